#include "perftracker/core/units.h"

#include <cmath>
#include <cstdio>
#include <iterator>
#include <string_view>

namespace perftracker {
namespace {

struct Unit {
  double scale;
  std::string_view name;
};

std::string Printf(const char* format, double value, std::string_view unit) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value, static_cast<int>(unit.size()), unit.data());
  return buf;
}

// value >= 0 with three significant digits, then " unit".
std::string ThreeDigits(double value, std::string_view unit) {
  if (value < 9.995) return Printf("%.2f %.*s", value, unit);
  if (value < 99.95) return Printf("%.1f %.*s", value, unit);
  return Printf("%.0f %.*s", value, unit);
}

// value >= 0 in the largest of units (ascending scales, the first 1 and printed as a whole
// number) that keeps it below 999.5, three significant digits; the last unit takes the rest.
template <size_t N>
std::string Scaled(double value, const Unit (&units)[N]) {
  static_assert(N >= 2);
  if (value < 999.5) return Printf("%.0f %.*s", value, units[0].name);
  size_t i = 1;
  while (i + 1 < N && value / units[i].scale >= 999.5) ++i;
  return ThreeDigits(value / units[i].scale, units[i].name);
}

// "-" and magnitude. (Appending to a one-character string: GCC 12 at -O3 warns about
// "-" + std::string with a false -Wrestrict, which -Werror turns into an error.)
std::string Negated(const std::string& magnitude) {
  std::string out(1, '-');
  out += magnitude;
  return out;
}

// Non-finite: "n/a"; negative: "-" and the magnitude; else format(value).
template <typename Format>
std::string Signed(double value, Format format) {
  if (!std::isfinite(value)) return "n/a";
  if (value < 0) return Negated(format(-value));
  return format(value == 0 ? 0.0 : value);  // -0.0 prints as 0
}

}  // namespace

std::string FormatDuration(double ns) {
  return Signed(ns, [](double v) {
    static constexpr Unit kUnits[] = {{1, "ns"}, {1e3, "µs"}, {1e6, "ms"}, {1e9, "s"}};
    constexpr double kMaxSeconds = 599.5;  // then minutes
    if (v < kMaxSeconds * 1e9) return Scaled(v, kUnits);
    const double minutes = v / 60e9;
    return Printf(minutes < 99.95 ? "%.1f %.*s" : "%.0f %.*s", minutes, "min");
  });
}

std::string FormatShare(double share) {
  if (!std::isfinite(share)) return "n/a";
  if (share < 0) return Negated(FormatShare(-share));
  if (share == 0) return "0%";
  const double pct = share * 100;
  char buf[32];
  if (pct < 0.05) return "<0.1%";
  std::snprintf(buf, sizeof(buf), pct < 9.95 ? "%.1f%%" : "%.0f%%", pct);
  return buf;
}

std::string FormatBytes(double bytes) {
  return Signed(bytes, [](double v) {
    static constexpr Unit kUnits[] = {{1, "B"},
                                      {1024.0, "KiB"},
                                      {1024.0 * 1024, "MiB"},
                                      {1024.0 * 1024 * 1024, "GiB"},
                                      {1024.0 * 1024 * 1024 * 1024, "TiB"}};
    // Binary units: the largest one that v reaches, so 1000..1023 of a unit stay in it.
    size_t i = std::size(kUnits) - 1;
    while (i > 0 && v < kUnits[i].scale) --i;
    if (i == 0) return Printf("%.0f %.*s", v, kUnits[0].name);
    return ThreeDigits(v / kUnits[i].scale, kUnits[i].name);
  });
}

std::string FormatByteRate(double bytes_per_s) {
  return Signed(bytes_per_s, [](double v) {
    static constexpr Unit kUnits[] = {
        {1, "B/s"}, {1e3, "kB/s"}, {1e6, "MB/s"}, {1e9, "GB/s"}, {1e12, "TB/s"}};
    return Scaled(v, kUnits);
  });
}

std::string FormatBitRate(double bytes_per_s) {
  return Signed(bytes_per_s * 8, [](double v) {
    static constexpr Unit kUnits[] = {
        {1, "bit/s"}, {1e3, "kbit/s"}, {1e6, "Mbit/s"}, {1e9, "Gbit/s"}, {1e12, "Tbit/s"}};
    return Scaled(v, kUnits);
  });
}

std::string FormatCount(double count) {
  if (!std::isfinite(count)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), std::fabs(count - std::round(count)) < 0.05 ? "%.0f" : "%.1f",
                count);
  return buf;
}

}  // namespace perftracker
