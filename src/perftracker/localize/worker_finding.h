// WorkerFinding: a finding about one worker, from the call-path collapse or a culprit rule,
// before findings merge across workers and are worded.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "perftracker/localize/anomaly.h"
#include "perftracker/localize/diagnosis.h"

namespace perftracker::localize {

// Whose run-queue waits decided a PT-CPU-CONTENTION: the whole process's threads, the
// training (main) thread's, or the communication threads' (its agent named them).
enum class ContentionThreads : uint8_t { kProcess, kTraining, kCommunication };

struct WorkerFinding {
  std::string_view code;
  FindingCategory category = FindingCategory::kCompute;
  std::string resource;
  Anomaly named;
  std::vector<Anomaly> below;     // the explaining path under the named function
  std::vector<Anomaly> children;  // other anomalous descendants, largest first
  // When `named` is no outlier of its own but carries its anomalous caller's excess
  // (Anomaly::carrier): that caller (fid kNone otherwise).
  Anomaly carried_from = Anomaly::OfWorker(0, 0, 0, 0);
  // Other anomalies of the same cause on this worker (MergeLayerParts): the same layer's
  // functions under other call paths (its backward pass, ...), and that layer's fid.
  std::vector<Anomaly> parts;
  uint32_t layer = UINT32_MAX;
  std::vector<uint32_t> extra_victims;
  bool dropped = false;
  // What the job loses at most (ResolveVictims): for communication / sync findings the
  // worker's extra total wait, for work findings how much longer the others wait than it.
  double lost_cap = INFINITY;
  // PT-CPU-CONTENTION: the worker's run-queue wait per timeslice and its peers' median, in ns
  // (-1 = not contention), ...
  float contention_wait_ns = -1;
  float contention_peer_wait_ns = -1;
  // ... of which threads.
  ContentionThreads contention_threads = ContentionThreads::kProcess;
  // PT-CPU-CONTENTION from run-queue evidence alone (no straggler function).
  bool run_queue_only = false;
  // ... whose cost is capped by how much less it waits than its group (lost_cap).
  bool contention_lateness = false;
  // ... and the worker's functions relabelled PT-CPU-CONTENTION that it took in (the same
  // starvation seen in one function each; dropped as findings of their own), largest first.
  std::vector<Anomaly> contention_functions;
  // DiscountSchedulerWait: the run-queue wait per iteration its extra work does not explain,
  // taken off what it costs (0 = none), and the figures it came from: its CPU time and its
  // training thread's run-queue wait per iteration, and its peers' medians, in ns.
  float scheduler_wait_ns = 0;
  float scheduler_cpu_ns = 0;
  float scheduler_peer_cpu_ns = 0;
  float scheduler_rq_ns = 0;
  float scheduler_peer_rq_ns = 0;
  // CountExtraWorkOnSaturatedHosts: what the extra CPU time of the named function's culprits
  // on this worker's saturated host costs the job per iteration (0 = the rule did not lift
  // the cap), that extra CPU time, the host's workers' CPU time per iteration summed, their
  // median run-queue wait per CPU second, and how many workers share the host; the worker's
  // own CPU time per iteration and its peers' median.
  float saturated_cost_ns = 0;
  float saturated_cpu_ns = 0;
  float saturated_peer_cpu_ns = 0;
  float saturated_extra_cpu_ns = 0;
  float saturated_host_cpu_ns = 0;
  float saturated_run_queue_per_cpu = 0;
  uint32_t saturated_host_workers = 0;
  // MarkOffCpuTime: most of the excess was spent neither running nor runnable (a sleep, I/O,
  // a lock); its process's CPU time and its thread's run-queue wait per iteration, and its
  // peers' medians, in ns.
  bool off_cpu = false;
  float off_cpu_cpu_ns = 0;
  float off_cpu_peer_cpu_ns = 0;
  float off_cpu_rq_ns = 0;
  float off_cpu_peer_rq_ns = 0;
  // Re-labelled PT-STRAGGLER-GC: the group's median GC time per iteration (-1 = not).
  float gc_peer_ns = -1;
  // PT-STRAGGLER-UNTRACED: the function before which the worker's thread idles longest
  // beyond its peers (UINT32_MAX = no such place), that idle gap and the peers' median.
  uint32_t untraced_before = UINT32_MAX;
  float untraced_gap_ns = 0;
  float untraced_peer_gap_ns = 0;
  // ... and the peers' median collective + sync wait per iteration, which the worker's falls
  // short of by named.excess().
  float untraced_peer_wait_ns = 0;
  // A fault that began inside the window (JudgeLateOnsets): the first iteration of the higher
  // level (0 = none), the worker's iterations, the function that stepped up (the named one or
  // one on the path below it), its time per iteration from then on and its peers' median, and
  // the named function's excess from then on.
  uint32_t onset_iteration = 0;
  uint32_t onset_of = 0;
  uint32_t onset_function = UINT32_MAX;
  float onset_value = 0;
  float onset_median = 0;
  float onset_excess = 0;
  // The stepped function's median call from the onset on (OnsetRecord::after_p50_ns; 0:
  // unknown).
  float onset_p50 = 0;
  // The excess of the named function (from its onset on, when it has one) and of its parts.
  double excess() const {
    double sum = onset_iteration > 0 ? onset_excess : named.excess();
    for (const Anomaly& p : parts) sum += p.excess();
    return sum;
  }
  // A fault that began inside the window (JudgeLateOnsets) made its extra time from its
  // onset on: what a per-iteration mean over the window is multiplied by to give its level
  // from then on (1 without an onset).
  double onset_scale() const {
    return onset_iteration > 0 && onset_of > onset_iteration
               ? static_cast<double>(onset_of) / (onset_of - onset_iteration)
               : 1.0;
  }
  bool wait_type() const {
    return category == FindingCategory::kCommunication ||
           category == FindingCategory::kSynchronization;
  }
};

// The culprits of each (peer group, named function) among the findings `is_culprit` accepts,
// in ascending worker order: whose peers a rule compares a culprit with are the group's other
// workers, not culprits of the same function.
template <typename Pred>
std::map<std::pair<uint32_t, uint32_t>, std::vector<uint32_t>> CulpritsByGroupAndFunction(
    const std::vector<WorkerFinding>& worker_findings, Pred is_culprit) {
  std::map<std::pair<uint32_t, uint32_t>, std::vector<uint32_t>> culprits;
  for (const auto& f : worker_findings) {
    if (is_culprit(f)) culprits[{f.named.group, f.named.fid}].push_back(f.named.worker);
  }
  for (auto& [key, ws] : culprits) std::sort(ws.begin(), ws.end());
  return culprits;
}

}  // namespace perftracker::localize
