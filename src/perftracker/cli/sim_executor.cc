// The simulated executor of `perftracker bench accuracy` (scenario_executor.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "perftracker/cli/scenario_executor.h"
#include "perftracker/compare/run_profile.h"
#include "perftracker/pipeline/diagnosis_pipeline.h"
#include "perftracker/report/report.h"

namespace perftracker {

std::vector<FaultCost> MeasureFaultCosts(const Scenario& scenario,
                                         const std::vector<double>& iteration_ns,
                                         double material_share) {
  std::vector<FaultCost> costs(scenario.faults.size());
  const double median = compare::Median(iteration_ns);
  for (FaultCost& c : costs) {
    c.iteration_ns = median;
    c.bar_ns = material_share * median;
  }
  for (size_t i = 0; i < scenario.faults.size(); ++i) {
    // A launch-bound job runs other kernels (many tiny ones instead of each layer's one): the
    // same job without it is another program, not the same one without a fault.
    if (scenario.faults[i].kind == FaultKind::kLaunchBound) continue;
    Scenario without = scenario;
    without.faults.erase(without.faults.begin() + static_cast<std::ptrdiff_t>(i));
    ClusterSimulator sim(without);
    sim.Run();
    const std::vector<double> base = sim.IterationNs();
    const size_t from = static_cast<size_t>(std::max(scenario.faults[i].start, 0));
    const size_t n = std::min(base.size(), iteration_ns.size());
    FaultCost& c = costs[i];
    if (from >= n) continue;  // it starts after the window: not measured
    std::vector<double> with(iteration_ns.begin() + static_cast<std::ptrdiff_t>(from),
                             iteration_ns.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<double> wo(base.begin() + static_cast<std::ptrdiff_t>(from),
                           base.begin() + static_cast<std::ptrdiff_t>(n));
    double sum = 0;
    for (size_t k = 0; k < with.size(); ++k) sum += with[k] - wo[k];
    c.measured = true;
    c.cost_ns = sum / static_cast<double>(with.size());
    c.p50_cost_ns = compare::Median(with) - compare::Median(wo);
  }
  return costs;
}

StatusOr<ScenarioRun> RunSimScenario(const Scenario& scenario, int threads,
                                     const std::string& report_dir, bool fault_costs) {
  const auto t0 = std::chrono::steady_clock::now();
  ClusterSimulator sim(scenario);
  sim.Run();
  PipelineOptions options;
  options.threads = std::max(threads, 1);
  DiagnosisPipeline pipeline(options);
  pipeline.AddSimulation(sim);
  const Diagnosis d = pipeline.Diagnose();
  if (!report_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(report_dir, ec);
    ReportInput input;
    input.diagnosis = &d;
    input.workers = &pipeline.workers();
    input.title = scenario.name;
    // The text a person reads, and the JSON with every number (per-worker records, notes).
    for (const bool json : {false, true}) {
      const std::string path =
          fmt::format("{}/{}.{}", report_dir, scenario.name, json ? "json" : "txt");
      std::ofstream out(path);
      out << (json ? RenderJson(input) : RenderText(input));
      if (!out) return Status::Internal(fmt::format("{}: cannot write the report", path));
    }
  }
  ScenarioRun run;
  for (const Finding& f : d.findings) {
    run.findings.push_back({f.code, std::string(FindingCategoryName(f.category)), f.workers,
                            f.material, f.title, f.lost_share});
  }
  run.events = sim.total_events();
  run.median_iteration_ns = d.median_iteration_ns;
  if (fault_costs) {
    run.fault_costs =
        MeasureFaultCosts(scenario, sim.IterationNs(), options.localizer.material_share);
  }
  run.run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

}  // namespace perftracker
