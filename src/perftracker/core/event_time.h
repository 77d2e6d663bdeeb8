// The range of valid event times, shared by every reader of events (importers, the
// summarizer, recordings and their export).
//
// Event times are valid in (-kEventTimeLimitNs, kEventTimeLimitNs): about +-146 years around
// the clock's epoch, so that the difference of any two valid times fits in int64. A time
// beyond it is bad data, counted where it is read and never used in arithmetic.
#pragma once

#include <cstdint>

#include "perftracker/core/event.h"

namespace perftracker {

inline constexpr int64_t kEventTimeLimitNs = int64_t{1} << 62;

inline constexpr bool TimeInRange(int64_t time_ns) {
  return time_ns > -kEventTimeLimitNs && time_ns < kEventTimeLimitNs;
}

// Both times in range and the end not before the start: duration_ns() and any difference of
// its times are safe.
inline constexpr bool HasValidTimes(const Event& e) {
  return TimeInRange(e.start_ns) && TimeInRange(e.end_ns) && e.end_ns >= e.start_ns;
}

}  // namespace perftracker
