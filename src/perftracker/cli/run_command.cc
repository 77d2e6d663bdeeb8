#include "perftracker/cli/run_command.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "perftracker/cli/job_process.h"
#include "perftracker/cli/job_python.h"
#include "perftracker/server/embedded/embedded_run.h"
#include "perftracker/server/report_writer.h"

#ifndef PERFTRACKER_BUILD_PYTHON_DIR
#define PERFTRACKER_BUILD_PYTHON_DIR ""
#endif

namespace perftracker {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxTitle = 160;

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_of(" \t\n'\"\\$`*?[]{}()<>|&;!#~") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string CommandLine(const std::vector<std::string>& command) {
  std::string out;
  for (const auto& a : command) out += (out.empty() ? "" : " ") + ShellQuote(a);
  if (out.size() > kMaxTitle) out = out.substr(0, kMaxTitle - 3) + "...";
  return out;
}

bool AgentAvailable(const std::string& python_dir, std::string* missing) {
  const fs::path boot = fs::path(python_dir) / "perftracker" / "_boot" / "sitecustomize.py";
  std::error_code ec;
  if (python_dir.empty() || !fs::exists(boot, ec)) {
    *missing =
        python_dir.empty() ? std::string("(no python directory was built in)") : boot.string();
    return false;
  }
  for (auto it = fs::directory_iterator(fs::path(python_dir) / "perftracker", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("_agent") && name.ends_with(".so")) return true;
  }
  *missing = (fs::path(python_dir) / "perftracker" / "_agent*.so").string();
  return false;
}

// A power of two in [2, 2^26].
std::string PowerOfTwoEvents(const std::string& text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < 2 || v > (1ull << 26) || (v & (v - 1)) != 0) {
    return "must be a power of two between 2 and 67108864";
  }
  return "";
}

}  // namespace

std::string AgentOptionsString(const RunOptions& o) {
  return fmt::format(
      "rings={},ring_events={},learn_repeats={},relearn_after={},window_iterations={},"
      "slowdown_ratio={},hang_factor={},min_hang_ms={},gpu_tracing={}",
      o.rings, o.ring_events, o.learn_repeats, o.relearn_after, o.window_iterations,
      o.slowdown_ratio, o.hang_factor, o.min_hang_seconds * 1000,
      o.gpu_tracing == "off" ? 0 : (o.gpu_tracing == "always" ? 2 : 1));
}

std::string DefaultNcclPlugin() {
  const char* env = std::getenv("PERFTRACKER_NCCL_PLUGIN");
  if (env != nullptr && *env != '\0') return env;
  return PERFTRACKER_BUILD_NCCL_PLUGIN;
}

std::string AgentPythonDir() {
  const char* env = std::getenv("PERFTRACKER_PYTHON_DIR");
  if (env != nullptr && *env != '\0') return env;
  return PERFTRACKER_BUILD_PYTHON_DIR;
}

