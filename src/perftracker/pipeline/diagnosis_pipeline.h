// DiagnosisPipeline: the one entry point for import → summarize → localize outside the live
// server (`perftracker diagnose`, the simulated executor of `bench accuracy`, the benches and
// the store fixture of the HTTP tests).
//
// Workers come in from any mix of sources, each turned into a WorkerSummary the same way:
//   AddTraceFiles()  per-rank Kineto / Chrome trace files, imported in parallel, each with
//                    its own FunctionTable and an offline summarizer (a file holds every
//                    event in its place, whatever its order); a file that cannot be read,
//                    holds no usable event or repeats a rank already read is skipped with
//                    its reason, and the diagnosis gets a note "skipped <reason>"; files
//                    whose traces name no rank (tensorboard_trace_handler's, torch 1.13
//                    CPU-only or a job without a process group) are numbered 0..n-1 by name
//                    when no other file names its rank, with a note that maps each rank to
//                    its file (NumberUnrankedFiles in the .cc); beside ranked files, refused;
//   AddSimulation()  every rank of a ClusterSimulator, in rank order whatever the threads;
//   AddSummary()     a summary made elsewhere (a synthetic worker, a collector's).
// Diagnose() then runs the Localizer over the workers in the order they came, then the
// notes. The summaries stay readable (and editable, e.g. to set hosts) until then and after,
// for the reports (with keep_durations off, each duration sketch reduced to its median); with
// keep_summaries off, AddSummary() feeds the localizer at once and keeps nothing (a benchmark
// of 100,000 workers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "perftracker/localize/localizer.h"
#include "perftracker/report/rank_trace.h"
#include "perftracker/report/report.h"
#include "perftracker/sources/kineto/kineto_importer.h"
#include "perftracker/sources/sim/cluster_simulator.h"
#include "perftracker/summary/window_summarizer.h"

namespace perftracker {

struct PipelineOptions {
  KinetoImportOptions kineto;
  // The summarizer of every source; AddTraceFiles() turns `offline` on for its files.
  SummarizerOptions summarizer;
  LocalizerOptions localizer;
  // Trace files (and simulated ranks) summarized in parallel: 0 = one per core.
  int threads = 1;
  // AddTraceFiles() also records each file's raw events (RankTrace, for a Perfetto export)
  // in the same pass.
  bool keep_events = false;
  // Off: AddSummary() localizes each summary as it comes and keeps none (workers() stays
  // empty); the other sources need it on.
  bool keep_summaries = true;
  // Off: each per-call duration sketch (FunctionSummary::durations) is reduced to a sketch of
  // one value, its median (count() 1, every quantile the median), before the localizer reads
  // it: by the summarizer of each trace file as it builds the summary
  // (SummarizerOptions::median_durations), and by Diagnose() for summaries added otherwise.
  // The localizer reads only count() > 0 and the median, so the diagnosis is the same; a path
  // called more than once then holds no heap block (64+ bytes) while the summaries and the
  // localizer's tables coexist (where a trace file with Python stacks peaks). For callers
  // whose reports read no sketch (`perftracker diagnose`: the text, JSON and HTML reports
  // read each path's key, kind, calls and times); the HTTP API's function table reads p50 and
  // p99, so the default keeps them.
  bool keep_durations = true;
  // Called after each trace file is summarized (from the importing threads, one at a time).
  std::function<void(size_t done, size_t total)> progress;
};

class DiagnosisPipeline {
 public:
  explicit DiagnosisPipeline(PipelineOptions options = {});

  void AddTraceFiles(const std::vector<std::string>& paths);
  void AddSimulation(const ClusterSimulator& sim);
  void AddSummary(const WorkerSummary& summary);
  void AddNote(std::string note);

  // Localizes what was added; call once.
  Diagnosis Diagnose();

  const std::vector<WorkerSummary>& workers() const { return workers_; }
  std::vector<WorkerSummary>& mutable_workers() { return workers_; }
  // The trace files that gave no worker, in the order given, with the reason.
  const std::vector<SkippedInput>& skipped() const { return skipped_; }
  // The raw events of each worker from a trace file (keep_events), in the order of workers().
  std::vector<std::unique_ptr<RankTrace>> TakeTraces() { return std::move(traces_); }

 private:
  PipelineOptions options_;
  Localizer localizer_;
  std::vector<WorkerSummary> workers_;
  std::vector<std::unique_ptr<RankTrace>> traces_;
  std::vector<SkippedInput> skipped_;
  std::vector<std::string> notes_;
  std::vector<std::string> rank_notes_;         // how files without a rank were numbered
  std::map<int32_t, std::string> rank_source_;  // the trace file each rank was read from
};

}  // namespace perftracker
