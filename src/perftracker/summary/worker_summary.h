// WorkerSummary: one worker's behaviour pattern over one window. This is what leaves the
// host (a few KB) and what the localizer compares across workers; raw events never do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/core/event.h"
#include "perftracker/core/metric_sample.h"
#include "perftracker/core/point_to_point.h"
#include "perftracker/core/shared_string.h"
#include "perftracker/summary/collective_groups.h"
#include "perftracker/summary/compact_vector.h"
#include "perftracker/summary/quantile_sketch.h"

namespace perftracker {

// The event flags a function's summary keeps (FunctionSummary::event_flags), and the only
// ones a decoder reads: a bit outside them (a newer collector's flag) is left out and counted
// (wire/unknown_values.h).
inline constexpr uint8_t kSummaryEventFlags = kEventFlagPageable | kEventFlagDeviceToDevice |
                                              kEventFlagOnDevice | kEventFlagSend |
                                              kEventFlagReceive;

// A hardware metric's level and fluctuation while one function ran.
struct FunctionMetric {
  Metric metric = Metric::kGpuSmActivity;
  double mean = 0;
  double stddev = 0;
};

struct FunctionSummary {
  static constexpr uint32_t kNoParent = UINT32_MAX;

  // The portable identity is the call path, WorkerSummary::Key(): "kind:name" of every frame
  // from the root down, joined by " > ". It derives from parent, kind and name, so `key`
  // holds it only where it does not (a summary written by hand, a decoded explicit key) and
  // is empty otherwise: with Python stacks (50 frames deep) a stored path per function
  // repeats every ancestor's frames, hundreds of MB for a 60k-event trace.
  //
  // Both are SharedStrings (8 bytes; copies share the text): the summarizer and the wire
  // decoder give every path ending in the same leaf one copy of its name, so a path costs no
  // heap of its own for them (issue 11: with Python stacks, one path per two events).
  SharedString key;
  SharedString name;  // the leaf name, for display
  EventKind kind = EventKind::kTorchOp;
  // kEventFlagPageable / kEventFlagDeviceToDevice / kEventFlagSend / kEventFlagReceive when
  // any of its calls carried it; kEventFlagOnDevice when its calls ran on a device stream
  // (kSummaryEventFlags). (Next to `kind`: one summary per call path, padding counts.)
  uint8_t event_flags = 0;
  uint32_t parent = kNoParent;  // index of the enclosing function in WorkerSummary::functions

  // Calls and their times count inside the window's iterations only (from the first marker's
  // start to the last one's end; see window_summarizer.cc, "Iterations only"): the localizer
  // divides them by the number of iterations. Without markers, the whole window.
  uint64_t count = 0;
  int64_t total_ns = 0;  // inclusive time of the calls
  int64_t self_ns = 0;   // total_ns minus time in nested calls on the same track
  // Time of the calls on the critical path: host calls while no device work ran (on a
  // host-only job: all of their time on the main thread), device calls: all of it.
  int64_t critical_ns = 0;
  int64_t idle_gap_before_ns = 0;         // idle time of the track just before each call, summed
  uint64_t bytes = 0;                     // bytes moved (memcpy, memset, collectives)
  QuantileSketch durations;               // per-call duration, ns (16 bytes for a single call)
  CompactVector<FunctionMetric> metrics;  // empty on every path of a trace file
  // Where its time per iteration steps up and stays up (summary/step_onset.h): the index of
  // the first iteration of the higher level in WorkerSummary::iterations (0 = no such step)
  // and its time in the iterations from there on. From the time grid: exact to a grid bin.
  uint32_t onset_iteration = 0;
  // The call path whose calls enclose most calls of this one (more than half) on its track
  // although the key skips them (index in WorkerSummary::functions; kNoParent: none):
  // a torch op nested in another op, which the key places under the nearest user-level frame
  // only. In a trace with no user-level frames (torch.profiler without with_stack) every op
  // is a root by its key; this is what still says that aten::convolution runs inside
  // aten::conv2d (the localizer's call-path collapse follows it). Beside onset_iteration: the
  // padding before onset_ns holds it.
  uint32_t enclosing_op = kNoParent;
  int64_t onset_ns = 0;
  // Collectives only: how much of total_ns was followed by a wait in the next point-to-point
  // receive, before any send (summary/receive_slack.h): time whose excess the pipeline
  // absorbed. At most total_ns; 0 when a send always came first, or the job has no
  // point-to-point calls.
  int64_t slack_after_ns = 0;

