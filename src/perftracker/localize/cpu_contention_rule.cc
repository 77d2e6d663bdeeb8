#include "perftracker/localize/cpu_contention_rule.h"

#include <algorithm>
#include <cstdint>

#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {
namespace {

namespace fc = finding_codes;

// A worker's run-queue wait per timeslice at least this many times its peers' median makes
// its straggler finding contention (when the extra wait explains it: kExplains). Measured
// beside two busy loops at load 15-22 on 2 cores (real-cpu-contention-r3, ci-real-slow-data-r1,
// docs/accuracy.md): healthy peers within +-15 % of their median; a rank sharing its core with
// three busy processes 1.4-2.7x; the rank that sleeps 0.5 ms per sample 0.3-0.9x.
constexpr double kCrowdedRatio = 1.3;
// ... and the wait beyond what its peers' wait per turn would give its own turns is at least
// this share of the straggler's excess per iteration.
constexpr double kExplains = 0.5;
// Without a straggler function to corroborate it: a larger ratio, and the extra wait at
// least this share of wall time.
constexpr double kAloneRatio = 1.5;
constexpr double kAloneExtraShare = 0.1;
// ... and each compared thread (or process) put on a CPU at least this many times in the
// iterations: a turn's wait varies about as much as its mean (coefficient of variation ~1),
// so the mean of n turns is known to 1/sqrt(n) and the ratio of two such to sqrt(2/n); at 100
// turns two standard errors (0.28) stay under the 0.3 the relabelling ratio must clear. A
// training thread on a loaded host may be put on a CPU only 15-40 times in a 4 s window
// (load 23-31 on 2 cores: one rank's 1.03x over 102 turns read 1.57x over 34 turns in the
// next window, real-cpu-contention-r3). A straggler function corroborates the relabelling
// above, so it needs no such count.
constexpr double kAloneMinTurns = 100;

// One worker's CPU waits in the window: run-queue delay / wall time and timeslices per
// second, of some of its threads.
struct CpuWait {
  double delay = -1;
  double slices = -1;
  bool valid() const { return delay >= 0 && slices > 0; }
  double per_slice_s() const { return delay / slices; }
};

CpuWait WaitOf(const WorkerRecord& w, ContentionThreads threads) {
  switch (threads) {
    case ContentionThreads::kTraining:
      return {w.main_run_queue, w.main_timeslices};
    case ContentionThreads::kCommunication:
      return {w.comm_run_queue, w.comm_timeslices};
    case ContentionThreads::kProcess:
      break;
  }
  return {w.run_queue, w.timeslices};
}

// Worker w against its peers (its group without it).
struct Crowding {
  bool known = false;
  ContentionThreads threads = ContentionThreads::kProcess;
  double wait_s = 0;       // w's wait per timeslice
  double peer_wait_s = 0;  // the peers' median
  double extra = 0;        // w's delay beyond peer_wait_s x its timeslices, share of wall time
  double turns = 0;        // the fewest turns on a CPU of w and its peers over their iterations
};

bool AllHave(const std::vector<WorkerRecord>& workers, const std::vector<uint32_t>& group,
             ContentionThreads threads) {
  return std::all_of(group.begin(), group.end(),
                     [&](uint32_t o) { return WaitOf(workers[o], threads).valid(); });
}

// How the peers' waits per timeslice are summarized.
enum class PeerWait {
  kMedian,
  // The upper median: with two peers the larger wait, the one that would set the pace
  // without the worker; with an odd number of peers the median. Run-queue evidence alone
  // needs it: with two peers the plain median is their mean, which one peer the scheduler
  // happened to favour pulls down (real-healthy-3: rank 1 waited 3.20 ms per turn against
  // the mean 2.12 ms of rank 0's ~3 ms and rank 2's ~1.2 ms; rank 2 was the odd one out).
  kUpperMedian,
};

// `threads`: the training threads when every worker has their counts (the helper threads —
// gloo, autograd, the agent — wake on their own schedule and blur the process's sums), else
// the processes; or the communication threads, compared only when every worker has theirs.
Crowding CrowdingOf(const std::vector<WorkerRecord>& workers, const std::vector<uint32_t>& group,
                    uint32_t w, ContentionThreads threads, std::vector<float>& values,
                    PeerWait summary = PeerWait::kMedian) {
  Crowding c;
  if (threads != ContentionThreads::kCommunication) {
    threads = AllHave(workers, group, ContentionThreads::kTraining) ? ContentionThreads::kTraining
                                                                    : ContentionThreads::kProcess;
  } else if (!AllHave(workers, group, threads)) {
    return c;
  }
  c.threads = threads;
  const CpuWait own = WaitOf(workers[w], threads);
  if (!own.valid()) return c;
  const auto turns = [](const WorkerRecord& r, const CpuWait& wait) {
    return wait.slices * static_cast<double>(r.iterations) * r.mean_iteration_ns / 1e9;
  };
  c.turns = turns(workers[w], own);
  values.clear();
  for (uint32_t o : group) {
    const CpuWait peer = WaitOf(workers[o], threads);
    if (o != w && peer.valid()) {
      values.push_back(static_cast<float>(peer.per_slice_s()));
      c.turns = std::min(c.turns, turns(workers[o], peer));
    }
  }
  if (values.empty()) return c;
  c.known = true;
  c.wait_s = own.per_slice_s();
  c.peer_wait_s =
      summary == PeerWait::kUpperMedian ? UpperMedianInPlace(values) : MedianInPlace(values);
  // Summed over a process's threads the delay can exceed the wall time; the time a worker
  // loses is at most all of it.
  c.extra = std::min(1.0, own.delay - c.peer_wait_s * own.slices);
  return c;
}

bool Crowded(const Crowding& c, double ratio) {
  return c.known && c.peer_wait_s > 0 && c.wait_s >= ratio * c.peer_wait_s && c.extra > 0;
}

void MarkContended(const Crowding& c, WorkerFinding& wf) {
  wf.code = fc::kCpuContention;
  wf.category = FindingCategory::kCpuContention;
  wf.resource = "CPU (run queue)";
  wf.contention_threads = c.threads;
  wf.contention_wait_ns = static_cast<float>(c.wait_s * 1e9);
  wf.contention_peer_wait_ns = static_cast<float>(c.peer_wait_s * 1e9);
}

}  // namespace

