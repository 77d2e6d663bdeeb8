// Anomaly: one (worker, function) that the peer comparison found unlike its peer group.
#pragma once

#include <cstdint>

namespace perftracker::localize {

struct Anomaly {
  uint32_t worker = 0;
  uint32_t fid = 0;
  uint32_t group = 0;
  uint32_t peers = 0;    // workers in the group
  uint32_t present = 0;  // of them running the function
  bool only_on_some = false;
  float value = 0;   // time per iteration on this worker
  float median = 0;  // group median
  float scale = 0;   // robust sigma
  float p50 = 0, peer_p50 = 0;
  float calls = 0, peer_calls = 0;
  float critical = 0, peer_critical = 0;
  double excess() const { return static_cast<double>(value) - median; }
};

}  // namespace perftracker::localize
