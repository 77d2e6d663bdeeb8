// Progressive disclosure against the full path on every simulated scenario of the suite
// (scenarios/sim, and scenarios/ci's simulated ones): the localizer on every full summary,
// and the localizer on the full summaries the DigestScreen asks for after it screened every
// worker's digest, must give the same material findings (code, culprit workers, function).
// Minor findings (below the material share, as small as 0.5 % of an iteration) may be
// below what the digests resolve: their differences are printed, and counted in
// docs/performance.md, not asserted.
// PERFTRACKER_DIGEST_MAX_RANKS (default 128; 64 in a sanitized build) skips larger
// scenarios, and PERFTRACKER_DIGEST_SAMPLE (default 32; 16 sanitized) is the screen's
// sample_workers: small, so that such scenarios can take the progressive path in the test
// suite's time (a sanitized build simulates ~10x slower).
// docs/performance.md gives the Release command that runs every scenario at the defaults.
#include "perftracker/localize/digest_screen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "perftracker/localize/localizer.h"
#include "perftracker/sources/sim/cluster_simulator.h"
#include "perftracker/sources/sim/scenario.h"
#include "perftracker/summary/window_summarizer.h"

namespace perftracker {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr int32_t kDefaultMaxRanks = 64;
constexpr size_t kDefaultSample = 16;
#else
constexpr int32_t kDefaultMaxRanks = 128;
constexpr size_t kDefaultSample = 32;
#endif

WorkerSummary Summarize(ClusterSimulator& sim, int32_t r) {
  WindowSummarizer summarizer(&sim.functions());
  sim.Emit(r, summarizer);
  WorkerSummary w = summarizer.Finish();
  w.rank = r;
  w.host = sim.HostName(r);
  w.source = "sim";
  return w;
}

using FindingId = std::tuple<std::string, std::vector<int32_t>, std::string, bool>;

std::vector<FindingId> Ids(const Diagnosis& d, bool material) {
  std::vector<FindingId> out;
  for (const Finding& f : d.findings) {
    if (f.material != material) continue;
    std::vector<int32_t> w = f.workers;
    std::sort(w.begin(), w.end());
    out.emplace_back(f.code, w, f.function_key, f.material);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Describe(const std::vector<FindingId>& ids) {
  std::string out;
  for (const auto& [code, workers, key, material] : ids) {
    out += fmt::format("  {} {} ranks [{}] {}\n", code, material ? "material" : "minor",
                       fmt::join(workers, ","), key.substr(0, 120));
  }
  return out;
}

std::vector<std::string> ScenarioFiles() {
  std::vector<std::string> out;
  const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
  const std::string root = src ? src : ".";
  for (const char* dir : {"scenarios/sim", "scenarios/ci"}) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root + "/" + dir, ec)) {
      if (e.path().extension() == ".json") out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(DigestScreen, EveryDigestFitsItsBudget) {
  StatusOr<Scenario> s = ParseScenario(
      R"({"name": "t", "job": {"ranks": 8, "iterations": 40}, "expect": {"healthy": true}})",
      "t.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ClusterSimulator sim(*s);
  sim.Run();
  const WorkerDigest d = MakeWorkerDigest(Summarize(sim, 3));
  EXPECT_EQ(d.rank, 3);
  EXPECT_LE(d.functions.size(), kMaxDigestFunctions);
  EXPECT_LE(d.iterations.size(), kMaxDigestIterations);
  EXPECT_EQ(d.iteration_total, 40u);
}

// A GPU host's worker with every sampler (NVML, IB, host, TCP) has every worker-level metric.
// Whichever of them is one worker's alone (a hot GPU, a link down, a crowded CPU under its
// communication threads), the screen must see it in the digest and make that worker a
// suspect: a worker the screen passes over is neither asked for nor named by any finding.
TEST(DigestScreen, EveryWorkerMetricOfAGpuWorkerReachesTheScreen) {
  constexpr int32_t kOdd = 41;
  for (int metric = 0; metric < kNumMetrics; ++metric) {
    DigestScreenOptions options;
    options.sample_workers = 16;
    DigestScreen screen(options);
    for (int32_t r = 0; r < 64; ++r) {
      const double jitter = 1 + 0.005 * static_cast<double>((r * 7919) % 201 - 100) / 100;
      WorkerSummary w;
      w.rank = r;
      w.host = fmt::format("node-{}", r / 8);
      w.has_device = true;
      w.window_end_ns = 1'000'000'000;
      for (int i = 0; i < 10; ++i) {
        IterationSummary it;
        it.start_ns = i * 100'000'000;
        it.duration_ns = 100'000'000;
        it.compute_ns = 80'000'000;
        it.communication_ns = 20'000'000;
        w.iterations.push_back(it);
      }
      for (int m = 0; m < kNumMetrics; ++m) {
        const double level = (m + 1) * jitter * (r == kOdd && m == metric ? 3 : 1);
        w.worker_metrics.push_back({static_cast<Metric>(m), level, 0.01 * (m + 1)});
      }
      screen.Add(MakeWorkerDigest(w));
    }
    const ScreenResult result = screen.Finish();
    EXPECT_EQ(result.suspects, std::vector<int32_t>{kOdd})
        << MetricName(static_cast<Metric>(metric)) << ": " << result.reason;
  }
}

TEST(DigestScreen, ProgressiveFindingsEqualTheFullPathOnEverySimulatedScenario) {
  const char* max_env = std::getenv("PERFTRACKER_DIGEST_MAX_RANKS");
  const int32_t max_ranks = max_env ? std::atoi(max_env) : kDefaultMaxRanks;
  const std::vector<std::string> files = ScenarioFiles();
  ASSERT_FALSE(files.empty()) << "no scenarios: set PERFTRACKER_SOURCE_DIR";
  // PERFTRACKER_DIGEST_SAMPLE: DigestScreenOptions::sample_workers (a smaller sample takes
  // the progressive path on smaller scenarios).
  DigestScreenOptions options;
  options.sample_workers = kDefaultSample;
  if (const char* sample = std::getenv("PERFTRACKER_DIGEST_SAMPLE"))
    options.sample_workers = static_cast<size_t>(std::atoi(sample));
  int progressive = 0, full = 0, undecided = 0, skipped = 0, minor_differ = 0, refined = 0;
  for (const std::string& path : files) {
    StatusOr<Scenario> s = LoadScenario(path);
    ASSERT_TRUE(s.ok()) << s.status().message();
    if (s->executor != ScenarioExecutor::kSim) continue;
    if (s->job.ranks > max_ranks) {
      ++skipped;
      continue;
    }
    SCOPED_TRACE(path);
    ClusterSimulator sim(*s);
    sim.Run();
    Localizer all;
    DigestScreen screen(options);
    for (int32_t r = 0; r < sim.num_ranks(); ++r) {
      const WorkerSummary w = Summarize(sim, r);
      all.Add(w);
      screen.Add(MakeWorkerDigest(w));
    }
    const Diagnosis full_path = all.Finish();
    const std::vector<FindingId> want = Ids(full_path, true);
    ScreenResult result = screen.Finish();
    if (result.full) {
      ++full;
      continue;
    }
    // As the server's coordinator: up to kRounds more rounds (Refine) when a finding names
    // part of a group's sample, then every full summary.
    constexpr int kRounds = 3;
    Diagnosis partial;
    bool decided = false;
    for (;;) {
      Localizer some;
      for (int32_t r : result.ranks) some.Add(Summarize(sim, r));
      partial = some.Finish();
      std::vector<int32_t> named;
      if (GeneralizeToGroups(result, &partial, &named)) {
        decided = true;
        break;
      }
      if (result.round >= kRounds) break;
      ScreenResult next = screen.Refine(result, named, result.round + 1);
      if (next.full) break;
      result = std::move(next);
    }
    if (!decided) {
      ++undecided;  // the caller asks every worker: the full path's findings by construction
      continue;
    }
    if (result.round > 0) ++refined;
    ++progressive;
    const std::vector<FindingId> got = Ids(partial, true);
    EXPECT_EQ(got, want) << result.reason << "\nfull path:\n"
                         << Describe(want) << "progressive path:\n"
                         << Describe(got);
    if (Ids(partial, false) != Ids(full_path, false)) {
      ++minor_differ;
      fmt::print("{}: minor findings differ\n  full path:\n{}  progressive path:\n{}", path,
                 Describe(Ids(full_path, false)), Describe(Ids(partial, false)));
    }
  }
  fmt::print(
      "{} scenarios on the progressive path ({} with different minor findings, {} after more "
      "rounds), {} on the full path by the screen, {} after the rounds, {} skipped\n",
      progressive, minor_differ, refined, full, undecided, skipped);
}

// A round after the localizer named part of a group's sample: the named peer and the
// earlier suspects are suspects now, every rank asked before is asked again (the caller
// has them), the sample grows, and the reason says which round it is. A round that would
// ask for most of the job is the full path.
TEST(DigestScreen, ARoundAsksForMoreAndKeepsWhatWasAsked) {
  // 200 alike workers (a 100 ms step of two functions, each worker within +-1 %): nothing
  // a screen flags, even 8x looser.
  DigestScreenOptions options;
  options.sample_workers = 16;
  DigestScreen screen(options);
  for (int32_t r = 0; r < 200; ++r) {
    const int64_t jitter = (r * 7919) % 2001 - 1000;  // -1,000 .. 1,000 us
    WorkerDigest d;
    d.rank = r;
    d.iteration_total = 10;
    for (int i = 0; i < 10; ++i) {
      IterationSummary it;
      it.start_ns = i * 100'000'000;
      it.duration_ns = 100'000'000 + jitter * 1000;
      it.compute_ns = 80'000'000 + jitter * 1000;
      it.communication_ns = 20'000'000;
      d.iterations.push_back(it);
    }
    d.functions.push_back({KeyHash("forward"), EventKind::kTorchOp, 10,
                           800'000'000 + jitter * 10'000, 400'000'000, 800'000'000});
    d.functions.push_back(
        {KeyHash("all_reduce"), EventKind::kTorchOp, 10, 200'000'000, 200'000'000, 200'000'000});
    screen.Add(d);
  }
  const ScreenResult first = screen.Finish();
  ASSERT_FALSE(first.full) << first.reason;
  ASSERT_FALSE(first.groups.empty());
  ASSERT_FALSE(first.groups[0].sampled.empty());
  const int32_t named = first.groups[0].sampled[0];

  const ScreenResult second = screen.Refine(first, {named}, 1);
  ASSERT_FALSE(second.full) << second.reason;
  EXPECT_EQ(second.round, 1);
  EXPECT_TRUE(std::binary_search(second.suspects.begin(), second.suspects.end(), named));
  for (int32_t r : first.ranks) {
    EXPECT_TRUE(std::binary_search(second.ranks.begin(), second.ranks.end(), r))
        << "rank " << r << " was asked before";
  }
  EXPECT_GT(second.ranks.size(), first.ranks.size());
  for (const ScreenGroup& g : second.groups) {
    EXPECT_FALSE(std::binary_search(g.sampled.begin(), g.sampled.end(), named))
        << "a suspect stands for nobody";
  }
  EXPECT_NE(second.reason.find("round 1"), std::string::npos) << second.reason;

  // The named peer is one: the finding generalizes now, naming it alone.
  Diagnosis d;
  d.num_workers = static_cast<int32_t>(second.ranks.size());
  Finding f;
  f.code = "PT-STRAGGLER-UNTRACED";
  f.workers = {named};
  d.findings.push_back(f);
  std::vector<int32_t> in_sample;
  ASSERT_TRUE(GeneralizeToGroups(second, &d, &in_sample));
  EXPECT_TRUE(in_sample.empty());
  EXPECT_EQ(d.findings[0].workers, std::vector<int32_t>{named});
  EXPECT_EQ(d.num_workers, 200);

  // Three rounds on: a sample of 16 x 2^3 = 128 is most of the job, the full path.
  const ScreenResult last = screen.Refine(second, {}, 3);
  EXPECT_TRUE(last.full) << last.reason;
}

// GeneralizeToGroups says which sampled peers a finding named when it cannot decide.
TEST(DigestScreen, AFindingNamingPartOfASampleReportsThosePeers) {
  ScreenResult screen;
  screen.workers = 10;
  screen.ranks = {0, 1, 2, 7};
  screen.suspects = {7};
  screen.groups.push_back({{0, 1, 2}, {3, 4, 5, 6, 8, 9}});
  Diagnosis d;
  Finding f;
  f.code = "PT-STRAGGLER-UNTRACED";
  f.workers = {7, 1};
  d.findings.push_back(f);
  std::vector<int32_t> named;
  EXPECT_FALSE(GeneralizeToGroups(screen, &d, &named));
  EXPECT_EQ(named, std::vector<int32_t>{1});
  EXPECT_EQ(d.findings[0].workers, (std::vector<int32_t>{7, 1}));  // unchanged
}

}  // namespace
}  // namespace perftracker
