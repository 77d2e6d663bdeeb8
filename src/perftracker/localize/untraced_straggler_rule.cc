#include "perftracker/localize/untraced_straggler_rule.h"

#include <algorithm>

#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {

namespace fc = finding_codes;

void FindUntracedStragglers(const RuleContext& ctx, std::vector<WorkerFinding>& wfs) {
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  const std::vector<std::vector<uint32_t>>& members = ctx.peers->members;
  std::vector<bool> has_work(workers.size(), false);
  for (const auto& f : wfs) {
    if (!f.dropped && !f.wait_type()) has_work[f.named.worker] = true;
  }
  std::vector<float> values;
  for (uint32_t g = 0; g < members.size(); ++g) {
    const auto& ws = members[g];
    values.clear();
    for (uint32_t w : ws) values.push_back(workers[w].wait_fn_ns);
    const RobustCenter c = MedianAndMadInPlace(values);
    if (ws.size() < kMinPeers || c.median <= 0) continue;
    const double scale = RobustScale(c, kScaleRelativeFloor, kScaleAbsoluteFloorNs);
    const double threshold = std::max({ctx.options->outlier_z * scale,
                                       ctx.options->min_relative_effect * c.median, ctx.report_ns});
    for (uint32_t w : ws) {
      const double deficit = c.median - workers[w].wait_fn_ns;
      if (deficit <= threshold || has_work[w]) continue;
      WorkerFinding wf;
      wf.code = fc::kStragglerUntraced;
      wf.category = FindingCategory::kCpuContention;
      wf.resource = "CPU";
      wf.named.worker = w;
      wf.named.fid = kNone;
      wf.named.group = g;
      wf.named.peers = static_cast<uint32_t>(ws.size());
      wf.named.value = static_cast<float>(c.median);  // so that excess() == deficit
      wf.named.median = workers[w].wait_fn_ns;
      wfs.push_back(std::move(wf));
    }
  }
}

}  // namespace perftracker::localize
