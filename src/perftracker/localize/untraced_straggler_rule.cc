#include "perftracker/localize/untraced_straggler_rule.h"

#include <algorithm>
#include <cstdint>

#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {

namespace fc = finding_codes;

namespace {

// Peers compared when placing untraced time (the first ones of the group; enough for a
// median, bounded for groups of thousands).
constexpr size_t kPlacePeers = 64;

// Where untraced time sits in w's iteration: the function whose calls w's thread starts after
// the longest idle gap beyond its peers' (the summarizer's idle gap before top-level calls);
// with host_thread_only, among the host thread's functions that most of the job runs (a gap
// before code only w runs has nothing to compare with). With a place, its excess caps what
// the job loses (wf.lost_cap). Returns that excess, 0 without a place.
double PlaceUntraced(const JobTable& job, const std::vector<uint32_t>& group, uint32_t w,
                     bool host_thread_only, WorkerFinding& wf) {
  const RecordStore& records = job.records();
  const WorkerRecord& wr = job.workers()[w];
  std::vector<int32_t> slot(job.functions().size(), -1);
  std::vector<uint32_t> fids;
  std::vector<float> own;
  for (uint32_t k = 0; k < wr.num_records; ++k) {
    const FunctionRecord& r = records[wr.first_record + k];
    if (r.idle_gap_ns <= 0 || slot[r.fid] >= 0) continue;
    if (host_thread_only && !OnHostThread(job.functions()[r.fid].kind)) continue;
    if (host_thread_only && job.Totals(r.fid).present * 2 < job.workers().size()) continue;
    slot[r.fid] = static_cast<int32_t>(fids.size());
    fids.push_back(r.fid);
    own.push_back(r.idle_gap_ns);
  }
  if (fids.empty()) return 0;
  std::vector<std::vector<float>> peer_gaps(fids.size());
  size_t peers = 0;
  for (uint32_t o : group) {
    if (o == w) continue;
    if (++peers > kPlacePeers) break;
    for (auto& g : peer_gaps) g.push_back(0);  // absent = no gap
    const WorkerRecord& orec = job.workers()[o];
    for (uint32_t k = 0; k < orec.num_records; ++k) {
      const FunctionRecord& r = records[orec.first_record + k];
      if (slot[r.fid] >= 0) peer_gaps[static_cast<size_t>(slot[r.fid])].back() = r.idle_gap_ns;
    }
  }
  double best = 0;
  for (size_t i = 0; i < fids.size(); ++i) {
    const auto median = static_cast<float>(MedianInPlace(peer_gaps[i]));
    const double excess = static_cast<double>(own[i]) - median;
    if (excess <= best) continue;
    best = excess;
    wf.untraced_before = fids[i];
    wf.untraced_gap_ns = own[i];
    wf.untraced_peer_gap_ns = median;
  }
  // A place that holds less than half of the missing wait is no place: the time is spread.
  // (Beside traced findings the caller judges the place by its own bar: the wait deficit
  // also holds the traced excess, twice over, see below.)
  if (!host_thread_only && best < 0.5 * wf.named.excess()) {
    wf.untraced_before = UINT32_MAX;
    return 0;
  }
  // The job loses at most the untraced time itself (the wait deficit also counts the host's
  // sync and the device's collectives waiting for the same delay).
  wf.lost_cap = best;
  return best;
}

}  // namespace

void FindUntracedStragglers(const RuleContext& ctx, std::vector<WorkerFinding>& worker_findings) {
  const std::vector<WorkerRecord>& workers = ctx.job->workers();
  const std::vector<std::vector<uint32_t>>& members = ctx.peers->members;
  // The time per iteration each worker's traced work findings explain. Its missing wait is
  // untraced only beyond that (twice that: see below), and only when they explain less than
  // half of it: a finding on
  // code its whole pipeline stage runs (the first stage's embedding, "only on some" of a group
  // that spans the stages) explains 12 ms, not a 260 ms pause beside it (issue 11, held-out
  // scenario rnd-s1-017), while a straggler's own slow function explains its wait.
  std::vector<double> explained(workers.size(), 0);
  for (const auto& f : worker_findings) {
    if (!f.dropped && !f.wait_type()) explained[f.named.worker] += std::max(0.0, f.excess());
  }
  std::vector<float> values;
  for (uint32_t g = 0; g < members.size(); ++g) {
    const auto& ws = members[g];
    values.clear();
    for (uint32_t w : ws) values.push_back(workers[w].wait_fn_ns);
    const RobustCenter c = MedianAndMadInPlace(values);
    if (ws.size() < kMinPeers || c.median <= 0) continue;
    const double scale = RobustScale(c, kScaleRelativeFloor, kScaleAbsoluteFloorNs);
    // The robust z-score against the peers' spread is the statistical bar, the report bar
    // the effect bar. No bar relative to the wait itself: a device-bound job's host waits
    // most of its step in the final synchronization, and 20 % of that hid an 8 ms pause
    // per 107 ms step (sim-untraced-pause-64).
    const double threshold = std::max(ctx.options->outlier_z * scale, ctx.report_ns);
    for (uint32_t w : ws) {
      const double deficit = c.median - workers[w].wait_fn_ns;
      // A host-side delay shows twice in the missing wait (the host's sync and the device's
      // collectives wait that much less), so the findings' excess counts twice.
      if (deficit <= threshold || 2 * explained[w] >= 0.5 * deficit) continue;
      const double untraced = deficit - 2 * explained[w];
      if (untraced <= threshold) continue;
      WorkerFinding wf;
      wf.code = fc::kStragglerUntraced;
      // Untraced time, not CPU contention: that takes run-queue evidence
      // (cpu_contention_rule.h relabels it when there is some).
      wf.category = FindingCategory::kHostOverhead;
      wf.resource = "host thread (untraced)";
      wf.named = Anomaly::OfWorker(w, g, static_cast<uint32_t>(ws.size()), untraced);
      wf.untraced_peer_wait_ns = static_cast<float>(c.median);
      // Beside traced findings, only an idle gap of its host thread beyond its peers' by the
      // bar shows untraced time: its missing wait counts their excess in its host's sync and
      // again in its device's collectives, and its device idles whenever its host is late (a
      // CPU-starved rank's slower loading and launches are traced time, not a pause).
      const double place = PlaceUntraced(*ctx.job, ws, w, explained[w] > 0, wf);
      if (explained[w] > 0 && place <= threshold) continue;
      worker_findings.push_back(std::move(wf));
    }
  }
}

}  // namespace perftracker::localize
