// Anomaly: one (worker, function) that the peer comparison found unlike its peer group; or,
// from OfWorker(), a worker unlike its group as a whole, with no function to name.
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
  // On a function anomaly (ComparePeers): the sum of its direct callees' positive excesses on
  // this worker, each against its own peers' median (0: none). What "a callee carries most of
  // the excess" is a share of (call_path_collapse.h).
  float callees_excess = 0;
  // Not an outlier of its own: the direct callee that carries the most of its anomalous
  // caller's excess on this worker (ComparePeers emits it beside the anomalies; the collapse
  // may step into it from that caller, never starts a path at it).
  bool carrier = false;
  double excess() const { return static_cast<double>(value) - median; }

  // A worker that costs its group excess_ns per iteration with no function to blame (its
  // untraced time, its run-queue delay): fid kNone, value = excess_ns over a median of 0, so
  // that it ranks and merges with the function anomalies by excess().
  static Anomaly OfWorker(uint32_t worker, uint32_t group, uint32_t peers, double excess_ns) {
    Anomaly a;
    a.worker = worker;
    a.fid = UINT32_MAX;  // kNone (job_table.h)
    a.group = group;
    a.peers = peers;
    a.value = static_cast<float>(excess_ns);
    return a;
  }
};

}  // namespace perftracker::localize
