// Layer merge (algorithm step 6, after the culprit rules): one cause, one finding. A slow
// layer runs slower in its forward and in its backward pass, so the call-path collapse finds
// two anomalies on the same worker under two call paths ("forward > layer2 > fprop kernel",
// "backward > layer2 > dgrad kernel"): two findings of the same code that pushed any other
// fault out of the top places. Findings of one worker with the same code and category whose
// named functions sit in the same layer (the nearest user-level function at or above the
// named one, annotation or Python call, compared by name: forward and backward run the same
// module under different parents) become one finding: the largest part is named, the others
// are its parts, listed as evidence, and the job loses their excesses summed. Waits
// (communication, synchronization) never merge: their loss is capped by the worker's extra
// total wait, not summed.
#pragma once

#include <cstdint>
#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

void MergeLayerParts(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings);

// The layer of `fid`: the nearest function at or above it that the user wrote (a
// record_function annotation or a Python call), kNone when there is none.
uint32_t LayerOf(const JobTable& job, uint32_t fid);

}  // namespace perftracker::localize
