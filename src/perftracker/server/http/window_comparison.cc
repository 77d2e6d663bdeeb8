#include "perftracker/server/http/window_comparison.h"

#include <vector>

#include <fmt/core.h>

#include "perftracker/compare/run_profile.h"

namespace perftracker {
namespace {

StatusOr<std::vector<WorkerSummary>> Summaries(Store* store, const std::string& job_id,
                                               uint64_t window) {
  StatusOr<WindowRecord> w = store->GetWindow(job_id, window);
  if (!w.ok()) return w.status();
  StatusOr<std::vector<WorkerSummary>> s = store->ListSummaries(job_id, window);
  if (!s.ok()) return s.status();
  if (s->empty()) {
    return Status::NotFound(
        fmt::format("job {} window {}: no worker summaries are stored for it", job_id, window));
  }
  return s;
}

}  // namespace

StatusOr<uint64_t> BaselineWindow(Store* store, const std::string& job_id) {
  StatusOr<std::optional<uint64_t>> b = store->GetBaseline(job_id);
  if (!b.ok()) return b.status();
  if (!b->has_value()) {
    return Status::NotFound(fmt::format(
        "job {} has no baseline window yet: its first window without a material finding "
        "becomes one, or mark one (POST /api/v1/jobs/{}/baseline?window=N)",
        job_id, job_id));
  }
  return **b;
}

StatusOr<compare::Comparison> CompareStoredWindows(Store* store, const std::string& job_id,
                                                   std::optional<uint64_t> baseline,
                                                   uint64_t current,
                                                   const compare::CompareOptions& options) {
  if (!baseline) {
    StatusOr<uint64_t> b = BaselineWindow(store, job_id);
    if (!b.ok()) return b.status();
    baseline = *b;
  }
  StatusOr<std::vector<WorkerSummary>> base = Summaries(store, job_id, *baseline);
  if (!base.ok()) return base.status();
  StatusOr<std::vector<WorkerSummary>> cur = Summaries(store, job_id, current);
  if (!cur.ok()) return cur.status();
  compare::CallPathTree tree;
  compare::RunProfile b(&tree, fmt::format("job {} window {}", job_id, *baseline));
  compare::RunProfile c(&tree, fmt::format("job {} window {}", job_id, current));
  for (const WorkerSummary& w : *base) b.AddSummary(w);
  for (const WorkerSummary& w : *cur) c.AddSummary(w);
  return compare::RunComparer(options).Compare(b, c);
}

}  // namespace perftracker
