// Runs a Scenario and returns what was diagnosed, for `perftracker bench accuracy`.
//  - RunSimScenario: ClusterSimulator -> one WindowSummarizer per worker (a pool of threads)
//    -> the Localizer, all in this process.
//  - RunRealScenario: `perftracker run` on tests/e2e/live_job.py with the fault options,
//    reading the window reports it writes (docs/scenarios.md, "Real executor").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perftracker/core/status.h"
#include "perftracker/sources/sim/scenario.h"

namespace perftracker {

struct DiagnosedFinding {
  std::string code;
  std::string category;
  std::vector<int32_t> workers;
  bool material = false;
  std::string title;
  double lost_share = 0;  // of the median iteration (sim; 0 when the report does not say)
};

struct ScenarioRun {
  std::vector<DiagnosedFinding> findings;  // ranked, as the diagnosis lists them
  bool skipped = false;
  std::string note;                // why skipped, or where the reports are
  double run_seconds = 0;          // wall time of the whole scenario
  double diagnosis_seconds = -1;   // fault onset -> diagnosis (real), -1 = not measured
  uint64_t events = 0;             // sim: events generated
  double median_iteration_ns = 0;  // sim: the diagnosed window's median iteration time
};

// With `report_dir`, the diagnosis's text report is written to <report_dir>/<name>.txt and its JSON
// report to <report_dir>/<name>.json.
StatusOr<ScenarioRun> RunSimScenario(const Scenario& scenario, int threads,
                                     const std::string& report_dir = "");

struct RealOptions {
  std::string perftracker;  // this binary
  std::string job;          // live_job.py
  std::string python = "/usr/bin/python3";
  std::string keep_dir;  // keep run directories here ("" = remove them)
  double timeout_seconds = 180;
};

StatusOr<ScenarioRun> RunRealScenario(const Scenario& scenario, const RealOptions& options);

}  // namespace perftracker
