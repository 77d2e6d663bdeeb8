// Host-bound check (algorithm step 7, first expectation): on the workers with a device, the
// median share of the iteration during which the device idles while the host works is at
// least kHostBoundShare: the job is host / launch-bound (PT-HOST-BOUND; hardware evidence
// may make it PT-LAUNCH-BOUND). Always material: the GPU waits for the host.
//
// Only workers whose launches ran: a worker whose trace shows kernels for fewer than
// kMinLaunchesRun of its kernel launches (at least kMinLaunches in the window) launched into
// something that did not run them in the window (a CUDA / HIP graph being captured records
// its launches without running them; or the trace lost the device's activity). Its idle GPU
// is no host overhead: it is left out, with a note that names it and says why (TraceLens'
// sglang and vLLM decode traces, taken during graph capture: 546 launches and 2 kernels, 428
// and 7, were "host / launch-bound, the GPU idle 100 %").
#pragma once

#include <string>
#include <vector>

#include "perftracker/localize/rendered_finding.h"
#include "perftracker/localize/rule_context.h"

namespace perftracker::localize {

void CheckHostBound(const RuleContext& ctx, std::vector<RenderedFinding>& out,
                    std::vector<std::string>& notes);

}  // namespace perftracker::localize
