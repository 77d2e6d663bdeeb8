// Localizer: differential observability across the workers of one job (PerfTracker /
// EROICA, arXiv 2506.08528). Workers of a data- / tensor- / pipeline-parallel job run the
// same code on the same kind of hardware, so the worker (or function) that behaves unlike
// its peers is the root cause; problems every worker shares are found by expectations.
//
// Algorithm: Finish() runs these steps in order, one file each (the header of each file
// says how it works and why).
//  1. Compact ingest (job_table.h): Add() keeps a 28-byte record per (worker, function)
//     and a record per worker, not the summaries.
//  2. Data quality (data_quality.h): missing / duplicate ranks and lost events are notes;
//     a badly incomplete worker is PT-INCOMPLETE-DATA.
//  3. Peer groups (peer_assignment.h, peer_groups.h): workers running the same significant
//     functions are compared with each other; a minority that runs its group's code plus
//     code of its own, in the same collectives, stays in the group (that code is a finding).
//  4. Peer comparison (peer_comparison.h): per group and function, the robust outliers and
//     the functions only a minority of the group runs.
//  5. Call-path collapse (call_path_collapse.h): per worker, the anomalies along one call
//     path become one finding naming what the user wrote.
//  6. Culprit rules, each rewriting the per-worker findings: culprits vs victims
//     (victim_rule.h), untraced stragglers (untraced_straggler_rule.h), GC stragglers
//     (gc_straggler_rule.h), CPU contention (cpu_contention_rule.h); a fault that began
//     inside the window is judged from its onset on (late_onset_rule.h); a work finding
//     whose worker waited longer in its own collectives on another thread costs at most its
//     extra time outside waits (victim_rule.h); on a host whose CPUs are saturated, extra
//     CPU time costs the job its share of the host's CPU rate even when no one waits for
//     it (saturated_host_rule.h); a work finding's share that is run-queue
//     wait its extra work does not explain is the scheduler's, not its code's
//     (scheduler_wait_rule.h); host code whose extra time used no extra CPU or run-queue
//     wait is off-CPU time, a sleep, I/O or a lock (off_cpu_rule.h); one worker's findings
//     of one cause in one layer merge (layer_merge.h).
//  7. Wording (finding_wording.h): findings naming the same function with the same code
//     merge across workers and are worded.
//  8. Expectation checks on the job median: host-bound (host_bound_check.h), then a table
//     of rules (expectation_checks.h).
//  9. Hardware evidence (hardware_findings.h) relabels, absorbs and adds findings.
// 10. Pipeline slack (pipeline_slack.h): a finding whose culprits' extra time fell where
//     their stage waits for another stage anyway is judged on its cost to the job.
// 11. Ranking: material first, then time lost per iteration; at most max_findings, whose
//     victims are then named.
//
// Nothing in the input can crash the localizer.
#include "perftracker/localize/localizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "perftracker/localize/call_path_collapse.h"
#include "perftracker/localize/cpu_contention_rule.h"
#include "perftracker/localize/data_quality.h"
#include "perftracker/localize/expectation_checks.h"
#include "perftracker/localize/finding_wording.h"
#include "perftracker/localize/gc_straggler_rule.h"
#include "perftracker/localize/hardware_findings.h"
#include "perftracker/localize/host_bound_check.h"
#include "perftracker/localize/job_table.h"
#include "perftracker/localize/late_onset_rule.h"
#include "perftracker/localize/layer_merge.h"
#include "perftracker/localize/off_cpu_rule.h"
#include "perftracker/localize/peer_assignment.h"
#include "perftracker/localize/peer_comparison.h"
#include "perftracker/localize/pipeline_slack.h"
#include "perftracker/localize/robust_stats.h"
#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/saturated_host_rule.h"
#include "perftracker/localize/scheduler_wait_rule.h"
#include "perftracker/localize/untraced_straggler_rule.h"
#include "perftracker/localize/victim_rule.h"

namespace perftracker {

using localize::RenderedFinding;

class Localizer::Impl {
 public:
  explicit Impl(LocalizerOptions options) : options_(options) {}
  const LocalizerOptions& options() const { return options_; }

  void Add(const WorkerSummary& worker) {
    with_iterations_ += !worker.iterations.empty();
    job_.Add(worker, notes_);
    hardware_.Add(worker, job_.LastP50s());
  }
  void AddNote(std::string note) { notes_.push_back(std::move(note)); }
  void MarkHangWindow() { hang_window_ = true; }
  Diagnosis Finish();

 private:
  void ApplyHardwareFindings(const localize::RuleContext& ctx,
                             std::vector<RenderedFinding>& candidates) const;
  void Rank(const localize::FindingWording& wording, std::vector<RenderedFinding>& candidates,
            Diagnosis& d) const;

