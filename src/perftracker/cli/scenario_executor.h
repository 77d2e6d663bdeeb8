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

// What one fault of a simulated scenario costs the job, measured counterfactually: the same
// scenario simulated again without it (same seed, so the same noise: each rank draws its
// jitter from its own generator, and a fault changes the draws only of the ranks it hits).
struct FaultCost {
  bool measured = false;
  // Mean over the iterations from the fault's start of (iteration with every fault - the same
  // iteration without this one): the time it adds to each iteration it is active in. A mean,
  // not a median: both runs draw the same noise, so the difference is not a noisy sample to
  // be robust against, and a median ignores a cost that comes in some iterations only (a
  // flapping NIC's down periods, a GC pause every few steps).
  double cost_ns = 0;
  // The same difference of the iterations' medians (from the start), for reading.
  double p50_cost_ns = 0;
  // The median iteration with every fault, and the report's materiality bar:
  // LocalizerOptions::material_share of it (what the localizer calls material).
  double iteration_ns = 0;
  double bar_ns = 0;
  bool material() const { return measured && cost_ns >= bar_ns; }
};

struct ScenarioRun {
  std::vector<DiagnosedFinding> findings;  // ranked, as the diagnosis lists them
  bool skipped = false;
  std::string note;                    // why skipped, or where the reports are
  double run_seconds = 0;              // wall time of the whole scenario
  double diagnosis_seconds = -1;       // fault onset -> diagnosis (real), -1 = not measured
  uint64_t events = 0;                 // sim: events generated
  double median_iteration_ns = 0;      // sim: the diagnosed window's median iteration time
  std::vector<FaultCost> fault_costs;  // sim: per fault of the scenario, in its order
};

// With `report_dir`, the diagnosis's text report is written to <report_dir>/<name>.txt and its JSON
// report to <report_dir>/<name>.json.
// With `fault_costs`, each fault's cost is measured (one more simulation per fault, no
// diagnosis: MeasureFaultCosts).
StatusOr<ScenarioRun> RunSimScenario(const Scenario& scenario, int threads,
                                     const std::string& report_dir = "", bool fault_costs = true);

// Each fault's cost: `scenario` simulated without it, compared with `iteration_ns`
// (ClusterSimulator::IterationNs of the scenario with every fault); the bar is
// `material_share` of the median of `iteration_ns`.
std::vector<FaultCost> MeasureFaultCosts(const Scenario& scenario,
                                         const std::vector<double>& iteration_ns,
                                         double material_share);

struct RealOptions {
  std::string perftracker;  // this binary
  std::string job;          // live_job.py
  std::string python = "/usr/bin/python3";
  std::string keep_dir;  // keep run directories here ("" = remove them)
  double timeout_seconds = 180;
};

StatusOr<ScenarioRun> RunRealScenario(const Scenario& scenario, const RealOptions& options);

}  // namespace perftracker
