#include "perftracker/cli/compare_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "perftracker/cli/trace_inputs.h"
#include "perftracker/compare/report_json_reader.h"
#include "perftracker/compare/run_comparer.h"
#include "perftracker/core/input_file.h"
#include "perftracker/pipeline/diagnosis_pipeline.h"
#include "perftracker/report/compare_report.h"
#include "perftracker/server/http/window_comparison.h"
#include "perftracker/server/open_store.h"

namespace perftracker {
namespace {

// A report JSON is read whole; larger files are traces.
constexpr size_t kMaxReportBytes = size_t{1} << 30;

// The first `n` bytes of a regular file (fewer when it is shorter).
StatusOr<std::string> ReadPrefix(const std::string& path, size_t n) {
  StatusOr<int> fd = OpenInputFile(path);
  if (!fd.ok()) return fd.status();
  std::string data(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(*fd, data.data() + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(*fd);
  data.resize(got);
  return data;
}

// One run from a report JSON, or from a trace set (files and directories).
Status LoadRun(const std::string& path, compare::RunProfile* profile) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return InputPathError(path, errno);
  if (!S_ISDIR(st.st_mode)) {
    StatusOr<std::string> prefix = ReadPrefix(path, 256);
    if (!prefix.ok()) return prefix.status();
    if (compare::LooksLikeReportJson(*prefix)) {
      StatusOr<std::string> text = ReadInputFile(path, kMaxReportBytes);
      if (!text.ok()) return text.status();
      return compare::ReadReportJson(*text, path, profile);
    }
  }
  StatusOr<std::vector<std::string>> files = ExpandTraceInputs({path});
  if (!files.ok()) return files.status();
  PipelineOptions pipeline_options;
  pipeline_options.threads = 0;  // one per core
  // A run that is one trace file is one worker, rank 0 unless the trace says (as diagnose).
  if (files->size() == 1) pipeline_options.kineto.default_rank = 0;
  DiagnosisPipeline pipeline(pipeline_options);
  pipeline.AddTraceFiles(*files);
  for (const SkippedInput& s : pipeline.skipped()) profile->AddNote("skipped " + s.error);
  if (pipeline.workers().empty()) {
    const std::string& first = pipeline.skipped().empty() ? path : pipeline.skipped()[0].error;
    return Status::InvalidArgument(
        files->size() == 1 ? first
                           : fmt::format("{}: none of the {} trace files could be read (first: {})",
                                         path, files->size(), first));
  }
  for (const WorkerSummary& w : pipeline.workers()) profile->AddSummary(w);
  return Status::Ok();
}

}  // namespace

CLI::App* AddCompareCommand(CLI::App& app, CompareCommandOptions* options) {
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Compare two runs of one job: what got slower or faster per function and per rank, by "
      "how much per iteration, largest first. Each run is a trace set (trace files or a "
      "directory of them, as diagnose takes) or a report JSON (diagnose --format json, a live "
      "window's report).");
  cmd->add_option("baseline", options->baseline, "The run to compare against (the good one)")
      ->required();
  cmd->add_option("current", options->current, "The run to explain")->required();
  cmd->add_option("--store", options->store,
                  "Compare two stored windows of a live job: the store `perftracker server "
                  "--store` (or run) keeps, an SQLite file or a postgresql:// URL; BASELINE and "
                  "CURRENT are then window ids (BASELINE may be 'baseline', the job's baseline "
                  "window)");
  cmd->add_option("--job", options->job, "The job whose windows --store compares");
  cmd->add_option("--format", options->format, "Report on stdout: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->default_val("text");
  cmd->add_option("--html", options->html_path, "Also write a self-contained HTML page here");
  cmd->add_option("--material-share", options->material_share,
                  "A change counts when it is at least this share of the baseline iteration "
                  "(and above the noise)")
      ->check(CLI::Range(0.0001, 1.0))
      ->default_val(0.05);
  cmd->add_option("--noise-sigmas", options->noise_sigmas,
                  "A change counts when it is at least this many standard errors of the mean "
                  "iteration (1.4826 x MAD of the iteration times / sqrt(iterations), both runs "
                  "combined)")
      ->check(CLI::Range(0.0, 100.0))
      ->default_val(3.0);
  return cmd;
}

namespace {

int Render(const CompareCommandOptions& options, const compare::Comparison& comparison);

// Two windows of a stored job.
StatusOr<compare::Comparison> CompareStored(const CompareCommandOptions& options,
                                            const compare::CompareOptions& compare_options) {
  if (options.job.empty()) {
    return Status::InvalidArgument("--store needs --job ID: the job whose windows to compare");
  }
  std::optional<uint64_t> ids[2];
  const std::string* given[2] = {&options.baseline, &options.current};
  for (int i = 0; i < 2; ++i) {
    if (i == 0 && *given[i] == "baseline") continue;
    uint64_t id = 0;
    const char* end = given[i]->data() + given[i]->size();
    auto [ptr, ec] = std::from_chars(given[i]->data(), end, id);
    if (ec != std::errc() || ptr != end || id == 0) {
      return Status::InvalidArgument(
          fmt::format("with --store, {} must be a window id (a positive integer{}), not '{}'",
                      i == 0 ? "BASELINE" : "CURRENT", i == 0 ? " or 'baseline'" : "", *given[i]));
    }
    ids[i] = id;
  }
  StatusOr<std::unique_ptr<Store>> store = OpenStore(options.store);
  if (!store.ok()) return store.status();
  return CompareStoredWindows(store->get(), options.job, ids[0], *ids[1], compare_options);
}

}  // namespace

int RunCompare(const CompareCommandOptions& options) {
  compare::CompareOptions compare_options;
  compare_options.material_share = options.material_share;
  compare_options.noise_sigmas = options.noise_sigmas;
  if (!options.store.empty()) {
    StatusOr<compare::Comparison> stored = CompareStored(options, compare_options);
    if (!stored.ok()) {
      fmt::print(stderr, "perftracker: {}\n", stored.status().message());
      return 2;
    }
    return Render(options, *stored);
  }
  if (!options.job.empty()) {
    fmt::print(stderr, "perftracker: --job applies to --store only\n");
    return 2;
  }
  compare::CallPathTree tree;
  compare::RunProfile baseline(&tree, options.baseline);
  compare::RunProfile current(&tree, options.current);
  for (auto [path, profile] :
       {std::pair{&options.baseline, &baseline}, std::pair{&options.current, &current}}) {
    Status loaded = LoadRun(*path, profile);
    if (!loaded.ok()) {
      fmt::print(stderr, "perftracker: {}\n", loaded.message());
      return 2;
    }
  }
  StatusOr<compare::Comparison> comparison =
      compare::RunComparer(compare_options).Compare(baseline, current);
  if (!comparison.ok()) {
    fmt::print(stderr, "perftracker: {}\n", comparison.status().message());
    return 2;
  }
  return Render(options, *comparison);
}

namespace {

int Render(const CompareCommandOptions& options, const compare::Comparison& comparison) {
  if (!options.html_path.empty()) {
    std::ofstream out(options.html_path, std::ios::binary | std::ios::trunc);
    out << RenderComparisonHtml(comparison);
    out.close();
    if (!out) {
      fmt::print(stderr, "perftracker: {}: cannot write the HTML page: {}\n", options.html_path,
                 std::strerror(errno));
      return 2;
    }
  }
  if (options.format == "json") {
    fmt::print("{}", RenderComparisonJson(comparison));
  } else {
    fmt::print("{}", RenderComparisonText(comparison));
    if (!options.html_path.empty()) fmt::print("HTML page: {}\n", options.html_path);
  }
  return 0;
}

}  // namespace

}  // namespace perftracker
