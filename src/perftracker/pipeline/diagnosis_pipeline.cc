#include "perftracker/pipeline/diagnosis_pipeline.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/core.h>

#include "perftracker/core/memory_trim.h"
#include "perftracker/sources/kineto/trace_file_name.h"

namespace perftracker {
namespace {

size_t ThreadCount(int threads, size_t items) {
  const size_t wanted = threads > 0 ? static_cast<size_t>(threads)
                                    : std::max(1u, std::thread::hardware_concurrency());
  return std::max<size_t>(1, std::min(wanted, items));
}

// Runs work(i) for i in [0, n) on `threads` threads (this one included).
void ParallelFor(size_t n, size_t threads, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) work(i);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

struct ImportResult {
  bool ok = false;
  std::string error;
  WorkerSummary summary;
  std::unique_ptr<RankTrace> trace;
  std::string note;           // for the diagnosis (a rank read by default)
  bool rank_missing = false;  // the trace names no rank: NumberUnrankedFiles() gives it one
};

// Import → summarize of one file, with its own FunctionTable; `keep_events` also records the
// raw events in the same pass.
ImportResult ImportOne(const std::string& path, const KinetoImportOptions& import_options,
                       SummarizerOptions summarizer_options, bool keep_events) {
  ImportResult result;
  FunctionTable own_functions;
  if (keep_events) result.trace = std::make_unique<RankTrace>();
  FunctionTable* functions = keep_events ? result.trace->functions() : &own_functions;
  summarizer_options.offline = true;  // a file: every event in its place, whatever its order
  WindowSummarizer summarizer(functions, summarizer_options);
  EventSink* sink = &summarizer;
  if (keep_events) {
    result.trace->set_forward(&summarizer);
    sink = result.trace.get();
  }
  StatusOr<KinetoTraceInfo> info = ImportKinetoFile(path, functions, sink, import_options);
  if (keep_events) result.trace->set_forward(nullptr);  // the summarizer ends with this scope
  if (!info.ok()) {
    result.error = info.status().message();
    return result;
  }
  result.summary = summarizer.Finish();
  result.summary.rank = info->rank;
  result.rank_missing = info->rank_missing;
  if (info->rank_assumed) {
    result.note = fmt::format(
        "{}: the trace names no rank (no distributedInfo.rank, no rank number in its name): "
        "read as rank {}",
        path, info->rank);
  }
  result.summary.source = path;
  if (keep_events) {
    result.trace->rank = info->rank;
    result.trace->source = path;
  }
  // How busy the machine was (the trace's host-load event): the levels a live collector's
  // host sampler gives for the window, as fractions of the recorded wall time.
  if (info->load_wall_ns > 0) {
    result.summary.worker_metrics.push_back(
        {Metric::kCpuUtilization, info->load_cpu_ns / info->load_wall_ns, 0});
    result.summary.worker_metrics.push_back(
        {Metric::kRunQueueDelayFraction, info->load_run_delay_ns / info->load_wall_ns, 0});
    if (info->load_steal_fraction >= 0) {
      result.summary.worker_metrics.push_back(
          {Metric::kCpuStealFraction, info->load_steal_fraction, 0});
    }
  }
  // The importer's counts join the summarizer's (summary/data_quality_counters.h).
  result.summary.stats.names_truncated += info->names_truncated;
  if (info->events_malformed > 0) {
    result.summary.stats.malformed_events += info->events_malformed;
    if (result.summary.stats.first_problem.empty()) {
      result.summary.stats.first_problem = info->first_malformed;
    }
  }
  if (info->events_emitted == 0 && info->events_malformed > 0) {
    result.error =
        fmt::format("{}: the trace holds no events perftracker can use: {} malformed (first: {})",
                    path, info->events_malformed, info->first_malformed);
    return result;
  }
  if (info->events_emitted == 0) {
    result.error = fmt::format(
        "{}: the trace holds no events perftracker can use (no complete \"X\" events); was "
        "the profiler's active phase empty?",
        path);
    return result;
  }
  result.ok = true;
  return result;
}

constexpr size_t kMaxFilesInRankNote = 32;

// Files whose traces name no rank (KinetoTraceInfo::rank_missing). Alone (no other file says
// its rank) they are one job's workers, numbered 0..n-1 in the natural order of their names
// (trace_file_name.h: tensorboard_trace_handler's "<host>_<pid>.<time>.pt.trace.json" sorts
// by host, then process id, then time), and the note maps each rank back to its file. Two
// files of one handler worker (its profiling cycles: same worker name, other times) would be
// one process twice: the later ones are refused. Beside files that do name their rank, the
// unranked ones cannot be numbered without colliding: each is refused. Returns the note.
std::string NumberUnrankedFiles(const std::vector<std::string>& paths,
                                std::vector<ImportResult>& results) {
  std::vector<size_t> unranked;
  size_t ranked = 0;
  size_t first_ranked = paths.size();
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok) continue;
    if (results[i].rank_missing) {
      unranked.push_back(i);
    } else if (++ranked == 1) {
      first_ranked = i;
    }
  }
  if (unranked.empty()) return {};
  auto refuse = [&](size_t i, std::string error) {
    results[i].ok = false;
    results[i].error = std::move(error);
  };
  if (ranked > 0) {
    for (size_t i : unranked) {
      refuse(i, fmt::format("{}: cannot tell which rank wrote this trace (no distributedInfo.rank, "
                            "no rank number in its name) while {} other trace file{} (e.g. "
                            "{}): rename it to include its rank (e.g. trace_rank3.json), or "
                            "diagnose the files without a rank apart",
                            paths[i], ranked, ranked == 1 ? " does" : "s do", paths[first_ranked]));
    }
    return {};
  }
  std::vector<TraceFileName> names(paths.size());
  for (size_t i : unranked) names[i] = ParseTraceFileName(paths[i]);
  std::stable_sort(unranked.begin(), unranked.end(), [&](size_t a, size_t b) {
    if (names[a].base != names[b].base) return NaturalLess(names[a].base, names[b].base);
    return NaturalLess(paths[a], paths[b]);
  });
  std::map<std::string, size_t> worker_file;  // handler worker name -> its first file
  std::vector<size_t> numbered;
  for (size_t i : unranked) {
    if (!names[i].worker.empty()) {
      auto [it, inserted] = worker_file.emplace(names[i].worker, i);
      if (!inserted) {
        refuse(i, fmt::format("{}: another trace of worker {}, already read from {}: "
                              "tensorboard_trace_handler writes one file per profiling cycle; "
                              "diagnose one cycle's files at a time",
                              paths[i], names[i].worker, paths[it->second]));
        continue;
      }
    }
    const auto rank = static_cast<int32_t>(numbered.size());
    results[i].summary.rank = rank;
    if (results[i].trace) results[i].trace->rank = rank;
    numbered.push_back(i);
  }
  if (numbered.size() == 1) {
    return fmt::format(
        "{}: the trace names no rank (no distributedInfo.rank, no rank number in "
        "its name): read as rank 0",
        paths[numbered[0]]);
  }
  std::string note = "ranks numbered by file (no trace names its rank): ";
  for (size_t k = 0; k < numbered.size() && k < kMaxFilesInRankNote; ++k) {
    note += fmt::format("{}rank {} = {}", k == 0 ? "" : ", ", k, names[numbered[k]].Label());
  }
  if (numbered.size() > kMaxFilesInRankNote) {
    note += fmt::format(" and {} more (each worker's source in the JSON report)",
                        numbered.size() - kMaxFilesInRankNote);
  }
  note +=
      "; in the natural order of the file names (tensorboard_trace_handler's "
      "<host>_<pid>.<time>.pt.trace.json: by host, then process id), which need not be the "
      "job's own ranks";
  return note;
}

}  // namespace

