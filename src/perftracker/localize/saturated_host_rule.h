// Extra work on a saturated host (algorithm step 5f, after the caps on what a work finding
// costs, before the scheduler-wait discount): where the workers of a host wait for a CPU at
// least as long as they run (more runnable threads than cores: several CPU-bound ranks per
// host, a CPU-only job, a busy neighbour), a rank that does extra work does not make its
// peers wait for it at the next collective; it takes CPU time they would have had, and every
// rank of the host slows down a little. The caps before this step (ResolveVictims' "what
// the others wait for it", CapWorkFindingsThatWaitForTheirOwnCollectives' "its time outside
// waits beyond its peers'") see no one waiting and no one later, and a 3x slower function
// came out as a minor finding, or none (real-slow-compute traces made while other tests
// loaded the machine: rank 2's block2 19.1 ms/iter against 9.5-13.2, its process 23.1 ms/iter
// of CPU against 15.5-17.1, every rank's threads 34-52 ms/iter in the run queue, every rank's
// iteration 71-72 ms; no rank waited for rank 2).
//
// Model: the workers of a saturated host progress at the CPU rate they get, their summed CPU
// time per iteration ΣC over the iteration T; work the job adds needs that rate too. So the
// ΔC = C - median(peers' C) of CPU time per iteration that a culprit used beyond the workers
// of its group that are not culprits of the same function (beyond their robust spread and
// by min_relative_effect of their median: noise is no work) lengthens the host's iteration by ΔC ×
// T / ΣC, for the culprits of one function on one host summed (two ranks of eight running the same
// extra code both take from the same cores). A work finding (not a wait, not PT-CPU-CONTENTION)
// then costs at least that, and never more than its excess: the rule only lifts a cap, never lowers
// one. A worker's extra CPU counts for its costliest work finding only. Needs host metrics (live
// mode's sampler, or a trace's perftracker_host_load event) for every worker of the host.
#pragma once

#include <vector>

#include "perftracker/localize/rule_context.h"
#include "perftracker/localize/worker_finding.h"

namespace perftracker::localize {

// A host is saturated when its workers' median run-queue wait per CPU second is at least this.
inline constexpr double kSaturatedRunQueuePerCpu = 1.0;

// A worker's CPU time per iteration, in ns; -1 when its host metrics were not sampled.
double CpuPerIteration(const WorkerRecord& w);

// Per host (JobTable::hosts() index): how busy its CPUs were.
struct HostLoad {
  // Every worker of the host has host metrics, and their median run-queue wait per CPU
  // second is at least kSaturatedRunQueuePerCpu.
  bool saturated = false;
  double cpu_ns = 0;  // the workers' CPU time per iteration, summed
  double run_queue_per_cpu = 0;
  uint32_t workers = 0;
};
std::vector<HostLoad> LoadPerHost(const JobTable& job);

// The workers of `group` (sorted) on a saturated host whose CPU time per iteration lies
// beyond the others' of the group by outlier_z robust sigmas, min_relative_effect of their
// median and report_share of the iteration: they did more work. Their functions' wall times are
// noisy there (every thread waits for a CPU longer than it runs), so peer comparison also compares
// such a worker with its peers without itself, as in a tiny group. Ascending.
std::vector<uint32_t> CpuOutliersOnSaturatedHosts(const RuleContext& ctx,
                                                  const std::vector<HostLoad>& hosts,
                                                  const std::vector<uint32_t>& group);

void CountExtraWorkOnSaturatedHosts(const RuleContext& ctx,
                                    std::vector<WorkerFinding>& worker_findings);

}  // namespace perftracker::localize
