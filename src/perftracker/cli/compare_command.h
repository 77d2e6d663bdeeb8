// `perftracker compare BASELINE CURRENT`: what got slower or faster from one run of a job to
// another, per function and per rank (docs/compare.md).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace perftracker {

struct CompareCommandOptions {
  std::string baseline;  // a trace file, a directory of them, or a report JSON
  std::string current;
  // With --store: BASELINE and CURRENT are window ids of job `job` in that store (BASELINE
  // may be "baseline": the job's baseline window).
  std::string store;
  std::string job;
  std::string format = "text";
  std::string html_path;
  double material_share = 0.05;
  double noise_sigmas = 3;
};

// Registers the subcommand; `options` must outlive the app.
CLI::App* AddCompareCommand(CLI::App& app, CompareCommandOptions* options);

// Returns the exit code: 0 = compared (whatever changed); 2 = bad input (one line on stderr).
int RunCompare(const CompareCommandOptions& options);

}  // namespace perftracker
