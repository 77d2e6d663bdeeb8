#include "perftracker/localize/victim_rule.h"

#include <algorithm>

namespace perftracker::localize {
namespace {

// A worker whose own work is shorter than its peers' by at least this share of its extra
// collective wait arrived early at the collective: the wait is not a finding.
constexpr double kEarlyArrivalShare = 0.5;

}  // namespace

void ResolveVictims(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings) {
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  for (auto& f : worker_findings) {
    if (!f.wait_type()) continue;
    // A longer wait at one call site can be a shorter one at another (DDP issues its
    // all-reduces from whichever hook completes a bucket): the job only loses what the
    // worker's total collective + sync wait exceeds its group's.
    const double extra_wait = static_cast<double>(workers[f.named.worker].wait_fn_ns) -
                              ctx.peers->group_wait_median[f.named.group];
    if (extra_wait < ctx.report_ns) {
      f.dropped = true;
      continue;
    }
    // It waited longer because it reached the collective early: its own work was shorter
    // than its peers' by most of the extra wait. Nobody lost time to it.
    const double work_deficit = ctx.peers->group_work_median[f.named.group] -
                                static_cast<double>(workers[f.named.worker].work_ns);
    if (work_deficit >= kEarlyArrivalShare * extra_wait) {
      f.dropped = true;
      continue;
    }
    f.lost_cap = std::min(f.named.excess(), extra_wait);
    // Only a worker of its own peer group can explain the wait: the extra wait is measured
    // against that group's median, and a straggler of another role (sharing a job-wide
    // collective) delays every worker of this group alike, so it makes no one wait more
    // than its peers.
    WorkerFinding* explaining = nullptr;
    for (auto& o : worker_findings) {
      if (o.wait_type() || o.dropped) continue;
      if (o.named.group != f.named.group) continue;
      if (o.named.excess() < kVictimShare * f.named.excess()) continue;
      if (explaining == nullptr || o.named.excess() > explaining->named.excess()) explaining = &o;
    }
    if (explaining == nullptr) continue;
    f.dropped = true;
    if (explaining->named.worker != f.named.worker) {
      explaining->extra_victims.push_back(f.named.worker);
    }
  }
}

}  // namespace perftracker::localize
