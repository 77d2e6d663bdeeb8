// Units: the one way perftracker writes a number a person reads — a duration, a byte count, a
// rate, a share, a count — in findings, trigger details, notes and every report format.
//
// One precision rule: a quantity shows three significant digits in the largest unit that
// keeps it at or above 1 ("812 ns", "41.2 µs", "12.8 ms", "1.52 s"; "512 B", "1.50 KiB";
// "12.5 MB/s"). Rounding that reaches 1000 moves to the next unit ("1.00 ms", never
// "1000 µs"). A share is a percentage with at least two significant digits and at most one
// decimal ("31%", "4.2%", "0.3%", "<0.1%"). Negative values keep their sign; a value that is
// not finite prints "n/a".
//
// Built without fmt (the agent-only build has none): std::snprintf rounds the same way.
#pragma once

#include <string>

namespace perftracker {

// "812 ns", "41.2 µs", "12.8 ms", "1.52 s", "12.5 min".
std::string FormatDuration(double ns);

// A share 0..1 (or beyond: a run-queue delay summed over threads) as a percentage:
// "105%", "31%", "4.2%", "0.3%", "<0.1%", "0%".
std::string FormatShare(double share);

// Bytes in binary units: "512 B", "1.50 KiB", "3.00 MiB", "1.25 GiB", "2.00 TiB".
std::string FormatBytes(double bytes);

// Bytes per second in decimal units, as links are rated: "812 B/s", "12.5 MB/s", "1.20 GB/s".
std::string FormatByteRate(double bytes_per_s);

// Bits per second (from bytes per second), as NICs are rated: "800 Mbit/s", "9.60 Gbit/s".
std::string FormatBitRate(double bytes_per_s);

// A count per iteration: "3" for a whole number (within 0.05), else one decimal: "2.5".
std::string FormatCount(double count);

}  // namespace perftracker
