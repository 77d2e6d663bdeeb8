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
//
// Roles from the process groups (issue 11). Where the sources name the process group of every
// worker's collectives (JobTable::WorkerGroups), workers linked through a group in which they ran
// a collective (point-to-point sends and receives left out: a pipeline's cross its stages) are
// one role candidate (RolesOfWorkers: the connected components); a pipeline stage's tensor- and
// data-parallel groups hold only its own ranks, a job-wide all-reduce links every worker (then
// nothing changes). The signatures are clustered within each role and clusters of different
// roles joined when they run the same code (PeerGroups::ClusterWithinRoles), so the first and
// last stages stop being "extra code" of the middle stages' group, and a stage's straggler
// with code of its own is compared with its stage (by functions alone, beside stages that
// send where it receives, it could found a group of one). That grouping is used when every
// group it forms has at least kMinPeers workers or is formed by the functions alone too:
// roles never take a worker's peers away (a stage of two ranks stays with the others).
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
  // Per worker, its role (RolesOfWorkers: a pipeline stage, where the collectives' process
  // groups say); empty when they do not.
  std::vector<uint32_t> worker_role;
};

// A worker's time per iteration outside its waits: mean iteration less the outermost
// collective + sync time, whichever thread waited; -1 without iteration times. In lockstep
// training this is the time before its collectives, its own.
double OutsideWaitNs(const WorkerRecord& w);

// Per worker, its role: the connected component of the process groups its collectives ran
// in (not point to point), numbered from 0 in worker order. Empty when a worker has no rank
// or no known group, two workers share a rank, or all workers are one component.
std::vector<uint32_t> RolesOfWorkers(const JobTable& job);

// Groups the workers of `job`; notes about the groups go to `notes`.
PeerAssignment AssignPeerGroups(const JobTable& job, const LocalizerOptions& options,
                                double iteration_ns, std::vector<std::string>& notes);

}  // namespace perftracker::localize
