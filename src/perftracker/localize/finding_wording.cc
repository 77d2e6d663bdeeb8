#include "perftracker/localize/finding_wording.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "perftracker/core/units.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {
namespace {

// An excess not carried by the median call nor by extra calls (a few slow calls) is material
// only above this multiple of the materiality bar.
constexpr double kIntermittentFactor = 3.0;
// Peers whose median time in a function is below this share of the worker's spend almost
// nothing there: the title says only the worker runs it, not a meaningless ratio.
constexpr double kAlmostNothingShare = 0.01;

// "sm90_xmma_gemm_bf16_dgrad 4.0x", or "only here" when the peers spend almost nothing there.
std::string RatioPhrase(const Anomaly& a, std::string_view name) {
  if (a.median < kAlmostNothingShare * a.value) return fmt::format("{} (only here)", name);
  return fmt::format("{} {:.1f}x", name, a.value / a.median);
}

}  // namespace

FindingWording::FindingWording(const RuleContext& ctx)
    : ctx_(ctx), has_children_(ctx.job->functions().size(), false) {
  for (const auto& fn : ctx.job->functions()) {
    if (fn.parent != kNone) has_children_[fn.parent] = true;
  }
}

void FindingWording::FillVictims(Finding& f, const std::vector<uint32_t>& culprits,
                                 const std::vector<uint32_t>& extra) const {
  const std::vector<WorkerRecord>& workers = ctx_.job->workers();
  float culprit_wait = INFINITY;
  for (uint32_t c : culprits) culprit_wait = std::min(culprit_wait, workers[c].wait_fn_ns);
  std::vector<bool> is_culprit(workers.size(), false);
  for (uint32_t c : culprits) is_culprit[c] = true;
  const double min_extra_wait = kVictimShare * f.lost_ns_per_iteration;
  std::vector<uint32_t> victims = extra;
  // Waits are only comparable within a peer group (another pipeline stage waits by design).
  std::vector<bool> culprit_group(ctx_.peers->group_wait_median.size(), false);
  for (uint32_t c : culprits) culprit_group[ctx_.peers->worker_group[c]] = true;
  for (uint32_t w = 0; w < workers.size(); ++w) {
    if (is_culprit[w] || !culprit_group[ctx_.peers->worker_group[w]]) continue;
    if (static_cast<double>(workers[w].wait_fn_ns) - culprit_wait >= min_extra_wait) {
      victims.push_back(w);
    }
  }
  std::sort(victims.begin(), victims.end());
  victims.erase(std::unique(victims.begin(), victims.end()), victims.end());
  std::erase_if(victims, [&](uint32_t w) { return is_culprit[w]; });
  if (victims.empty()) return;
  std::vector<int32_t> ranks;
  for (uint32_t w : victims) ranks.push_back(workers[w].rank);
  std::sort(ranks.begin(), ranks.end());
  if (ranks.size() > kMaxListedWorkers) ranks.resize(kMaxListedWorkers);
  f.victims = ranks;
  f.evidence.push_back(
      {"victims (wait for it)", fmt::format("{} (waiting at least {} more per iteration)",
                                            victims.size(), FormatDuration(min_extra_wait))});
}

