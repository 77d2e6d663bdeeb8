// `perftracker run [options] -- <command...>`: runs a training job under live diagnosis.
//
// In this process: the node collector (Unix socket, ring draining, host sampling) and the
// embedded server (window coordination, localization, reports). For the job: a process of
// its own process group, with PERFTRACKER_SOCKET, PERFTRACKER_RUN_ID,
// PERFTRACKER_AGENT_OPTIONS set and PYTHONPATH prefixed by the agent's boot directory (its
// sitecustomize starts the agent in every Python process) and package directory. SIGINT,
// SIGTERM, SIGHUP and SIGQUIT are forwarded to the job's process group; the job's exit code
// is passed through (a signal N becomes 128 + N). See docs/live-mode.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "perftracker/cli/remote_options.h"
#include "perftracker/cli/window_options.h"

namespace CLI {
class App;
}

namespace perftracker {

struct RunOptions {
  std::vector<std::string> command;
  std::string report_dir = "perftracker-reports";
  WindowOptions window{.max_windows = 3};
  std::optional<double> trigger_at_seconds;
  // Detector thresholds (the agent's PERFTRACKER_AGENT_OPTIONS).
  double slowdown_ratio = 0.05;
  int learn_repeats = 10;
  int relearn_after = 200;
  int window_iterations = 50;
  double hang_factor = 4.0;
  double min_hang_seconds = 30;  // DetectorOptions::min_hang_ns: why 30 s is said there
  // Agent memory.
  uint32_t ring_events = 1u << 16;
  uint32_t rings = 16;
  double material_share = 0.05;
  // GPU sources: CUPTI tracing in the agent; the NCCL profiler plugin ("" = the built one,
  // "off" = none).
  std::string gpu_tracing = "auto";  // off | auto (ranks where torch uses CUDA) | always
  std::string nccl_plugin;
  // The embedded store ("" = <report_dir>/perftracker.db, "off" = none); not with --server.
  std::string store;
  // --server and the options that go with it: run only the collector here.
  RemoteOptions remote;
  bool color = false;
  // Live Perfetto export: each rank's window events kept (at most this many per rank and
  // window) and merged into window-<id>.perfetto.json; 0 = off. Embedded server only.
  size_t perfetto_events_per_rank = 250'000;
};

// Registers the subcommand; `options` must outlive the app.
CLI::App* AddRunCommand(CLI::App& app, RunOptions* options);

// Runs the job; returns its exit code (128 + N when a signal N ended it), 127 when the
// command cannot be started, 2 on bad usage (nothing started).
int RunJob(const RunOptions& options);

// The PERFTRACKER_AGENT_OPTIONS value for `options` (key=value pairs).
std::string AgentOptionsString(const RunOptions& options);

// Where the agent's Python package lives: $PERFTRACKER_PYTHON_DIR, else the build tree's
// python/ directory (compile-time). The directory holds perftracker/_boot/sitecustomize.py.
// Without PERFTRACKER_PYTHON_DIR, RunJob first looks for the agent installed in the job's own
// Python (job_python.h).
std::string AgentPythonDir();

// The NCCL profiler plugin `perftracker run` gives the job: $PERFTRACKER_NCCL_PLUGIN, else the
// build tree's libperftracker_nccl_profiler.so (compile-time).
std::string DefaultNcclPlugin();

}  // namespace perftracker
