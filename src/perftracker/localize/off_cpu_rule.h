// Time off a CPU (algorithm step 5f', after the scheduler-wait discount): a work finding says
// "compute, resource CPU" because the named function is host code, but a host function can be
// long without computing: its thread sleeps (time.sleep, a rate limiter), waits for I/O (a
// read from storage, a socket), for a lock, a queue or another process. Then the worker's
// process uses no more CPU time per iteration than its peers', and its training thread waits
// no longer for a CPU; calling that time "CPU" sends the user to optimize code that does not
// run (issue 11 §3: say what is known, and no more).
//
// For a work finding on host code (resource "CPU", not a wait, not PT-CPU-CONTENTION) on a
// host-only worker whose group has host metrics (live mode's sampler, or a trace's host-load
// event): per iteration, its process's extra CPU time ΔCPU and its training thread's extra
// run-queue wait ΔRQ over the medians of its group's workers that are not culprits of the
// same function (scaled to the finding's onset, as its excess is). The excess is off-CPU when
//   - ΔCPU + ΔRQ is at most kOnCpuShareOfExcess of it;
//   - so is its extra time inside torch ops (the outermost ops it runs, directly or through
//     Python calls, over its peers' median; the function itself is no op): what the trace
//     shows inside an op is compute, whatever the window means say. On a crowded host a
//     computing rank's extra CPU second takes 2-3 s of wall time while its peers, woken
//     from their all-reduce together, wait longer for a CPU than it does: in a clean-clone
//     CI run extra linear layers in Block2.forward (+62 ms/iter) came with only +15 ms/iter
//     of process CPU and 12.5 ms/iter *less* run-queue wait. A sleep, I/O or a lock in
//     Python code runs no op;
//   - the rest stands out of those peers' own spread of CPU + run-queue time per iteration
//     (outlier_z robust sigmas, and in groups of up to 8 their whole range): on a crowded
//     host these window means differ by milliseconds between ranks doing the same work, and
//     a small excess within that spread may be the scheduler's after all;
//   - the others wait for it (it costs at least half its excess): a worker that does in this
//     function what its peers do in others (another role, a different split of the work)
//     uses the same CPU time, computes all the same, and makes no one wait;
//   - the workers are host-only: their collectives block (gloo), so a waiting peer uses no
//     CPU for it. A GPU worker's host thread may spin in a device sync or a collective's wait
//     and burn as much CPU waiting as a culprit does computing: process CPU time cannot tell
//     the two apart there, and the rule stays out.
// The resource becomes "off-CPU (blocked)" and the finding says so, with the figures.
// The code and the cost stay: the others still wait for this worker; what changes is what
// the user should look for (a sleep, I/O, a lock), not whether it matters.
// Measured (a hand-written 3-rank data-parallel job, one rank's metrics logger sleeping 40 ms
// per step, docs/accuracy.md): log_metrics +40.1 ms/iter, its process 6.9 ms/iter of CPU
// against 6.3, its thread's run-queue wait 4.8 against 5.6 ms/iter.
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

// At most this share of a finding's excess may be extra CPU time and run-queue wait for the
// rest to be called off-CPU: a function that computes part of its extra time and blocks for
// the rest stays "CPU".
inline constexpr double kOnCpuShareOfExcess = 0.25;

void MarkOffCpuTime(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings);

}  // namespace perftracker::localize
