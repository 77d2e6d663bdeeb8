// Late onsets (algorithm step 6, after the culprit rules): a fault that begins inside the
// window is judged by what it costs from its onset on. The peer comparison works on time
// per iteration over the whole window, where 15 ms GC pauses from iteration 9 of 12 are
// 3.75 ms per iteration: minor, while from iteration 9 on the job loses 15 ms of every
// iteration. The summarizer finds where each function's time per iteration steps up and
// stays up (summary/step_onset.h); a finding whose named function (else the first function
// on the path below it that carries its excess) has such a step on its worker, whose excess
// from the step on exceeds its window average, and whose time before the step is within
// kBeforeShare of that excess of the peers' median and below the material bar (the excess is
// concentrated after the step: the fault began there) is judged, worded and ranked by its excess
// from the onset on. A finding without a step keeps its window average, and so does a function
// whose record had nested collectives / syncs taken out (its step's time still holds them).
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

// Before the onset the worker may exceed its peers by at most this share of the excess after.
inline constexpr double kBeforeShare = 0.25;

void JudgeLateOnsets(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings);

}  // namespace perftracker::localize
