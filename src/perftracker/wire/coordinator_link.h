// The seam between a node collector and the server that coordinates windows.
//
//   collector ──CoordinatorLink──► server     (workers joining, triggers, iterations,
//                                               stacks, finished WorkerSummaries)
//   collector ◄──CollectorControl── server     (open a window on every worker, ask for stacks)
//
// `perftracker run` wires the NodeCollector to the embedded server's WindowCoordinator in
// one process: both interfaces are plain virtual calls. A multi-host deployment puts a
// gRPC client behind CoordinatorLink on each host and a gRPC service that calls
// CollectorControl on the server; neither side's logic changes. The interfaces live in wire/
// with the rest of the contract between the processes, so that neither side links the other.
//
// Threading contract: implementations must return quickly and never block on the other
// side (a slow server must not stall ring draining; a slow collector must not stall the
// server). Each side queues work for its own threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perftracker/core/window_reason.h"
#include "perftracker/summary/worker_summary.h"
#include "perftracker/wire/window_spec.h"
#include "perftracker/wire/worker_info.h"

namespace perftracker {

// After a window's end (or EndWindowNow), how long a collector waits for an agent's
// window_done before it summarizes the window without it (an agent whose threads cannot run:
// one holds the GIL). The server waits longer than this for a window's summaries.
inline constexpr int64_t kWindowDoneGraceNs = 1'500'000'000;

// What a collector tells the server. Called from collector threads.
class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;
  // An agent said hello (again: a second hello on one connection updates the info).
  virtual void OnWorkerJoined(const WorkerInfo& worker) = 0;
  // An agent left. `clean` when it said `bye` first (the process exited normally).
  virtual void OnWorkerLeft(int32_t rank, bool clean) = 0;
  // An agent said its training ended (destroy_process_group, or the interpreter exiting):
  // from now on its silence is the end of the job, never a hang. `detail` says what ended it.
  // An iteration that arrives later means it trains again.
  virtual void OnTrainingEnded(int32_t rank, const std::string& detail) = 0;
  // An agent's always-on detector closed an iteration.
  virtual void OnIteration(int32_t rank, int64_t end_ns, int64_t duration_ns) = 0;
  // An agent's detector fired (or a `manual` request).
  virtual void OnTrigger(int32_t rank, WindowReason reason, const std::string& detail) = 0;
  // An agent's answer to dump_stacks: `text` holds the stacks of all its threads, or, when
  // not `available` (no thread released the GIL in time), the agent's explanation.
  virtual void OnStacks(uint64_t window, int32_t rank, bool available, const std::string& text) = 0;
  // A worker's summary of window `window` (rank, host and source are filled in).
  virtual void OnSummary(uint64_t window, WorkerSummary summary) = 0;
  // The worker's raw window events are in `path`, a file on the collector's host
  // (report/rank_trace_file.h), for the window's Perfetto export. Sent before OnSummary.
  // A link that cannot reach that file (another host) ignores it: the default.
  virtual void OnWindowRecording(uint64_t window, int32_t rank, const std::string& path) {
    (void)window;
    (void)rank;
    (void)path;
  }
};

// What the server tells a collector. Called from server threads; must not block.
class CollectorControl {
 public:
  virtual ~CollectorControl() = default;
  // Turn on the fine-grained hooks of every worker of this collector for `window`.
  virtual void StartWindow(const WindowSpec& window) = 0;
  // Ask every worker of this collector for the Python stacks of all its threads.
  virtual void DumpStacks(uint64_t window) = 0;
  // End `window` now (every rank completed its iterations, a hang is confirmed, the job
  // ended): each worker's summary follows its agent's window_done (its hooks are off and what
  // it writes at a window's end, CUPTI's records, is in), or kWindowDoneGraceNs after now.
  virtual void EndWindowNow(uint64_t window) = 0;
  // Progressive disclosure (the server's control plane only): send the full summaries of
  // `ranks` for `window`, whose digests came first. A collector that sends full summaries
  // at once (the embedded run) ignores it: the default.
  virtual void RequestSummaries(uint64_t window, const std::vector<int32_t>& ranks) {
    (void)window;
    (void)ranks;
  }
  // After `window`'s diagnosis, for its Perfetto timeline: send this collector's recordings
  // of the window (OnWindowRecording, or why a rank has none). False when there is nothing
  // to ask: a collector that announces its recordings as it makes them (the embedded run).
  virtual bool RequestRecordings(uint64_t window) {
    (void)window;
    return false;
  }
};

}  // namespace perftracker
