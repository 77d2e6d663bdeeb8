#include "perftracker/localize/victim_rule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "perftracker/localize/peer_assignment.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {
namespace {

// A worker whose own work is shorter than its peers' by at least this share of its extra
// collective wait arrived early at the collective: the wait is not a finding.
constexpr double kEarlyArrivalShare = 0.5;

// A work finding (compute, data, GC, ...) costs the job what its peers wait for it. In
// synchronous training a rank that is longer in one function makes the others wait for it at
// the next collective, unless it made up the time elsewhere before that collective (a loaded
// machine's scheduler hands CPU time out unevenly: real-healthy-4's rank 3 was 5 ms longer in
// its forward and 5 ms shorter in its backward, and waited in DDP's all-reduce as long as its
// peers). A victim is a worker of its group that waits at least kVictimShare of its excess
// longer than it (FindingWording lists them); with none, the job loses at most the longest
// extra wait of any worker of its group that is not a culprit of the same function. Only
// where the group has collective or sync waits to compare: a job without traced waits keeps
// the excess. The longest, not the median: in a subgroup collective (a tensor-parallel
// partner) one worker waiting is the whole cost. Only where all workers are one peer group:
// with several roles (pipeline stages) the worker that waits for a straggler can be of
// another role (its stage partner's send), whose waits are not comparable with its own.
void CapWorkFindingsByTheWaitTheyCause(const RuleContext& ctx,
                                       std::vector<WorkerFinding>& worker_findings) {
  if (ctx.peers->members.size() != 1 || ctx.peers->group_wait_median[0] <= 0) return;
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  auto is_work = [](const WorkerFinding& f) {
    return !f.wait_type() && !f.dropped && f.named.fid != kNone;
  };
  // Function -> its culprits (every worker is of the one group).
  std::map<uint32_t, std::vector<uint32_t>> culprits;
  for (const auto& f : worker_findings) {
    if (is_work(f)) culprits[f.named.fid].push_back(f.named.worker);
  }
  // Function -> the longest wait of the others; -INFINITY when every worker is a culprit.
  std::map<uint32_t, double> others_wait;
  for (auto& [fid, ws] : culprits) {
    std::sort(ws.begin(), ws.end());
    double longest = -INFINITY;
    for (uint32_t w : ctx.peers->members[0]) {
      if (!std::binary_search(ws.begin(), ws.end(), w)) {
        longest = std::max(longest, static_cast<double>(workers[w].wait_fn_ns));
      }
    }
    others_wait[fid] = longest;
  }
  for (auto& f : worker_findings) {
    if (!is_work(f)) continue;
    const double longest = others_wait.at(f.named.fid);
    if (longest == -INFINITY) continue;
    const double waited = longest - static_cast<double>(workers[f.named.worker].wait_fn_ns);
    if (waited >= kVictimShare * f.named.excess()) continue;
    f.lost_cap = std::min(f.lost_cap, std::max(0.0, waited));
  }
}

}  // namespace

void ResolveVictims(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings) {
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  for (auto& f : worker_findings) {
    if (!f.wait_type()) continue;
    // A longer wait at one call site can be a shorter one at another (DDP issues its
    // all-reduces from whichever hook completes a bucket): the job only loses what the
    // worker's total collective + sync wait exceeds its group's.
    const double extra_wait = static_cast<double>(workers[f.named.worker].wait_fn_ns) -
                              ctx.peers->group_wait_median[f.named.group];
    if (extra_wait < ctx.report_ns) {
      f.dropped = true;
      continue;
    }
    // It waited longer because it reached the collective early: what it did before was
    // shorter than its peers' by most of the extra wait. Nobody lost time to it. Two measures
    // of that: its own work (traced calls that are not waits), and its time outside waits
    // (iteration less waits). Only the second holds when the collective ran on another
    // thread while the training thread stayed in a traced call: DDP's all-reduce runs on
    // gloo's thread during `Tensor.backward`, which ends by waiting for it, so an early rank's
    // backward is no shorter (real-healthy-4: rank 3 entered the all-reduce ~30 ms before its
    // peers on average; its work read 8 ms longer). A rank whose own transfer is slow
    // lengthens its iteration by its extra wait: its time outside waits stays its peers'.
    const double work_deficit = ctx.peers->group_work_median[f.named.group] -
                                static_cast<double>(workers[f.named.worker].work_ns);
    const double outside = OutsideWaitNs(workers[f.named.worker]);
    const double group_outside = ctx.peers->group_outside_wait_median[f.named.group];
    const double outside_deficit = outside >= 0 && group_outside >= 0 ? group_outside - outside : 0;
    if (std::max(work_deficit, outside_deficit) >= kEarlyArrivalShare * extra_wait) {
      f.dropped = true;
      continue;
    }
    f.lost_cap = std::min(f.named.excess(), extra_wait);
    // Only a worker of its own peer group can explain the wait: the extra wait is measured
    // against that group's median, and a straggler of another role (sharing a job-wide
    // collective) delays every worker of this group alike, so it makes no one wait more
    // than its peers.
    WorkerFinding* explaining = nullptr;
    for (auto& o : worker_findings) {
      if (o.wait_type() || o.dropped) continue;
      if (o.named.group != f.named.group) continue;
      if (o.named.excess() < kVictimShare * f.named.excess()) continue;
      if (explaining == nullptr || o.named.excess() > explaining->named.excess()) explaining = &o;
    }
    if (explaining == nullptr) continue;
    f.dropped = true;
    if (explaining->named.worker != f.named.worker) {
      explaining->extra_victims.push_back(f.named.worker);
    }
  }
  CapWorkFindingsByTheWaitTheyCause(ctx, worker_findings);
}

