#include "perftracker/localize/saturated_host_rule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {

double CpuPerIteration(const WorkerRecord& w) {
  if (w.cpu_util < 0 || w.run_queue < 0 || !(w.mean_iteration_ns > 0)) return -1;
  return static_cast<double>(w.cpu_util) * w.mean_iteration_ns;
}

std::vector<HostLoad> LoadPerHost(const JobTable& job) {
  const std::vector<WorkerRecord>& workers = job.workers();
  std::vector<HostLoad> hosts(job.hosts().size() + 1);
  std::vector<std::vector<float>> per_cpu(hosts.size());
  std::vector<bool> missing(hosts.size(), false);
  for (const WorkerRecord& w : workers) {
    if (w.host >= hosts.size()) continue;
    HostLoad& h = hosts[w.host];
    ++h.workers;
    const double cpu = CpuPerIteration(w);
    if (cpu < 0) {
      missing[w.host] = true;
      continue;
    }
    h.cpu_ns += cpu;
    if (w.cpu_util > 0) per_cpu[w.host].push_back(w.run_queue / w.cpu_util);
  }
  for (size_t i = 0; i < hosts.size(); ++i) {
    HostLoad& h = hosts[i];
    if (missing[i] || h.workers == 0 || per_cpu[i].empty() || !(h.cpu_ns > 0)) continue;
    h.run_queue_per_cpu = MedianInPlace(per_cpu[i]);
    h.saturated = h.run_queue_per_cpu >= kSaturatedRunQueuePerCpu;
  }
  return hosts;
}

namespace {

// How much more CPU time per iteration than its peers' median a worker must use to have done
// more work: beyond their robust spread, by min_relative_effect of their median (as a
// straggler's time must be: a starved rank's thrashed caches and extra context switches make
// the same work cost a few % more CPU time) and by report_share of the iteration.
double ExtraCpuBar(const RuleContext& ctx, const RobustCenter& peers) {
  return std::max(
      {ctx.report_ns, ctx.options->min_relative_effect * peers.median,
       ctx.options->outlier_z * RobustScale(peers, kScaleRelativeFloor, kScaleAbsoluteFloorNs)});
}

// Groups of up to this many workers with host metrics compare a worker's CPU time with the
// others' without it.
constexpr size_t kLeaveOneOutCpuPeers = 8;

}  // namespace

std::vector<uint32_t> CpuOutliersOnSaturatedHosts(const RuleContext& ctx,
                                                  const std::vector<HostLoad>& hosts,
                                                  const std::vector<uint32_t>& group) {
  std::vector<uint32_t> out;
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  std::vector<float> all;
  bool any_saturated = false;
  for (uint32_t w : group) {
    const double c = CpuPerIteration(workers[w]);
    if (c >= 0) all.push_back(static_cast<float>(c));
    any_saturated =
        any_saturated || (workers[w].host < hosts.size() && hosts[workers[w].host].saturated);
  }
  if (!any_saturated || all.size() < kMinPeers) return out;
  // A small group's worker is compared with the others without itself (one outlier among
  // four moves the median); a larger group's median and MAD hold against one outlier, and are
  // computed once (a group of 100,000 workers is compared in O(n log n)).
  const bool leave_one_out = all.size() <= kLeaveOneOutCpuPeers;
  RobustCenter center;
  if (!leave_one_out) center = MedianAndMadInPlace(all);
  std::vector<float> others;
  for (uint32_t w : group) {
    const WorkerRecord& wr = workers[w];
    if (wr.host >= hosts.size() || !hosts[wr.host].saturated) continue;
    const double own = CpuPerIteration(wr);
    if (own < 0) continue;
    if (leave_one_out) {
      others.clear();
      for (uint32_t o : group) {
        const double c = o == w ? -1 : CpuPerIteration(workers[o]);
        if (c >= 0) others.push_back(static_cast<float>(c));
      }
      center = MedianAndMadInPlace(others);
    }
    if (own - center.median > ExtraCpuBar(ctx, center)) out.push_back(w);
  }
  return out;
}

