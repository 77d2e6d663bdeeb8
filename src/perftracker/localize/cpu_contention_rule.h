// CPU contention (algorithm step 5c): a worker is starved of CPU when it waited in the run
// queue longer *per timeslice* (each time it was put on a CPU) than its peers did, by a clear
// ratio, and that extra wait explains its straggling. Per timeslice, not per wall second: on a
// loaded host every thread waits about the same for each turn on a CPU, so a rank that runs
// more (slow code) or wakes more often (a sleep per sample in its DataLoader) waits more in
// total without being starved; a rank whose CPU is crowded (busy processes beside it) waits
// longer for every turn. The values are the main (training) threads' (HostSampler's
// kMainThread* metrics) when every worker of the group has them, else the whole process's.
//   - A straggler finding (compute, data, communication, sync, untraced) becomes
//     PT-CPU-CONTENTION when the extra wait, at the peers' wait per turn, is at least half
//     of its excess per iteration.
//   - A communication or untraced straggler whose training thread does not explain it: the
//     same test on its communication threads (gloo's workers, named by its agent:
//     kCommThread* metrics) when every worker of the group has them and each was put on a
//     CPU at least 100 times in the window. DDP's all-reduce runs on those threads while the
//     training thread blocks in backward; a crowded CPU slows them first.
//   - A worker with no straggler function whose wait per turn is far above its peers' gets
//     a PT-CPU-CONTENTION finding of its own (run_queue_only): in DDP a starved rank loses
//     its time everywhere a little. Only when every compared thread was put on a CPU at
//     least 100 times in the window: over fewer turns a wait per turn is noise.
// No timeslice counts (offline traces, old summaries): no judgment.
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

void MarkCpuContention(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings);

}  // namespace perftracker::localize
