// `perftracker bench accuracy <scenario files or dirs>...`: runs fault scenarios
// (docs/scenarios.md) with the simulated and / or the real executor, compares each
// diagnosis with the scenario's expectation and prints a table and the totals
// (docs/accuracy.md).
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace perftracker {

struct BenchOptions {
  std::vector<std::string> paths;
  std::string format = "text";
  std::string executor = "all";  // sim, real or all
  int jobs = 2;                  // summarizer threads (sim)
  std::string job;               // live_job.py for the real executor ("" = find it)
  std::string python = "/usr/bin/python3";
  std::string keep_dir;
  double timeout_seconds = 180;
};

// Registers `bench` with its `accuracy` subcommand; `options` must outlive the app.
CLI::App* AddBenchCommand(CLI::App& app, BenchOptions* options);

// 0: every scenario passed (or was skipped); 1: some failed; 2: bad usage or input.
int RunBenchAccuracy(const BenchOptions& options);

}  // namespace perftracker
