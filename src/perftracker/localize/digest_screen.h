// DigestScreen: the first pass of progressive disclosure. Given every worker's WorkerDigest
// (summary/worker_digest.h), it names the workers whose full summary the localizer needs:
// the suspects, and a sample of their peers to compare them with. The localizer then runs on
// those full summaries only; at fleet size that is a few hundred of 100,000.
//
// Algorithm.
//  1. Peer groups: workers whose digest functions of at least kSignatureShare of their
//     iteration are the same set (the roles of a pipeline- or expert-parallel job differ
//     there). A group split by noise only costs requests (a small group is asked whole),
//     never a missed culprit.
//  2. Suspects, per group of more than kMinScreenedGroup workers: a worker is one when any
//     of its features is a robust outlier both ways (|x - median| above suspect_z robust
//     sigmas, scale floored as in robust_stats.h, and above suspect_relative of the median):
//     median iteration; the iteration's compute, communication, wait, data and host-only
//     time; each function most of the group has in its digest: time, self time and critical
//     time per iteration, and calls; each worker-level metric's level and fluctuation. Time
//     features must also differ by report_share of the job's median iteration. A function
//     that a minority of the group has in its digest makes them suspects when it takes more
//     time than the majority's digests leave out (a digest keeps the heaviest functions: one
//     just under the cut is in some digests, not in others). The thresholds are looser than the
//     localizer's (a suspect costs one request; a culprit the screen misses is a wrong diagnosis).
//  3. Peers: one sampling rate for every group, its suspects counted in (so that the
//     localizer sees the groups in the job's proportions: whether a function runs on a
//     minority of the workers depends on them, and a tie must stay a tie): sample_workers
//     over the job, or more where a group needs 4 of its peers per suspect; the peers evenly
//     over the ranks of each group, at least kMinSampledPerGroup workers of each.
//  4. It cannot decide (ScreenResult::full, with the reason) when the suspects are more than
//     max_suspect_share of the workers (a job-wide problem, or noise the digests cannot
//     resolve), or when the request would cover most workers anyway (a small job): then the
//     caller asks every worker for its full summary.
//  5. After the localizer ran on the full summaries asked for, GeneralizeToGroups() makes its
//     findings the job's: a finding that names every sampled peer of a group names the
//     group's workers that were not asked too (they are what the sample stands for); one
//     that names some of a group's sampled peers but not all cannot be generalized.
//  6. Then the caller asks again in rounds (Refine, a few at most): the peers so named are
//     suspects, the screen looser and the sample larger, each round's request a superset of
//     the last; only when the rounds run out or a round's request passes the budgets of
//     step 4 does it fall back to every full summary.
//
// Memory: Add() keeps the features (~1 KB per worker), not the digests. Time: in a group of
// more than 8,192 workers a feature's median and MAD come from every k-th worker (8,192 of
// them); every worker is tested against them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "perftracker/localize/diagnosis.h"
#include "perftracker/summary/worker_digest.h"

namespace perftracker {

struct DigestScreenOptions {
  double suspect_z = 3.0;
  double suspect_relative = 0.15;
  // Effects on time below this share of the job's median iteration are not suspicious (the
  // localizer reports nothing below its report_share, 0.005).
  double report_share = 0.005;
  // Peers sampled over the whole job (at least; 4 per suspect when there are more).
  size_t sample_workers = 256;
  // More suspects than this share of the workers (and more than min_suspects): full path.
  double max_suspect_share = 0.05;
  size_t min_suspects = 16;
  // A request that covers at least this share of the workers is the full path.
  double max_request_share = 0.5;
};

// One peer group of the screen: its peers sampled, and those not asked for.
struct ScreenGroup {
  std::vector<int32_t> sampled;    // ascending
  std::vector<int32_t> not_asked;  // ascending
};

struct ScreenResult {
  bool full = false;              // every worker's full summary is needed
  std::string reason;             // why (full), or what the screen found (progressive)
  std::vector<int32_t> ranks;     // the full summaries to ask for, ascending (every rank if full)
  std::vector<int32_t> suspects;  // ascending
  size_t workers = 0;
  std::vector<ScreenGroup> groups;
  int round = 0;  // 0: Finish; 1, 2, ...: Refine
};

// Step 5 of the header comment: widens `diagnosis` (the localizer's, on the full summaries of
// screen.ranks) to every worker: findings and victims naming a whole group's sample name the
// group, num_workers counts every worker, and a note says which path the diagnosis took.
// False (diagnosis unchanged) when a finding names part of a group's sample: the digests
// cannot decide as they were screened; `named_in_sample` (when given) gets those sampled
// peers, for DigestScreen::Refine.
bool GeneralizeToGroups(const ScreenResult& screen, Diagnosis* diagnosis,
                        std::vector<int32_t>* named_in_sample = nullptr);

class DigestScreen {
 public:
  explicit DigestScreen(DigestScreenOptions options = {});
  ~DigestScreen();
  DigestScreen(const DigestScreen&) = delete;
  DigestScreen& operator=(const DigestScreen&) = delete;

  void Add(const WorkerDigest& digest);
  ScreenResult Finish();
  // Another round (1, 2, ...) after GeneralizeToGroups could not decide on `previous`: the
  // peers a finding named in a sample (`named`) and the previous suspects are suspects now,
  // the suspect thresholds are 0.5^round of the options' and the sample 2^round times
  // larger, and every rank of `previous` stays asked. Full (as Finish) when that is more
  // than the budgets allow. The caller bounds the rounds.
  ScreenResult Refine(const ScreenResult& previous, const std::vector<int32_t>& named, int round);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace perftracker
