#include "perftracker/localize/finding_format.h"

#include <fmt/format.h>

#include <cmath>

namespace perftracker::localize {

std::string FormatNs(double ns) {
  const double a = std::fabs(ns);
  if (a < 1e3) return fmt::format("{:.0f} ns", ns);
  if (a < 1e5) return fmt::format("{:.1f} us", ns / 1e3);
  if (a < 1e6) return fmt::format("{:.0f} us", ns / 1e3);
  if (a < 1e8) return fmt::format("{:.1f} ms", ns / 1e6);
  if (a < 1e9) return fmt::format("{:.0f} ms", ns / 1e6);
  return fmt::format("{:.2f} s", ns / 1e9);
}

std::string FormatShare(double share) {
  const double pct = share * 100;
  return pct < 1 ? fmt::format("{:.1f}%", pct) : fmt::format("{:.0f}%", pct);
}

std::string FormatCount(double v) {
  return std::fabs(v - std::round(v)) < 0.05 ? fmt::format("{:.0f}", v) : fmt::format("{:.1f}", v);
}

std::string FormatBytes(double b) {
  if (b < 1024) return fmt::format("{:.0f} B", b);
  if (b < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}

std::string FormatRanges(const std::vector<int32_t>& sorted, size_t max_items) {
  std::string out;
  size_t items = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (items == max_items) {
      out += fmt::format(", ... ({} in all)", sorted.size());
      break;
    }
    if (!out.empty()) out += ", ";
    out += j == i ? fmt::format("{}", sorted[i]) : fmt::format("{}-{}", sorted[i], sorted[j]);
    ++items;
    i = j + 1;
  }
  return out;
}

}  // namespace perftracker::localize
