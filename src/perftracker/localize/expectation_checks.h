// Expectation checks (algorithm step 7): problems every worker shares, which no peer
// comparison can see, checked on the job median (no peers needed).
//
// Each check is a row of a table (kExpectations in expectation_checks.cc): a per-worker
// quantity (WorkerRecord member, per iteration) whose job median is the time lost, the
// functions the finding cites (the kind it is about, ranked by time or critical time) and
// its wording. A row fires when that median is at least report_share of the iteration.
// The host-bound check (host_bound_check.h) runs before the table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/localize/rendered_finding.h"
#include "perftracker/localize/rule_context.h"

namespace perftracker::localize {

// Appends the findings of the table's rows, in table order.
void RunExpectationChecks(const RuleContext& ctx, std::vector<RenderedFinding>& out);

// A job-wide finding of `lost_ns` per iteration about function `fid` (kNone: none).
Finding JobFinding(const RuleContext& ctx, std::string_view code, FindingCategory category,
                   std::string resource, double lost_ns, uint32_t fid);

// The (at most k) functions matching `pred` with the most time (or critical time) summed
// over the workers, largest first; functions with none are left out.
std::vector<uint32_t> TopFunctions(const JobTable& job, bool (*pred)(const FunctionInfo&),
                                   bool by_critical, size_t k);

}  // namespace perftracker::localize
