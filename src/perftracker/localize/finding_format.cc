#include "perftracker/localize/finding_format.h"

#include <fmt/format.h>

namespace perftracker::localize {

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
