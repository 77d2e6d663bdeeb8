#include "perftracker/compare/run_profile.h"

#include <algorithm>
#include <cmath>

namespace perftracker::compare {
namespace {

// Makes the MAD a consistent estimator of the standard deviation of normal data.
constexpr double kMadToSigma = 1.4826;
// A steal fraction beyond this is not a measurement to stretch by (a broken counter).
constexpr double kMaxSteal = 0.95;

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

double RobustSpread(std::vector<double> values) {
  if (values.size() < 2) return 0;
  const double center = Median(values);
  for (double& v : values) v = std::fabs(v - center);
  return kMadToSigma * Median(std::move(values));
}

double CpuStretch(double cpu, double run_queue, double steal) {
  if (!(cpu > 0) || !(run_queue >= 0)) return 0;
  // On a VM the schedstat CPU time is the guest's view: the threads ran, but the hypervisor
  // kept their virtual CPUs for another guest a share `steal` of the time, so each second of
  // work took 1 / (1 - steal) seconds on top of the run-queue wait.
  const double on_cpu = steal >= 0 && steal < kMaxSteal ? 1 / (1 - steal) : 1;
  return on_cpu + run_queue / cpu;
}

double CpuStretch(const WorkerSummary& summary) {
  double cpu = -1;
  double run_queue = -1;
  double steal = -1;
  for (const FunctionMetric& m : summary.worker_metrics) {
    if (m.metric == Metric::kCpuUtilization) cpu = m.mean;
    if (m.metric == Metric::kRunQueueDelayFraction) run_queue = m.mean;
    if (m.metric == Metric::kCpuStealFraction) steal = m.mean;
  }
  return CpuStretch(cpu, run_queue, steal);
}

std::vector<uint64_t> CallPathHashes(const WorkerSummary& summary) {
  std::vector<uint64_t> hashes(summary.functions.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    const FunctionSummary& f = summary.functions[i];
    if (!f.key.empty()) {
      hashes[i] = CallPathTree::KeyHash(f.key);
    } else {
      const uint64_t parent = f.parent < i ? hashes[f.parent] : CallPathTree::kRootHash;
      hashes[i] = CallPathTree::FrameHash(parent, EventKindName(f.kind), f.name);
    }
  }
  return hashes;
}

void RunProfile::AddSummary(const WorkerSummary& summary,
                            const std::unordered_set<uint64_t>* paths) {
  ProfileWorker worker;
  worker.rank = summary.rank;
  worker.host = summary.host;
  worker.iterations = summary.iterations.size();
  worker.median_iteration_ns = static_cast<double>(summary.median_iteration_ns());
  std::vector<double> durations;
  durations.reserve(summary.iterations.size());
  for (const IterationSummary& it : summary.iterations) {
    durations.push_back(static_cast<double>(it.duration_ns));
  }
  worker.iteration_spread_ns = RobustSpread(std::move(durations));
  worker.cpu_stretch = CpuStretch(summary);

  // Parents precede their children in a summary (WorkerSummary::Key()), so one pass interns
  // each function under its parent's node; a function with an explicit key is interned by it.
  // Functions not counted (not in `paths`) are interned only as callers of counted ones.
  const double iterations = static_cast<double>(summary.iteration_count());
  constexpr uint32_t kUnset = UINT32_MAX;
  const size_t n = summary.functions.size();
  std::vector<uint32_t> node_of(n, kUnset);
  std::vector<uint64_t> hashes;
  if (paths != nullptr) hashes = CallPathHashes(summary);
  std::vector<size_t> chain;
  for (size_t i = 0; i < n; ++i) {
    const FunctionSummary& f = summary.functions[i];
    const bool counted = paths == nullptr || paths->contains(hashes[i]);
    if (!counted && f.key.empty()) continue;
    // i and its callers not interned yet, innermost first.
    chain.clear();
    for (size_t j = i; node_of[j] == kUnset;) {
      chain.push_back(j);
      const FunctionSummary& g = summary.functions[j];
      if (!g.key.empty() || g.parent >= j) break;
      j = g.parent;
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const size_t j = *it;
      const FunctionSummary& g = summary.functions[j];
      if (!g.key.empty()) {
        node_of[j] = tree_->InternKey(g.key);
      } else {
        const uint32_t parent =
            g.parent < j ? node_of[g.parent] : static_cast<uint32_t>(CallPathTree::kRoot);
        node_of[j] = tree_->Intern(parent, EventKindName(g.kind), g.name);
      }
    }
    if (!counted) continue;
    FunctionTimes& t = worker.functions[node_of[i]];
    t.inclusive_ns += static_cast<double>(f.total_ns) / iterations;
    t.self_ns += static_cast<double>(f.self_ns) / iterations;
    t.calls += static_cast<double>(f.count) / iterations;
  }
  workers_.push_back(std::move(worker));
}

const ProfileWorker* RunProfile::Worker(int32_t rank) const {
  for (const ProfileWorker& w : workers_) {
    if (w.rank == rank) return &w;
  }
  return nullptr;
}

double RunProfile::median_iteration_ns() const {
  std::vector<double> medians;
  medians.reserve(workers_.size());
  for (const ProfileWorker& w : workers_) medians.push_back(w.median_iteration_ns);
  return Median(std::move(medians));
}

}  // namespace perftracker::compare
