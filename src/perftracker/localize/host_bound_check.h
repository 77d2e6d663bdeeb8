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
//
// Launch-bound under kHostBoundShare (issue 11). When the job's kernels are tiny (the
// workers' median share of kernel calls under kTinyKernelNs is at least kTinyKernelJobShare,
// at least kMinLaunches launches per iteration), device idle while the host works is launch
// overhead, and costs the job like any other finding: it is judged at material_share, not
// kHostBoundShare: on the job median, and where that is under it, on the workers whose own GPU
// idles that long, when there are at least kMinPeers of them: the workers that set the pace. In a
// pipeline only the first stage's GPUs wait for their host; the later stages' wait in their
// receives for it (their host got ahead meanwhile), so the median worker shows no host-bound
// idle (a tp 4, pp 8 job: 14 % on the first stage's 64 ranks, 0 on the other 448). In a job
// whose collectives take most of the iteration (a 175 B model over 4-way data parallelism)
// the launch-bound share is 11 %, under kHostBoundShare yet material. PT-LAUNCH-BOUND, always
// material; it names its workers when they are not all. The Kineto toy traces (a handful of
// ops, one worker) stay with the kHostBoundShare check: one worker is fewer than kMinPeers.
#pragma once

#include <string>
#include <vector>

#include "perftracker/localize/rendered_finding.h"
#include "perftracker/localize/rule_context.h"

namespace perftracker::localize {

// Kernels whose median call is under this are tiny (launch overhead dominates them); a job
// whose workers' median share of tiny kernel calls is at least kTinyKernelJobShare launches
// mostly tiny kernels (also HardwareFindings' relabel of PT-HOST-BOUND).
inline constexpr double kTinyKernelNs = 20e3;
inline constexpr double kTinyKernelJobShare = 0.5;

void CheckHostBound(const RuleContext& ctx, std::vector<RenderedFinding>& out,
                    std::vector<std::string>& notes);

}  // namespace perftracker::localize