DiagnosisPipeline::DiagnosisPipeline(PipelineOptions options)
    : options_(std::move(options)), localizer_(options_.localizer) {}

void DiagnosisPipeline::AddTraceFiles(const std::vector<std::string>& paths) {
  if (paths.empty()) return;
  // Each file has its own table and summarizer (bounded memory each).
  std::vector<ImportResult> results(paths.size());
  std::atomic<size_t> done{0};
  std::mutex progress_mu;
  KinetoImportOptions import_options = options_.kineto;
  import_options.allow_missing_rank = true;  // numbered below, once every file is read
  ParallelFor(paths.size(), ThreadCount(options_.threads, paths.size()), [&](size_t i) {
    SummarizerOptions summarizer = options_.summarizer;
    summarizer.median_durations |= !options_.keep_durations;
    results[i] = ImportOne(paths[i], import_options, summarizer, options_.keep_events);
    const size_t n = ++done;
    if (options_.progress) {
      std::lock_guard<std::mutex> lock(progress_mu);
      options_.progress(n, paths.size());
    }
  });
  // The summarizers are gone; what they freed (every event of every file, the per-path
  // accumulators) goes back to the system before the localizer allocates its tables, so that
  // the two phases' memory does not add up in the peak (xdit_sd_3.5: 42.0 -> 38.9 MiB).
  ReturnFreedMemoryToSystem();
  std::string rank_note = NumberUnrankedFiles(paths, results);
  if (!rank_note.empty()) rank_notes_.push_back(std::move(rank_note));
  // Keep the good ones; a rank claimed twice keeps its first file.
  for (size_t i = 0; i < paths.size(); ++i) {
    ImportResult& r = results[i];
    if (r.ok) {
      auto [it, inserted] = rank_source_.emplace(r.summary.rank, paths[i]);
      if (!inserted) {
        r.ok = false;
        r.error = fmt::format(
            "{}: rank {} was already read from {}; each rank needs its own "
            "trace file",
            paths[i], r.summary.rank, it->second);
      }
    }
    if (r.ok) {
      if (!r.note.empty()) notes_.push_back(std::move(r.note));
      workers_.push_back(std::move(r.summary));
      if (r.trace) traces_.push_back(std::move(r.trace));
    } else {
      skipped_.push_back({paths[i], std::move(r.error)});
    }
  }
}

