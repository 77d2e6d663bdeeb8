#include "perftracker/localize/cpu_contention_rule.h"

#include <algorithm>

#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {
namespace {

namespace fc = finding_codes;

// CPU contention: a worker's run-queue delay fraction at least this much above its peers'
// median, and this many times it, makes its straggler finding PT-CPU-CONTENTION. (An
// absolute excess and a modest ratio, not a level: on an oversubscribed host every rank
// waits a lot — measured 75 % for three busy loops on a loaded 2-core machine.)
constexpr double kContentionRunQueue = 0.15;
constexpr double kContentionPeerRatio = 1.5;
// ... or a large absolute excess at a smaller ratio: on a host oversubscribed by other work
// every rank waits about a wall second per second, and a starved rank's +0.4 is only 1.3x
// (e2e_live cpu_contention at load average 20: 1.59 against 1.20).
constexpr double kContentionLargeRunQueue = 0.3;
constexpr double kContentionLargePeerRatio = 1.25;
// An untraced straggler (its peers wait for it, none of its traced functions is longer) needs
// only kContentionRunQueue above and kContentionLargePeerRatio times its peers: nothing else
// explains it (real-cpu-contention-r3: 0.887 against 0.595, 1.49x).
// Without a straggler function to corroborate it, run-queue delay alone names contention
// only when it is this far (absolute) and this many times above the peers' median.
constexpr double kContentionAloneRunQueue = 0.3;
constexpr double kContentionAlonePeerRatio = 1.5;

// An untraced straggler (nothing it ran is longer than its peers') is starved of CPU when its
// main (training) thread waited in the run queue at least this much more of the wall time
// than its peers' main threads (median), and that excess explains at least this share of
// the time it costs per iteration. Main threads, not whole processes: on a host loaded by
// other work every process's helper threads (gloo, autograd, the agent) wait as well, and
// the process sums lose the contrast (real-cpu-contention-r3 beside two busy loops, load
// 24-32: the starved rank's process 2.18 against its peers' 2.75, and it was the one the
// others waited for). An excess, not a ratio: background load raises every level alike.
// A rank that sleeps or blocks in untraced code is not runnable then: its main thread waits
// less, not more.
constexpr double kMainThreadRunQueueMargin = 0.1;
constexpr double kMainThreadExplains = 0.5;

// The median main-thread run-queue delay of worker w's peers, or a negative value when w's
// own is not starved by the bars above for a loss of `lost_share` of the iteration.
float StarvedMainThread(const std::vector<WorkerRecord>& workers,
                        const std::vector<uint32_t>& group, uint32_t w, double lost_share,
                        std::vector<float>& values) {
  if (workers[w].main_run_queue < 0) return -1;
  values.clear();
  for (uint32_t o : group) {
    if (o != w && workers[o].main_run_queue >= 0) values.push_back(workers[o].main_run_queue);
  }
  if (values.empty()) return -1;
  const auto peer = static_cast<float>(MedianInPlace(values));
  const double excess = static_cast<double>(workers[w].main_run_queue - peer);
  if (excess < kMainThreadRunQueueMargin || excess < kMainThreadExplains * lost_share) return -1;
  return peer;
}

// The median run-queue delay of worker w's peers (its group without it), or a negative value
// when w's own delay is not at least `margin` above and `ratio` times that median.
float ContendedPeerRunQueue(const std::vector<WorkerRecord>& workers,
                            const std::vector<uint32_t>& group, uint32_t w, double margin,
                            double ratio, std::vector<float>& values) {
  if (workers[w].run_queue < margin) return -1;
  values.clear();
  for (uint32_t o : group) {
    if (o != w && workers[o].run_queue >= 0) values.push_back(workers[o].run_queue);
  }
  if (values.empty()) return -1;
  const auto peer = static_cast<float>(MedianInPlace(values));
  if (workers[w].run_queue < peer + margin || workers[w].run_queue < ratio * peer) return -1;
  return peer;
}

}  // namespace

