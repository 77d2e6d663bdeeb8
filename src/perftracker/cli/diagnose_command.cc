#include "perftracker/cli/diagnose_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "perftracker/cli/trace_inputs.h"
#include "perftracker/core/input_file.h"
#include "perftracker/pipeline/diagnosis_pipeline.h"
#include "perftracker/report/perfetto_writer.h"
#include "perftracker/report/report.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

bool StderrIsTerminal() { return isatty(STDERR_FILENO) == 1; }

constexpr int32_t kMaxRanksPerHost = 1 << 20;

// --ranks-per-host N: the host of rank r is "host<r / N>" where the traces name no host, or
// one for all (a trace written by a tool that does not say, or a job whose traces were all
// written where they were gathered). Traces that name several hosts keep theirs (one line).
// The localizer tells a process group inside one host (NVLink) from one across hosts (the
// NIC) by these names; findings about a host name it; the Perfetto export aligns the clocks
// of one host's ranks together.
void AssignHostsByRank(int32_t ranks_per_host, std::vector<WorkerSummary>& workers,
                       const std::vector<std::unique_ptr<RankTrace>>& traces) {
  std::set<std::string> named;
  for (const WorkerSummary& w : workers) {
    if (!w.host.empty()) named.insert(w.host);
  }
  if (named.size() > 1) {
    fmt::print(stderr,
               "perftracker: --ranks-per-host {} ignored: the traces name {} hosts, which are "
               "kept\n",
               ranks_per_host, named.size());
    return;
  }
  auto host_of = [ranks_per_host](int32_t rank) {
    return rank < 0 ? std::string() : fmt::format("host{}", rank / ranks_per_host);
  };
  for (WorkerSummary& w : workers) w.host = host_of(w.rank);
  for (const auto& t : traces) t->host = host_of(t->rank);
}

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
                  "its name (rank3, rank-3, rank_3) says it (default: 0, said in the report)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--ranks-per-host", options->ranks_per_host,
                  "Ranks per host, for traces that do not name their host (torch.profiler's "
                  "do not): rank r ran on host r / N (\"host0\", \"host1\", ...), so that "
                  "process groups inside one host (NVLink) are told from those across hosts "
                  "(the NIC)")
      ->check(CLI::Range(1, kMaxRanksPerHost));
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
  if (options.ranks_per_host &&
      (*options.ranks_per_host < 1 || *options.ranks_per_host > kMaxRanksPerHost)) {
    fmt::print(stderr,
               "perftracker: --ranks-per-host {}: must be 1..{} (the ranks each host ran, e.g. "
               "8 for 8 GPUs per node)\n",
               *options.ranks_per_host, kMaxRanksPerHost);
    return 2;
  }
  StatusOr<std::vector<std::string>> files = ExpandTraceInputs(options.paths);
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

  PipelineOptions pipeline_options;
  pipeline_options.kineto.rank = options.rank;
  // One file is one worker: a trace that names no rank (single-GPU training, inference, a
  // renamed file) is rank 0, and the report says so. With several, a rank must come from
  // each file: guessing would mix them up.
  if (files->size() == 1) pipeline_options.kineto.default_rank = 0;
  if (options.time_unit == "us") pipeline_options.kineto.time_unit = TraceTimeUnit::kMicroseconds;
  if (options.time_unit == "ns") pipeline_options.kineto.time_unit = TraceTimeUnit::kNanoseconds;
  pipeline_options.localizer.material_share = options.material_share;
  pipeline_options.threads = options.jobs;
  pipeline_options.keep_events = perfetto;
  // No report below reads a duration sketch, the localizer only its median: each is reduced
  // to its median as the summary is built (its peak, with Python stacks, is where the
  // summaries and its tables coexist).
  pipeline_options.keep_durations = false;
  if (StderrIsTerminal() && files->size() > 1) {
    pipeline_options.progress = [](size_t done, size_t total) {
      fmt::print(stderr, "\rperftracker: imported {}/{} trace files", done, total);
      if (done == total) fmt::print(stderr, "\n");
    };
  }
  DiagnosisPipeline pipeline(std::move(pipeline_options));
  pipeline.AddTraceFiles(*files);
  const std::vector<SkippedInput>& skipped = pipeline.skipped();

  if (pipeline.workers().empty()) {
    if (skipped.size() == 1) {
      fmt::print(stderr, "perftracker: {}\n", skipped[0].error);
    } else {
      for (const SkippedInput& s : skipped) {
        fmt::print(stderr, "perftracker: skipped {}\n", s.error);
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
  for (const SkippedInput& s : skipped) {
    fmt::print(stderr, "perftracker: skipped {}\n", s.error);
  }

  std::vector<std::unique_ptr<RankTrace>> traces = pipeline.TakeTraces();
  if (options.ranks_per_host) {
    AssignHostsByRank(*options.ranks_per_host, pipeline.mutable_workers(), traces);
  }
  Diagnosis diagnosis = pipeline.Diagnose();

  ReportInput input;
  input.diagnosis = &diagnosis;
  input.workers = &pipeline.workers();
  input.title =
      options.paths.size() == 1 ? options.paths[0] : fmt::format("{} trace files", files->size());
  input.skipped_inputs = &skipped;

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
    // Written as it is made: with Python stacks the report is ~1 MB of call-path keys, which
    // would otherwise exist whole (and once more in fmt's buffer) at the run's memory peak.
    if (!WriteJson(input, stdout)) {
      fmt::print(stderr, "perftracker: cannot write the JSON report: {}\n", std::strerror(errno));
      return 2;
    }
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
