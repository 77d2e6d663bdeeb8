// PeerAssignment: which peer group each worker belongs to (algorithm step 2).
//
// A worker's signature is the set of functions it runs among those that matter job-wide
// (mean time over the workers running them >= signature_share of the iteration), leaving
// out collectives / syncs and what they contain (where DDP issues an all-reduce depends on
// timing) and GC. Presence, not share, so that a straggler's shifted shares keep it in its
// group. With it goes the set of collectives the worker takes part in, by name: the shared
// structure that tells a role from a straggler. PeerGroups (peer_groups.h) hashes identical
// signatures together, merges near-identical ones, and merges a minority that runs its
// group's code plus code of its own in the same collectives (that code is then compared as
// "only on some": the finding, never a group of its own).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perftracker/localize/job_table.h"
#include "perftracker/localize/localizer.h"

namespace perftracker::localize {

struct PeerAssignment {
  std::vector<uint32_t> worker_group;          // per worker
  std::vector<std::vector<uint32_t>> members;  // per group, worker indices ascending
  // Per group: the median of the workers' outermost collective + sync time, and of their
  // own work (root non-wait functions), per iteration.
  std::vector<float> group_wait_median;
  std::vector<float> group_work_median;
  // Per group: the median of the workers' time outside waits (OutsideWaitNs), over the
  // workers that have it.
  std::vector<float> group_outside_wait_median;
};

// A worker's time per iteration outside its waits: mean iteration less the outermost
// collective + sync time, whichever thread waited; -1 without iteration times. In lockstep
// training this is the time before its collectives, its own.
double OutsideWaitNs(const WorkerRecord& w);

// Groups the workers of `job`; notes about the groups go to `notes`.
PeerAssignment AssignPeerGroups(const JobTable& job, const LocalizerOptions& options,
                                double iteration_ns, std::vector<std::string>& notes);

}  // namespace perftracker::localize
