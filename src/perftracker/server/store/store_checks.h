// The argument checks and window-state rules of the Store contract (store.h), shared by
// every implementation so that each one refuses the same input with the same line.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/core/status.h"
#include "perftracker/server/store/store.h"

namespace perftracker {

inline std::string_view WindowStateName(WindowState state) {
  switch (state) {
    case WindowState::kOpen:
      return "open";
    case WindowState::kDiagnosed:
      return "diagnosed";
    case WindowState::kAbandoned:
      return "abandoned";
  }
  return "unknown";
}

// Window states only move forward: open -> diagnosed | abandoned, abandoned -> diagnosed
// (late summaries completed it). Re-putting the same state is an update of its fields.
inline bool WindowStateMayFollow(WindowState from, WindowState to) {
  if (from == to || from == WindowState::kOpen) return true;
  return from == WindowState::kAbandoned && to == WindowState::kDiagnosed;
}

inline WindowState WindowStateFromInt(int64_t state) {
  return state == 1 ? WindowState::kDiagnosed
                    : (state == 2 ? WindowState::kAbandoned : WindowState::kOpen);
}

inline Status CheckStoreJobId(const std::string& job_id) {
  if (job_id.empty()) return Status::InvalidArgument("store: empty job id");
  return Status::Ok();
}

// Every worker of an UpsertWorkers batch: a job id and a rank >= 0.
inline Status CheckStoreWorkers(const std::vector<WorkerRecord>& workers) {
  for (const WorkerRecord& worker : workers) {
    PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(worker.job_id));
    if (worker.rank < 0) {
      return Status::InvalidArgument(
          fmt::format("store: job {}: worker rank {} is negative", worker.job_id, worker.rank));
    }
  }
  return Status::Ok();
}

inline Status CheckStoreWindowId(const std::string& job_id, uint64_t window_id) {
  if (window_id == 0 || window_id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status::InvalidArgument(
        fmt::format("store: job {}: window id {} out of range (1 .. 2^63-1)", job_id, window_id));
  }
  return Status::Ok();
}

// PutWindow over a stored window `prev`: the same span, and a state that may follow.
inline Status CheckWindowUpdate(const WindowRecord& prev, const WindowRecord& window) {
  if (prev.start_ns != window.start_ns || prev.duration_ns != window.duration_ns) {
    return Status::InvalidArgument(
        fmt::format("store: job {} window {} already exists with another span (start {} ns, {} "
                    "ns long; got start {} ns, {} ns long): window ids are not reused",
                    window.job_id, window.window_id, prev.start_ns, prev.duration_ns,
                    window.start_ns, window.duration_ns));
  }
  if (!WindowStateMayFollow(prev.state, window.state)) {
    return Status::InvalidArgument(fmt::format(
        "store: job {} window {} is {}; it cannot become {} (out-of-order update)", window.job_id,
        window.window_id, WindowStateName(prev.state), WindowStateName(window.state)));
  }
  return Status::Ok();
}

inline Status CheckIterationPoints(const std::string& job_id,
                                   const std::vector<IterationPoint>& points) {
  for (const IterationPoint& p : points) {
    if (p.rank < 0 || p.duration_ns < 0) {
      return Status::InvalidArgument(
          fmt::format("store: job {}: bad iteration point (rank {}, duration {} ns)", job_id,
                      p.rank, p.duration_ns));
    }
  }
  return Status::Ok();
}

}  // namespace perftracker
