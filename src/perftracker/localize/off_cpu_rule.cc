#include "perftracker/localize/off_cpu_rule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "perftracker/localize/robust_stats.h"
#include "perftracker/localize/scheduler_wait_rule.h"

namespace perftracker::localize {
namespace {

// At least this share of the excess must be what the others wait for it.
constexpr double kWaitedForShareOfExcess = 0.5;

// Groups of up to this many peers measure their spread by their range.
constexpr size_t kSmallGroup = 8;

// The peers' median time in ops is taken over at most this many of them (each reads its
// worker's records).
constexpr size_t kOpPeers = 64;

// The time per iteration worker `w` spends in the torch ops `fid` runs directly or through
// Python calls (the outermost ops under it; an op nested in an op is in its time already).
double TimeInOpsUnder(const JobTable& job, uint32_t w, uint32_t fid) {
  const WorkerRecord& wr = job.workers()[w];
  const std::vector<FunctionInfo>& fns = job.functions();
  double sum = 0;
  job.records().ForEach(wr.first_record, wr.num_records, [&](uint64_t, const FunctionRecord& r) {
    if (r.fid >= fns.size() || fns[r.fid].kind != EventKind::kTorchOp) return;
    // One walk up the collapse chain (JobTable::IsAncestor's): under fid, no op between.
    int depth = 0;
    for (uint32_t p = job.CollapseParent(r.fid); p < fns.size() && depth < kMaxDepth;
         p = job.CollapseParent(p), ++depth) {
      if (p == fid) {
        sum += r.time_ns;
        return;
      }
      if (fns[p].kind == EventKind::kTorchOp) return;
    }
  });
  return sum;
}

}  // namespace

void MarkOffCpuTime(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings) {
  const PeerAssignment& peers = *ctx.peers;
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  auto is_host_work = [](const WorkerFinding& f) {
    return f.category == FindingCategory::kCompute && f.resource == "CPU" && !f.dropped &&
           !f.run_queue_only && f.named.fid != kNone && f.contention_wait_ns < 0;
  };
  const auto culprits = CulpritsByGroupAndFunction(worker_findings, is_host_work);
  std::vector<float> cpu, run_queue, both, ops;
  for (WorkerFinding& f : worker_findings) {
    if (!is_host_work(f)) continue;
    const double excess = f.excess();
    if (!(excess >= ctx.report_ns) || !(excess > 0)) continue;
    const uint32_t g = f.named.group;
    if (g >= peers.members.size()) continue;
    // Host-only workers: their collectives and syncs block (gloo), so a peer that waits uses
    // no CPU for it. A GPU worker's host thread may spin in a device sync or a collective's
    // wait, and then burns as much CPU waiting as a culprit does computing.
    if (workers[f.named.worker].has_device) continue;
    // An op's own time is compute (below).
    if (ctx.job->functions()[f.named.fid].kind == EventKind::kTorchOp) continue;
    double own_cpu = 0, own_rq = 0;
    if (!CpuAndRunQueue(workers[f.named.worker], own_cpu, own_rq)) continue;
    const std::vector<uint32_t>& same = culprits.at({g, f.named.fid});
    cpu.clear();
    run_queue.clear();
    both.clear();
    for (uint32_t w : peers.members[g]) {
      if (std::binary_search(same.begin(), same.end(), w) || workers[w].has_device) continue;
      double c = 0, rq = 0;
      if (!CpuAndRunQueue(workers[w], c, rq)) continue;
      cpu.push_back(static_cast<float>(c));
      run_queue.push_back(static_cast<float>(rq));
      both.push_back(static_cast<float>(c + rq));
    }
    if (cpu.empty()) continue;
    const double peer_cpu = MedianInPlace(cpu);
    const double peer_rq = MedianInPlace(run_queue);
    // Window means; the excess is per iteration from the onset on (1x without one).
    const double scale = f.onset_scale();
    const double on_cpu =
        (std::max(0.0, own_cpu - peer_cpu) + std::max(0.0, own_rq - peer_rq)) * scale;
    if (on_cpu > kOnCpuShareOfExcess * excess) continue;
    // Time the trace shows inside torch ops is compute, whatever the window means say: on a
    // crowded host a computing rank's extra CPU second takes 2-3 s of wall time, and its
    // peers, woken from their all-reduce together, wait longer for a CPU than it does (a
    // clean-clone CI run: Block2.forward +62 ms/iter of extra linear layers, its process
    // +15 ms/iter of CPU, its thread 12.5 ms/iter *less* run-queue wait, called blocked).
    // A sleep, I/O or a lock in Python code runs no op.
    ops.clear();
    for (uint32_t w : peers.members[g]) {
      if (ops.size() == kOpPeers) break;
      if (std::binary_search(same.begin(), same.end(), w) || workers[w].has_device) continue;
      ops.push_back(static_cast<float>(TimeInOpsUnder(*ctx.job, w, f.named.fid)));
    }
    const double peer_ops = ops.empty() ? 0.0 : MedianInPlace(ops);
    const double in_ops =
        std::max(0.0, TimeInOpsUnder(*ctx.job, f.named.worker, f.named.fid) - peer_ops) * scale;
    if (in_ops > kOnCpuShareOfExcess * excess) continue;
    // The others must wait for it: a worker that does in this function what its peers do in
    // others (another role, a different split of the work) uses the same CPU time, computes
    // all the same, and makes no one wait.
    if (std::min(excess, f.lost_cap) < kWaitedForShareOfExcess * excess) continue;
    // What is left must stand out of the peers' own spread of CPU time + run-queue wait per
    // iteration: window means of a crowded host vary by milliseconds between ranks that do
    // the same work, and an excess within that spread may be the scheduler's after all.
    // In a small group a MAD of two or three values says little: its whole range counts.
    const auto [lo, hi] = std::minmax_element(both.begin(), both.end());
    const double range = both.size() <= kSmallGroup ? *hi - *lo : 0.0;
    const RobustCenter spread = MedianAndMadInPlace(both);
    const double bar =
        std::max(range, ctx.options->outlier_z *
                            RobustScale(spread, kScaleRelativeFloor, kScaleAbsoluteFloorNs));
    if (excess - on_cpu < bar) continue;
    f.resource = "off-CPU (blocked)";
    f.off_cpu = true;
    f.off_cpu_cpu_ns = static_cast<float>(own_cpu);
    f.off_cpu_peer_cpu_ns = static_cast<float>(peer_cpu);
    f.off_cpu_rq_ns = static_cast<float>(own_rq);
    f.off_cpu_peer_rq_ns = static_cast<float>(peer_rq);
  }
}

}  // namespace perftracker::localize
