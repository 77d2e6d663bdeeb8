// How the localizer writes numbers in findings: durations, shares, counts, bytes, rank lists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace perftracker::localize {

// "850 ns", "12.3 us", "450 us", "10.5 ms", "120 ms", "1.25 s".
std::string FormatNs(double ns);
// "0.5%", "12%".
std::string FormatShare(double share);
// "3" for a whole number, else "2.5".
std::string FormatCount(double v);
// "512 B", "1.5 KiB", "3.0 MiB", "1.25 GiB".
std::string FormatBytes(double b);
// "3, 7-9, 12": sorted unique ints as ranges, at most `max_items` of them.
std::string FormatRanges(const std::vector<int32_t>& sorted, size_t max_items = 20);

}  // namespace perftracker::localize