CLI::App* AddRunCommand(CLI::App& app, RunOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run a training job under live diagnosis: every Python process it starts loads the "
      "perftracker agent (no code change); a slowdown or a hang opens a profiling window on "
      "every rank, and the diagnosis is written to the report directory and printed at the "
      "end. Usage: perftracker run [options] -- <command...>, e.g. "
      "perftracker run -- torchrun --nproc_per_node 4 train.py");
  cmd->add_option("command", o->command, "The job's command line, after --");
  cmd->add_option("--report-dir", o->report_dir,
                  "Directory for the reports (window-<id>-<reason>.json / .html), created if "
                  "needed")
      ->default_val("perftracker-reports");
  AddReportModeOption(cmd);
  AddWindowOptions(cmd, &o->window, /*max_windows_limit=*/1000);
  cmd->add_option("--trigger-at-seconds", o->trigger_at_seconds,
                  "Also take one window this long after the first rank says hello (demos, "
                  "tests, on-demand profiling)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--slowdown-ratio", o->slowdown_ratio,
                  "Detector: trigger when the mean of the last --window-iterations iterations "
                  "exceeds the recent shortest mean by this fraction")
      ->check(CLI::Range(0.001, 100.0))
      ->default_val(0.05);
  cmd->add_option("--learn-repeats", o->learn_repeats,
                  "Detector: identical data-loader/optimizer marker sequences needed to learn "
                  "the iteration")
      ->check(CLI::Range(1, 1000))
      ->default_val(10);
  cmd->add_option("--relearn-after", o->relearn_after,
                  "Detector: unmatched markers before the iteration is learned again")
      ->check(CLI::Range(1, 1000000))
      ->default_val(200);
  cmd->add_option("--window-iterations", o->window_iterations,
                  "Detector: iterations in the moving mean")
      ->check(CLI::Range(1, 100000))
      ->default_val(50);
  cmd->add_option("--hang-factor", o->hang_factor,
                  "Detector: a hang is no progress for this many mean iteration times (and "
                  "1.5 x the longest recent one); 4 leaves time for the report with every "
                  "rank's stacks within 5 x")
      ->check(CLI::Range(1.0, 10000.0))
      ->default_val(4.0);
  cmd->add_option("--min-hang-seconds", o->min_hang_seconds,
                  "Detector: never call a hang before this much silence. Real jobs pause for "
                  "seconds (checkpoints, evaluation, recompilation) and NCCL's watchdog waits "
                  "minutes; every hang is also confirmed by a second stack sample")
      ->check(CLI::Range(0.0, 100000.0))
      ->default_val(30.0);
  cmd->add_option("--ring-events", o->ring_events,
                  "Agent: events per thread ring (a power of two; 40 bytes each); a full ring "
                  "drops and counts")
      ->check(CLI::Validator(PowerOfTwoEvents, "POWER_OF_TWO"))
      ->default_val(1u << 16);
  cmd->add_option("--perfetto-events-per-rank", o->perfetto_events_per_rank,
                  "Each window's timeline (window-<id>.perfetto.json, for ui.perfetto.dev): "
                  "keep at most this many events per rank (40 bytes each, in memory and on "
                  "disk until merged; later ones are counted, not drawn); 0: no timeline "
                  "(docs/perfetto-export.md)")
      ->check(CLI::Range(size_t{0}, size_t{100'000'000}))
      ->default_val(o->perfetto_events_per_rank);
  cmd->add_option("--rings", o->rings, "Agent: thread rings per process")
      ->check(CLI::Range(1, 1024))
      ->default_val(16);
  cmd->add_option("--gpu-tracing", o->gpu_tracing,
                  "GPU kernels, copies and launches traced with CUPTI in windows: auto (ranks "
                  "where torch uses CUDA; skipped while torch.profiler records), always (CUDA "
                  "through another library too), off")
      ->check(CLI::IsMember({"off", "auto", "always"}))
      ->capture_default_str();
  cmd->add_option("--nccl-plugin", o->nccl_plugin,
                  "NCCL profiler plugin for the job (NCCL_PROFILER_PLUGIN): a path, or off. "
                  "Default: perftracker's own, unless the environment already names one")
      ->default_str("built in");
  cmd->add_option("--material-share", o->material_share,
                  "A finding is material when it costs at least this share of the iteration")
      ->check(CLI::Range(0.0001, 1.0))
      ->default_val(0.05);
  cmd->add_option("--store", o->store,
                  "SQLite store of the run's windows, summaries and diagnoses, for `perftracker "
                  "server --store` to serve afterwards (or a postgresql:// URL: the database "
                  "a fleet of servers shares, docs/server.md); off: none")
      ->default_str("<report-dir>/perftracker.db");
  cmd->add_option("--server", o->remote.server,
                  "host:port of a perftracker server (docs/server.md): only the collector runs "
                  "here; the server coordinates windows and keeps the reports");
  AddRemoteOptions(cmd, &o->remote);
  cmd->add_flag("--color", o->color, "Colour the final text report");
  return cmd;
}