std::vector<RenderedFinding> FindingWording::Render(
    const std::vector<WorkerFinding>& worker_findings) const {
  const JobTable& job = *ctx_.job;
  const std::vector<WorkerRecord>& workers = job.workers();
  const std::vector<FunctionInfo>& functions = job.functions();
  // Group by (code, named function, peer group); the worst worker's finding carries the
  // evidence. Workers of two peer groups (roles) were compared with different peers, so one
  // sentence about "their peers" cannot hold for both: each role gets its own finding.
  const std::vector<uint32_t>& group = ctx_.peers->worker_group;
  std::vector<size_t> order;
  for (size_t i = 0; i < worker_findings.size(); ++i) {
    if (!worker_findings[i].dropped) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = worker_findings[a];
    const auto& y = worker_findings[b];
    if (x.code != y.code) return x.code < y.code;
    if (x.named.fid != y.named.fid) return x.named.fid < y.named.fid;
    if (group[x.named.worker] != group[y.named.worker]) {
      return group[x.named.worker] < group[y.named.worker];
    }
    return x.named.excess() > y.named.excess();
  });
  std::vector<RenderedFinding> out;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    const WorkerFinding& top = worker_findings[order[i]];
    std::vector<uint32_t> culprits, extra;
    // Untraced findings are per worker (no function to merge on).
    while (j < order.size() && worker_findings[order[j]].code == top.code &&
           worker_findings[order[j]].named.fid == top.named.fid &&
           group[worker_findings[order[j]].named.worker] == group[top.named.worker] &&
           (top.named.fid != kNone || j == i)) {
      culprits.push_back(worker_findings[order[j]].named.worker);
      for (uint32_t v : worker_findings[order[j]].extra_victims) extra.push_back(v);
      ++j;
    }
    i = j;
    const Anomaly& a = top.named;
    const uint32_t w = a.worker;
    // Culprits in rank order, in the title as in the list of workers.
    std::sort(culprits.begin(), culprits.end(),
              [&](uint32_t x, uint32_t y) { return workers[x].rank < workers[y].rank; });
    const std::string who = job.WorkersPhrase(culprits);
    const bool plural = culprits.size() > 1;
    Finding f;
    f.code = top.code;
    f.category = top.category;
    f.resource = top.resource;
    // The named function's excess, and its parts' (MergeLayerParts).
    const double excess = top.excess();
    f.lost_ns_per_iteration = std::min(excess, top.lost_cap);
    // A job loses at most its whole iteration: an excess summed over threads or streams that
    // run at once can be longer.
    const bool over_iteration =
        ctx_.iteration_ns > 0 && f.lost_ns_per_iteration > ctx_.iteration_ns;
    if (over_iteration) f.lost_ns_per_iteration = ctx_.iteration_ns;
    f.lost_share = ctx_.iteration_ns > 0 ? f.lost_ns_per_iteration / ctx_.iteration_ns : 0;
    for (size_t k = 0; k < culprits.size() && k < kMaxListedWorkers; ++k) {
      f.workers.push_back(workers[culprits[k]].rank);
    }
    // A fault that began inside the window: what it costs from its onset on.
    const std::string since =
        top.onset_iteration > 0
            ? fmt::format(" from iteration {} of {} on", top.onset_iteration + 1, top.onset_of)
            : std::string();
    const std::string effect =
        over_iteration ? fmt::format(
                             "+{} summed over threads or streams that run at once: at most the "
                             "whole iteration",
                             FormatDuration(excess))
        : f.lost_ns_per_iteration < excess && top.scheduler_wait_ns > 0
            ? fmt::format("+{} here, +{} beyond its extra wait for a CPU, {} {}",
                          FormatDuration(excess), FormatDuration(f.lost_ns_per_iteration),
                          FormatShare(f.lost_share), ctx_.of())
        : f.lost_ns_per_iteration < excess && top.saturated_cost_ns > 0
            ? fmt::format("+{} here, +{} of its host's shared CPU time, {} {}",
                          FormatDuration(excess), FormatDuration(f.lost_ns_per_iteration),
                          FormatShare(f.lost_share), ctx_.of())
        : f.lost_ns_per_iteration < excess
            ? fmt::format("+{} here, +{} total wait, {} {}", FormatDuration(excess),
                          FormatDuration(f.lost_ns_per_iteration), FormatShare(f.lost_share),
                          ctx_.of())
            : fmt::format("+{}{}, {} {}", FormatDuration(excess), since, FormatShare(f.lost_share),
                          ctx_.of());
    // A fault that began inside the window in the named function: its title gives its time
    // (and ratio) from the onset on, the numbers its cost is judged by, not the window's
    // average, which dilutes them (3.75 ms of a 15 ms pause from iteration 10 of 12 on).
    const bool onset_named = top.onset_iteration > 0 && top.onset_function == a.fid &&
                             f.lost_ns_per_iteration >= excess && !over_iteration;
    const std::string onset_effect =
        fmt::format("+{}, {} {}", FormatDuration(excess), FormatShare(f.lost_share), ctx_.of());
    if (top.run_queue_only) {
      // Run-queue evidence alone (see MarkCpuContention); when its peers wait for it less
      // than it waited for a CPU, what it costs is that wait.
      if (top.contention_lateness && f.lost_ns_per_iteration < excess) {
        const double group_wait = ctx_.peers->group_wait_median[a.group];
        f.title = fmt::format(
            "{} waits for a CPU far more than its peers (+{}{}), but they wait for it only {} "
            "({} {}): most of its extra wait fell where it would have waited for them anyway",
            who, FormatDuration(excess), ctx_.per_word(), FormatDuration(f.lost_ns_per_iteration),
            FormatShare(f.lost_share), ctx_.of());
        f.evidence.push_back(
            {"time lost per iteration",
             fmt::format("at most {}: its group's median collective + sync wait ({}) less its "
                         "own ({}); its extra run-queue wait alone would allow {}",
                         FormatDuration(f.lost_ns_per_iteration), FormatDuration(group_wait),
                         FormatDuration(workers[w].wait_fn_ns), FormatDuration(excess))});
      } else {
        f.title = fmt::format(
            "{} waits for a CPU far more than its peers, which slows every iteration (up to {})",
            who, effect);
        f.evidence.push_back({"time lost per iteration",
                              fmt::format("at most {}: the extra share of wall time {} was "
                                          "runnable but not running, times the median iteration",
                                          FormatDuration(a.excess()), who)});
      }
      if (top.contention_functions.empty()) {
        f.evidence.push_back({"traced functions",
                              "none is longer than its peers': the delay is "
                              "spread over the whole step"});
      } else {
        std::string longer;
        for (size_t k = 0; k < top.contention_functions.size() && k < 3; ++k) {
          const Anomaly& fa = top.contention_functions[k];
          longer += fmt::format("{}{} +{}{}", k ? ", " : "", job.Name(fa.fid),
                                FormatDuration(fa.excess()), ctx_.per());
        }
        if (top.contention_functions.size() > 3) {
          longer += fmt::format(" and {} more", top.contention_functions.size() - 3);
        }
        f.evidence.push_back({"traced functions longer than its peers' (the same wait)", longer});
      }
    } else if (a.fid == kNone) {
      // PT-STRAGGLER-UNTRACED.
      const WorkerRecord& wr = workers[w];
      if (top.untraced_before != UINT32_MAX) {
        const std::string_view before = job.Name(top.untraced_before);
        f.title = fmt::format(
            "{} has {}{} of untraced time before {}: no traced function covers it, and its "
            "peers wait for it ({} {})",
            who, FormatDuration(f.lost_ns_per_iteration), ctx_.per(), before,
            FormatShare(f.lost_share), ctx_.of());
        f.evidence.push_back(
            {"where in the iteration",
             fmt::format("its thread idles {}/iter before {} (peers' median {}): a sleep, "
                         "Python the profiler did not record, or a stalled thread",
                         FormatDuration(top.untraced_gap_ns), before,
                         FormatDuration(top.untraced_peer_gap_ns))});
      } else {
        f.title = fmt::format(
            "{} is the worker its peers wait for ({}), but none of its traced functions is "
            "longer: the time is untraced, spread over the step",
            who, effect);
      }
      f.evidence.push_back({"collective + sync wait per iteration",
                            fmt::format("{} on {}", FormatDuration(wr.wait_fn_ns), who)});
      f.evidence.push_back({fmt::format("peer median ({} workers)", a.peers),
                            FormatDuration(top.untraced_peer_wait_ns)});
      double gap_median = 0;
      {
        std::vector<float> gaps;
        for (uint32_t o = 0; o < workers.size(); ++o) {
          if (ctx_.peers->worker_group[o] == a.group) gaps.push_back(workers[o].idle_gap_ns);
        }
        gap_median = MedianInPlace(gaps);
      }
      f.evidence.push_back({"idle gaps before calls per iteration",
                            fmt::format("{} (peers' median {})", FormatDuration(wr.idle_gap_ns),
                                        FormatDuration(gap_median))});
    } else {
      const FunctionInfo& fn = functions[a.fid];
      f.function = job.Name(a.fid);
      f.function_key = job.Key(a.fid);
      if (!top.parts.empty()) {
        // One layer slower in several places (its forward and backward, ...).
        std::string where = RatioPhrase(a, job.Name(a.fid));
        for (const Anomaly& p : top.parts) {
          where += ", " + RatioPhrase(p, job.Name(p.fid));
        }
        f.title = fmt::format("{} run{} {} slower than {} peers in {} places: {} ({})", who,
                              plural ? "" : "s", job.Name(top.layer), plural ? "their" : "its",
                              top.parts.size() + 1, where, effect);
      } else if (a.only_on_some) {
        f.title = fmt::format(
            "only {} run{} {} ({}{}{}); the other {} ranks of {} peer group do not ({})", who,
            plural ? "" : "s", job.Name(a.fid),
            FormatDuration(onset_named ? top.onset_value : a.value), ctx_.per(),
            onset_named ? since : std::string(), a.peers - a.present, plural ? "their" : "its",
            onset_named ? onset_effect : effect);
      } else if (onset_named) {
        const std::string against =
            top.onset_median < kAlmostNothingShare * top.onset_value
                ? fmt::format("against {} peers' median {}", plural ? "their" : "its",
                              FormatDuration(top.onset_median))
                : fmt::format("{:.1f}x {} peers", top.onset_value / top.onset_median,
                              plural ? "their" : "its");
        f.title = fmt::format("{} spend{} {}{} in {}{}, {} ({})", who, plural ? "" : "s",
                              FormatDuration(top.onset_value), ctx_.per(), job.Name(a.fid), since,
                              against, onset_effect);
      } else if (a.median < kAlmostNothingShare * a.value) {
        // A ratio to almost nothing ("47697.3x its peers") says nothing.
        f.title =
            fmt::format("only {} run{} {} for real: {}{} against {} peers' median {} ({})", who,
                        plural ? "" : "s", job.Name(a.fid), FormatDuration(a.value), ctx_.per(),
                        plural ? "their" : "its", FormatDuration(a.median), effect);
      } else {
        f.title =
            fmt::format("{} spend{} {}{} in {}, {:.1f}x {} peers ({})", who, plural ? "" : "s",
                        FormatDuration(a.value), ctx_.per(), job.Name(a.fid),
                        a.median > 0 ? a.value / a.median : 0.0, plural ? "their" : "its", effect);
      }
      f.evidence.push_back(
          {"time per iteration", fmt::format("{} in {} on {}", FormatDuration(a.value),
                                             job.Name(a.fid), job.WorkerName(w))});
      if (a.only_on_some) {
        f.evidence.push_back(
            {"peer group workers running it", fmt::format("{} of {}", a.present, a.peers)});
      } else {
        f.evidence.push_back(
            {fmt::format("peer median ({} workers)", a.peers), FormatDuration(a.median)});
        f.evidence.push_back(
            {"robust z-score", fmt::format("{:.1f}", a.scale > 0 ? a.excess() / a.scale : 0.0)});
        if (top.carried_from.fid != kNone) {
          // No outlier of its own (its peers vary): named for carrying its caller's excess.
          const Anomaly& c = top.carried_from;
          f.evidence.push_back({"carries its caller's excess",
                                fmt::format("+{} of {}'s +{} on {} ({} vs peers' median {})",
                                            FormatDuration(a.excess()), job.Name(c.fid),
                                            FormatDuration(c.excess()), job.WorkerName(c.worker),
                                            FormatDuration(c.value), FormatDuration(c.median))});
        }
        // How: slower calls or more calls.
        const double call_ratio = a.peer_calls > 0 ? a.calls / a.peer_calls : 0;
        const double p50_ratio = a.peer_p50 > 0 ? a.p50 / a.peer_p50 : 0;
        std::string how;
        if (call_ratio < 1.2 && p50_ratio < 1.2) {
          how = fmt::format(
              "same calls ({} per iteration, p50 {} vs {}): the extra time is "
              "work between or inside them",
              FormatCount(a.calls), FormatDuration(a.p50), FormatDuration(a.peer_p50));
        } else if (call_ratio >= 1.2 && call_ratio >= p50_ratio) {
          how = fmt::format("more calls: {} per iteration vs {} (p50 {} vs {})",
                            FormatCount(a.calls), FormatCount(a.peer_calls), FormatDuration(a.p50),
                            FormatDuration(a.peer_p50));
        } else {
          how = fmt::format("slower calls: p50 {} vs {} ({:.1f}x), {} calls per iteration vs {}",
                            FormatDuration(a.p50), FormatDuration(a.peer_p50), p50_ratio,
                            FormatCount(a.calls), FormatCount(a.peer_calls));
        }
        f.evidence.push_back({"how it differs", how});
      }
      for (const Anomaly& b : top.below) {
        f.evidence.push_back(
            {"time goes into", fmt::format("{}: {} -> {} per iteration (+{})", job.Name(b.fid),
                                           FormatDuration(b.median), FormatDuration(b.value),
                                           FormatDuration(b.excess()))});
      }
      if (top.onset_iteration > 0) {
        f.evidence.push_back(
            {"since when",
             fmt::format("from iteration {} of {} on: {}/iter in {} (peers' median {}), +{} per "
                         "iteration; before it at its peers' level; averaged over the window "
                         "+{}",
                         top.onset_iteration + 1, top.onset_of, FormatDuration(top.onset_value),
                         job.Name(top.onset_function), FormatDuration(top.onset_median),
                         FormatDuration(top.onset_excess), FormatDuration(a.excess()))});
      }
      for (const Anomaly& p : top.parts) {
        f.evidence.push_back({"same layer, also in",
                              fmt::format("{}: {} -> {} per iteration (+{})", job.PathName(p.fid),
                                          FormatDuration(p.median), FormatDuration(p.value),
                                          FormatDuration(p.excess()))});
      }
      for (size_t k = 0; k < top.children.size() && k < 3; ++k) {
        const Anomaly& c = top.children[k];
        f.evidence.push_back(
            {"of which", fmt::format("{}: {} -> {} per iteration (+{})", job.Name(c.fid),
                                     FormatDuration(c.median), FormatDuration(c.value),
                                     FormatDuration(c.excess()))});
      }
      if (top.below.empty() && top.children.empty() && has_children_[a.fid]) {
        f.evidence.push_back({"where", fmt::format("in {}'s own code: none of its traced "
                                                   "callees is longer",
                                                   job.Name(a.fid))});
      }
      if (!IsUserLevel(fn.kind)) {
        int depth = 0;
        for (uint32_t p = fn.parent; p != kNone && depth < kMaxDepth;
             p = functions[p].parent, ++depth) {
          if (IsUserLevel(functions[p].kind)) {
            f.evidence.push_back({"called from", std::string(job.Name(p))});
            break;
          }
        }
      }
      if (a.critical > 0 || a.peer_critical > 0) {
        f.evidence.push_back({"on the critical path per iteration",
                              fmt::format("{} (peers' median {})", FormatDuration(a.critical),
                                          FormatDuration(a.peer_critical))});
      }
    }
    if (top.gc_peer_ns >= 0) {
      const std::string gc =
          fmt::format("{}{} on {} vs {} (peers' median)", FormatDuration(workers[w].gc_ns),
                      ctx_.per(), job.WorkerName(w), FormatDuration(top.gc_peer_ns));
      f.title = fmt::format("{} (GC pauses: {})", f.title, gc);
      f.evidence.insert(f.evidence.begin(), Evidence{"GC pauses", gc});
    }
    if (top.contention_peer_wait_ns >= 0) {
      const WorkerRecord& cw = workers[w];
      const char* thread = "threads";
      float delay = cw.run_queue;
      if (top.contention_threads == ContentionThreads::kTraining) {
        thread = "training thread";
        delay = cw.main_run_queue;
      } else if (top.contention_threads == ContentionThreads::kCommunication) {
        thread = "communication threads";
        delay = cw.comm_run_queue;
      }
      const std::string per_turn =
          fmt::format("run-queue wait {} per timeslice on {} vs {} on peers ({})",
                      FormatDuration(top.contention_wait_ns), job.WorkerName(w),
                      FormatDuration(top.contention_peer_wait_ns), thread);
      f.title = fmt::format("CPU contention: {}; {}", per_turn, f.title);
      std::vector<Evidence> first{{"run-queue wait per timeslice", per_turn + ", median"}};
      first.push_back(
          {"run-queue delay", fmt::format("{} of wall time on {} ({})", FormatShare(delay),
                                          job.WorkerName(w), thread)});
      if (cw.cpu_util >= 0) {
        first.push_back(
            {"CPU utilization", fmt::format("{:.2f} cores on {}", cw.cpu_util, job.WorkerName(w))});
      }
      f.evidence.insert(f.evidence.begin(), first.begin(), first.end());
    }
    if (plural) {
      f.evidence.push_back(
          {"workers affected", fmt::format("{} (worst: {})", culprits.size(), job.WorkerName(w))});
    }
    const WorkerRecord& wr = workers[w];
    if (!job.hosts()[wr.host].empty()) {
      f.evidence.push_back(
          {"host", fmt::format("{} ({})", job.hosts()[wr.host], job.WorkerName(w))});
    }
    if (f.category != FindingCategory::kCommunication &&
        f.category != FindingCategory::kSynchronization &&
        ctx_.peers->group_wait_median[a.group] > 0) {
      const double group_wait = ctx_.peers->group_wait_median[a.group];
      f.evidence.push_back(
          {"its collective + sync wait",
           fmt::format(
               "{}{} on {} (peers' median {}): {}", FormatDuration(wr.wait_fn_ns), ctx_.per(),
               job.WorkerName(w), FormatDuration(group_wait),
               wr.wait_fn_ns < group_wait ? "the others wait for it" : "no shorter than theirs")});
    }
    if (top.saturated_cost_ns > 0) {
      const std::string& host = job.hosts()[wr.host];
      f.evidence.push_back(
          {"extra work on a saturated host",
           fmt::format("{}'s process used {}{} of CPU time (peers' median {}); {} {} workers "
                       "wait {:.1f}x as long for a CPU as they run and use {}{} of CPU time "
                       "together, so the extra {}{} of CPU takes time the others would have "
                       "had: ~{}{} of the iteration, although no one waits for it",
                       job.WorkerName(w), FormatDuration(top.saturated_cpu_ns), ctx_.per(),
                       FormatDuration(top.saturated_peer_cpu_ns),
                       host.empty() ? std::string("the host's") : host + "'s",
                       top.saturated_host_workers, top.saturated_run_queue_per_cpu,
                       FormatDuration(top.saturated_host_cpu_ns), ctx_.per(),
                       FormatDuration(top.saturated_extra_cpu_ns), ctx_.per(),
                       FormatDuration(top.saturated_cost_ns), ctx_.per())});
    }
    if (top.scheduler_wait_ns > 0) {
      f.evidence.push_back(
          {"waiting for a CPU",
           fmt::format("{}{} in the run queue on {}'s training thread (peers' median {}), "
                       "with {}{} of CPU time (peers' median {}): {}{} of its extra time "
                       "is the scheduler serving it later, not more work",
                       FormatDuration(top.scheduler_rq_ns), ctx_.per(), job.WorkerName(w),
                       FormatDuration(top.scheduler_peer_rq_ns),
                       FormatDuration(top.scheduler_cpu_ns), ctx_.per(),
                       FormatDuration(top.scheduler_peer_cpu_ns),
                       FormatDuration(top.scheduler_wait_ns), ctx_.per())});
    }
    if (top.off_cpu) {
      f.evidence.insert(
          f.evidence.begin() + std::min<std::ptrdiff_t>(1, std::ssize(f.evidence)),
          {"off-CPU",
           fmt::format("{}'s process used {}{} of CPU time (peers' median {}) and its training "
                       "thread waited {}{} for a CPU (peers' median {}): its extra time in {} was "
                       "spent blocked, not computing: a sleep, I/O, a lock or a wait for "
                       "another thread or process",
                       job.WorkerName(w), FormatDuration(top.off_cpu_cpu_ns), ctx_.per(),
                       FormatDuration(top.off_cpu_peer_cpu_ns), FormatDuration(top.off_cpu_rq_ns),
                       ctx_.per(), FormatDuration(top.off_cpu_peer_rq_ns), job.Name(a.fid))});
      f.title += "; it is blocked there (a sleep, I/O, a lock or another thread), not computing";
    }
    if (f.category == FindingCategory::kCommunication) {
      f.evidence.push_back({"compute anomalies on other workers",
                            "none: the time is lost "
                            "in communication itself"});
    }
    f.evidence.push_back({"median iteration (job)", FormatDuration(ctx_.iteration_ns)});
    f.material = f.lost_ns_per_iteration >= ctx_.material_ns;
    // Consistency: a straggler's median call is slower, or it makes more calls. When neither
    // explains at least half of the material bar, the excess comes from a few slow calls
    // (preemption, jitter): material only when it is large (kIntermittentFactor x the bar).
    // Judged on the named function and on the path below it that carries its excess: the
    // named function is what the user wrote, but its own calls need not hold the time (a
    // host annotation whose GPU kernels run asynchronously is not slower per call when its
    // kernels are: bench/localizer_bench's straggler, +10.5 ms, was "intermittent").
    // A late onset is steady by construction: every iteration from the onset on is above
    // every one before it (step_onset.h).
    if (f.material && !a.only_on_some && a.peer_p50 > 0 && a.fid != kNone &&
        top.onset_iteration == 0) {
      auto steady = [](const Anomaly& x) {
        if (x.peer_p50 <= 0) return 0.0;
        return std::max(0.0, static_cast<double>(x.calls) * (x.p50 - x.peer_p50)) +
               std::max(0.0, static_cast<double>(x.calls - x.peer_calls)) * x.peer_p50;
      };
      double consistent = steady(a);
      for (const Anomaly& b : top.below) consistent = std::max(consistent, steady(b));
      for (const Anomaly& p : top.parts) consistent += steady(p);
      if (consistent < 0.5 * ctx_.material_ns &&
          f.lost_ns_per_iteration < kIntermittentFactor * ctx_.material_ns) {
        f.material = false;
        f.evidence.push_back(
            {"intermittent",
             fmt::format("the median call is not slower (p50 {} vs peers' {}) and there are "
                         "no extra calls: a few slow calls make the excess; below {} of "
                         "the iteration this is treated as noise",
                         FormatDuration(a.p50), FormatDuration(a.peer_p50),
                         FormatShare(kIntermittentFactor * ctx_.options->material_share))});
      }
    }
    RenderedFinding r;
    r.finding = std::move(f);
    r.wants_victims = top.category != FindingCategory::kCommunication &&
                      top.category != FindingCategory::kSynchronization;
    r.culprits = std::move(culprits);
    r.extra_victims = std::move(extra);
    if (a.fid != kNone && !a.only_on_some) {
      const bool stepped = top.onset_iteration > 0 && top.onset_function == a.fid;
      const float p50 = stepped && top.onset_p50 > 0 ? top.onset_p50 : a.p50;
      r.function_time = {a.value,
                         a.median,
                         static_cast<float>(excess),
                         a.peer_p50 > 0 ? p50 / a.peer_p50 : 0,
                         functions[a.fid].on_device,
                         static_cast<float>(1 / top.onset_scale())};
    } else if (a.fid != kNone) {
      // Code only a minority runs: its time on the worst culprit (no peers to compare).
      r.function_time = {a.value, -1, -1, 0, functions[a.fid].on_device};
    } else if (top.untraced_before != UINT32_MAX) {  // untraced time (PT-STRAGGLER-UNTRACED)
      r.function_time.untraced_before_host_code =
          OnHostThread(job.functions()[top.untraced_before].kind);
    }
    out.push_back(std::move(r));
  }
  return out;
}
}  // namespace perftracker::localize