void MarkCpuContention(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings) {
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  const std::vector<std::vector<uint32_t>>& members = ctx.peers->members;
  std::vector<float> values;
  for (auto& wf : worker_findings) {
    if (wf.dropped) continue;
    const bool straggler = wf.code == fc::kStragglerCompute || wf.code == fc::kStragglerData ||
                           wf.code == fc::kStragglerComm || wf.code == fc::kStragglerSync ||
                           wf.code == fc::kStragglerUntraced;
    if (!straggler) continue;
    const std::vector<uint32_t>& group = members[wf.named.group];
    const auto explains = [&](const Crowding& c) {
      return Crowded(c, kCrowdedRatio) &&
             c.extra * ctx.iteration_ns >= kExplains * wf.named.excess();
    };
    const Crowding c =
        CrowdingOf(workers, group, wf.named.worker, ContentionThreads::kTraining, values);
    if (explains(c)) {
      MarkContended(c, wf);
      continue;
    }
    // Time lost in communication (or between traced calls): the threads that run the
    // collectives may be the starved ones while the training thread, blocked in backward
    // waiting for them, is not (real-cpu-contention-r3: gloo's busiest thread 1.8-2.6x its
    // peers' wait per turn, the training thread 1.19x). Their turns are many (gloo's socket
    // loop and workers: 80-250 a second), so the count guard of the judgment alone costs
    // nothing and keeps a short window's noise out.
    if (wf.code != fc::kStragglerComm && wf.code != fc::kStragglerUntraced) continue;
    const Crowding comm =
        CrowdingOf(workers, group, wf.named.worker, ContentionThreads::kCommunication, values);
    if (explains(comm) && comm.turns >= kAloneMinTurns) MarkContended(comm, wf);
  }
  // Run-queue evidence alone: a starved worker need not show a longer traced function (in
  // DDP it loses its time in backward and the C++ all-reduce, where its peers wait as long).
  // A stricter bar than the relabelling above, since no function corroborates it; the time
  // lost is bounded by its extra wait (share of wall time) times the iteration.
  // A worker named only as contended already, by relabelled straggler functions none of
  // which is material, gets this finding too when it says more: a starved rank is slower in every
  // function, each one alone a little (real-cpu-contention-r3: Block2.forward +4 ms, 3 % of the
  // iteration, as the largest).
  std::vector<bool> named(workers.size(), false);
  std::vector<double> contended(workers.size(), -1);       // largest relabelled excess
  std::vector<double> contended_cost(workers.size(), -1);  // ... and cost
  for (const auto& wf : worker_findings) {
    if (wf.dropped || wf.wait_type()) continue;
    if (wf.code == fc::kCpuContention) {
      contended[wf.named.worker] = std::max(contended[wf.named.worker], wf.named.excess());
      contended_cost[wf.named.worker] =
          std::max(contended_cost[wf.named.worker], std::min(wf.named.excess(), wf.lost_cap));
    } else {
      named[wf.named.worker] = true;
    }
  }
  // What it costs: a starved worker delays the job by reaching the collectives after its
  // peers, and then it waits in them less than its group does; so the job loses at most the
  // group's median collective + sync wait less its own. A worker starved while it waited for
  // a culprit anyway costs nothing (real-slow-data-r1, load 7-9: ranks 0 and 2 waited 1.15 ms
  // per turn against 0.52 ms, "up to +10.5 ms", while all waited 35.8 ms/iter for rank 1's
  // data), nor does one starved while it waited for its GPU (rnd-s4-011: rank 195, a 9.8x
  // slower host side, 45 % of its wall time runnable, "up to +379 ms", while its group
  // waited 1.28 s/iter in collectives and it 1.25 s; the job lost nothing by it).
  // The wait cannot cap it when its communication threads are starved too: they lengthen
  // every member's collective alike, its own too (a DDP job on gloo: the starved rank's
  // time goes into backward and the C++ all-reduce, and every rank waits as long). So the
  // cap holds with a material culprit in the group (the starved worker then waits for it),
  // with communication threads known not to be crowded, or, where they are not known, on a
  // worker whose collectives run on its GPU, which a crowded CPU does not slow.
  std::vector<double> group_culprit(members.size(), 0);
  for (const auto& wf : worker_findings) {
    if (wf.dropped || wf.wait_type() || wf.run_queue_only) continue;
    if (wf.named.group >= group_culprit.size()) continue;
    double& c = group_culprit[wf.named.group];
    c = std::max(c, std::min(wf.named.excess(), wf.lost_cap));
  }
  for (uint32_t g = 0; g < members.size(); ++g) {
    if (members[g].size() < kMinPeers) continue;
    const double group_wait = ctx.peers->group_wait_median[g];
    const bool culprit = group_culprit[g] >= ctx.material_ns;
    for (uint32_t w : members[g]) {
      if (named[w]) continue;
      const Crowding c = CrowdingOf(workers, members[g], w, ContentionThreads::kTraining, values,
                                    PeerWait::kUpperMedian);
      if (!Crowded(c, kAloneRatio) || c.extra < kAloneExtraShare || c.turns < kAloneMinTurns) {
        continue;
      }
      // A material relabelled finding names the function and says it already.
      if (contended[w] >= ctx.material_ns || c.extra * ctx.iteration_ns <= contended[w]) continue;
      WorkerFinding wf;
      MarkContended(c, wf);
      wf.run_queue_only = true;
      wf.named = Anomaly::OfWorker(w, g, static_cast<uint32_t>(members[g].size()),
                                   c.extra * ctx.iteration_ns);
      const auto comm_unslowed = [&] {
        const Crowding comm =
            CrowdingOf(workers, members[g], w, ContentionThreads::kCommunication, values);
        return comm.known ? !Crowded(comm, kCrowdedRatio) : workers[w].has_device;
      };
      if (group_wait > 0 && (culprit || comm_unslowed())) {
        wf.lost_cap = std::max(0.0, group_wait - static_cast<double>(workers[w].wait_fn_ns));
        wf.contention_lateness = true;
      }
      // Its functions relabelled above are the same starvation, each seen in one function:
      // one cause, one finding. Findings of their own beside it ranked the same cause two or
      // three times, above another fault (rnd-s1-060: rank 1's run-queue finding, then its
      // DataLoader.__next__ +3.90 ms, above a degraded NVLink host's +2.63 ms). They become
      // its evidence where it costs at least as much as each of them.
      const double cost = std::min(wf.named.excess(), wf.lost_cap);
      // Capped under what a relabelled function of it costs, it says less than that finding,
      // which names the function and the contention already: one cause, one finding
      // (rnd-s4-026: rank 13's DataLoader.__next__ +10.2 ms, its run-queue finding 9.18 ms).
      if (cost <= contended_cost[w]) continue;
      for (WorkerFinding& fn : worker_findings) {
        if (fn.dropped || fn.run_queue_only || fn.code != fc::kCpuContention ||
            fn.named.worker != w || std::min(fn.excess(), fn.lost_cap) > cost) {
          continue;
        }
        wf.contention_functions.push_back(fn.named);
        fn.dropped = true;
      }
      std::sort(wf.contention_functions.begin(), wf.contention_functions.end(),
                [](const Anomaly& a, const Anomaly& b) { return a.excess() > b.excess(); });
      worker_findings.push_back(std::move(wf));
    }
  }
}

}  // namespace perftracker::localize
