// Host-bound check (algorithm step 7, first expectation): on the workers with a device, the
// median share of the iteration during which the device idles while the host works is at
// least kHostBoundShare: the job is host / launch-bound (PT-HOST-BOUND; hardware evidence
// may make it PT-LAUNCH-BOUND). Always material: the GPU waits for the host.
#pragma once

#include <vector>

#include "perftracker/localize/rendered_finding.h"
#include "perftracker/localize/rule_context.h"

namespace perftracker::localize {

void CheckHostBound(const RuleContext& ctx, std::vector<RenderedFinding>& out);

}  // namespace perftracker::localize
