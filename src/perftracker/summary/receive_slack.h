// ReceiveSlack: how much of each collective's time its worker could have spent anyway,
// because a wait in the next point-to-point receive followed it.
//
// A pipeline stage that is late by E (a slow gradient all-reduce on a degraded NIC, say)
// before its next receive waits E less in that receive when the data arrives at its own
// time: the receive's wait absorbs the lateness, and neither the stage's sends nor the job
// are delayed. Late before a send, the lateness delays the send and the stages after it.
// So each collective call is credited, once it has ended, with the wait of the first
// point-to-point call that starts after it: a receive's duration (shared among the calls
// since the previous point-to-point call, the latest first, each up to its own duration), a
// send's nothing. FunctionSummary::slack_after_ns sums the credit; the localizer reads it as
// the share of the function's time whose excess cost the job nothing (localize/
// pipeline_slack.h). A receive's duration is all wait here (its own transfer time is not
// known apart): an upper bound, small next to the waits that matter.
//
// Host and device calls are tracked apart (the host's nccl:recv lasts as long as its launch,
// the kernel as long as the wait). Calls are credited in the order the summarizer processes
// them: start order on a track (trace files: across all tracks); live, tracks are processed
// each in order but not in step, so a receive on another stream than the collective may
// miss it (no credit: the conservative error). At most kMaxPending calls wait for their
// point-to-point call (the oldest are dropped, uncredited).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "perftracker/core/point_to_point.h"

namespace perftracker {

class ReceiveSlack {
 public:
  static constexpr size_t kMaxPending = 1024;

  // A collective call that is not point to point: function `fn`, ending at `end`, of which
  // `ns` count (the part inside the iterations).
  void OnCollective(uint32_t fn, int64_t end, int64_t ns);

  // A point-to-point call [start, end) of kind `p2p` (not kNone). Calls credit(fn, ns) for the
  // collectives that ended by `start`, and forgets them.
  template <typename Credit>
  void OnPointToPoint(PointToPoint p2p, int64_t start, int64_t end, Credit&& credit) {
    int64_t budget = p2p == PointToPoint::kReceive ? end - start : 0;
    size_t kept = 0;
    // Latest first: the calls just before the receive are the ones its wait covered.
    for (size_t i = pending_.size(); i-- > 0;) {
      const Call& c = pending_[i];
      if (c.end > start) continue;
      if (budget > 0 && c.ns > 0) {
        const int64_t take = c.ns < budget ? c.ns : budget;
        credit(c.fn, take);
        budget -= take;
      }
    }
    for (const Call& c : pending_) {
      if (c.end > start) pending_[kept++] = c;
    }
    pending_.resize(kept);
  }

  size_t pending() const { return pending_.size(); }

 private:
  struct Call {
    uint32_t fn = 0;
    int64_t end = 0;
    int64_t ns = 0;
  };
  std::vector<Call> pending_;
};

}  // namespace perftracker
