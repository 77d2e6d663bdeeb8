// GC straggler (algorithm step 5b): a compute / untraced straggler finding whose excess is
// mostly (>= kExplainsMost) the worker's extra GC pause time (its GC, wherever nested, minus
// its group's median) becomes PT-STRAGGLER-GC: the live agent records pauses inside whatever
// function ran, so they can be spread over many call paths none of which explains the
// excess alone.
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

void MarkGcStragglers(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings);

}  // namespace perftracker::localize
