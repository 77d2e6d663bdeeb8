#include "perftracker/core/rank_list.h"

#include <algorithm>

namespace perftracker {

std::string FormatRanks(std::vector<int32_t> ranks, size_t max_chars, std::string_view separator) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  max_chars = std::max<size_t>(max_chars, 16);
  std::vector<std::string> items;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j - i >= 2) {
      items.push_back(std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]));
    } else {
      for (size_t k = i; k <= j; ++k) items.push_back(std::to_string(ranks[k]));
    }
    i = j + 1;
  }
  const std::string tail =
      std::string(separator) + "\u2026 (" + std::to_string(ranks.size()) + " ranks)";
  const size_t tail_width = tail.size() - 2;  // "…" is 3 bytes, 1 column; the rest ASCII
  // The items are ASCII: the size of `out` is its width.
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    const size_t sep = i == 0 ? 0 : separator.size();
    const bool last = i + 1 == items.size();
    // Keep room for the tail unless this item finishes the list.
    const size_t need = out.size() + sep + items[i].size() + (last ? 0 : tail_width);
    if (need > max_chars) {
      if (out.empty()) out = items[i];  // always show at least one item
      return out + tail;
    }
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

}  // namespace perftracker
