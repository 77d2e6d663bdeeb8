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
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

void ResolveVictims(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings);

}  // namespace perftracker::localize
