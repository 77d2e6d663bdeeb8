// Culprits vs victims (algorithm step 5): in synchronous training everyone waits for the
// slowest; victims show longer collective / sync time, the culprit longer work and shorter
// waits. A communication or synchronization finding is dropped, and its worker listed as a
// victim, when another worker has a work (compute, data, GC, ...) finding of comparable size
// (kVictimShare); otherwise it stands (e.g. one slow link: PT-STRAGGLER-COMM), and the job
// loses at most the worker's extra total wait. A worker that waits longer because its own
// work (root non-wait functions) or its time outside waits (iteration less waits: the
// measure that holds when the collective ran on another thread, DDP's on gloo's) was shorter
// than its peers' by at least kEarlyArrivalShare of the extra wait arrived early: dropped, it
// is nobody's culprit. The collective's culprit is whoever arrived last; a worker slow in the
// transfer itself waits longer *and* its iteration lengthens by it. A work finding costs
// the job what the others wait for it: when the workers of its group that are not culprits of
// the same function wait less than kVictimShare of its excess longer than it does (it made the
// time up elsewhere before the collective), the job loses at most that difference (jobs
// whose workers form one peer group).
//
// CapWorkFindingsThatWaitForTheirOwnCollectives (run after JudgeLateOnsets, any number of
// groups): a function on the training thread can end by waiting for a collective that runs
// on another thread (`Tensor.backward` waits for DDP's all-reduce, which gloo's thread runs
// and completes; no traced call of the training thread shows that wait). When the culprit
// of a work finding waited longer than its group's median, by at least report_share of the
// iteration, in collectives with no traced caller, part of its function's excess may be
// that wait, which is no work. Its cost is then judged on the worker as a whole: in lockstep
// training a worker makes the others wait only by reaching the collectives later, that is
// by spending longer outside its waits (OutsideWaitNs: iteration less all collective + sync
// time, whichever thread waited), so the job loses at most the worker's time outside waits
// beyond the median of itself and the workers of its group that are not culprits of the
// same function (with three workers, the slower of its two peers: the one that would set the
// pace without it). From a late onset on, that extra time is the window's divided by the
// share of iterations after the onset. A real straggler reaches its collectives last and
// waits in them less than its peers, so this never caps it. Measured on real-healthy-roles-6
// (docs/accuracy.md): rank 0's backward 30.2 ms/iter against 23.5 / 24.2, its DDP all-reduce
// 13.2 against 10.0 / 10.1, its time outside waits 33.3 against 29.9 / 32.1 ms.
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

void ResolveVictims(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings);
void CapWorkFindingsThatWaitForTheirOwnCollectives(const RuleContext& ctx,
                                                   std::vector<WorkerFinding>& worker_findings);

}  // namespace perftracker::localize
