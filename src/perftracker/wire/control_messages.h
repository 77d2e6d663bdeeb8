// The control plane's messages (control.proto, perftracker.v1) as plain structs: what the
// collector's gRPC link and the server's control service exchange. The generated types
// never leave wire/; conversion and validation happen in wire/control_*.cc.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "perftracker/core/window_reason.h"
#include "perftracker/wire/window_spec.h"
#include "perftracker/wire/worker_info.h"

namespace perftracker {

inline constexpr uint32_t kControlProtocolVersion = 1;

// Limits a server enforces on what a collector sends (a message breaking one is rejected
// with a line saying which limit; the stream goes on).
inline constexpr size_t kMaxControlIdBytes = 256;         // job id, host
inline constexpr size_t kMaxControlTextBytes = 4u << 20;  // stacks, details, titles
inline constexpr size_t kMaxRanksPerCollector = 65536;
inline constexpr size_t kMaxIterationsPerBatch = 65536;
inline constexpr size_t kMaxControlDigestBytes = 4096;       // summary/worker_digest.h's budget
inline constexpr size_t kMaxRecordingChunkBytes = 1u << 20;  // WindowRecording's data

struct ControlHardware {
  std::string description;
  uint32_t cpus = 0;
  uint64_t memory_bytes = 0;
};

// The first message of every stream.
struct ControlRegistration {
  uint32_t protocol_version = kControlProtocolVersion;
  std::string job_id;
  std::string host;
  std::string title;
  std::vector<WorkerInfo> ranks;
  ControlHardware hardware;
};

struct ControlHeartbeat {
  int64_t sent_ns = 0;
  uint64_t dropped_messages = 0;
};

struct ControlWorkerLeft {
  int32_t rank = -1;
  bool clean = false;
};

struct ControlTrainingEnded {
  int32_t rank = -1;
  std::string detail;
};

// The job's command exited (perftracker run --server): 0..255, 128 + N for signal N.
struct ControlJobExited {
  int32_t exit_code = 0;
};

struct ControlIteration {
  int32_t rank = -1;
  int64_t end_ns = 0;
  int64_t duration_ns = 0;
};

struct ControlIterations {
  std::vector<ControlIteration> points;
};

// On the wire the reason is its WindowReasonName(); one this server does not know is
// refused when the message is decoded.
struct ControlTrigger {
  int32_t rank = -1;
  WindowReason reason = WindowReason::kManual;
  std::string detail;
};

struct ControlStacks {
  uint64_t window = 0;
  int32_t rank = -1;
  bool available = false;
  std::string text;
};

struct ControlSummary {
  uint64_t window = 0;
  int32_t rank = -1;
  std::string worker_summary;  // EncodeWorkerSummary bytes
};

// Progressive disclosure: a worker's digest of a window (instead of its full summary).
struct ControlDigest {
  uint64_t window = 0;
  int32_t rank = -1;
  std::string worker_digest;  // EncodeWorkerDigest bytes
};

// The answer to ControlRequestSummaries for the ranks whose full summary the collector no
// longer keeps (its --keep-summaries-mb / --keep-summaries-seconds dropped it): the server
// stops waiting for them and names them in the window's notes with `reason` (one line).
struct ControlSummariesNotKept {
  uint64_t window = 0;
  std::vector<int32_t> ranks;
  std::string reason;
};

// A chunk of a rank's recorded window events (report/rank_trace_file.h's bytes), sent when
// the server asks (ControlSendRecordings); `missing` (no data, last) when there is none.
struct ControlWindowRecording {
  uint64_t window = 0;
  int32_t rank = -1;
  uint64_t offset = 0;
  std::string data;
  bool last = false;
  std::string missing;
};

// collector -> server
using CollectorMessage =
    std::variant<ControlRegistration, ControlHeartbeat, WorkerInfo /* worker joined */,
                 ControlWorkerLeft, ControlIterations, ControlTrigger, ControlStacks,
                 ControlSummary, ControlTrainingEnded, ControlJobExited, ControlDigest,
                 ControlWindowRecording, ControlSummariesNotKept>;

struct ControlRegistered {
  std::string collector_id;
  int64_t server_time_ns = 0;
  // Send a digest per worker at a window's end, and full summaries when asked for them.
  bool send_digests = false;
  // Answer a request for summaries no longer kept with ControlSummariesNotKept (an older
  // server does not know that message).
  bool takes_summaries_not_kept = false;
};

struct ControlDumpStacks {
  uint64_t window = 0;
};

struct ControlEndWindow {
  uint64_t window = 0;
};

struct ControlRejected {
  std::string error;
};

// Send the full summaries of `ranks` for `window` (progressive disclosure).
struct ControlRequestSummaries {
  uint64_t window = 0;
  std::vector<int32_t> ranks;
};

// `window` is diagnosed: the summaries kept for it can go.
struct ControlWindowDiagnosed {
  uint64_t window = 0;
};

// Send the recordings of `window` (after its diagnosis, for its Perfetto timeline).
struct ControlSendRecordings {
  uint64_t window = 0;
};

// server -> collector
// A WindowSpec is start_window; its reason, when a newer server sends one this collector
// does not know, reads as manual.
using ServerMessage =
    std::variant<ControlRegistered, WindowSpec /* start window */, ControlDumpStacks,
                 ControlEndWindow, ControlRejected, ControlRequestSummaries, ControlWindowDiagnosed,
                 ControlSendRecordings>;

}  // namespace perftracker
