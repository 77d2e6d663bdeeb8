// Untraced straggler (algorithm step 5): a worker the others wait for (its collective + sync
// wait is a low outlier of its peer group's, by the peer comparison's margins) whose anomalous
// traced work functions explain less than half of that missing wait is PT-STRAGGLER-UNTRACED
// for the rest: its time goes outside traced code (a sleep, Python the profiler did not
// record, a stalled thread). It is placed in the iteration by the idle gap of its thread
// before a function, against its peers'; beside traced findings only an idle gap of its host
// thread, beyond its peers' by the bar, counts. Its category is host overhead: only run-queue
// evidence makes it CPU contention (cpu_contention_rule.h).
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

void FindUntracedStragglers(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings);

}  // namespace perftracker::localize
