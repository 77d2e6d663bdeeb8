// The control messages of the agent<->collector protocol (docs/agent-protocol.md): parsing
// what agents send (one JSON object per line) and writing what the collector sends.
//
// Parsing never throws and never trusts the peer: every field is type-checked, strings are
// length-capped, and a message missing a required field is malformed (with a message that
// names the field). Unknown `type`s are a separate outcome (kUnknownType) because the
// protocol says they are ignored and counted, not treated as errors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "perftracker/core/event_sink.h"
#include "perftracker/wire/coordinator_link.h"

namespace perftracker {

enum class AgentMessageType : uint8_t {
  kHello,
  kIteration,
  kTrigger,
  kWindowDone,
  kStacks,
  kBye,
  kEnded,         // the job's training ended (destroy_process_group, interpreter exit)
  kProcessGroup,  // a torch.distributed process group its collectives ran in
  kCommThread,    // a thread of the process that completed a collective another one started
};

// Global ranks a `process_group` message may list (the agent sends at most 4096; the 64 KiB
// line bounds it anyway).
inline constexpr size_t kMaxProcessGroupRanks = 16384;

struct AgentMessage {
  AgentMessageType type = AgentMessageType::kBye;
  int32_t rank = -1;
  // hello
  WorkerInfo worker;
  std::string shm_path;
  int64_t version = 0;
  // iteration
  int64_t end_ns = 0;
  int64_t duration_ns = 0;
  // trigger; ended (detail only)
  WindowReason reason = WindowReason::kManual;
  std::string detail;
  // window_done, stacks
  uint64_t window = 0;
  uint64_t events = 0;
  uint64_t dropped = 0;
  int64_t gpu_stopped_ns = 0;  // window_done: the window's GPU tracing ended early then (0: no)
  std::string text;            // stacks
  bool available = true;       // stacks: false when the agent could not take them (text says why)
  // process_group: `group` (1..65535, the Event::group of its collectives), torch's `name`,
  // the members' global `ranks` (distinct, maybe only the first `size`), and its backend.
  ProcessGroupInfo group;
  // comm_thread: its OS thread id (> 0)
  int32_t tid = 0;
};

// Longest string field kept from a message (host names, details); stacks text is bounded
// by the line limit only.
inline constexpr size_t kMaxMessageStringField = 1024;

enum class ParseOutcome : uint8_t {
  kOk,
  kMalformed,    // not JSON, not an object, a missing or mistyped field: `error` says which
  kUnknownType,  // well-formed, of a type this collector does not know (ignored, counted)
};

// Parses one line into *message; on failure `error` (if given) says what is wrong.
ParseOutcome ParseAgentMessage(std::string_view line, AgentMessage* message,
                               std::string* error = nullptr);

// collector -> agent messages, each one line ending in '\n'.
std::string WindowMessage(const WindowSpec& window);
std::string DumpStacksMessage(uint64_t window);
std::string EndWindowMessage(uint64_t window);

}  // namespace perftracker
