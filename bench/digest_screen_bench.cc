// digest_screen_bench: progressive disclosure's server-side work at fleet size, without the
// network: N workers' digests (MakeWorkerDigest of the ~300-function SyntheticWorker step,
// 16 distinct seeds re-labelled per rank; one rank in 1,000 runs its step 40 % slower)
// through the DigestScreen, then the Localizer on the full summaries the screen asks for.
// Every rank is the same SyntheticWorker step with its own 3 % jitter per function and
// iteration (as localizer_bench); one rank in 1,000 runs its step 40 % slower.
// Prints the time of each phase, the peak RSS, and whether every slowed rank was named.
// --all-metrics 1: every worker also carries every worker-level metric id it lacks (a GPU
// host with every sampler: NVML, IB, host, TCP), at a level of its own per id within
// +-1 % across ranks, so that the digests and the screen hold as many metrics as they can.
//
//   digest_screen_bench --workers 100000 [--all-metrics 1]
// Exit status: 0 = every slowed rank named, 1 = not, 2 = bad usage.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "perftracker/localize/digest_screen.h"
#include "perftracker/localize/localizer.h"
#include "perftracker/wire/digest_codec.h"
#include "synthetic_worker.h"

namespace perftracker {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// CPU time of this process: on the shared VM (load 15-25 on 2 cores) wall time says more
// about the neighbours than about this code.
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

constexpr int kSlowEvery = 1000;
constexpr int kSlowOffset = 37;

int ranks_per_host = 8;
bool all_metrics = false;

WorkerSummary Worker(const WorkerSummary& base, int32_t r) {
  WorkerSummary s = JitteredWorker(base, r, r % kSlowEvery == kSlowOffset ? 1.4 : 1.0);
  s.host = fmt::format("sim-node-{}", r / ranks_per_host);
  if (all_metrics) {
    std::vector<bool> present(kNumMetrics, false);
    for (const FunctionMetric& m : s.worker_metrics) present[static_cast<size_t>(m.metric)] = true;
    const double jitter = 1 + 0.01 * static_cast<double>((r * 7919) % 201 - 100) / 100;
    for (int m = 0; m < kNumMetrics; ++m) {
      if (present[static_cast<size_t>(m)]) continue;
      const double level = (m + 1) * jitter;
      s.worker_metrics.push_back({static_cast<Metric>(m), level, level * 0.01});
    }
    std::sort(s.worker_metrics.begin(), s.worker_metrics.end(),
              [](const FunctionMetric& a, const FunctionMetric& b) { return a.metric < b.metric; });
  }
  return s;
}

int Main(int argc, char** argv) {
  int workers = 10000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--workers") {
      workers = std::atoi(argv[i + 1]);
    } else if (k == "--all-metrics") {
      all_metrics = std::atoi(argv[i + 1]) != 0;
    } else if (k == "--ranks-per-host") {
      ranks_per_host = std::max(1, std::atoi(argv[i + 1]));
    } else {
      fmt::print(stderr, "digest_screen_bench: unknown option {}\n", k);
      return 2;
    }
  }
  const WorkerSummary base = SyntheticWorker(1).Run(10);
  const double rss_base = PeakRssMb();

  // Collector side: one digest per worker (made and encoded here, untimed but for the
  // first 100, which give the collector's cost per worker).
  std::vector<std::string> encoded(static_cast<size_t>(workers));
  size_t max_bytes = 0;
  const auto t0 = Clock::now();
  double digest_s = 0;
  for (int32_t r = 0; r < workers; ++r) {
    encoded[static_cast<size_t>(r)] = EncodeWorkerDigest(MakeWorkerDigest(Worker(base, r)));
    max_bytes = std::max(max_bytes, encoded[static_cast<size_t>(r)].size());
    if (r + 1 == std::min(workers, 100)) digest_s = Seconds(Clock::now() - t0) / (r + 1);
  }

  // Server side: decode and screen every digest, then localize the full summaries asked for.
  const auto t1 = Clock::now();
  const double c1 = CpuSeconds();
  DigestScreen screen;
  for (int32_t r = 0; r < workers; ++r) {
    StatusOr<WorkerDigest> decoded = DecodeWorkerDigest(encoded[static_cast<size_t>(r)]);
    if (!decoded.ok()) {
      fmt::print(stderr, "decode: {}\n", decoded.status().message());
      return 1;
    }
    screen.Add(*decoded);
  }
  const auto t2 = Clock::now();
  const double c2 = CpuSeconds();
  ScreenResult result = screen.Finish();
  const auto t3 = Clock::now();
  const double c3 = CpuSeconds();
  // As the server's coordinator: up to 3 more rounds (DigestScreen::Refine) when a finding
  // names part of a group's sample.
  Diagnosis d;
  bool generalized = false;
  for (;;) {
    Localizer localizer;
    for (int32_t r : result.ranks) localizer.Add(Worker(base, r));
    d = localizer.Finish();
    std::vector<int32_t> in_sample;
    generalized = GeneralizeToGroups(result, &d, &in_sample);
    if (generalized) break;
    for (const Finding& f : d.findings) {
      fmt::print("round {}: {} {} names {} worker(s): {}{}\n", result.round, f.code,
                 f.material ? "material" : "minor", f.workers.size(),
                 fmt::join(f.workers.begin(),
                           f.workers.begin() + std::min<size_t>(f.workers.size(), 12), ","),
                 f.workers.size() > 12 ? ",..." : "");
    }
    fmt::print("round {}: {} sampled peer(s) named: {}\n", result.round, in_sample.size(),
               fmt::join(in_sample, ","));
    if (result.round >= 3) break;
    ScreenResult next = screen.Refine(result, in_sample, result.round + 1);
    fmt::print("round {}: {}\n", next.round, next.reason);
    if (next.full) break;
    result = std::move(next);
  }
  const auto t4 = Clock::now();
  const double c4 = CpuSeconds();

  std::set<int32_t> named;
  for (const Finding& f : d.findings) {
    if (f.material) named.insert(f.workers.begin(), f.workers.end());
  }
  bool all_found = true;
  for (int32_t r = kSlowOffset; r < workers; r += kSlowEvery) all_found &= named.count(r) > 0;
  fmt::print("workers: {}; digest: at most {} B encoded, {:.1f} us wall to make and encode\n",
             workers, max_bytes, digest_s * 1e6);
  encoded.clear();
  fmt::print(
      "screen: decode and add every digest {:.2f} s CPU ({:.2f} s wall), screen {:.2f} s CPU "
      "({:.2f} s wall): {}\n",
      c2 - c1, Seconds(t2 - t1), c3 - c2, Seconds(t3 - t2), result.reason);
  fmt::print(
      "localizer on {} full summaries: {:.2f} s CPU ({:.2f} s wall; {}); {} findings, top {}\n",
      result.ranks.size(), c4 - c3, Seconds(t4 - t3),
      generalized ? "generalized to every worker" : "could not generalize: full path",
      d.findings.size(), d.findings.empty() ? "none" : d.findings[0].code);
  fmt::print(
      "server total {:.2f} s CPU, {:.2f} s wall (the re-making of the summaries asked for "
      "included); peak RSS {:.0f} MB ({:.0f} MB before any digest; the encoded digests are "
      "held by the bench)\n",
      c4 - c1, Seconds(t4 - t1), PeakRssMb(), rss_base);
  fmt::print("{}\n", all_found ? "every slowed rank named" : "SLOWED RANKS MISSED");
  return all_found ? 0 : 1;
}

}  // namespace
}  // namespace perftracker

int main(int argc, char** argv) { return perftracker::Main(argc, argv); }