  LocalizerOptions options_;
  std::vector<std::string> notes_;
  localize::JobTable job_;
  HardwareFindings hardware_;   // hardware evidence: GPU clocks, links, NICs
  size_t with_iterations_ = 0;  // workers that completed an iteration in the window
  bool hang_window_ = false;
};

Diagnosis Localizer::Impl::Finish() {
  using namespace localize;  // NOLINT: the steps below read as the list of rules
  Diagnosis d;
  d.num_workers = static_cast<int32_t>(job_.workers().size());
  d.notes = std::move(notes_);
  if (job_.workers().empty()) {
    d.notes.push_back("no worker summaries to diagnose");
    return d;
  }
  job_.EndIngest();
  RuleContext ctx;
  ctx.job = &job_;
  ctx.options = &options_;
  ctx.window_only = with_iterations_ == 0;
  {
    std::vector<float> iters;
    for (const auto& wr : job_.workers()) {
      if (wr.median_iteration_ns > 0) iters.push_back(wr.median_iteration_ns);
    }
    ctx.iteration_ns = MedianInPlace(iters);
  }
  d.median_iteration_ns = ctx.iteration_ns;
  CheckDataQuality(job_, d, hang_window_);
  if (ctx.iteration_ns <= 0) {
    d.notes.push_back(
        "no iteration or window times in any summary: nothing to compare "
        "(check that the profiles cover at least one iteration)");
    return d;
  }
  ctx.material_ns = options_.material_share * ctx.iteration_ns;
  ctx.report_ns = options_.report_share * ctx.iteration_ns;
  const PeerAssignment peers = AssignPeerGroups(job_, options_, ctx.iteration_ns, d.notes);
  ctx.peers = &peers;

  std::vector<WorkerFinding> worker_findings = CollapseCallPaths(ctx, ComparePeers(ctx));
  ResolveVictims(ctx, worker_findings);
  FindUntracedStragglers(ctx, worker_findings);
  MarkGcStragglers(ctx, worker_findings);
  MarkCpuContention(ctx, worker_findings);
  JudgeLateOnsets(ctx, worker_findings);
  CapWorkFindingsThatWaitForTheirOwnCollectives(ctx, worker_findings);
  CountExtraWorkOnSaturatedHosts(ctx, worker_findings);
  DiscountSchedulerWait(ctx, worker_findings);
  MarkOffCpuTime(ctx, worker_findings);
  MergeLayerParts(ctx, worker_findings);
  const FindingWording wording(ctx);
  std::vector<RenderedFinding> candidates = wording.Render(worker_findings);
  CheckHostBound(ctx, candidates, d.notes);
  RunExpectationChecks(ctx, candidates);
  hardware_.SplitByHost();
  ApplyHardwareFindings(ctx, candidates);
  DiscountPipelineSlack(ctx, candidates);
  // The data-quality finding ranks with the others.
  for (auto& f : d.findings) {
    RenderedFinding r;
    r.finding = std::move(f);
    candidates.push_back(std::move(r));
  }
  d.findings.clear();
  Rank(wording, candidates, d);
  return d;
}

// Hardware evidence relabels, absorbs and adds findings (hardware_findings.h); the findings it
// adds get their victims like any straggler finding.
void Localizer::Impl::ApplyHardwareFindings(const localize::RuleContext& ctx,
                                            std::vector<RenderedFinding>& candidates) const {
  HardwareFindings::Context hw;
  hw.iteration_ns = ctx.iteration_ns;
  hw.material_ns = ctx.material_ns;
  hw.report_ns = ctx.report_ns;
  hw.worker_group = &ctx.peers->worker_group;
  std::vector<Finding*> view;
  std::vector<localize::NamedFunctionTime> times;
  for (auto& r : candidates) {
    view.push_back(&r.finding);
    times.push_back(r.function_time);
  }
  hw.function_times = &times;
  std::vector<bool> drop(view.size(), false);
  std::vector<HardwareFindings::Added> added = hardware_.Apply(hw, view, drop);
  size_t kept = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (drop[i]) continue;
    if (kept != i) candidates[kept] = std::move(candidates[i]);
    ++kept;
  }
  candidates.resize(kept);
  for (auto& a : added) {
    RenderedFinding r;
    r.finding = std::move(a.finding);
    r.wants_victims = true;
    r.culprits = std::move(a.culprits);
    r.absorbed_share = a.absorbed_share;
    candidates.push_back(std::move(r));
  }
}

// Material first, then time lost per iteration; the top max_findings go into `d`, with their
// victims.
void Localizer::Impl::Rank(const localize::FindingWording& wording,
                           std::vector<RenderedFinding>& candidates, Diagnosis& d) const {
  const auto ranks_higher = [](const RenderedFinding& x, const RenderedFinding& y) {
    const Finding& a = x.finding;
    const Finding& b = y.finding;
    if (a.material != b.material) return a.material;
    if (a.lost_ns_per_iteration != b.lost_ns_per_iteration) {
      return a.lost_ns_per_iteration > b.lost_ns_per_iteration;
    }
    if (a.code != b.code) return a.code < b.code;
    return a.workers < b.workers;
  };
  std::stable_sort(candidates.begin(), candidates.end(), ranks_higher);
  if (candidates.size() > options_.max_findings) {
    d.notes.push_back(fmt::format("{} more findings below the top {} were left out",
                                  candidates.size() - options_.max_findings,
                                  options_.max_findings));
    candidates.resize(options_.max_findings);
  }
  for (auto& r : candidates) {
    if (r.wants_victims) wording.FillVictims(r.finding, r.culprits, r.extra_victims);
    d.findings.push_back(std::move(r.finding));
  }
}

Localizer::Localizer(LocalizerOptions options) : impl_(std::make_unique<Impl>(options)) {}
Localizer::~Localizer() = default;
void Localizer::Add(const WorkerSummary& worker) { impl_->Add(worker); }
void Localizer::AddNote(std::string note) { impl_->AddNote(std::move(note)); }
void Localizer::MarkHangWindow() { impl_->MarkHangWindow(); }
Diagnosis Localizer::Finish() {
  Diagnosis d = impl_->Finish();
  impl_ = std::make_unique<Impl>(impl_->options());
  return d;
}

}  // namespace perftracker
