// Scheduler wait (algorithm step 5e, after the victim caps): a worker whose training thread
// waited longer for a CPU than its peers, by more than its own extra work explains, spent that
// time in the run queue, not in its code. On a host whose CPUs are shared by more runnable
// threads than it has cores (several ranks per host, a CPU-only job, a busy neighbour) the
// kernel's scheduler hands the turns out unevenly, and the rank it serves last is longer in
// whatever it was doing: its backward, its optimizer step, its data loading, all by the same
// factor, while its process used no more CPU time per iteration than its peers'.
//
// For a work finding (compute, not a wait, not PT-CPU-CONTENTION) on a worker whose host
// metrics were sampled (live mode): per iteration, its training thread's run-queue wait beyond
// the upper quartile of its group's workers that are not culprits of the same function (ΔRQ:
// beyond their own spread, not their median), less the run-queue wait its extra CPU time would
// bring at those peers' median run-queue wait per CPU second r (max(0, ΔCPU) × r), is
// scheduler wait S. The job loses at most what the finding would cost less S, and never less
// than what its extra work costs at its peers' pace, max(0, ΔCPU) × (1 + r) (from a late onset
// on, S is the window's divided by the share of iterations after the onset, as its excess
// is); a worker's S is taken off its findings once, the costliest first. What S is *not*:
//   - extra work: a genuine compute straggler uses more CPU, and on a crowded host waits more
//     in the run queue in proportion (the ΔCPU term takes that out: real-slow-compute-r0's
//     rank 0 used 15 ms of CPU per iteration more than its peers, its 8 ms of extra run-queue
//     wait is below the 25 ms its extra work predicts, S = 0);
//   - blocking: a function that sleeps or waits for I/O is neither running nor runnable, its
//     run-queue wait does not grow (S = 0, the finding stands);
//   - clear CPU contention: MarkCpuContention (before this rule) turns a straggler whose wait
//     *per turn on a CPU* is clearly above its peers' into PT-CPU-CONTENTION; S is the rest, a
//     scheduler that served one rank a little later on every turn.
// Measured on real-healthy-roles-6 (docs/accuracy.md): rank 0's backward 26.7 ms/iter against
// 21.2, its CPU time 18.5 ms/iter against 18.2 / 19.0, its training thread's run-queue wait
// 20.8 against 18.3 / 19.1 ms/iter.
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

// A worker's per-iteration CPU time and its training thread's run-queue wait, in ns; false
// when its host metrics were not sampled (offline traces, old summaries) or it has no
// iteration time. (Also read by off_cpu_rule.h.)
bool CpuAndRunQueue(const WorkerRecord& w, double& cpu_ns, double& run_queue_ns);

void DiscountSchedulerWait(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings);

}  // namespace perftracker::localize
