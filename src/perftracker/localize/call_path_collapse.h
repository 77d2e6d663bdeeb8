// Call-path collapse (algorithm step 4), per worker: the anomalies form a forest along the
// call paths, refined by the enclosing ops that keys skip (JobTable::CollapseParent: a torch
// op's key hangs under the nearest user-level frame, so in a trace without any, such as
// torch.profiler's without with_stack, aten::conv2d > aten::convolution > ... are roots by
// their keys, and only FunctionSummary::enclosing_op says they nest). From each root we follow the
// child that explains >= kExplainsMost of its parent's excess. Once a function is an anomaly on a
// worker, which of its callees carries that excess is a question of share, not of each callee being
// an outlier of its own (with one noisy peer a 2x slower block has a robust z of 2.3): a direct
// callee also carries it when it holds >= kExplainsMost of the positive excess its siblings and it
// carry between them (Anomaly::callees_excess; each callee against its own peers' median, so noisy
// peers slow in different callees do not hide it) and more than kCarriesMajority of the anomalous
// excess itself (so never noise). Such a callee that is no anomaly (a carrier, emitted by
// ComparePeers) is stepped into only from its anomalous caller, never starts a path, and from it
// the walk goes on only into the anomalies under it. The finding names what the user wrote: the
// deepest annotation (record_function) on that path, else the deepest Python function / data load /
// optimizer step, else the path's top (for a chain of ops alone: the outermost op that holds the
// excess, the call the user's code made, with the ops it went into as evidence); the nodes below it
// become evidence ("time goes into aten::mm: 12.3 ms -> 31.0 ms per iteration"). Anomalies outside
// the named subtree start new roots. The category is that of the path: data loading, GC, a
// collective, a synchronization anywhere on it wins (in that order), else the leaf's kind.
#pragma once

#include <vector>

#include "perftracker/localize/anomaly.h"
#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

std::vector<WorkerFinding> CollapseCallPaths(const RuleContext& ctx,
                                             std::vector<Anomaly> anomalies);

}  // namespace perftracker::localize
