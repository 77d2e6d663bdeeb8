// Rank lists: the one way perftracker writes a set of ranks for a person, in findings, notes
// and every report format: sorted, de-duplicated, runs of three or more compressed
// ("0-3,5,7-1023"; a note separates items with ", ": "3, 7-9, 12").
//
// Built without fmt (the agent-only build has none).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace perftracker {

// `ranks` as runs ("0-3,5,7-1023"), items separated by `separator`. When the result would
// exceed max_chars columns, it is cut after an item and ends "<separator>… (N ranks)" so that
// the total stays within max_chars (max_chars < 16 is raised to 16; at least one item shows).
std::string FormatRanks(std::vector<int32_t> ranks, size_t max_chars = SIZE_MAX,
                        std::string_view separator = ",");

}  // namespace perftracker
