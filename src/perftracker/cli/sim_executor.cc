// The simulated executor of `perftracker bench accuracy` (scenario_executor.h).
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "perftracker/cli/scenario_executor.h"
#include "perftracker/localize/localizer.h"
#include "perftracker/report/report.h"
#include "perftracker/sources/sim/cluster_simulator.h"
#include "perftracker/summary/window_summarizer.h"

namespace perftracker {

StatusOr<ScenarioRun> RunSimScenario(const Scenario& scenario, int threads,
                                     const std::string& report_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  ClusterSimulator sim(scenario);
  sim.Run();
  const int32_t n = sim.num_ranks();
  // Summaries are a few KB each: keep them in rank order so that the Localizer sees the
  // same input whatever the thread count.
  std::vector<WorkerSummary> summaries(static_cast<size_t>(n));
  std::atomic<int32_t> next{0};
  auto work = [&] {
    for (int32_t r = next++; r < n; r = next++) {
      WindowSummarizer summarizer(&sim.functions());
      sim.Emit(r, summarizer);
      WorkerSummary w = summarizer.Finish();
      w.rank = r;
      w.host = sim.HostName(r);
      w.source = "sim";
      summaries[static_cast<size_t>(r)] = std::move(w);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(threads, 1); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  Localizer localizer;
  for (const auto& w : summaries) localizer.Add(w);
  const Diagnosis d = localizer.Finish();
  if (!report_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(report_dir, ec);
    const std::string path = fmt::format("{}/{}.txt", report_dir, scenario.name);
    std::ofstream out(path);
    ReportInput input;
    input.diagnosis = &d;
    input.workers = &summaries;
    input.title = scenario.name;
    out << RenderText(input);
    if (!out) return Status::Internal(fmt::format("{}: cannot write the report", path));
  }
  summaries.clear();
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
