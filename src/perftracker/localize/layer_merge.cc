#include "perftracker/localize/layer_merge.h"

#include <algorithm>
#include <cstddef>

namespace perftracker::localize {

uint32_t LayerOf(const JobTable& job, uint32_t fid) {
  const std::vector<FunctionInfo>& functions = job.functions();
  int depth = 0;
  for (uint32_t f = fid; f != kNone && f < functions.size() && depth < kMaxDepth;
       f = functions[f].parent, ++depth) {
    const EventKind kind = functions[f].kind;
    if (kind == EventKind::kUserAnnotation || kind == EventKind::kPythonCall) return f;
  }
  return kNone;
}

void MergeLayerParts(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings) {
  const JobTable& job = *ctx.job;
  const std::vector<FunctionInfo>& functions = job.functions();
  // Candidates: (worker, position), largest excess first within a worker.
  std::vector<size_t> order;
  for (size_t i = 0; i < worker_findings.size(); ++i) {
    const WorkerFinding& wf = worker_findings[i];
    if (wf.dropped || wf.named.fid == kNone || wf.run_queue_only || wf.wait_type()) continue;
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (worker_findings[a].named.worker != worker_findings[b].named.worker) {
      return worker_findings[a].named.worker < worker_findings[b].named.worker;
    }
    return worker_findings[a].named.excess() > worker_findings[b].named.excess();
  });
  std::vector<uint32_t> layer(order.size());
  for (size_t k = 0; k < order.size(); ++k)
    layer[k] = LayerOf(job, worker_findings[order[k]].named.fid);
  for (size_t k = 0; k < order.size(); ++k) {
    WorkerFinding& into = worker_findings[order[k]];
    if (into.dropped || layer[k] == kNone) continue;
    for (size_t m = k + 1; m < order.size(); ++m) {
      WorkerFinding& part = worker_findings[order[m]];
      if (part.named.worker != into.named.worker) break;
      if (part.dropped || layer[m] == kNone || part.code != into.code ||
          part.category != into.category ||
          functions[layer[m]].name_id != functions[layer[k]].name_id) {
        continue;
      }
      into.parts.push_back(part.named);
      for (uint32_t v : part.extra_victims) into.extra_victims.push_back(v);
      part.dropped = true;
    }
    if (!into.parts.empty()) into.layer = layer[k];
  }
}

}  // namespace perftracker::localize
