// WindowSummarizer: turns one worker's Event stream for one window into a WorkerSummary.
// (Algorithm description: see window_summarizer.cc's header comment.)
#pragma once

#include <cstdint>
#include <memory>

#include "perftracker/core/event_sink.h"
#include "perftracker/core/function_table.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker {

struct SummarizerOptions {
  // Per-track reorder buffer: events may arrive this many positions out of start order and
  // still be nested correctly. Bounds memory independently of trace size.
  size_t reorder_window = 4096;
  // Offline (a trace file, read once): every event is kept (32 bytes each) until
  // Finish(), which sorts each track and summarizes all events in start order, whatever
  // order the source delivered them in; no event is ever out of order and the result does
  // not depend on the arrival order. reorder_window is then unused. A file that marks no
  // iteration is summarized as one iteration spanning its window. Live sources (agent
  // rings) leave this off and keep their fixed memory.
  bool offline = false;
  // Each call path's duration sketch is reduced, as Finish() builds the summary, to a sketch
  // of one value: its median, Quantile(0.5) of the full sketch (count() is then 1; every
  // quantile is that median). For readers of the median alone (`perftracker diagnose`: the
  // localizer reads count() > 0 and the median, its reports no sketch): a path called more
  // than once then holds no heap block (64+ bytes) in the summary. Off by default: the HTTP
  // API's function table reads p50 and p99.
  bool median_durations = false;
};

class WindowSummarizer : public EventSink {
 public:
  // `functions` resolves the function ids of incoming events; not owned, must outlive this.
  explicit WindowSummarizer(const FunctionTable* functions, SummarizerOptions options = {});
  ~WindowSummarizer() override;

  void OnTrack(const TrackInfo& track) override;
  void OnEvent(const Event& event) override;
  void OnMetric(const MetricSample& sample) override;
  void OnProcessGroup(const ProcessGroupInfo& group) override;

  // Flushes everything buffered and returns the summary. Call once.
  WorkerSummary Finish();

  // Debug / test accessor: the largest number of events any track's reorder buffer held.
  // Never exceeds SummarizerOptions::reorder_window + 1 (offline: the track's event count).
  size_t peak_reorder_buffer() const;
  // Debug / test accessor: how many functions (call paths) were counted more than once and so
  // hold a full accumulator (sketch, per-track times, time bins). A path counted once keeps
  // its call as it is: this stays below the number of paths.
  size_t detailed_functions() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace perftracker