void CountExtraWorkOnSaturatedHosts(const RuleContext& ctx,
                                    std::vector<WorkerFinding>& worker_findings) {
  const PeerAssignment& peers = *ctx.peers;
  const JobTable& job = *ctx.job;
  const std::vector<WorkerRecord>& workers = job.workers();
  auto is_work = [](const WorkerFinding& f) {
    return !f.wait_type() && !f.dropped && !f.run_queue_only && f.named.fid != kNone &&
           f.contention_wait_ns < 0;
  };
  // Only findings whose cost an earlier step capped below their excess can gain.
  bool any_capped = false;
  for (const auto& f : worker_findings) {
    any_capped = any_capped || (is_work(f) && f.lost_cap < f.excess());
  }
  if (!any_capped) return;
  const std::vector<HostLoad> hosts = LoadPerHost(job);
  // A worker's extra CPU time counts for its costliest work finding only.
  std::map<uint32_t, size_t> claimed;  // worker -> index of that finding
  for (size_t i = 0; i < worker_findings.size(); ++i) {
    const WorkerFinding& f = worker_findings[i];
    if (!is_work(f)) continue;
    auto [it, inserted] = claimed.try_emplace(f.named.worker, i);
    if (!inserted && f.excess() > worker_findings[it->second].excess()) it->second = i;
  }
  const auto culprits = CulpritsByGroupAndFunction(worker_findings, is_work);
  // (group, function) -> per host, the extra CPU time per iteration of its culprits there.
  std::map<std::pair<uint32_t, uint32_t>, std::map<uint32_t, double>> extra_by_host;
  std::map<std::pair<uint32_t, uint32_t>, double> peer_cpu;  // the peers' median
  std::vector<float> cpu;
  for (const auto& [key, same] : culprits) {
    const uint32_t g = key.first;
    if (g >= peers.members.size()) continue;
    cpu.clear();
    for (uint32_t w : peers.members[g]) {
      if (std::binary_search(same.begin(), same.end(), w)) continue;
      const double c = CpuPerIteration(workers[w]);
      if (c >= 0) cpu.push_back(static_cast<float>(c));
    }
    if (cpu.size() < 2) continue;
    const RobustCenter center = MedianAndMadInPlace(cpu);
    const double bar = ExtraCpuBar(ctx, center);
    peer_cpu[key] = center.median;
    auto& per_host = extra_by_host[key];
    for (uint32_t w : same) {
      // A culprit's extra CPU time counts for the function of its costliest finding only.
      const WorkerFinding& own = worker_findings[claimed.at(w)];
      if (own.named.fid != key.second || own.named.group != g) continue;
      const double c = CpuPerIteration(workers[w]);
      if (c < 0 || c - center.median <= bar) continue;
      per_host[workers[w].host] += c - center.median;
    }
  }
  for (const auto& [w, i] : claimed) {
    WorkerFinding& f = worker_findings[i];
    const double excess = f.excess();
    if (!(f.lost_cap < excess)) continue;
    const WorkerRecord& wr = workers[w];
    if (wr.host >= hosts.size() || !hosts[wr.host].saturated) continue;
    const auto key_it = extra_by_host.find({f.named.group, f.named.fid});
    if (key_it == extra_by_host.end()) continue;
    const auto host_it = key_it->second.find(wr.host);
    if (host_it == key_it->second.end()) continue;
    const HostLoad& host = hosts[wr.host];
    const double extra_cpu = host_it->second;
    const double cost =
        std::min(excess, extra_cpu * static_cast<double>(wr.mean_iteration_ns) / host.cpu_ns);
    if (!(cost > f.lost_cap)) continue;
    f.lost_cap = cost;
    f.saturated_cost_ns = static_cast<float>(cost);
    f.saturated_cpu_ns = static_cast<float>(CpuPerIteration(wr));
    f.saturated_peer_cpu_ns = static_cast<float>(peer_cpu.at({f.named.group, f.named.fid}));
    f.saturated_extra_cpu_ns = static_cast<float>(extra_cpu);
    f.saturated_host_cpu_ns = static_cast<float>(host.cpu_ns);
    f.saturated_run_queue_per_cpu = static_cast<float>(host.run_queue_per_cpu);
    f.saturated_host_workers = host.workers;
  }
}

}  // namespace perftracker::localize
