// Call-path collapse (algorithm step 4), per worker: the anomalies form a forest along the
// call paths. From each root we follow the child that explains >= kExplainsMost of its
// parent's excess; the finding names what the user wrote: the deepest annotation
// (record_function) on that path, else the deepest Python function / data load / optimizer
// step, else the path's top; the nodes below it become evidence ("time goes into aten::mm:
// 12.3 ms -> 31.0 ms per iteration"). Anomalies outside the named subtree start new roots.
// The category is that of the path: data loading, GC, a collective, a synchronization
// anywhere on it wins (in that order), else the leaf's kind.
#pragma once

#include <vector>

#include "perftracker/localize/anomaly.h"
#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

std::vector<WorkerFinding> CollapseCallPaths(const RuleContext& ctx,
                                             std::vector<Anomaly> anomalies);

}  // namespace perftracker::localize
