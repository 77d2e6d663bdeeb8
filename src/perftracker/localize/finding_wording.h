// FindingWording: turns per-worker findings into the Findings a person reads (algorithm
// step 6, and the wording of steps 3-5).
//
// Findings naming the same function with the same code on several workers merge; the worst
// worker's finding carries the evidence (time per iteration, the peer median, the robust
// z-score, how it differs: slower calls or more calls, the call path below the named
// function, where it is called from, its critical time). A material finding whose excess is
// carried neither by a slower median call nor by extra calls (a few slow calls: preemption,
// jitter), neither in the named function nor along the path below it that carries the
// excess, stays material only above kIntermittentFactor x the bar and says "intermittent"
// in its evidence. Victims of a culprit are the workers of its peer group whose outermost
// collective + sync time exceeds the culprit's by kVictimShare of its excess (waits of other
// groups, e.g. other pipeline stages, are not comparable), plus the workers whose wait
// findings it explained.
#pragma once

#include <cstdint>
#include <vector>

#include "perftracker/localize/rendered_finding.h"
#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

class FindingWording {
 public:
  explicit FindingWording(const RuleContext& ctx);

  // Merges and words the findings that are not dropped.
  std::vector<RenderedFinding> Render(const std::vector<WorkerFinding>& worker_findings) const;
  // Names the victims of a finding about `culprits` in `f`.
  void FillVictims(Finding& f, const std::vector<uint32_t>& culprits,
                   const std::vector<uint32_t>& extra) const;

 private:
  const RuleContext& ctx_;
  std::vector<bool> has_children_;  // per fid
};

}  // namespace perftracker::localize
