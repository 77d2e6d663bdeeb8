// One profiling window: the same wall-clock span (CLOCK_REALTIME ns) on every worker. The
// one shape of a window in the contract: the coordinator opens it, CollectorControl carries
// it in process and control.proto's Window (ServerMessage start_window) across hosts, and
// the collector writes it to its agents (collector/agent_message.h's WindowMessage).
#pragma once

#include <cstdint>

#include "perftracker/core/window_reason.h"

namespace perftracker {

struct WindowSpec {
  uint64_t id = 0;  // 1, 2, ... per job
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
  WindowReason reason = WindowReason::kManual;

  int64_t end_ns() const { return start_ns + duration_ns; }
};

}  // namespace perftracker
