// Peer comparison (algorithm step 3): per peer group (>= kMinPeers workers), per function,
// the workers whose time per iteration is unlike their peers'.
//
// The group's records are bucketed by function (counting sort, O(records)); over the
// group's workers (absent = 0) the median and MAD of time per iteration give a robust
// z-score. A worker is anomalous when its excess over the median exceeds outlier_z robust
// sigmas (sigma floored at 1 % of the median or 1 us, so identical peers, MAD = 0, work),
// min_relative_effect x the median, and report_share of the job's median iteration. In a
// group of at most kSmallGroup workers a candidate is also compared with its peers without
// itself. A function present on a strict minority of the group with >= report_share of the
// iteration is an anomaly of its own (only_on_some: PT-FUNCTION-ONLY-ON-SOME), not a reason
// to split the group. The group medians of p50 duration, calls and critical time per
// iteration say *how* it differs (slower calls vs more calls). For each function anomaly, one
// scan of its worker's records sums its direct callees' positive excesses (callees_excess)
// and, when its largest callee is no anomaly but holds a majority of its excess, emits that
// callee as a carrier (Anomaly::carrier) for the call-path collapse: a pass over the records
// of the workers with an anomaly, not over the group.
#pragma once

#include <vector>

#include "perftracker/localize/anomaly.h"
#include "perftracker/localize/rule_context.h"

namespace perftracker::localize {

std::vector<Anomaly> ComparePeers(const RuleContext& ctx);

}  // namespace perftracker::localize
