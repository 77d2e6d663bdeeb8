// How the localizer writes rank lists in findings (numbers: core/units.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "perftracker/core/units.h"

namespace perftracker::localize {

// "3, 7-9, 12": sorted unique ints as ranges, at most `max_items` of them.
std::string FormatRanges(const std::vector<int32_t>& sorted, size_t max_items = 20);

}  // namespace perftracker::localize
