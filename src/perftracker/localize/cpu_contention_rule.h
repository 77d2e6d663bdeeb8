// CPU contention (algorithm step 5c): a straggler finding (compute, data, communication,
// sync, untraced) on a worker whose run-queue delay fraction (live mode: HostSampler)
// exceeds its peer group's median by a margin and a ratio becomes PT-CPU-CONTENTION: starved
// of CPU, not slow code. The worker's value is WorkerSummary::worker_metrics' mean, else the
// time-weighted mean of its root functions' levels. A worker with no straggler function
// whose run-queue delay alone is far above its peers' gets a PT-CPU-CONTENTION finding of
// its own (run_queue_only).
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

void MarkCpuContention(const RuleContext& ctx, std::vector<WorkerFinding>& wfs);

}  // namespace perftracker::localize
