// The simulated executor of `perftracker bench accuracy` (scenario_executor.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "perftracker/cli/scenario_executor.h"
#include "perftracker/pipeline/diagnosis_pipeline.h"
#include "perftracker/report/report.h"

namespace perftracker {

StatusOr<ScenarioRun> RunSimScenario(const Scenario& scenario, int threads,
                                     const std::string& report_dir) {
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
  run.run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

}  // namespace perftracker
