#include "perftracker/localize/gc_straggler_rule.h"

#include <cstdint>

#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {

namespace fc = finding_codes;

void MarkGcStragglers(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings) {
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  const std::vector<std::vector<uint32_t>>& members = ctx.peers->members;
  std::vector<float> values;
  for (auto& wf : worker_findings) {
    if (wf.dropped || (wf.code != fc::kStragglerCompute && wf.code != fc::kStragglerUntraced)) {
      continue;
    }
    values.clear();
    for (uint32_t o : members[wf.named.group]) values.push_back(workers[o].gc_ns);
    const auto peer = static_cast<float>(MedianInPlace(values));
    const double extra_gc = static_cast<double>(workers[wf.named.worker].gc_ns) - peer;
    if (extra_gc < kExplainsMost * wf.named.excess() || extra_gc < ctx.material_ns) continue;
    wf.code = fc::kStragglerGc;
    wf.category = FindingCategory::kGc;
    wf.resource = "CPU (Python GC)";
    wf.gc_peer_ns = peer;
  }
}

}  // namespace perftracker::localize
