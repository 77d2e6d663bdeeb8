#include "perftracker/localize/late_onset_rule.h"

namespace perftracker::localize {
namespace {

// The excess of `a` per iteration from its onset on when `a` has one and its excess is
// concentrated there (see the header); 0 otherwise.
double ExcessAfterOnset(const JobTable& job, const Anomaly& a, double material_ns,
                        const OnsetRecord** onset) {
  const OnsetRecord* o = job.OnsetOf(a.worker, a.fid);
  if (o == nullptr || o->iteration == 0 || o->iteration >= o->iterations) return 0;
  const double n = o->iterations;
  const double k = o->iteration;
  const double after_excess = static_cast<double>(o->after_ns) - a.median;
  if (after_excess <= a.excess()) return 0;
  // The function's mean time per iteration before the onset.
  const double before =
      (static_cast<double>(a.value) * n - static_cast<double>(o->after_ns) * (n - k)) / k;
  if (before - a.median > kBeforeShare * after_excess) return 0;
  // Already a material straggler before the step: the fault did not begin there, it grew
  // (e2e extra_function_rank3 on a loaded machine: aten::mm +8.5 ms/iter, 14 % of the
  // iteration, in its first 13 iterations, +37.6 ms in the last two). Judged on the window.
  if (before - a.median >= material_ns) return 0;
  *onset = o;
  return after_excess;
}

}  // namespace

void JudgeLateOnsets(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings) {
  const JobTable& job = *ctx.job;
  for (WorkerFinding& wf : worker_findings) {
    if (wf.dropped || wf.named.fid == kNone || wf.run_queue_only) continue;
    // The named function, else the first function on the path below it that carries its
    // excess (a GC pause under the Python train_step it interrupted): the rest of the named
    // function's excess is taken as steady.
    const OnsetRecord* onset = nullptr;
    const Anomaly* stepped = &wf.named;
    double after = ExcessAfterOnset(job, wf.named, ctx.material_ns, &onset);
    for (size_t i = 0; onset == nullptr && i < wf.below.size(); ++i) {
      after = ExcessAfterOnset(job, wf.below[i], ctx.material_ns, &onset);
      stepped = &wf.below[i];
    }
    if (onset == nullptr) continue;
    wf.onset_iteration = onset->iteration;
    wf.onset_of = onset->iterations;
    wf.onset_function = stepped->fid;
    wf.onset_value = onset->after_ns;
    wf.onset_median = stepped->median;
    wf.onset_p50 = onset->after_p50_ns;
    wf.onset_excess = static_cast<float>(wf.named.excess() - stepped->excess() + after);
  }
}

}  // namespace perftracker::localize
