#include "perftracker/localize/scheduler_wait_rule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {
namespace {

// The value below which `share` of `values` lie (linear between order statistics); sorts.
double QuantileInPlace(std::vector<float>& values, double share) {
  std::sort(values.begin(), values.end());
  const double at = share * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (at - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

// The peers' run-queue wait the worker must exceed: their upper quartile, not their median.
// Two ranks of one role on one host can differ by half (44 and 68 ms/iter in a window of
// three): only a wait beyond most of the peers' own spread is the scheduler's doing.
constexpr double kPeerRunQueueQuantile = 0.75;

}  // namespace

bool CpuAndRunQueue(const WorkerRecord& w, double& cpu_ns, double& run_queue_ns) {
  if (w.cpu_util < 0 || w.main_run_queue < 0 || !(w.mean_iteration_ns > 0)) return false;
  cpu_ns = static_cast<double>(w.cpu_util) * w.mean_iteration_ns;
  run_queue_ns = static_cast<double>(w.main_run_queue) * w.mean_iteration_ns;
  return true;
}

void DiscountSchedulerWait(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings) {
  const PeerAssignment& peers = *ctx.peers;
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  auto is_work = [](const WorkerFinding& f) {
    return f.category == FindingCategory::kCompute && !f.dropped && !f.run_queue_only &&
           f.named.fid != kNone && f.contention_wait_ns < 0;
  };
  const auto culprits = CulpritsByGroupAndFunction(worker_findings, is_work);
  if (culprits.empty()) return;
  // One worker's extra wait for a CPU is taken off its findings once: largest cost first.
  std::vector<size_t> order;
  for (size_t i = 0; i < worker_findings.size(); ++i) {
    if (is_work(worker_findings[i])) order.push_back(i);
  }
  auto cost = [](const WorkerFinding& f) { return std::min(f.excess(), f.lost_cap); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return cost(worker_findings[a]) > cost(worker_findings[b]);
  });
  std::map<uint32_t, double> taken;  // worker -> wait taken off its findings so far
  std::vector<float> cpu, run_queue, per_cpu;
  for (size_t i : order) {
    WorkerFinding& f = worker_findings[i];
    const uint32_t g = f.named.group;
    if (g >= peers.members.size()) continue;
    double own_cpu = 0, own_rq = 0;
    if (!CpuAndRunQueue(workers[f.named.worker], own_cpu, own_rq)) continue;
    const std::vector<uint32_t>& same = culprits.at({g, f.named.fid});
    cpu.clear();
    run_queue.clear();
    per_cpu.clear();
    for (uint32_t w : peers.members[g]) {
      if (std::binary_search(same.begin(), same.end(), w)) continue;
      double c = 0, rq = 0;
      if (!CpuAndRunQueue(workers[w], c, rq) || !(c > 0)) continue;
      cpu.push_back(static_cast<float>(c));
      run_queue.push_back(static_cast<float>(rq));
      per_cpu.push_back(static_cast<float>(rq / c));
    }
    if (cpu.empty()) continue;
    const double peer_cpu = MedianInPlace(cpu);
    const double peer_rq = QuantileInPlace(run_queue, kPeerRunQueueQuantile);
    const double rq_per_cpu = MedianInPlace(per_cpu);
    const double extra_cpu = std::max(0.0, own_cpu - peer_cpu);
    double& used = taken[f.named.worker];
    double wait = own_rq - peer_rq - extra_cpu * rq_per_cpu - used;
    if (!(wait > 0)) continue;
    const double lost = cost(f);
    // What its extra work costs at its peers' pace (each CPU second and the run-queue wait
    // that comes with it) is work, whatever the run queue says: never discounted.
    const double work = std::min(lost, extra_cpu * (1 + rq_per_cpu));
    const double scale = f.onset_scale();
    wait = std::min(wait * scale, lost - work);
    if (!(wait > 0)) continue;
    used += wait / scale;
    f.scheduler_wait_ns = static_cast<float>(wait);
    f.scheduler_cpu_ns = static_cast<float>(own_cpu);
    f.scheduler_peer_cpu_ns = static_cast<float>(peer_cpu);
    f.scheduler_rq_ns = static_cast<float>(own_rq);
    f.scheduler_peer_rq_ns = static_cast<float>(peer_rq);
    f.lost_cap = lost - wait;
  }
}

}  // namespace perftracker::localize
