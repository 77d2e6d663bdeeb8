// Pipeline slack (algorithm step 10, after the hardware evidence): a culprit's extra time
// that falls where its pipeline stage would have waited anyway costs the job nothing.
//
// A later pipeline stage waits for the earlier one (its first receive of the iteration, the
// bubble before the last stage's backward ends). A worker of that stage that is late by E
// (a GC pause, slow host work, a slow batch copy before its first receive) waits E less in
// that receive than its peers, and the stage, and the job, keep their pace: peer comparison
// alone sees a straggler and counts all of E as lost. The slack a worker consumed is how
// much less than its peers it waits in point-to-point receives (pipeline recv: the wait is
// for another stage, which a late receiver does not delay, unlike a collective among its
// peers, where the others wait for it), summed over its receive functions per track kind
// (host-side and device-side records of the same receive are not added twice). A finding's
// cost to the job is its loss minus the least slack any of its culprits consumed (a culprit
// that absorbed less delays the job by more; a culprit's slack is used once, by its largest
// findings first); when that cost is below the materiality bar
// the finding becomes minor: still reported, ranked by the time its culprits lose, with the
// absorbed wait and the cost to the job as evidence, and without victims (nobody waited).
//
// A whole stage late together (every rank of a later stage in one slow gradient all-reduce,
// over a host's degraded NIC) waits less in its receives with no peer to compare: there the
// rule that measured the loss says which share of it was in calls a wait in the stage's next
// point-to-point receive followed, before any send (RenderedFinding::absorbed_share, from
// FunctionSummary::slack_after_ns, summary/receive_slack.h). That share of the loss is
// absorbed too: the stage would have waited as long for its predecessor. A first stage's
// all-reduce is followed by its next forward sends, so nothing of it is absorbed.
#pragma once

#include <string_view>
#include <vector>

#include "perftracker/localize/rendered_finding.h"
#include "perftracker/localize/rule_context.h"

namespace perftracker {

// The evidence label of a finding whose culprits' extra time the pipeline absorbed: its title
// then says what the job loses; its lost_ns_per_iteration stays the culprits' own excess.
inline constexpr std::string_view kAbsorbedByPipelineEvidence = "absorbed by the pipeline";

}  // namespace perftracker

namespace perftracker::localize {

// Whether a function of this name is a point-to-point receive ("nccl:recv", "irecv"; not
// NCCL's SendRecv kernels by name alone: their direction comes from the trace's collective
// metadata, FunctionInfo::point_to_point).
bool IsPointToPointReceive(std::string_view name);

// Per worker: the wait in point-to-point receives it spent less than its peers, per
// iteration (0 when it waits as long or longer, or has no receive with enough peers).
std::vector<float> ConsumedPipelineSlack(const RuleContext& ctx);

// Judges the materiality of the findings with culprits on their cost to the job (see above).
void DiscountPipelineSlack(const RuleContext& ctx, std::vector<RenderedFinding>& all);

}  // namespace perftracker::localize