void MarkCpuContention(const RuleContext& ctx, std::vector<WorkerFinding>& wfs) {
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  const std::vector<std::vector<uint32_t>>& members = ctx.peers->members;
  std::vector<float> values;
  for (auto& wf : wfs) {
    if (wf.dropped) continue;
    const bool straggler = wf.code == fc::kStragglerCompute || wf.code == fc::kStragglerData ||
                           wf.code == fc::kStragglerComm || wf.code == fc::kStragglerSync ||
                           wf.code == fc::kStragglerUntraced;
    if (!straggler) continue;
    float peer = ContendedPeerRunQueue(workers, members[wf.named.group], wf.named.worker,
                                       kContentionRunQueue, kContentionPeerRatio, values);
    if (peer < 0) {
      peer = ContendedPeerRunQueue(workers, members[wf.named.group], wf.named.worker,
                                   kContentionLargeRunQueue, kContentionLargePeerRatio, values);
    }
    if (peer < 0 && wf.code == fc::kStragglerUntraced) {
      // Nothing traced explains why the peers wait for it: a clear run-queue excess does.
      peer = ContendedPeerRunQueue(workers, members[wf.named.group], wf.named.worker,
                                   kContentionRunQueue, kContentionLargePeerRatio, values);
    }
    bool main_thread = false;
    if (peer < 0 && wf.code == fc::kStragglerUntraced && ctx.iteration_ns > 0) {
      // ... or its training thread's own wait for a CPU does.
      peer = StarvedMainThread(workers, members[wf.named.group], wf.named.worker,
                               wf.named.excess() / ctx.iteration_ns, values);
      main_thread = peer >= 0;
    }
    if (peer < 0) continue;
    wf.contention_main_thread = main_thread;
    wf.code = fc::kCpuContention;
    wf.category = FindingCategory::kCpuContention;
    wf.resource = "CPU (run queue)";
    wf.contention_peer_run_queue = peer;
  }
  // Run-queue evidence alone: a starved worker need not show a longer traced function (in
  // DDP it loses its time in backward and the C++ all-reduce, where its peers wait as long).
  // A stricter bar than the relabelling above, since no function corroborates it; the time
  // lost is bounded by the extra share of wall time it spent runnable but not running.
  // A worker named only as contended already, by relabelled straggler functions none of
  // which is material, gets this finding too when it says more: a starved rank is slower in every
  // function, each one alone a little (real-cpu-contention-r3: Block2.forward +4 ms, 3 % of the
  // iteration, as the largest, while the rank waited 0.89 of wall time for a CPU against its peers'
  // 0.58).
  std::vector<bool> named(workers.size(), false);
  std::vector<double> contended(workers.size(), -1);  // largest relabelled excess
  for (const auto& wf : wfs) {
    if (wf.dropped || wf.wait_type()) continue;
    if (wf.code == fc::kCpuContention) {
      contended[wf.named.worker] = std::max(contended[wf.named.worker], wf.named.excess());
    } else {
      named[wf.named.worker] = true;
    }
  }
  for (uint32_t g = 0; g < members.size(); ++g) {
    if (members[g].size() < kMinPeers) continue;
    for (uint32_t w : members[g]) {
      if (named[w]) continue;
      const float peer = ContendedPeerRunQueue(workers, members[g], w, kContentionAloneRunQueue,
                                               kContentionAlonePeerRatio, values);
      if (peer < 0) continue;
      const double excess = std::min(1.0, static_cast<double>(workers[w].run_queue - peer));
      // A material relabelled finding names the function and says it already.
      if (contended[w] >= ctx.material_ns || excess * ctx.iteration_ns <= contended[w]) continue;
      WorkerFinding wf;
      wf.code = fc::kCpuContention;
      wf.category = FindingCategory::kCpuContention;
      wf.resource = "CPU (run queue)";
      wf.contention_peer_run_queue = peer;
      wf.run_queue_only = true;
      wf.named = Anomaly::OfWorker(w, g, static_cast<uint32_t>(members[g].size()),
                                   excess * ctx.iteration_ns);
      wfs.push_back(std::move(wf));
    }
  }
}

}  // namespace perftracker::localize
