// perftracker's time base: CLOCK_REALTIME nanoseconds (shared by every process of a host, see
// docs/agent-protocol.md). clock_gettime is a vDSO call (no syscall).
#pragma once

#include <time.h>

#include <cstdint>

namespace perftracker {

inline int64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace perftracker
