// AgentRings: the collector's side of one agent's shared-memory file (core/agent_shm.h):
// drains its rings, resolves its function ids and summarizes the events of a window.
//
// Identity. The agent publishes function slots (kind, name, parent slot) in its file before
// it pushes the first event that uses them. AgentRings copies newly published slots into
// its own FunctionTable *after* popping a batch of events (an event's function is always
// published before the event, so every id in the batch is then known), keeping the parent
// chain: the FunctionTable key of a Python call is its whole call path, the same string on
// every rank. Slots are validated (id, parent below the slot, known kind, name length);
// an invalid slot becomes a root "<invalid function N>" and is counted, never trusted; a
// window's events of such functions are counted in its summary (invalid_function_events).
//
// Windows. Between BeginWindow() and FinishWindow() the events whose start lies in the
// window's span go to a fresh WindowSummarizer (with their track announced once, named
// after the ring's thread); other events are drained and discarded (counted), so rings
// never fill outside windows either. Drops are read from the file's counters: the summary
// reports the drops that happened since the window began (and the agent's own count, when
// it sent one, whichever is larger: both count the same full-ring events).
//
// Other sources of the same process (the NCCL profiler plugin, the CUPTI tracer) write files
// of their own in the same format (docs/gpu-sources.md); AttachSource() adds one, and its
// events go through the same routing into the same window, with the file's own function map.
//
// Process groups. The agent declares each torch.distributed process group it sees in a
// `process_group` message (DeclareProcessGroup) and its collectives carry the group's id in
// Event::group; every window's summarizer hears the declared groups, so the summary's
// collective_groups (summary/collective_groups.h) hold what the Kineto importer gives offline:
// each group's global ranks and backend, and per (function, group) calls, time and bytes. A
// collective naming a group the agent never declared (an agent bug, a lost message) is
// summarized without a group and counted (collectives_of_unknown_groups); ids of the other
// sources' files are not the agent's and are dropped.
//
// Recording (for the live Perfetto export, docs/perfetto-export.md): with a cap set
// (set_record_cap), a window's events are also kept as they were routed, at most `cap`
// (40 B each; later ones are counted per track), and FinishWindow() leaves them, with a copy
// of the function table, for TakeRecording().
//
// Not thread-safe: one owner (the collector serializes access per agent).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "perftracker/core/agent_shm.h"
#include "perftracker/core/function_table.h"
#include "perftracker/core/metric_sampler.h"
#include "perftracker/report/rank_trace.h"
#include "perftracker/summary/window_summarizer.h"
#include "perftracker/wire/coordinator_link.h"

namespace perftracker {

struct AgentRingsStats {
  uint64_t events_drained = 0;     // all events popped from the rings
  uint64_t events_in_window = 0;   // handed to a window's summarizer
  uint64_t events_outside = 0;     // popped outside any window (discarded)
  uint64_t malformed_events = 0;   // unknown function id, unknown kind
  uint64_t invalid_functions = 0;  // published slots that failed validation
  // The agent's DataLoader markers not summarized: the iterator's own __next__ call, which
  // the profile recorded, is the same call (AgentRings::Route).
  uint64_t duplicate_data_load_markers = 0;
  uint64_t process_groups = 0;                 // declared by the agent
  uint64_t process_groups_dropped = 0;         // beyond kMaxAgentProcessGroups
  uint64_t collectives_of_unknown_groups = 0;  // naming a group the agent never declared
};

// Process groups one agent may declare (the agent itself stops at 1024).
inline constexpr size_t kMaxAgentProcessGroups = 4096;

class AgentRings {
 public:
  AgentRings(std::unique_ptr<AgentShm> shm, WorkerInfo worker);
  ~AgentRings();
  AgentRings(const AgentRings&) = delete;
  AgentRings& operator=(const AgentRings&) = delete;

  // Pops up to `max_events` events (over all rings) and routes them. Returns how many were
  // popped; call again while it returns max_events.
  size_t Drain(size_t max_events);

