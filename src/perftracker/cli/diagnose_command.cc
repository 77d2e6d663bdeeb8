#include "perftracker/cli/diagnose_command.h"

#include <sys/stat.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "perftracker/core/input_file.h"
#include "perftracker/localize/localizer.h"
#include "perftracker/report/perfetto_writer.h"
#include "perftracker/report/rank_trace.h"
#include "perftracker/report/report.h"
#include "perftracker/summary/window_summarizer.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

bool IsTraceFileName(const fs::path& p) {
  const std::string name = p.filename().string();
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".json") || ends_with(".json.gz");
}

// Expands files and directories (recursively) into a sorted list of trace files.
StatusOr<std::vector<std::string>> ExpandInputs(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return InputPathError(path, errno);
    std::error_code ec;
    if (S_ISDIR(st.st_mode)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(
               path, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_regular_file(ec) && IsTraceFileName(it->path())) {
          found.push_back(it->path().string());
        }
      }
      if (ec)
        return Status::InvalidArgument(
            fmt::format("{}: cannot read directory: {}", path, ec.message()));
      if (found.empty()) {
        return Status::NotFound(fmt::format(
            "{}: no trace files (*.json, *.json.gz) in this directory; point diagnose at the "
            "files torch.profiler's export_chrome_trace wrote",
            path));
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(path);
    }
  }
  return files;
}

struct ImportResult {
  std::string path;
  bool ok = false;
  std::string error;
  WorkerSummary summary;
  std::unique_ptr<RankTrace> trace;  // the raw events, only for --perfetto
};

