// Re-runs the localizer on the summaries a live run stored (`perftracker run` keeps them in
// <report-dir>/perftracker.db): the diagnosis this build makes of a window that an older one
// diagnosed, for working on the localizer's rules with real windows. Prints the text report,
// or with --json the JSON report, and with --workers one line per worker of the figures the
// rules compare (iteration, waits, work, CPU, run-queue). Usage:
//   replay_window <perftracker.db> [--window N] [--json] [--workers]
// The first job of the store; its last window unless --window is given.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "perftracker/localize/localizer.h"
#include "perftracker/report/report.h"
#include "perftracker/server/sqlite/sqlite_store.h"

namespace {

int Fail(const std::string& what) {
  fmt::print(stderr, "replay_window: {}\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace perftracker;
  std::string db;
  long window = -1;
  bool json = false;
  bool workers = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--window" && i + 1 < argc) {
      window = std::strtol(argv[++i], nullptr, 10);
    } else if (a == "--json") {
      json = true;
    } else if (a == "--workers") {
      workers = true;
    } else if (a == "-h" || a == "--help") {
      fmt::print("usage: replay_window <perftracker.db> [--window N] [--json] [--workers]\n");
      return 0;
    } else if (db.empty() && a.rfind("--", 0) != 0) {
      db = a;
    } else {
      return Fail(fmt::format("unknown argument '{}' (see --help)", a));
    }
  }
  if (db.empty()) return Fail("no store given (see --help)");
  SqliteStoreOptions options;
  auto store = SqliteStore::Open(db, options);
  if (!store.ok()) return Fail(fmt::format("{}: {}", db, store.status().message()));
  auto jobs = (*store)->ListJobs();
  if (!jobs.ok() || jobs->empty()) return Fail(fmt::format("{}: no job in the store", db));
  const std::string job = jobs->front().job_id;
  auto windows = (*store)->ListWindows(job);
  if (!windows.ok() || windows->empty()) return Fail(fmt::format("{}: no window", db));
  const uint64_t id = window >= 0 ? static_cast<uint64_t>(window) : windows->back().window_id;
  auto summaries = (*store)->ListSummaries(job, id);
  if (!summaries.ok()) return Fail(fmt::format("window {}: {}", id, summaries.status().message()));
  Localizer localizer{LocalizerOptions{}};
  for (const auto& s : *summaries) localizer.Add(s);
  const Diagnosis diagnosis = localizer.Finish();
  ReportInput input;
  input.diagnosis = &diagnosis;
  input.workers = &*summaries;
  input.title = fmt::format("{} window {}", db, id);
  if (workers) {
    for (const auto& w : *summaries) {
      double iter = 0;
      for (const auto& it : w.iterations) iter += static_cast<double>(it.duration_ns);
      if (!w.iterations.empty()) iter /= static_cast<double>(w.iterations.size());
      double cpu = -1, rq = -1, main_rq = -1, turns = -1, main_turns = -1;
      for (const auto& m : w.worker_metrics) {
        if (m.metric == Metric::kCpuUtilization) cpu = m.mean;
        if (m.metric == Metric::kRunQueueDelayFraction) rq = m.mean;
        if (m.metric == Metric::kMainThreadRunQueueFraction) main_rq = m.mean;
        if (m.metric == Metric::kTimeslicesPerSec) turns = m.mean;
        if (m.metric == Metric::kMainThreadTimeslicesPerSec) main_turns = m.mean;
      }
      fmt::print(
          "rank {:>4}: {} iterations, mean {:7.2f} ms; cpu {:5.3f} cores = {:6.2f} ms/iter; "
          "run-queue {:5.3f} (main thread {:5.3f} = {:6.2f} ms/iter); turns/s {:.1f} (main "
          "{:.1f})\n",
          w.rank, w.iterations.size(), iter / 1e6, cpu, cpu * iter / 1e6, rq, main_rq,
          main_rq * iter / 1e6, turns, main_turns);
    }
  }
  std::fputs((json ? RenderJson(input) : RenderText(input)).c_str(), stdout);
  return 0;
}
