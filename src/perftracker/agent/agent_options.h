// AgentOptions: everything the agent can be told through PERFTRACKER_AGENT_OPTIONS, with
// bounds. Format (docs/agent-protocol.md, "Agent options"): either `key=value` pairs
// separated by commas, semicolons or spaces ("rings=8,ring_events=65536,hang_factor=5"), or
// one JSON object ({"rings": 8, "hang_factor": 5}). An unknown key or a bad value is an
// error that names the key and the accepted range; the agent then stays off (the job runs).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "perftracker/core/agent_shm.h"
#include "perftracker/core/status.h"
#include "perftracker/detect/iteration_detector.h"

namespace perftracker {

struct AgentOptions {
  AgentShmOptions shm;       // rings, ring_events, functions
  DetectorOptions detector;  // learn_repeats, relearn_after, window_iterations, ...
  int64_t hang_check_interval_ns = 100'000'000;  // hang_check_ms
  int64_t stack_timeout_ns = 2'000'000'000;      // stack_timeout_ms: GIL wait for stacks
  int64_t reconnect_max_ns = 5'000'000'000;      // reconnect_max_ms: back-off ceiling
  uint32_t outbox_capacity = 1024;               // outbox: queued messages (power of two)
  // gpu_tracing: CUPTI kernel / copy / launch tracing in windows. 0 off; 1 in processes where
  // torch has initialized CUDA; 2 in every process (CUDA through another library)
  int gpu_tracing = 1;
  bool eval_hook = true;  // eval_hook: record with the frame-evaluation hook where available
};

StatusOr<AgentOptions> ParseAgentOptions(std::string_view text);

// The accepted keys, for messages and docs.
std::string AgentOptionKeys();

}  // namespace perftracker