// `keep_events`: also record the raw events (for --perfetto), in the same pass.
ImportResult ImportOne(const std::string& path, const KinetoImportOptions& import_options,
                       bool keep_events) {
  ImportResult result;
  result.path = path;
  FunctionTable own_functions;
  if (keep_events) result.trace = std::make_unique<RankTrace>();
  FunctionTable* functions = keep_events ? result.trace->functions() : &own_functions;
  SummarizerOptions summarizer_options;
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
  result.summary.source = path;
  if (keep_events) {
    result.trace->rank = info->rank;
    result.trace->source = path;
  }
  if (info->events_malformed > 0) {
    result.summary.stats.malformed_events += info->events_malformed;
    if (result.summary.stats.first_problem.empty()) {
      result.summary.stats.first_problem = info->first_malformed;
    }
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

bool StderrIsTerminal() { return isatty(STDERR_FILENO) == 1; }

}  // namespace

CLI::App* AddDiagnoseCommand(CLI::App& app, DiagnoseOptions* options) {
  CLI::App* cmd = app.add_subcommand(
      "diagnose",
      "Diagnose a job from the per-rank trace files torch.profiler wrote "
      "(Kineto / Chrome trace JSON, .json or .json.gz): names the slow worker, function and "
      "resource.");
  cmd->add_option("paths", options->paths,
                  "Trace files or directories (searched recursively for *.json, *.json.gz)")
      ->required();
  cmd->add_option("--format", options->format, "Report on stdout: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->default_val("text");
  cmd->add_option("--html", options->html_path,
                  "Also write a self-contained HTML report (heat map, per-worker charts) here");
  cmd->add_option("--rank", options->rank,
                  "Rank of the single trace file given, when neither its distributedInfo nor "
                  "its name (rank3, rank-3, rank_3) says it")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--time-unit", options->time_unit,
                  "Unit of ts/dur in the traces: auto (µs unless the trace says "
                  "displayTimeUnit ns), us or ns")
      ->check(CLI::IsMember({"auto", "us", "ns"}))
      ->default_val("auto");
  cmd->add_option("--material-share", options->material_share,
                  "A finding is material when it costs at least this share of the iteration")
      ->check(CLI::Range(0.0001, 1.0))
      ->default_val(0.05);
  cmd->add_option("-j,--jobs", options->jobs, "Files imported in parallel (0 = one per core)")
      ->check(CLI::Range(0, 256))
      ->default_val(0);
  cmd->add_option("--perfetto", options->perfetto_path,
                  "Also write the window as a Chrome / Perfetto trace here (open it in "
                  "ui.perfetto.dev or chrome://tracing): one process per rank, clocks aligned "
                  "on collective ends, each finding drawn on its culprit's calls with arrows to "
                  "the victims' waits; at most 2 M events, shorter ones beyond that aggregated "
                  "(docs/perfetto-export.md)");
  cmd->add_option("--perfetto-max-events", options->perfetto_max_events,
                  "Cap of the --perfetto export: events beyond it (the shortest) are counted "
                  "per track in its metadata instead of drawn")
      ->check(CLI::Range(static_cast<size_t>(1), static_cast<size_t>(1) << 40))
      ->default_val(options->perfetto_max_events);
  cmd->add_flag("--color", options->color, "Colour the text report");
  return cmd;
}

int RunDiagnose(const DiagnoseOptions& options) {
  StatusOr<std::vector<std::string>> files = ExpandInputs(options.paths);
  if (!files.ok()) {
    fmt::print(stderr, "perftracker: {}\n", files.status().message());
    return 2;
  }
  if (options.rank && files->size() != 1) {
    fmt::print(stderr,
               "perftracker: --rank applies to a single trace file, but {} were given; name "
               "each file with its rank (e.g. trace_rank3.json) instead\n",
               files->size());
    return 2;
  }

  // Open the export first: a bad path fails before minutes of import, not after.
  std::ofstream perfetto_out;
  const bool perfetto = !options.perfetto_path.empty();
  if (perfetto) {
    perfetto_out.open(options.perfetto_path, std::ios::binary | std::ios::trunc);
    if (!perfetto_out) {
      fmt::print(stderr,
                 "perftracker: {}: cannot write the Perfetto trace: {}; give --perfetto a file "
                 "in a writable directory\n",
                 options.perfetto_path, std::strerror(errno));
      return 2;
    }
  }

  KinetoImportOptions import_options;
  import_options.rank = options.rank;
  if (options.time_unit == "us") import_options.time_unit = TraceTimeUnit::kMicroseconds;
  if (options.time_unit == "ns") import_options.time_unit = TraceTimeUnit::kNanoseconds;

  // Import in parallel: each file has its own table and summarizer (bounded memory each).
  std::vector<ImportResult> results(files->size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex progress_mu;
  const bool progress = StderrIsTerminal() && files->size() > 1;
  const size_t threads = std::min<size_t>(
      files->size(), options.jobs > 0 ? static_cast<size_t>(options.jobs)
                                      : std::max(1u, std::thread::hardware_concurrency()));
  auto worker = [&] {
    for (size_t i = next++; i < files->size(); i = next++) {
      results[i] = ImportOne((*files)[i], import_options, perfetto);
      const size_t n = ++done;
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        fmt::print(stderr, "\rperftracker: imported {}/{} trace files", n, files->size());
        if (n == files->size()) fmt::print(stderr, "\n");
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
#if defined(__GLIBC__)
  // The summarizers are gone; what they freed (every event of every file, the per-path
  // accumulators) goes back to the system before the localizer allocates its tables, so that
  // the two phases' memory does not add up in the peak (xdit_sd_3.5: 42.0 -> 38.9 MiB).
  malloc_trim(0);
#endif

  // Keep the good ones; a rank claimed twice keeps its first file.
  std::vector<WorkerSummary> workers;
  std::vector<std::unique_ptr<RankTrace>> traces;
  std::vector<std::pair<std::string, std::string>> skipped;
  std::map<int32_t, std::string> rank_source;
  for (auto& r : results) {
    if (r.ok) {
      auto [it, inserted] = rank_source.emplace(r.summary.rank, r.path);
      if (!inserted) {
        r.ok = false;
        r.error = fmt::format(
            "{}: rank {} was already read from {}; each rank needs its own "
            "trace file",
            r.path, r.summary.rank, it->second);
      }
    }
    if (r.ok) {
      workers.push_back(std::move(r.summary));
      if (r.trace) traces.push_back(std::move(r.trace));
    } else {
      skipped.emplace_back(r.path, r.error);
    }
  }

  if (workers.empty()) {
    if (skipped.size() == 1) {
      fmt::print(stderr, "perftracker: {}\n", skipped[0].second);
    } else {
      for (const auto& [path, error] : skipped) {
        fmt::print(stderr, "perftracker: skipped {}\n", error);
      }
      fmt::print(stderr, "perftracker: none of the {} trace files could be read\n", skipped.size());
    }
    if (perfetto) {
      perfetto_out.close();
      std::error_code ec;
      fs::remove(options.perfetto_path, ec);  // no half-made export left behind
    }
    return 2;
  }
  for (const auto& [path, error] : skipped) {
    fmt::print(stderr, "perftracker: skipped {}\n", error);
  }

  LocalizerOptions localizer_options;
  localizer_options.material_share = options.material_share;
  Localizer localizer(localizer_options);
  for (const auto& w : workers) localizer.Add(w);
  for (const auto& [path, error] : skipped) localizer.AddNote("skipped " + error);
  Diagnosis diagnosis = localizer.Finish();

  ReportInput input;
  input.diagnosis = &diagnosis;
  input.workers = &workers;
  input.title =
      options.paths.size() == 1 ? options.paths[0] : fmt::format("{} trace files", files->size());
  std::vector<SkippedInput> skipped_inputs;
  for (const auto& [path, error] : skipped) skipped_inputs.push_back({path, error});
  input.skipped_inputs = &skipped_inputs;

  if (!options.html_path.empty()) {
    std::ofstream out(options.html_path, std::ios::binary | std::ios::trunc);
    out << RenderHtml(input);
    out.close();
    if (!out) {
      fmt::print(stderr, "perftracker: {}: cannot write the HTML report: {}\n", options.html_path,
                 std::strerror(errno));
      return 2;
    }
  }

  if (perfetto) {
    PerfettoOptions perfetto_options;
    perfetto_options.max_events = options.perfetto_max_events;
    PerfettoWriter writer(perfetto_options);
    for (const auto& t : traces) writer.AddRank(t.get());
    Status written = writer.Write(diagnosis, &perfetto_out);
    perfetto_out.close();
    if (!written.ok() || !perfetto_out) {
      fmt::print(stderr, "perftracker: {}: cannot write the Perfetto trace: {}\n",
                 options.perfetto_path, std::strerror(errno));
      return 2;
    }
    traces.clear();  // the raw events are no longer needed
    if (writer.stats().events_aggregated > 0) {
      fmt::print(stderr,
                 "perftracker: {}: {} of {} events written, the {} shortest aggregated per track "
                 "(the export's cap; counts in its metadata)\n",
                 options.perfetto_path, writer.stats().events_written, writer.stats().events_total,
                 writer.stats().events_aggregated);
    }
  }

  if (options.format == "json") {
    fmt::print("{}", RenderJson(input));
  } else {
    TextOptions text_options;
    text_options.color = options.color;
    fmt::print("{}", RenderText(input, text_options));
    if (!options.html_path.empty()) fmt::print("HTML report: {}\n", options.html_path);
    if (perfetto) {
      fmt::print("Perfetto trace: {} (open in ui.perfetto.dev or chrome://tracing)\n",
                 options.perfetto_path);
    }
  }
  return skipped.empty() ? 0 : 1;
}

}  // namespace perftracker
