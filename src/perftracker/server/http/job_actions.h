// JobActions: what the HTTP API may ask the running server to do to a job. The server's
// control plane implements it (server/); the HTTP layer only calls it, so it needs no
// knowledge of collectors or gRPC. Implementations must be thread-safe: HTTP handlers run
// on a thread pool.
#pragma once

#include <string>

#include "perftracker/core/status.h"

namespace perftracker {

class JobActions {
 public:
  virtual ~JobActions() = default;
  // Opens a profiling window on every worker of `job_id` now (reason "manual"), as a
  // worker's trigger would. NotFound when the job is unknown or has no connected collector;
  // InvalidArgument when a window is already open (the message says which).
  virtual Status TriggerWindow(const std::string& job_id) = 0;
};

}  // namespace perftracker