int RunJob(const RunOptions& options) {
  if (options.command.empty()) {
    fmt::print(stderr,
               "perftracker run: no command given; usage: perftracker run [options] -- "
               "<command...> (see perftracker run --help)\n");
    return 2;
  }
  if (!options.remote.server.empty() && options.trigger_at_seconds) {
    // The server coordinates the windows of every host; a local trigger time would do nothing.
    fmt::print(stderr,
               "perftracker run: --trigger-at-seconds works only without --server; with a "
               "server, take a window from its web UI or POST /api/v1/jobs/{{job}}/trigger\n");
    return 2;
  }
  {
    const Status st = EnsureReportDir(options.report_dir);
    if (!st.ok()) {
      fmt::print(stderr, "perftracker run: --report-dir: {}\n", st.message());
      return 2;
    }
  }

  EmbeddedRunOptions run_options;
  run_options.run_id = NewRunId();
  run_options.title = CommandLine(options.command);
  if (!options.remote.server.empty()) {
    // Only the collector runs here: the server coordinates the windows of every host of the
    // job, diagnoses and keeps the reports.
    RemoteOptions r = options.remote;
    const char* job_env = std::getenv("PERFTRACKER_JOB_ID");
    if (r.job_id.empty()) {
      r.job_id = job_env != nullptr && *job_env != '\0' ? job_env : run_options.run_id;
    }
    StatusOr<GrpcLinkOptions> link_options = MakeLinkOptions(r, run_options.title);
    if (!link_options.ok()) {
      fmt::print(stderr, "perftracker run: {}\n", link_options.status().message());
      return 2;
    }
    run_options.remote = std::move(*link_options);
    run_options.remote_server = r.server;
    run_options.remote_job = r.job_id;
  } else {
    CoordinatorOptions& co = run_options.coordinator;
    co.report_dir = options.report_dir;
    ApplyWindowOptions(options.window, &co);
    if (options.trigger_at_seconds) co.trigger_at_ns = SecondsToNs(*options.trigger_at_seconds);
    co.localizer.material_share = options.material_share;
    co.title = run_options.title;
    co.text.color = options.color;
    // The ranks' window recordings are files on this host: the embedded server merges them.
    co.perfetto = options.perfetto_events_per_rank > 0;
    run_options.store = options.store;
  }
  // The collector keeps the ranks' window events for the timeline in <report-dir>/recordings
  // (with --server until the server asks for them).
  run_options.recordings_dir = (fs::path(options.report_dir) / "recordings").string();
  run_options.perfetto_events_per_rank = options.perfetto_events_per_rank;
  run_options.window_iterations = options.window_iterations;
  run_options.slowdown_ratio = options.slowdown_ratio;
  StatusOr<std::unique_ptr<EmbeddedRun>> started = EmbeddedRun::Start(std::move(run_options));
  if (!started.ok()) {
    fmt::print(stderr, "perftracker run: {}\n", started.status().message());
    return 2;
  }
  EmbeddedRun& run = **started;
  for (const std::string& line : run.warnings()) fmt::print(stderr, "perftracker: {}\n", line);

  std::vector<std::pair<std::string, std::string>> env_set;
  if (run.live()) {
    const char* python_dir_env = std::getenv("PERFTRACKER_PYTHON_DIR");
    const std::string python_dir = AgentPythonDir();
    std::string missing;
    // Without PERFTRACKER_PYTHON_DIR: the agent installed in the job's own Python, else the
    // build tree's when it fits that Python (job_python.h).
    const JobAgent job_agent = python_dir_env != nullptr && *python_dir_env != '\0'
                                   ? JobAgent{}
                                   : LocateJobAgent(options.command, PERFTRACKER_BUILD_PYTHON_DIR,
                                                    PERFTRACKER_SOURCE_DIR_DEFAULT);
    if (job_agent.from == JobAgent::From::kNone) {
      fmt::print(stderr, "perftracker: {}\n", job_agent.message);
    } else if (job_agent.from == JobAgent::From::kJobPython) {
      std::string pythonpath = job_agent.boot_dir;
      const char* old = std::getenv("PYTHONPATH");
      if (old != nullptr && *old != '\0') pythonpath += std::string(":") + old;
      env_set.emplace_back("PYTHONPATH", pythonpath);
    } else if (AgentAvailable(python_dir, &missing)) {
      std::string pythonpath =
          (fs::path(python_dir) / "perftracker" / "_boot").string() + ":" + python_dir;
      const char* old = std::getenv("PYTHONPATH");
      if (old != nullptr && *old != '\0') pythonpath += std::string(":") + old;
      env_set.emplace_back("PYTHONPATH", pythonpath);
    } else {
      fmt::print(stderr,
                 "perftracker: warning: the agent is not available: {} not found (build the "
                 "perftracker_python target, or set PERFTRACKER_PYTHON_DIR to the directory "
                 "that holds perftracker/_agent*.so); running the job without it\n",
                 missing);
    }
    for (auto& entry : run.JobEnvironment()) env_set.push_back(std::move(entry));
    env_set.emplace_back("PERFTRACKER_AGENT_OPTIONS", AgentOptionsString(options));
    // NCCL loads the plugin at its first communicator: collectives and p2p operations with
    // bytes, algorithm and protocol, into <agent file>-nccl (docs/gpu-sources.md). A plugin
    // the user set is kept unless --nccl-plugin names one.
    if (options.nccl_plugin != "off") {
      const std::string plugin =
          options.nccl_plugin.empty() ? DefaultNcclPlugin() : options.nccl_plugin;
      const char* user = std::getenv("NCCL_PROFILER_PLUGIN");
      std::error_code ec;
      if (options.nccl_plugin.empty() && user != nullptr && *user != '\0' && plugin != user) {
        fmt::print(stderr,
                   "perftracker: NCCL_PROFILER_PLUGIN is set ({}): keeping it, so NCCL "
                   "operations are not seen (--nccl-plugin {} to use perftracker's)\n",
                   user, plugin);
      } else if (!fs::exists(plugin, ec)) {
        fmt::print(stderr,
                   "perftracker: warning: the NCCL profiler plugin {} does not exist (build "
                   "the perftracker_nccl_profiler target, or --nccl-plugin off); NCCL "
                   "operations are not seen\n",
                   plugin);
      } else {
        env_set.emplace_back("NCCL_PROFILER_PLUGIN", plugin);
      }
    }
  }

  const int exit_code = RunJobProcess(options.command, env_set);

  run.Finish(exit_code);
  const std::string summary = run.FinalSummary();
  if (!summary.empty()) {
    fmt::print("{}", summary);
    std::fflush(stdout);
  }
  return exit_code;
}

}  // namespace perftracker