  // Starts summarizing `window`. A window still open is discarded.
  void BeginWindow(const WindowSpec& window);
  bool in_window() const { return window_.has_value(); }
  const std::optional<WindowSpec>& window() const { return window_; }
  // Ends the window's span early (the job is ending): later events are not summarized.
  void TruncateWindow(int64_t end_ns);
  // The span's end: the window's, or where TruncateWindow cut it. Requires in_window().
  int64_t window_end_ns() const { return window_end_ns_; }
  // A host metric sample: summarized when it falls inside the open window.
  void AddMetric(const MetricSample& sample);
  // What the collector's sampler could not read for this worker (or its host) at time_ns:
  // counted in the window's summary when it falls inside the open window.
  void CountSampleProblem(SampleProblem problem, uint64_t count, int64_t time_ns);
  // An iteration the agent's detector closed (from `iteration` messages): used for the
  // window's iterations when the rings carried no iteration events.
  void AddIteration(int64_t end_ns, int64_t duration_ns);
  // The agent's `window_done` counts, and when its GPU tracing ended early (`gpu_stopped_ns`,
  // 0: it did not; the summary's gpu_untraced_ms counts the rest of the window).
  void SetAgentCounts(uint64_t events, uint64_t dropped, int64_t gpu_stopped_ns = 0);
  // A process group the agent declared (`process_group`): kept for the agent's life, the same
  // id again replaces it. Its backend is the summary's field (CollectiveGroup::backend) and is
  // also added to its name, "0 (gloo)": servers older than the field read it there.
  void DeclareProcessGroup(const ProcessGroupInfo& group);
  size_t process_group_count() const { return groups_.size(); }
  // Drains what is left, closes the window and returns its summary (rank, host and source
  // "pid N" filled in). Requires in_window().
  WorkerSummary FinishWindow();
  // Drops the open window without a summary.
  void AbandonWindow();

  // Record each window's events, at most `cap` per window (0: do not record).
  void set_record_cap(size_t cap) { record_cap_ = cap; }
  // The last finished window's recorded events (null when not recording). Self-contained:
  // the trace owns a copy of the function table its events refer to.
  std::unique_ptr<RankTrace> TakeRecording() { return std::move(finished_recording_); }

  const WorkerInfo& worker() const { return worker_; }
  void set_worker(const WorkerInfo& worker) { worker_ = worker; }
  const AgentRingsStats& stats() const { return stats_; }
  const FunctionTable& functions() const { return functions_; }
  AgentShm* shm() { return sources_[0].shm.get(); }

  // Another file of the same process in the agent's format, written by an in-process source
  // that is not the agent (the NCCL profiler plugin's "<agent file>-nccl", the CUPTI tracer's
  // "-cupti"): drained with the agent's rings into the same window summary, with its own
  // function-id map. Its drops count from the moment it is attached.
  void AttachSource(std::unique_ptr<AgentShm> shm);
  size_t source_count() const { return sources_.size(); }

 private:
  struct Source {
    std::unique_ptr<AgentShm> shm;
    std::vector<uint32_t> local_ids;  // the file's function id -> functions_ id
    uint64_t dropped_at_start = 0;    // TotalDropped() when the window began
  };
  void SyncFunctions(Source& source);
  void Route(Source& source, int ring, const Event& event);
  uint64_t TotalDroppedSince();

  std::vector<Source> sources_;  // [0]: the agent's file
  WorkerInfo worker_;
  FunctionTable functions_;
  std::unordered_set<uint32_t> invalid_functions_;  // functions_ ids of invalid slots
  // functions_ ids of the callers of a DataLoader iterator's own __next__ (a Python call the
  // agent's profile records): the agent's kDataLoad marker under such a caller is the same
  // call recorded twice, and is not summarized (see Route).
  std::unordered_set<uint32_t> iterator_next_callers_;
  std::vector<Event> batch_;
  AgentRingsStats stats_;
  std::map<uint16_t, ProcessGroupInfo> groups_;  // the agent's, by id

  // Open window.
  std::optional<WindowSpec> window_;
  int64_t window_end_ns_ = 0;  // the span's end (TruncateWindow may move it earlier)
  std::unique_ptr<WindowSummarizer> summarizer_;
  std::unordered_set<uint32_t> tracks_announced_;
  uint64_t window_malformed_ = 0;
  uint64_t window_invalid_function_events_ = 0;
  SummaryStats window_sample_problems_;  // the metric counters only
  uint64_t agent_dropped_ = 0;
  uint64_t agent_events_ = 0;
  int64_t agent_gpu_stopped_ns_ = 0;
  bool saw_iteration_event_ = false;
  std::vector<std::pair<int64_t, int64_t>> iterations_;  // (start, end) from messages
  uint32_t iteration_function_ = FunctionTable::kNoParent;

  size_t record_cap_ = 0;
  std::unique_ptr<RankTrace> recording_;  // the open window's (ids in functions_)
  std::unique_ptr<RankTrace> finished_recording_;
};

}  // namespace perftracker
