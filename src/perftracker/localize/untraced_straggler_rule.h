// Untraced straggler (algorithm step 5): a worker the others wait for (its collective + sync
// wait is a low outlier of its peer group's, by the peer comparison's margins) with no
// anomalous traced work function is PT-STRAGGLER-UNTRACED: its time goes outside traced code
// (a sleep, Python the profiler did not record, a stalled thread). It is placed in the
// iteration by the idle gap of its thread before a function, against its peers'. Its category
// is host overhead: only run-queue evidence makes it CPU contention (cpu_contention_rule.h).
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

void FindUntracedStragglers(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings);

}  // namespace perftracker::localize
