#include "perftracker/summary/worker_digest.h"

#include <algorithm>
#include <numeric>

namespace perftracker {

int64_t WorkerDigest::median_iteration_ns() const {
  if (iterations.empty()) return window_end_ns - window_start_ns;
  std::vector<int64_t> d;
  d.reserve(iterations.size());
  for (const auto& it : iterations) d.push_back(it.duration_ns);
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  return d[d.size() / 2];
}

uint64_t KeyHash(std::string_view key) {
  constexpr uint64_t kOffset = 14695981039346656037ull;
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h = kOffset;
  for (unsigned char c : key) {
    h ^= c;
    h *= kPrime;
  }
  return h;
}

WorkerDigest MakeWorkerDigest(const WorkerSummary& summary) {
  WorkerDigest d;
  d.rank = summary.rank;
  d.host = summary.host.substr(0, kMaxDigestHostBytes);
  d.window_start_ns = summary.window_start_ns;
  d.window_end_ns = summary.window_end_ns;
  d.has_device = summary.has_device;
  d.iteration_total = static_cast<uint32_t>(summary.iterations.size());
  const size_t first_iteration = summary.iterations.size() > kMaxDigestIterations
                                     ? summary.iterations.size() - kMaxDigestIterations
                                     : 0;
  d.iterations.assign(summary.iterations.begin() + static_cast<std::ptrdiff_t>(first_iteration),
                      summary.iterations.end());
  d.function_total = static_cast<uint32_t>(summary.functions.size());
  // Every worker-level metric, one per id (the first, as the localizer reads them), in id
  // order: at most kNumMetrics <= kMaxDigestMetrics entries, none left out.
  std::vector<bool> seen(kNumMetrics, false);
  for (const FunctionMetric& m : summary.worker_metrics) {
    const auto id = static_cast<size_t>(m.metric);
    if (id >= seen.size() || seen[id]) continue;
    seen[id] = true;
    d.worker_metrics.push_back(m);
  }
  std::sort(d.worker_metrics.begin(), d.worker_metrics.end(),
            [](const FunctionMetric& a, const FunctionMetric& b) { return a.metric < b.metric; });
  d.events = summary.stats.events;
  d.dropped_events = summary.stats.dropped_events;

  // The heaviest functions: half the budget by inclusive time (where the iteration goes),
  // then by self time (the leaves that do the work), then by critical-path time; each
  // function once. Ties by index, so that equal summaries give equal digests.
  const size_t n = summary.functions.size();
  std::vector<size_t> order(n);
  std::vector<bool> taken(n, false);
  std::vector<size_t> chosen;
  const auto take_by = [&](auto value, size_t budget) {
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return value(a) > value(b); });
    for (size_t i : order) {
      if (chosen.size() >= budget) break;
      if (taken[i] || value(i) <= 0) continue;
      if (summary.functions[i].kind == EventKind::kIteration) continue;
      taken[i] = true;
      chosen.push_back(i);
    }
  };
  const auto& fs = summary.functions;
  take_by([&](size_t i) { return fs[i].total_ns; }, kMaxDigestFunctions / 2);
  take_by([&](size_t i) { return fs[i].self_ns; }, kMaxDigestFunctions * 3 / 4);
  take_by([&](size_t i) { return fs[i].critical_ns; }, kMaxDigestFunctions);
  d.functions.reserve(chosen.size());
  for (size_t i : chosen) {
    const FunctionSummary& f = fs[i];
    DigestFunction df;
    df.key_hash = KeyHash(summary.Key(i));
    df.kind = f.kind;
    df.count = f.count;
    df.total_ns = f.total_ns;
    df.self_ns = f.self_ns;
    df.critical_ns = f.critical_ns;
    d.functions.push_back(df);
  }
  return d;
}

}  // namespace perftracker