  double achieved_bytes_per_s() const {
    return total_ns > 0 ? static_cast<double>(bytes) * 1e9 / static_cast<double>(total_ns) : 0;
  }
};

// One iteration (ProfilerStep#N in a trace, a learned iteration online) and where its time
// went. compute: device kernels (or, on host-only jobs, host work outside communication,
// data loading and synchronization); communication: collectives; wait: the main thread
// blocked on the device or a collective; data: data loading; host_only: time in which no
// device ran anything (0 when the worker has no device tracks).
struct IterationSummary {
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
  int64_t compute_ns = 0;
  int64_t communication_ns = 0;
  int64_t wait_ns = 0;
  int64_t data_ns = 0;
  int64_t host_only_ns = 0;
};

// Named counters of what went wrong with the input (Perfetto's stats table): bad data is
// counted, the first offender kept, and the report shows it. Each counter has a row, with
// its severity, in data_quality_counters.h: the notes and the JSON report read them there.
struct SummaryStats {
  uint64_t events = 0;
  uint64_t dropped_events = 0;       // lost before they reached us (full rings)
  uint64_t out_of_order_events = 0;  // arrived too late to be nested; counted flat
  uint64_t malformed_events = 0;     // e.g. end before start, a time out of range
  // Nested deeper than the summarizer's open-frame limit (kMaxOpenFrames in
  // window_summarizer.cc): counted, not summarized (their time stays in the enclosing call).
  uint64_t deep_events = 0;
  // Event names longer than the importer's cap (KinetoImporter::kMaxNameBytes), kept cut at
  // a UTF-8 boundary: two long names that differ only after the cap become one function.
  uint64_t names_truncated = 0;
  // Events of functions whose slot in the agent's shared memory failed validation
  // (collector/agent_rings.h): counted under a root "<invalid function N>", their call path
  // lost.
  uint64_t invalid_function_events = 0;
  // The live collector's host metrics of the window (core/metric_sampler.h: SampleProblem),
  // the worker's own and the host-wide ones: samples missed because the process had exited,
  // reads that failed (a /proc or /sys file, the socket table, an NVML query), readings cut
  // at a bound (TCP sockets of a process beyond TcpSampler::kMaxSockets).
  uint64_t metric_samples_process_gone = 0;
  uint64_t metric_reads_failed = 0;
  uint64_t metric_readings_truncated = 0;
  // The window's GPU tracing ended early (the agent gave CUPTI up to the job's torch.profiler):
  // how many ms of the window have no GPU data.
  uint64_t gpu_untraced_ms = 0;
  std::string first_problem;
};

struct WorkerSummary {
  int32_t rank = -1;
  std::string host;
  std::string source;  // where it came from: a trace file path, a collector address
  int64_t window_start_ns = 0;
  int64_t window_end_ns = 0;
  bool has_device = false;  // saw at least one device (GPU) track
  std::vector<IterationSummary> iterations;
  std::vector<FunctionSummary> functions;
  // Each sampled metric's mean / stddev over the whole window (all samples fed to the
  // summarizer, equally weighted): the worker-level view when per-function levels are
  // missing, e.g. the run-queue delay of a worker whose slow time is outside traced code.
  std::vector<FunctionMetric> worker_metrics;
  SummaryStats stats;
  // The process group of its collectives, where the sources know it (collective_groups.h).
  CollectiveGroups collective_groups;

  int64_t window_ns() const { return window_end_ns - window_start_ns; }
  // Function i's key: its explicit `key`, else its parent's key (when the parent precedes
  // it) + " > " + "kind:name".
  std::string Key(size_t i) const;
  // Key(i) == key, without building Key(i).
  bool KeyIs(size_t i, std::string_view key) const;
  // Key(i).size(), without building it.
  size_t KeySize(size_t i) const;
  // Median iteration duration; the window length when no iteration markers were seen.
  int64_t median_iteration_ns() const;
  // Number of iterations the totals cover (at least 1).
  size_t iteration_count() const { return iterations.empty() ? 1 : iterations.size(); }
};

}  // namespace perftracker