void CapWorkFindingsThatWaitForTheirOwnCollectives(const RuleContext& ctx,
                                                   std::vector<WorkerFinding>& worker_findings) {
  const PeerAssignment& peers = *ctx.peers;
  const JobTable& job = *ctx.job;
  const std::vector<WorkerRecord>& workers = job.workers();
  // Host work only: a kernel or a copy on a device stream runs no wait of the training
  // thread. (A GPU worker's host thread launches and then waits in a device sync for most of
  // the iteration, so its time outside waits is ~0 for every worker, and a slow kernel
  // capped by it cost "0 ns": held-out rnd-s1-026, rank 0's GEMMs 2.4x, +72 ms/iter.)
  auto is_work = [&job](const WorkerFinding& f) {
    return !f.wait_type() && !f.dropped && !f.run_queue_only && f.named.fid != kNone &&
           !job.functions()[f.named.fid].on_device;
  };
  // Per group (computed for the groups with a work finding): its workers' waits with no
  // traced caller, and their median.
  std::vector<std::vector<float>> detached(peers.members.size());
  std::vector<float> detached_median(peers.members.size(), -1);
  std::vector<float> values;
  auto fill = [&](uint32_t g) {
    if (detached_median[g] >= 0) return;
    const std::vector<uint32_t>& ws = peers.members[g];
    detached[g].assign(ws.size(), 0.0f);
    for (size_t i = 0; i < ws.size(); ++i) {
      const WorkerRecord& wr = workers[ws[i]];
      for (uint32_t k = 0; k < wr.num_records; ++k) {
        const FunctionRecord& r = job.records()[wr.first_record + k];
        const FunctionInfo& info = job.functions()[r.fid];
        if (info.outermost_wait && info.parent == kNone) detached[g][i] += r.time_ns;
      }
    }
    values = detached[g];
    detached_median[g] = static_cast<float>(MedianInPlace(values));
  };
  const auto culprits = CulpritsByGroupAndFunction(worker_findings, is_work);
  for (auto& f : worker_findings) {
    if (!is_work(f)) continue;
    const uint32_t g = f.named.group;
    if (g >= peers.members.size()) continue;
    const std::vector<uint32_t>& ws = peers.members[g];
    const auto at = std::lower_bound(ws.begin(), ws.end(), f.named.worker);
    if (at == ws.end() || *at != f.named.worker) continue;
    fill(g);
    // Only a worker that waited longer than its peers in such collectives.
    if (detached[g][static_cast<size_t>(at - ws.begin())] - detached_median[g] < ctx.report_ns) {
      continue;
    }
    const double own = OutsideWaitNs(workers[f.named.worker]);
    if (own < 0) continue;
    const std::vector<uint32_t>& same = culprits.at({g, f.named.fid});
    values.clear();
    values.push_back(static_cast<float>(own));
    for (uint32_t w : ws) {
      if (std::binary_search(same.begin(), same.end(), w)) continue;
      const double outside = OutsideWaitNs(workers[w]);
      if (outside >= 0) values.push_back(static_cast<float>(outside));
    }
    if (values.size() < 2) continue;
    // A fault that began inside the window (JudgeLateOnsets) made the worker's extra time
    // from its onset on: the window's mean spreads it over every iteration.
    const double extra = std::max(0.0, own - MedianInPlace(values)) * f.onset_scale();
    f.lost_cap = std::min(f.lost_cap, extra);
  }
}

}  // namespace perftracker::localize