void DiagnosisPipeline::AddSimulation(const ClusterSimulator& sim) {
  const int32_t n = sim.num_ranks();
  // Summaries are a few KB each: kept in rank order so that the Localizer sees the same
  // input whatever the thread count.
  std::vector<WorkerSummary> summaries(static_cast<size_t>(n));
  ParallelFor(summaries.size(), ThreadCount(options_.threads, summaries.size()), [&](size_t i) {
    const auto r = static_cast<int32_t>(i);
    WindowSummarizer summarizer(&sim.functions(), options_.summarizer);
    sim.Emit(r, summarizer);
    WorkerSummary w = summarizer.Finish();
    w.rank = r;
    w.host = sim.HostName(r);
    w.source = "sim";
    summaries[i] = std::move(w);
  });
  for (WorkerSummary& w : summaries) workers_.push_back(std::move(w));
}

void DiagnosisPipeline::AddSummary(const WorkerSummary& summary) {
  if (options_.keep_summaries) {
    workers_.push_back(summary);
  } else {
    localizer_.Add(summary);
  }
}

void DiagnosisPipeline::AddNote(std::string note) { notes_.push_back(std::move(note)); }

Diagnosis DiagnosisPipeline::Diagnose() {
  if (!options_.keep_durations) {
    // Before the localizer's tables exist (the summaries of trace files are reduced already,
    // by their summarizers: SummarizerOptions::median_durations).
    bool reduced = false;
    for (WorkerSummary& w : workers_) {
      for (FunctionSummary& f : w.functions) {
        if (f.durations.count() <= 1) continue;
        QuantileSketch median;
        median.Add(f.durations.Quantile(0.5));  // exact: its Quantile(q) is that value
        f.durations = std::move(median);
        reduced = true;
      }
    }
    if (reduced) ReturnFreedMemoryToSystem();
  }
  // First, so that the report shows how its ranks map to the files before anything else.
  for (std::string& note : rank_notes_) localizer_.AddNote(std::move(note));
  rank_notes_.clear();
  for (const WorkerSummary& w : workers_) {
    localizer_.Add(w);  // copies what it needs (localize/job_table.h): keeps no reference
  }
  for (const SkippedInput& s : skipped_) localizer_.AddNote("skipped " + s.error);
  for (std::string& note : notes_) localizer_.AddNote(std::move(note));
  notes_.clear();
  Diagnosis d = localizer_.Finish();
  // The localizer freed its tables: the report is rendered without their pages.
  ReturnFreedMemoryToSystem();
  return d;
}

}  // namespace perftracker
