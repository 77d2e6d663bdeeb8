// Localizer: differential observability across the workers of one job (PerfTracker /
// EROICA, arXiv 2506.08528). Workers of a data- / tensor- / pipeline-parallel job run the
// same code on the same kind of hardware, so the worker (or function) that behaves unlike
// its peers is the root cause; problems every worker shares are found by expectations.
//
// Algorithm
//  1. Compact ingest. Add() interns every function key job-wide (a cursor into the previous
//     worker's key list makes the common case, a worker listing the same keys in nearly the
//     same order, a string compare instead of a hash lookup) and keeps one 32-byte FunctionRecord
//     per (worker, function): time, self time, critical time, idle gap, bytes and calls per
//     iteration, and the p50 call duration. Records live in fixed-size blocks (no
//     reallocation spike at 30 M records). Per worker it keeps a WorkerRecord: rank, host,
//     median / mean iteration, the iteration breakdown per iteration, and the sums the
//     expectation checks and the culprit / victim logic need (outermost collective + sync
//     time, sync and data-loading critical time, GC, pageable copies). The summary itself
//     is not kept: 100,000 workers x 300 functions is about 1 GB.
//     A non-wait function's time excludes the collectives / syncs nested in it (DDP issues
//     all-reduces from AccumulateGrad hooks: that is waiting, not work).
//  2. Peer groups (peer_groups.h): each worker's signature is the set of functions it runs
//     among those that matter job-wide (mean time >= signature_share of the iteration),
//     without collectives / syncs and their contents (their call sites depend on timing);
//     presence, not share, so a straggler's shifted shares keep it in its group. Identical
//     signatures are hashed together and near-identical ones (Jaccard >= peer_jaccard, or
//     one function apart) merge.
//  3. Per group (>= 3 workers), per function: the records are bucketed by function
//     (counting sort, O(records)); over the group's workers (absent = 0) the median and MAD
//     of time per iteration give a robust z-score. A worker is anomalous when its excess
//     over the median exceeds outlier_z robust sigmas (sigma floored at 1 % of the median
//     or 1 us, so identical peers, MAD = 0, work), min_relative_effect x the median, and
//     report_share of the job's median iteration; material when the excess is at least
//     material_share of it. A function present on a strict minority of the group with
//     >= report_share of the iteration is an anomaly of its own (PT-FUNCTION-ONLY-ON-SOME),
//     not a reason to split the group. The group medians of p50 duration and calls per
//     iteration say *how* it differs (slower calls vs more calls).
//  4. Parent / child collapse, per worker: the anomalies form a forest along the call
//     paths. From each root we follow the child that explains >= 70 % of its parent's
//     excess; the finding names what the user wrote: the deepest annotation
//     (record_function) on that path, else the deepest Python function / data load /
//     optimizer step, else the path's top; the nodes below it become evidence ("time goes into
//     aten::mm: 12.3 ms -> 31.0 ms per iteration"). Anomalies outside the named subtree start new
//     roots.
//  5. Culprits vs victims: in synchronous training everyone waits for the slowest; victims
//     show longer collective / sync time, the culprit longer work and shorter waits. A
//     communication or synchronization anomaly is dropped, and its worker listed as a
//     victim, when another worker has a work (compute, data, GC, ...) anomaly of comparable
//     size; otherwise it stands (e.g. one slow link: PT-STRAGGLER-COMM). Victims of a
//     culprit are the workers of its peer group whose outermost collective + sync time
//     exceeds the culprit's by half its excess (waits of other groups, e.g. other pipeline
//     stages, are not comparable), plus the workers whose wait anomalies it explained.
//     A worker that waits longer because its own work (root non-wait functions) was
//     shorter than its peers' by at least half the extra wait arrived early: dropped, it
//     is nobody's culprit. A material finding whose excess is carried neither by a slower
//     median call nor by extra calls (a few slow calls: preemption, jitter) stays material
//     only above 3x the bar and says "intermittent" in its evidence. A worker the others wait for
//     (its wait time is a low outlier) with no anomalous traced function is PT-STRAGGLER-UNTRACED.
//  5b. GC: a compute / untraced straggler finding whose excess is mostly (>= 70 %) the
//     worker's extra GC pause time (its GC, wherever nested, minus its group's median)
//     becomes PT-STRAGGLER-GC: the live agent records pauses inside whatever function ran,
//     so they can be spread over many call paths none of which explains the excess alone.
//  5c. CPU contention: a straggler finding (compute, data, communication, sync, untraced)
//     on a worker whose run-queue delay fraction (live mode: HostSampler) exceeds its peer
//     group's median by >= 0.15 and >= 1.5x becomes PT-CPU-CONTENTION: starved of CPU, not slow
//     code. The worker's value is WorkerSummary::worker_metrics' mean, else the
//     time-weighted mean of its root functions' levels.
//  6. Findings naming the same function with the same code on several workers merge.
//  7. Expectation checks on the job median (no peers needed): host-bound (device idle
//     while the host works >= 30 % of the iteration), synchronizations, data loading and
//     GC on the critical path, pageable memcpy.
//  8. Data quality: missing / duplicate / absent ranks and dropped / malformed /
//     out-of-order events become notes; a worker whose data is badly incomplete becomes a
//     PT-INCOMPLETE-DATA finding. Nothing in the input can crash the localizer.
//  9. Ranking: material first, then time lost per iteration; at most max_findings.
//
// Invariants: every FunctionRecord's fid is < functions_.size(); a worker's records are
// contiguous and hold each fid at most once (duplicates within a summary are summed);
// function parents always point at interned fids or kNone.
#include "perftracker/localize/localizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/hardware_findings.h"
#include "perftracker/localize/peer_groups.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker {
namespace {

namespace fc = finding_codes;

constexpr uint32_t kNone = UINT32_MAX;
// Peer statistics need at least this many workers in a group.
constexpr size_t kMinPeers = 3;
// Up to this many workers, a candidate is compared with its peers without itself: with 3,
// the MAD is the smaller of the two other deviations, so two noisy peers hide a 3x
// straggler (seen on a 3-worker diagnosis of a real job: z 2.8 against its peers' 6.3).
// From 4 workers on, the full-sample MAD is robust to one outlier and leave-one-out only
// sharpens the noise (it flagged time-slicing noise on healthy 4-rank jobs).
constexpr size_t kSmallGroup = 3;
// A child anomaly "explains" its parent's when it carries this share of the excess.
constexpr double kExplainsMost = 0.7;
// MAD floors (see robust_stats.h).
constexpr double kScaleRelativeFloor = 0.01;
constexpr double kScaleAbsoluteFloorNs = 1000;
// A worker whose events were this much dropped / malformed is badly incomplete.
constexpr double kIncompleteShare = 0.1;
// Device idle while the host works, as a share of the iteration, that makes a job
// host-bound.
constexpr double kHostBoundShare = 0.3;
// A wait anomaly is explained by another worker's work anomaly this large (relative);
// a worker is a victim when it waits this share of the culprit's excess longer.
constexpr double kVictimShare = 0.5;
// A worker whose own work is shorter than its peers' by at least this share of its extra
// collective wait arrived early at the collective: the wait is not a finding.
constexpr double kEarlyArrivalShare = 0.5;
// An excess not carried by the median call nor by extra calls (a few slow calls) is material
// only above this multiple of the materiality bar.
constexpr double kIntermittentFactor = 3.0;
// CPU contention: a worker's run-queue delay fraction at least this much above its peers'
// median, and this many times it, makes its straggler finding PT-CPU-CONTENTION. (An
// absolute excess and a modest ratio, not a level: on an oversubscribed host every rank
// waits a lot — measured 75 % for three busy loops on a loaded 2-core machine.)
constexpr double kContentionRunQueue = 0.15;
constexpr double kContentionPeerRatio = 1.5;
// ... or a large absolute excess at a smaller ratio: on a host oversubscribed by other work
// every rank waits about a wall second per second, and a starved rank's +0.4 is only 1.3x
// (e2e_live cpu_contention at load average 20: 1.59 against 1.20).
constexpr double kContentionLargeRunQueue = 0.3;
constexpr double kContentionLargePeerRatio = 1.25;
// An untraced straggler (its peers wait for it, none of its traced functions is longer) needs
// only kContentionRunQueue above and kContentionLargePeerRatio times its peers: nothing else
// explains it (real-cpu-contention-r3: 0.887 against 0.595, 1.49x).
// Without a straggler function to corroborate it, run-queue delay alone names contention
// only when it is this far (absolute) and this many times above the peers' median.
constexpr double kContentionAloneRunQueue = 0.3;
constexpr double kContentionAlonePeerRatio = 1.5;
// Lists of workers in a finding are capped; the full count goes into the evidence.
constexpr size_t kMaxListedWorkers = 1024;
// Per-worker notes of one kind beyond this many are summarized.
constexpr size_t kMaxNotesPerKind = 10;
// Anomalies per worker considered for collapsing (the largest ones).
constexpr size_t kMaxAnomaliesPerWorker = 64;
// Parent chains longer than this are treated as cut (guards against cycles).
constexpr int kMaxDepth = 256;
constexpr size_t kRecordsPerBlock = size_t{1} << 18;

struct FunctionRecord {
  uint32_t fid = 0;
  float time_ns = 0;      // inclusive time per iteration
  float self_ns = 0;      // self time per iteration
  float p50_ns = 0;       // median call duration
  float calls = 0;        // calls per iteration
  float critical_ns = 0;  // critical-path time per iteration
  float idle_gap_ns = 0;  // idle gap before calls, per iteration
  float bytes = 0;        // bytes per iteration
};
static_assert(sizeof(FunctionRecord) == 32, "keep the per-(worker, function) record compact");

struct WorkerRecord {
  int32_t rank = -1;
  uint32_t host = 0;
  uint32_t first_record = 0;
  uint32_t num_records = 0;
  uint32_t signature = 0;
  uint32_t iterations = 1;
  bool has_device = false;
  float median_iteration_ns = 0;
  float mean_iteration_ns = 0;
  // Iteration breakdown, mean per iteration.
  float compute_ns = 0;
  float communication_ns = 0;
  float wait_ns = 0;
  float data_ns = 0;
  float host_only_ns = 0;
  // Per iteration: outermost collective + sync time; sync / data-loading critical time;
  // GC; pageable copies; pinned copies while no kernel ran; idle gaps before calls.
  float wait_fn_ns = 0;
  // Per iteration: time in root functions that are not waits (the worker's own work). A
  // worker that waits longer *because it worked less* arrived early: a victim of noise.
  float work_ns = 0;
  float sync_critical_ns = 0;
  float data_critical_ns = 0;
  float gc_ns = 0;
  float pageable_ns = 0;
  float exposed_copy_ns = 0;  // critical time of the other copies: no kernel overlaps them
  float idle_gap_ns = 0;
  // Host metrics over the window (live mode), -1 when not sampled.
  float run_queue = -1;  // run-queue delay / wall time
  float cpu_util = -1;   // cores busy
};

struct FunctionInfo {
  std::string key;
  std::string name;
  EventKind kind = EventKind::kTorchOp;
  uint32_t parent = kNone;
  bool outermost_wait = false;  // collective / sync without a collective / sync ancestor
  bool under_wait = false;      // a collective / sync or nested in one
  bool outermost_kind = false;  // no ancestor of the same kind
  bool pageable = false;        // a pageable memcpy
  uint32_t present = 0;         // workers that ran it
  double sum_time_ns = 0;       // over workers, per iteration
  double sum_critical_ns = 0;
  double sum_calls = 0;
  double sum_bytes = 0;
};

struct WorkerProblem {
  uint32_t worker = 0;
  SummaryStats stats;
  std::string source;
  bool empty = false;
};

// 32-byte records in fixed-size blocks: no reallocation copies of a gigabyte-sized array.
class RecordStore {
 public:
  uint64_t size() const { return size_; }
  FunctionRecord& operator[](uint64_t i) {
    return blocks_[i / kRecordsPerBlock][i % kRecordsPerBlock];
  }
  const FunctionRecord& operator[](uint64_t i) const {
    return blocks_[i / kRecordsPerBlock][i % kRecordsPerBlock];
  }
  void push_back(const FunctionRecord& r) {
    if (size_ % kRecordsPerBlock == 0) {
      blocks_.push_back(std::make_unique<FunctionRecord[]>(kRecordsPerBlock));
    }
    (*this)[size_++] = r;
  }

 private:
  std::vector<std::unique_ptr<FunctionRecord[]>> blocks_;
  uint64_t size_ = 0;
};

// One anomalous (worker, function) from the peer comparison.
struct Anomaly {
  uint32_t worker = 0;
  uint32_t fid = 0;
  uint32_t group = 0;
  uint32_t peers = 0;    // workers in the group
  uint32_t present = 0;  // of them running the function
  bool only_on_some = false;
  float value = 0;   // time per iteration on this worker
  float median = 0;  // group median
  float scale = 0;   // robust sigma
  float p50 = 0, peer_p50 = 0;
  float calls = 0, peer_calls = 0;
  float critical = 0, peer_critical = 0;
  double excess() const { return static_cast<double>(value) - median; }
};

// A finding about one worker before findings merge across workers.
struct WorkerFinding {
  std::string_view code;
  FindingCategory category = FindingCategory::kCompute;
  std::string resource;
  Anomaly named;
  std::vector<Anomaly> below;     // the explaining path under the named function
  std::vector<Anomaly> children;  // other anomalous descendants, largest first
  std::vector<uint32_t> extra_victims;
  bool dropped = false;
  // For communication / sync findings: the worker's extra total wait, when smaller than the
  // function's excess (then that is what the job loses).
  double lost_cap = INFINITY;
  // PT-CPU-CONTENTION: the peers' median run-queue delay fraction (-1 = not contention).
  float contention_peer_run_queue = -1;
  // PT-CPU-CONTENTION from run-queue evidence alone (no straggler function).
  bool run_queue_only = false;
  // Re-labelled PT-STRAGGLER-GC: the group's median GC time per iteration (-1 = not).
  float gc_peer_ns = -1;
  bool wait_type() const {
    return category == FindingCategory::kCommunication ||
           category == FindingCategory::kSynchronization;
  }
};

// QuantileSketch::Quantile(0.5) with memoized bucket values: std::pow per call was a tenth
// of ingest time at 30 M records. Same semantics as Quantile(): the value of the bucket
// holding rank floor(0.5 * (count - 1)), clamped to [min, max].
class SketchMedian {
 public:
  double operator()(const QuantileSketch& s) {
    if (s.count() == 0) return 0;
    if (!(s.min() <= s.max())) return s.mean();
    const auto rank = static_cast<uint64_t>(0.5 * static_cast<double>(s.count() - 1));
    if (rank < s.zero_count()) return std::min(0.0, s.max());
    uint64_t seen = s.zero_count();
    const auto& b = s.buckets();
    for (size_t i = 0; i < b.size(); ++i) {
      seen += b[i];
      if (seen > rank) {
        return std::clamp(Value(s.offset() + static_cast<int32_t>(i)), s.min(), s.max());
      }
    }
    return s.max();
  }

 private:
  static constexpr int32_t kLow = -1024;  // bucket values ~1e-18 ns
  static constexpr int32_t kHigh = 2048;  // ~1e35 ns
  double Value(int32_t index) {
    if (index < kLow || index >= kHigh) return QuantileSketch::BucketValue(index);
    if (cache_.empty()) cache_.assign(static_cast<size_t>(kHigh - kLow), -1.0);
    double& v = cache_[static_cast<size_t>(index - kLow)];
    if (v < 0) v = QuantileSketch::BucketValue(index);
    return v;
  }
  std::vector<double> cache_;
};

// A finding ready for ranking; victims are filled only for the findings that make the cut.
struct Rendered {
  Finding finding;
  bool wants_victims = false;
  std::vector<uint32_t> culprits;
  std::vector<uint32_t> extra_victims;
};

bool IsUserLevel(EventKind kind) {
  return kind == EventKind::kPythonCall || kind == EventKind::kUserAnnotation ||
         kind == EventKind::kDataLoad || kind == EventKind::kOptimizerStep;
}

bool IsWaitKind(EventKind kind) {
  return kind == EventKind::kCollective || kind == EventKind::kSync;
}

bool IsHostWorkKind(EventKind kind) {
  return kind == EventKind::kPythonCall || kind == EventKind::kTorchOp ||
         kind == EventKind::kUserAnnotation || kind == EventKind::kKernelLaunch ||
         kind == EventKind::kRuntimeCall || kind == EventKind::kOptimizerStep;
}

std::string FormatNs(double ns) {
  const double a = std::fabs(ns);
  if (a < 1e3) return fmt::format("{:.0f} ns", ns);
  if (a < 1e5) return fmt::format("{:.1f} us", ns / 1e3);
  if (a < 1e6) return fmt::format("{:.0f} us", ns / 1e3);
  if (a < 1e8) return fmt::format("{:.1f} ms", ns / 1e6);
  if (a < 1e9) return fmt::format("{:.0f} ms", ns / 1e6);
  return fmt::format("{:.2f} s", ns / 1e9);
}

std::string FormatShare(double share) {
  const double pct = share * 100;
  return pct < 1 ? fmt::format("{:.1f}%", pct) : fmt::format("{:.0f}%", pct);
}

std::string FormatCount(double v) {
  return std::fabs(v - std::round(v)) < 0.05 ? fmt::format("{:.0f}", v) : fmt::format("{:.1f}", v);
}

std::string FormatBytes(double b) {
  if (b < 1024) return fmt::format("{:.0f} B", b);
  if (b < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}

// "3, 7-9, 12": sorted unique ints as ranges.
std::string FormatRanges(const std::vector<int32_t>& sorted, size_t max_items = 20) {
  std::string out;
  size_t items = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (items == max_items) {
      out += fmt::format(", ... ({} in all)", sorted.size());
      break;
    }
    if (!out.empty()) out += ", ";
    out += j == i ? fmt::format("{}", sorted[i]) : fmt::format("{}-{}", sorted[i], sorted[j]);
    ++items;
    i = j + 1;
  }
  return out;
}

std::string_view CodeFor(FindingCategory category) {
  switch (category) {
    case FindingCategory::kDataLoading:
      return fc::kStragglerData;
    case FindingCategory::kCommunication:
      return fc::kStragglerComm;
    case FindingCategory::kSynchronization:
      return fc::kStragglerSync;
    case FindingCategory::kGc:
      return fc::kStragglerGc;
    case FindingCategory::kMemory:
      return fc::kStragglerMemcpy;
    default:
      return fc::kStragglerCompute;
  }
}

}  // namespace

class Localizer::Impl {
 public:
  explicit Impl(LocalizerOptions options) : options_(options) {}

  void Add(const WorkerSummary& worker);
  void AddNote(std::string note) { notes_.push_back(std::move(note)); }
  Diagnosis Finish();

 private:
  uint32_t InternFunction(const FunctionSummary& f);
  void ResolveNewFunctions(const WorkerSummary& worker, const std::vector<uint32_t>& fids,
                           size_t first_new_fid);
  std::string WorkerName(uint32_t w) const;
  std::string WorkersPhrase(const std::vector<uint32_t>& ws) const;
  bool IsAncestor(uint32_t ancestor, uint32_t fid) const;
  const std::string& DisplayName(uint32_t fid) const { return functions_[fid].name; }

  void CheckDataQuality(Diagnosis& d);
  std::vector<Anomaly> FindAnomalies(const std::vector<std::vector<uint32_t>>& members);
  std::vector<WorkerFinding> Collapse(std::vector<Anomaly> anomalies);
  void ResolveVictims(std::vector<WorkerFinding>& wfs);
  void FindUntraced(const std::vector<std::vector<uint32_t>>& members,
                    std::vector<WorkerFinding>& wfs);
  float ContendedPeerRunQueue(const std::vector<uint32_t>& group, uint32_t w, double margin,
                              double ratio, std::vector<float>& values) const;
  void MarkCpuContention(const std::vector<std::vector<uint32_t>>& members,
                         std::vector<WorkerFinding>& wfs);
  void MarkGcStragglers(const std::vector<std::vector<uint32_t>>& members,
                        std::vector<WorkerFinding>& wfs);
  std::vector<Rendered> MergeAndRender(std::vector<WorkerFinding>& wfs);
  void ExpectationChecks(std::vector<Rendered>& out);
  void ApplyHardwareFindings(std::vector<Rendered>& all) const;
  Finding JobFinding(std::string_view code, FindingCategory category, std::string resource,
                     double lost_ns, uint32_t fid) const;
  void FillVictims(Finding& f, const std::vector<uint32_t>& culprits,
                   const std::vector<uint32_t>& extra) const;

  LocalizerOptions options_;
  std::vector<std::string> notes_;
  HardwareFindings hardware_;  // hardware evidence: GPU clocks, links, NICs

  // Job-wide function table.
  std::vector<FunctionInfo> functions_;
  std::unordered_map<std::string, uint32_t> function_index_;
  std::vector<uint32_t> prev_fids_;  // the previous worker's fids by position (cache)
  // Per fid: its position in the list of worker prev_position_worker_[fid] - 1.
  std::vector<uint32_t> prev_position_;
  std::vector<uint32_t> prev_position_worker_;
  std::vector<uint32_t> fids_;       // scratch
  std::vector<uint32_t> stamp_;      // per fid: last worker index + 1 that recorded it
  std::vector<uint32_t> stamp_pos_;  // per fid: that record's index

  // Workers.
  std::vector<WorkerRecord> workers_;
  RecordStore records_;
  std::vector<std::string> hosts_;
  std::unordered_map<std::string, uint32_t> host_index_;
  std::vector<WorkerProblem> problems_;
  std::vector<std::string> unranked_sources_;
  bool records_full_ = false;
  SketchMedian sketch_median_;

  // Set by Finish().
  double iteration_ns_ = 0;
  double material_ns_ = 0;
  double report_ns_ = 0;
  std::vector<uint32_t> worker_group_;
  std::vector<bool> has_children_;  // per fid
  std::vector<uint32_t> group_sizes_;
  std::vector<float> group_wait_median_;
  std::vector<float> group_work_median_;
};

uint32_t Localizer::Impl::InternFunction(const FunctionSummary& f) {
  auto [it, inserted] =
      function_index_.try_emplace(f.key, static_cast<uint32_t>(functions_.size()));
  if (inserted) {
    FunctionInfo info;
    info.key = f.key;
    info.name = f.name;
    if (info.name.empty()) {
      // The leaf frame of the key, without its "kind:" prefix.
      const size_t sep = f.key.rfind(" > ");
      std::string_view leaf = f.key;
      if (sep != std::string::npos) leaf.remove_prefix(sep + 3);
      const size_t colon = leaf.find(':');
      if (colon != std::string_view::npos) leaf.remove_prefix(colon + 1);
      info.name = leaf.empty() ? f.key : std::string(leaf);
    }
    info.kind = f.kind;
    // Communication issued through torch operators (c10d::allreduce_, record_param_comms)
    // waits like a collective: DDP runs them inside AccumulateGrad hooks, under whichever
    // gradient completes a bucket, so they must not read as compute.
    if (f.kind == EventKind::kTorchOp &&
        (info.name.starts_with("c10d::") || info.name == "record_param_comms")) {
      info.kind = EventKind::kCollective;
    }
    info.pageable = f.kind == EventKind::kMemcpy && (f.name.find("Pageable") != std::string::npos ||
                                                     f.name.find("pageable") != std::string::npos);
    functions_.push_back(std::move(info));
    stamp_.push_back(0);
    stamp_pos_.push_back(0);
  }
  return it->second;
}

// Parents and outermost flags of the functions first interned by this worker.
void Localizer::Impl::ResolveNewFunctions(const WorkerSummary& worker,
                                          const std::vector<uint32_t>& fids, size_t first_new_fid) {
  for (size_t i = 0; i < fids.size(); ++i) {
    const uint32_t fid = fids[i];
    if (fid < first_new_fid) continue;
    FunctionInfo& info = functions_[fid];
    if (info.parent != kNone) continue;
    const uint32_t p = worker.functions[i].parent;
    if (p < fids.size() && fids[p] != fid) {
      info.parent = fids[p];
    } else {
      // No (valid) parent index: the key's prefix names the caller, if it was summarized.
      std::string_view prefix = info.key;
      for (size_t sep = prefix.rfind(" > "); sep != std::string_view::npos;
           sep = prefix.rfind(" > ")) {
        prefix = prefix.substr(0, sep);
        auto it = function_index_.find(std::string(prefix));
        if (it != function_index_.end() && it->second != fid) {
          info.parent = it->second;
          break;
        }
      }
    }
  }
  for (size_t fid = first_new_fid; fid < functions_.size(); ++fid) {
    FunctionInfo& info = functions_[fid];
    bool wait_ancestor = false, same_kind_ancestor = false;
    int depth = 0;
    for (uint32_t a = info.parent; a != kNone && depth < kMaxDepth; a = functions_[a].parent) {
      wait_ancestor |= IsWaitKind(functions_[a].kind);
      same_kind_ancestor |= functions_[a].kind == info.kind;
      ++depth;
    }
    info.outermost_wait = IsWaitKind(info.kind) && !wait_ancestor;
    info.under_wait = IsWaitKind(info.kind) || wait_ancestor;
    info.outermost_kind = !same_kind_ancestor;
  }
}

void Localizer::Impl::Add(const WorkerSummary& worker) {
  const auto w = static_cast<uint32_t>(workers_.size());
  WorkerRecord wr;
  wr.rank = worker.rank;
  {
    auto [it, inserted] =
        host_index_.try_emplace(worker.host, static_cast<uint32_t>(hosts_.size()));
    if (inserted) hosts_.push_back(worker.host);
    wr.host = it->second;
  }
  wr.has_device = worker.has_device;
  wr.iterations = static_cast<uint32_t>(worker.iteration_count());
  const double iters = static_cast<double>(wr.iterations);
  double median_iter = static_cast<double>(worker.median_iteration_ns());
  if (median_iter <= 0) median_iter = static_cast<double>(worker.window_ns());
  wr.median_iteration_ns = static_cast<float>(std::max(median_iter, 0.0));
  if (!worker.iterations.empty()) {
    double dur = 0, compute = 0, comm = 0, wait = 0, data = 0, host_only = 0;
    for (const auto& it : worker.iterations) {
      dur += static_cast<double>(it.duration_ns);
      compute += static_cast<double>(it.compute_ns);
      comm += static_cast<double>(it.communication_ns);
      wait += static_cast<double>(it.wait_ns);
      data += static_cast<double>(it.data_ns);
      host_only += static_cast<double>(it.host_only_ns);
    }
    const double n = static_cast<double>(worker.iterations.size());
    wr.mean_iteration_ns = static_cast<float>(dur / n);
    wr.compute_ns = static_cast<float>(compute / n);
    wr.communication_ns = static_cast<float>(comm / n);
    wr.wait_ns = static_cast<float>(wait / n);
    wr.data_ns = static_cast<float>(data / n);
    wr.host_only_ns = static_cast<float>(host_only / n);
  } else {
    wr.mean_iteration_ns = wr.median_iteration_ns;
  }

  if (worker.rank < 0 && unranked_sources_.size() < kMaxNotesPerKind) {
    unranked_sources_.push_back(worker.source.empty() ? worker.host : worker.source);
  } else if (worker.rank < 0) {
    unranked_sources_.emplace_back();
  }
  const SummaryStats& st = worker.stats;
  const bool empty = worker.functions.empty() && worker.iterations.empty();
  if (st.dropped_events + st.malformed_events + st.out_of_order_events > 0 || empty) {
    problems_.push_back(WorkerProblem{w, st, worker.source, empty});
  }

  // Intern the keys. Workers usually list the same keys in (nearly) the same order as the
  // previous worker: a cursor into the previous worker's list predicts the next key, so the
  // common case costs one string compare; after a miss (hash lookup) the cursor resyncs to
  // just after the found key's position in the previous list, so an inserted, removed or
  // rotated stretch costs one lookup, not one per key.
  const size_t n = worker.functions.size();
  const size_t first_new_fid = functions_.size();
  fids_.resize(n);
  size_t cursor = 0;
  for (size_t i = 0; i < n; ++i) {
    const FunctionSummary& f = worker.functions[i];
    if (cursor < prev_fids_.size() && functions_[prev_fids_[cursor]].key == f.key) {
      fids_[i] = prev_fids_[cursor++];
    } else {
      fids_[i] = InternFunction(f);
      const uint32_t fid = fids_[i];
      if (fid < prev_position_.size() && prev_position_worker_[fid] == w) {
        cursor = prev_position_[fid] + 1;
      }
    }
  }
  // Positions of this worker's keys, for the next worker's cursor resync.
  prev_position_.resize(functions_.size(), 0);
  prev_position_worker_.resize(functions_.size(), kNone);
  for (size_t i = 0; i < n; ++i) {
    prev_position_[fids_[i]] = static_cast<uint32_t>(i);
    prev_position_worker_[fids_[i]] = w + 1;
  }
  if (functions_.size() > first_new_fid) ResolveNewFunctions(worker, fids_, first_new_fid);

  wr.first_record = static_cast<uint32_t>(records_.size());
  if (records_.size() + n >= UINT32_MAX) {
    if (!records_full_) {
      notes_.push_back(fmt::format(
          "function records exceed the localizer's capacity at worker {}: the functions of "
          "later workers are ignored (diagnose fewer workers or a smaller window)",
          w));
    }
    records_full_ = true;
  }
  // Pass 1: one record per function (a key listed twice is summed into its first record).
  for (size_t i = 0; i < n && !records_full_; ++i) {
    const FunctionSummary& f = worker.functions[i];
    if (f.count == 0 && f.total_ns <= 0) continue;
    const uint32_t fid = fids_[i];
    FunctionRecord r;
    r.fid = fid;
    r.time_ns = static_cast<float>(std::max(static_cast<double>(f.total_ns), 0.0) / iters);
    r.self_ns = static_cast<float>(static_cast<double>(f.self_ns) / iters);
    r.calls = static_cast<float>(static_cast<double>(f.count) / iters);
    r.p50_ns = static_cast<float>(
        f.durations.count() > 0
            ? sketch_median_(f.durations)
            : (f.count > 0 ? static_cast<double>(f.total_ns) / static_cast<double>(f.count) : 0));
    r.critical_ns = static_cast<float>(static_cast<double>(f.critical_ns) / iters);
    r.idle_gap_ns = static_cast<float>(static_cast<double>(f.idle_gap_before_ns) / iters);
    r.bytes = static_cast<float>(static_cast<double>(f.bytes) / iters);
    if (stamp_[fid] == w + 1) {
      FunctionRecord& prev = records_[stamp_pos_[fid]];
      prev.time_ns += r.time_ns;
      prev.self_ns += r.self_ns;
      prev.calls += r.calls;
      prev.critical_ns += r.critical_ns;
      prev.idle_gap_ns += r.idle_gap_ns;
      prev.bytes += r.bytes;
    } else {
      stamp_[fid] = w + 1;
      stamp_pos_[fid] = static_cast<uint32_t>(records_.size());
      records_.push_back(r);
    }
  }
  const uint32_t first = wr.first_record;
  const auto count = static_cast<uint32_t>(records_.size() - first);
  // Pass 2: a non-wait function's time excludes the collectives / syncs nested in it, so
  // that waiting inside a compute function (DDP all-reduces issued from AccumulateGrad
  // hooks, a .item() inside a block) reads as waiting, not as work.
  for (uint32_t k = 0; k < count; ++k) {
    const FunctionRecord& r = records_[first + k];
    if (!functions_[r.fid].outermost_wait) continue;
    int depth = 0;
    for (uint32_t a = functions_[r.fid].parent; a != kNone && depth < kMaxDepth;
         a = functions_[a].parent, ++depth) {
      if (stamp_[a] != w + 1) continue;
      FunctionRecord& anc = records_[stamp_pos_[a]];
      anc.time_ns = std::max(anc.time_ns - r.time_ns, 0.0f);
    }
  }
  // Pass 3: job-wide and per-worker sums.
  for (uint32_t k = 0; k < count; ++k) {
    const FunctionRecord& r = records_[first + k];
    FunctionInfo& info = functions_[r.fid];
    ++info.present;
    info.sum_time_ns += r.time_ns;
    info.sum_critical_ns += r.critical_ns;
    info.sum_calls += r.calls;
    info.sum_bytes += r.bytes;
    if (info.outermost_wait) wr.wait_fn_ns += r.time_ns;
    if (info.parent == kNone && !IsWaitKind(info.kind) && info.kind != EventKind::kIteration) {
      wr.work_ns += r.time_ns;
    }
    if (info.outermost_kind) {
      if (info.kind == EventKind::kSync) wr.sync_critical_ns += r.critical_ns;
      if (info.kind == EventKind::kDataLoad) wr.data_critical_ns += r.critical_ns;
      if (info.kind == EventKind::kGc) wr.gc_ns += r.time_ns;
    }
    if (info.pageable) wr.pageable_ns += r.time_ns;
    if (info.kind == EventKind::kMemcpy && !info.pageable) wr.exposed_copy_ns += r.critical_ns;
    wr.idle_gap_ns += r.idle_gap_ns;
  }
  wr.num_records = count;
  // Host metrics: the window-wide level when the summary has it, else the time-weighted
  // level over the root functions that carry one.
  auto host_metric = [&](Metric metric) -> float {
    for (const FunctionMetric& m : worker.worker_metrics) {
      if (m.metric == metric && std::isfinite(m.mean)) return static_cast<float>(m.mean);
    }
    double weight = 0, sum = 0;
    for (const FunctionSummary& f : worker.functions) {
      if (f.parent != FunctionSummary::kNoParent || f.total_ns <= 0) continue;
      for (const FunctionMetric& m : f.metrics) {
        if (m.metric != metric || !std::isfinite(m.mean)) continue;
        weight += static_cast<double>(f.total_ns);
        sum += static_cast<double>(f.total_ns) * m.mean;
      }
    }
    return weight > 0 ? static_cast<float>(sum / weight) : -1.0f;
  };
  wr.run_queue = host_metric(Metric::kRunQueueDelayFraction);
  wr.cpu_util = host_metric(Metric::kCpuUtilization);
  prev_fids_.swap(fids_);
  workers_.push_back(wr);
  hardware_.Add(worker);
}

std::string Localizer::Impl::WorkerName(uint32_t w) const {
  const WorkerRecord& wr = workers_[w];
  if (wr.rank >= 0) return fmt::format("rank {}", wr.rank);
  return fmt::format("worker #{} (no rank)", w);
}

std::string Localizer::Impl::WorkersPhrase(const std::vector<uint32_t>& ws) const {
  if (ws.size() == 1) return WorkerName(ws[0]);
  std::string out = "ranks ";
  const size_t shown = std::min<size_t>(ws.size(), 4);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    out += workers_[ws[i]].rank >= 0 ? fmt::format("{}", workers_[ws[i]].rank)
                                     : fmt::format("#{}", ws[i]);
  }
  if (ws.size() > shown) out += fmt::format(" and {} more", ws.size() - shown);
  return out;
}

bool Localizer::Impl::IsAncestor(uint32_t ancestor, uint32_t fid) const {
  int depth = 0;
  for (uint32_t a = functions_[fid].parent; a != kNone && depth < kMaxDepth;
       a = functions_[a].parent, ++depth) {
    if (a == ancestor) return true;
  }
  return false;
}

void Localizer::Impl::CheckDataQuality(Diagnosis& d) {
  // Ranks: missing, duplicate, absent.
  int32_t max_rank = -1;
  for (const auto& wr : workers_) max_rank = std::max(max_rank, wr.rank);
  constexpr int32_t kMaxRankChecked = 1 << 24;
  if (max_rank >= kMaxRankChecked) {
    d.notes.push_back(
        fmt::format("rank {} is implausibly large; rank gaps were not checked", max_rank));
  } else if (max_rank >= 0) {
    std::vector<uint32_t> seen(static_cast<size_t>(max_rank) + 1, 0);
    for (const auto& wr : workers_) {
      if (wr.rank >= 0) ++seen[static_cast<size_t>(wr.rank)];
    }
    std::vector<int32_t> missing, duplicate;
    for (int32_t r = 0; r <= max_rank; ++r) {
      if (seen[static_cast<size_t>(r)] == 0) missing.push_back(r);
      if (seen[static_cast<size_t>(r)] > 1) duplicate.push_back(r);
    }
    if (!missing.empty()) {
      d.notes.push_back(fmt::format(
          "missing ranks: {} ({} of {} expected ranks have no data; a missing worker may be "
          "the one the others wait for, check that its profile was written)",
          FormatRanges(missing), missing.size(), max_rank + 1));
    }
    if (!duplicate.empty()) {
      d.notes.push_back(fmt::format(
          "duplicate ranks: {} appear more than once (two profiles of one rank, or mixed "
          "windows); each copy was compared as a separate worker",
          FormatRanges(duplicate)));
    }
  }
  if (!unranked_sources_.empty()) {
    d.notes.push_back(
        fmt::format("{} worker(s) have no rank (first: {}); they are named by their input position",
                    unranked_sources_.size(), unranked_sources_.front()));
  }

  // Event problems per worker.
  std::vector<uint32_t> incomplete;
  double worst_lost_share = 0;
  size_t noted = 0;
  for (const auto& p : problems_) {
    const SummaryStats& st = p.stats;
    const double total = static_cast<double>(st.events + st.dropped_events);
    const double lost_share =
        p.empty ? 1.0
                : (total > 0 ? static_cast<double>(st.dropped_events + st.malformed_events) / total
                             : 0);
    if (noted < kMaxNotesPerKind) {
      std::string note =
          p.empty ? fmt::format("{}: no functions and no iterations in its summary",
                                WorkerName(p.worker))
                  : fmt::format("{}: {} dropped, {} malformed, {} out-of-order of {} events",
                                WorkerName(p.worker), st.dropped_events, st.malformed_events,
                                st.out_of_order_events, st.events + st.dropped_events);
      if (!st.first_problem.empty()) note += fmt::format(" (first: {})", st.first_problem);
      if (!p.source.empty()) note += fmt::format(" [{}]", p.source);
      d.notes.push_back(std::move(note));
    }
    ++noted;
    if (lost_share >= kIncompleteShare) {
      incomplete.push_back(p.worker);
      worst_lost_share = std::max(worst_lost_share, lost_share);
    }
  }
  if (noted > kMaxNotesPerKind) {
    d.notes.push_back(
        fmt::format("... and {} more workers with event problems", noted - kMaxNotesPerKind));
  }
  if (!incomplete.empty()) {
    Finding f;
    f.code = fc::kIncompleteData;
    f.category = FindingCategory::kDataQuality;
    std::sort(incomplete.begin(), incomplete.end(),
              [&](uint32_t a, uint32_t b) { return workers_[a].rank < workers_[b].rank; });
    f.title = fmt::format(
        "{}: profile badly incomplete (up to {} of events lost or malformed); "
        "findings about {} are less certain",
        WorkersPhrase(incomplete), FormatShare(worst_lost_share),
        incomplete.size() == 1 ? "it" : "them");
    for (size_t i = 0; i < incomplete.size() && i < kMaxListedWorkers; ++i) {
      f.workers.push_back(workers_[incomplete[i]].rank);
    }
    f.resource = "profiler";
    f.evidence.push_back({"workers with incomplete data", fmt::format("{}", incomplete.size())});
    f.evidence.push_back(
        {"worst share of events dropped or malformed", FormatShare(worst_lost_share)});
    f.evidence.push_back({"threshold", FormatShare(kIncompleteShare)});
    d.findings.push_back(std::move(f));
  }
}

std::vector<Anomaly> Localizer::Impl::FindAnomalies(
    const std::vector<std::vector<uint32_t>>& members) {
  std::vector<Anomaly> out;
  std::vector<uint32_t> counts(functions_.size(), 0);
  std::vector<uint32_t> offsets(functions_.size(), 0);
  std::vector<uint32_t> touched;
  std::vector<uint32_t> entries;  // record indices bucketed by fid
  std::vector<float> times;       // their time per iteration, same order (contiguous reads)
  std::vector<float> values;
  for (uint32_t g = 0; g < members.size(); ++g) {
    const auto& ws = members[g];
    const size_t n = ws.size();
    if (n < kMinPeers) continue;
    // Counting sort of the group's records by function.
    touched.clear();
    uint64_t total = 0;
    for (uint32_t w : ws) {
      const WorkerRecord& wr = workers_[w];
      for (uint32_t k = 0; k < wr.num_records; ++k) {
        const uint32_t fid = records_[wr.first_record + k].fid;
        if (counts[fid]++ == 0) touched.push_back(fid);
      }
      total += wr.num_records;
    }
    uint32_t acc = 0;
    for (uint32_t fid : touched) {
      offsets[fid] = acc;
      acc += counts[fid];
    }
    entries.resize(total);
    times.resize(total);
    for (uint32_t w : ws) {
      const WorkerRecord& wr = workers_[w];
      for (uint32_t k = 0; k < wr.num_records; ++k) {
        const uint32_t idx = wr.first_record + k;
        const FunctionRecord& r = records_[idx];
        const uint32_t pos = offsets[r.fid]++;
        entries[pos] = idx;
        times[pos] = r.time_ns;
      }
    }
    // offsets[fid] now points at the end of its bucket.
    for (uint32_t fid : touched) {
      const uint32_t present = counts[fid];
      const uint32_t end = offsets[fid];
      const uint32_t begin = end - present;
      const size_t first_anomaly = out.size();
      auto emit = [&](uint32_t idx, float median, float scale, bool minority) {
        const FunctionRecord& r = records_[idx];
        // The worker owning record idx: records are contiguous per worker, in order.
        auto it = std::upper_bound(ws.begin(), ws.end(), idx, [&](uint32_t v, uint32_t w) {
          return v < workers_[w].first_record;
        });
        Anomaly a;
        a.worker = *(it - 1);
        a.fid = fid;
        a.group = g;
        a.peers = static_cast<uint32_t>(n);
        a.present = present;
        a.only_on_some = minority;
        a.value = r.time_ns;
        a.median = median;
        a.scale = scale;
        a.p50 = r.p50_ns;
        a.calls = r.calls;
        a.critical = r.critical_ns;
        out.push_back(a);
      };
      if (2 * static_cast<size_t>(present) >= n) {
        values.resize(n);
        std::copy(times.begin() + begin, times.begin() + end, values.begin());
        std::fill(values.begin() + present, values.end(), 0.0f);
        const double max_value = *std::max_element(values.begin(), values.end());
        RobustCenter c;
        c.median = MedianInPlace(values);
        // The relative-effect and reporting floors alone rule most functions out: then the
        // MAD (a second selection pass) is not needed.
        const double floor =
            c.median + std::max(options_.min_relative_effect * c.median, report_ns_);
        if (max_value <= floor) continue;
        std::copy(times.begin() + begin, times.begin() + end, values.begin());
        std::fill(values.begin() + present, values.end(), 0.0f);
        c = MedianAndMadInPlace(values);
        const double scale = RobustScale(c, kScaleRelativeFloor, kScaleAbsoluteFloorNs);
        const double threshold = std::max(floor, c.median + options_.outlier_z * scale);
        for (uint32_t e = begin; e < end; ++e) {
          if (times[e] > threshold) {
            emit(entries[e], static_cast<float>(c.median), static_cast<float>(scale), false);
          } else if (n <= kSmallGroup && times[e] > floor) {
            // In a tiny group compare the candidate with its peers only (leave one out).
            values.clear();
            for (uint32_t o = begin; o < end; ++o) {
              if (o != e) values.push_back(times[o]);
            }
            values.resize(n - 1, 0.0f);
            const RobustCenter peers = MedianAndMadInPlace(values);
            const double peer_scale =
                RobustScale(peers, kScaleRelativeFloor, kScaleAbsoluteFloorNs);
            const double peer_floor =
                peers.median + std::max(options_.min_relative_effect * peers.median, report_ns_);
            if (times[e] > std::max(peer_floor, peers.median + options_.outlier_z * peer_scale)) {
              emit(entries[e], static_cast<float>(peers.median), static_cast<float>(peer_scale),
                   false);
            }
          }
        }
      } else {
        for (uint32_t e = begin; e < end; ++e) {
          if (times[e] >= report_ns_) emit(entries[e], 0, 0, true);
        }
      }
      if (out.size() > first_anomaly) {
        // How the anomalous workers differ: the group's p50 (over the workers running the
        // function) and calls / critical time per iteration (absent workers count 0).
        values.resize(present);
        for (uint32_t e = begin; e < end; ++e) values[e - begin] = records_[entries[e]].p50_ns;
        const auto peer_p50 = static_cast<float>(MedianInPlace(values));
        values.resize(n);
        std::fill(values.begin(), values.end(), 0.0f);
        for (uint32_t e = begin; e < end; ++e) values[e - begin] = records_[entries[e]].calls;
        const auto peer_calls = static_cast<float>(MedianInPlace(values));
        std::fill(values.begin(), values.end(), 0.0f);
        for (uint32_t e = begin; e < end; ++e) {
          values[e - begin] = records_[entries[e]].critical_ns;
        }
        const auto peer_critical = static_cast<float>(MedianInPlace(values));
        for (size_t k = first_anomaly; k < out.size(); ++k) {
          out[k].peer_p50 = peer_p50;
          out[k].peer_calls = peer_calls;
          out[k].peer_critical = peer_critical;
        }
      }
    }
    for (uint32_t fid : touched) counts[fid] = 0;
  }
  return out;
}

std::vector<WorkerFinding> Localizer::Impl::Collapse(std::vector<Anomaly> anomalies) {
  std::vector<WorkerFinding> out;
  std::sort(anomalies.begin(), anomalies.end(), [](const Anomaly& a, const Anomaly& b) {
    return a.worker != b.worker ? a.worker < b.worker : a.excess() > b.excess();
  });
  std::vector<bool> consumed;
  for (size_t begin = 0; begin < anomalies.size();) {
    size_t end = begin;
    while (end < anomalies.size() && anomalies[end].worker == anomalies[begin].worker) ++end;
    // The largest anomalies of this worker (sorted by excess, descending).
    std::vector<Anomaly> s(anomalies.begin() + static_cast<std::ptrdiff_t>(begin),
                           anomalies.begin() + static_cast<std::ptrdiff_t>(
                                                   std::min(end, begin + kMaxAnomaliesPerWorker)));
    begin = end;
    consumed.assign(s.size(), false);
    auto find = [&](uint32_t fid) -> int {
      for (size_t i = 0; i < s.size(); ++i) {
        if (!consumed[i] && s[i].fid == fid) return static_cast<int>(i);
      }
      return -1;
    };
    // Nearest unconsumed anomalous ancestor of s[i], or -1.
    auto nearest_ancestor = [&](size_t i) -> int {
      int depth = 0;
      for (uint32_t a = functions_[s[i].fid].parent; a != kNone && depth < kMaxDepth;
           a = functions_[a].parent, ++depth) {
        const int j = find(a);
        if (j >= 0) return j;
      }
      return -1;
    };
    for (;;) {
      // The largest unconsumed anomaly without an unconsumed anomalous ancestor.
      int root = -1;
      for (size_t i = 0; i < s.size() && root < 0; ++i) {
        if (!consumed[i] && nearest_ancestor(i) < 0) root = static_cast<int>(i);
      }
      if (root < 0) break;
      std::vector<size_t> path{static_cast<size_t>(root)};
      for (;;) {
        const size_t cur = path.back();
        int best = -1;
        for (size_t i = 0; i < s.size(); ++i) {
          if (consumed[i] || i == cur) continue;
          if (nearest_ancestor(i) != static_cast<int>(cur)) continue;
          if (best < 0 || s[i].excess() > s[static_cast<size_t>(best)].excess()) {
            best = static_cast<int>(i);
          }
        }
        if (best < 0 || s[static_cast<size_t>(best)].excess() < kExplainsMost * s[cur].excess()) {
          break;
        }
        path.push_back(static_cast<size_t>(best));
      }
      // Name what the user wrote: the deepest annotation (record_function) on the path, else
      // the deepest other user-level function, else the path's top.
      size_t named_pos = 0;
      bool annotated = false;
      for (size_t p = 0; p < path.size(); ++p) {
        const EventKind kind = functions_[s[path[p]].fid].kind;
        if (kind == EventKind::kUserAnnotation) {
          named_pos = p;
          annotated = true;
        } else if (!annotated && IsUserLevel(kind)) {
          named_pos = p;
        }
      }
      const size_t named = path[named_pos];
      WorkerFinding wf;
      wf.named = s[named];
      for (size_t p = named_pos + 1; p < path.size(); ++p) wf.below.push_back(s[path[p]]);
      // Category: data loading, GC, a collective, a synchronization anywhere on the path
      // wins (in that order: a kernel under a collective is communication); otherwise the
      // leaf's kind.
      const EventKind leaf = functions_[s[path.back()].fid].kind;
      bool data = false, gc = false, collective = false, sync = false;
      for (size_t p : path) {
        const EventKind kind = functions_[s[p].fid].kind;
        data |= kind == EventKind::kDataLoad;
        gc |= kind == EventKind::kGc;
        collective |= kind == EventKind::kCollective;
        sync |= kind == EventKind::kSync;
      }
      if (data) {
        wf.category = FindingCategory::kDataLoading;
        wf.resource = "data loader";
      } else if (gc) {
        wf.category = FindingCategory::kGc;
        wf.resource = "CPU (Python GC)";
      } else if (collective) {
        wf.category = FindingCategory::kCommunication;
        wf.resource = "network";
      } else if (sync) {
        wf.category = FindingCategory::kSynchronization;
        wf.resource = "GPU";
      } else if (leaf == EventKind::kMemcpy || leaf == EventKind::kMemset) {
        wf.category = FindingCategory::kMemory;
        wf.resource = "PCIe";
      } else {
        wf.category = FindingCategory::kCompute;
        wf.resource = leaf == EventKind::kGpuKernel ? "GPU" : "CPU";
      }
      // GC pauses only some workers take are a GC straggler, not extra work.
      wf.code = wf.named.only_on_some && wf.category != FindingCategory::kGc
                    ? fc::kFunctionOnlyOnSome
                    : CodeFor(wf.category);
      // Consume the path down to the named function and everything under the named one.
      for (size_t p = 0; p <= named_pos; ++p) consumed[path[p]] = true;
      for (size_t i = 0; i < s.size(); ++i) {
        if (consumed[i] || !IsAncestor(s[named].fid, s[i].fid)) continue;
        consumed[i] = true;
        const bool on_path = std::find(path.begin(), path.end(), i) != path.end();
        if (!on_path) wf.children.push_back(s[i]);
      }
      out.push_back(std::move(wf));
    }
  }
  return out;
}

void Localizer::Impl::ResolveVictims(std::vector<WorkerFinding>& wfs) {
  for (auto& f : wfs) {
    if (!f.wait_type()) continue;
    // A longer wait at one call site can be a shorter one at another (DDP issues its
    // all-reduces from whichever hook completes a bucket): the job only loses what the
    // worker's total collective + sync wait exceeds its group's.
    const double extra_wait = static_cast<double>(workers_[f.named.worker].wait_fn_ns) -
                              group_wait_median_[f.named.group];
    if (extra_wait < report_ns_) {
      f.dropped = true;
      continue;
    }
    // It waited longer because it reached the collective early: its own work was shorter
    // than its peers' by most of the extra wait. Nobody lost time to it.
    const double work_deficit =
        group_work_median_[f.named.group] - static_cast<double>(workers_[f.named.worker].work_ns);
    if (work_deficit >= kEarlyArrivalShare * extra_wait) {
      f.dropped = true;
      continue;
    }
    f.lost_cap = std::min(f.named.excess(), extra_wait);
    WorkerFinding* explaining = nullptr;
    for (auto& o : wfs) {
      if (o.wait_type() || o.dropped) continue;
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

void Localizer::Impl::FindUntraced(const std::vector<std::vector<uint32_t>>& members,
                                   std::vector<WorkerFinding>& wfs) {
  std::vector<bool> has_work(workers_.size(), false);
  for (const auto& f : wfs) {
    if (!f.dropped && !f.wait_type()) has_work[f.named.worker] = true;
  }
  std::vector<float> values;
  for (uint32_t g = 0; g < members.size(); ++g) {
    const auto& ws = members[g];
    values.clear();
    for (uint32_t w : ws) values.push_back(workers_[w].wait_fn_ns);
    const RobustCenter c = MedianAndMadInPlace(values);
    if (ws.size() < kMinPeers || c.median <= 0) continue;
    const double scale = RobustScale(c, kScaleRelativeFloor, kScaleAbsoluteFloorNs);
    const double threshold =
        std::max({options_.outlier_z * scale, options_.min_relative_effect * c.median, report_ns_});
    for (uint32_t w : ws) {
      const double deficit = c.median - workers_[w].wait_fn_ns;
      if (deficit <= threshold || has_work[w]) continue;
      WorkerFinding wf;
      wf.code = fc::kStragglerUntraced;
      wf.category = FindingCategory::kCpuContention;
      wf.resource = "CPU";
      wf.named.worker = w;
      wf.named.fid = kNone;
      wf.named.group = g;
      wf.named.peers = static_cast<uint32_t>(ws.size());
      wf.named.value = static_cast<float>(c.median);  // so that excess() == deficit
      wf.named.median = workers_[w].wait_fn_ns;
      wfs.push_back(std::move(wf));
    }
  }
}

void Localizer::Impl::MarkGcStragglers(const std::vector<std::vector<uint32_t>>& members,
                                       std::vector<WorkerFinding>& wfs) {
  std::vector<float> values;
  for (auto& wf : wfs) {
    if (wf.dropped || (wf.code != fc::kStragglerCompute && wf.code != fc::kStragglerUntraced)) {
      continue;
    }
    values.clear();
    for (uint32_t o : members[wf.named.group]) values.push_back(workers_[o].gc_ns);
    const auto peer = static_cast<float>(MedianInPlace(values));
    const double extra_gc = static_cast<double>(workers_[wf.named.worker].gc_ns) - peer;
    if (extra_gc < kExplainsMost * wf.named.excess() || extra_gc < material_ns_) continue;
    wf.code = fc::kStragglerGc;
    wf.category = FindingCategory::kGc;
    wf.resource = "CPU (Python GC)";
    wf.gc_peer_ns = peer;
  }
}

// The median run-queue delay of worker w's peers (its group without it), or a negative value
// when w's own delay is not at least `margin` above and `ratio` times that median.
float Localizer::Impl::ContendedPeerRunQueue(const std::vector<uint32_t>& group, uint32_t w,
                                             double margin, double ratio,
                                             std::vector<float>& values) const {
  if (workers_[w].run_queue < margin) return -1;
  values.clear();
  for (uint32_t o : group) {
    if (o != w && workers_[o].run_queue >= 0) values.push_back(workers_[o].run_queue);
  }
  if (values.empty()) return -1;
  const auto peer = static_cast<float>(MedianInPlace(values));
  if (workers_[w].run_queue < peer + margin || workers_[w].run_queue < ratio * peer) return -1;
  return peer;
}

void Localizer::Impl::MarkCpuContention(const std::vector<std::vector<uint32_t>>& members,
                                        std::vector<WorkerFinding>& wfs) {
  std::vector<float> values;
  for (auto& wf : wfs) {
    if (wf.dropped) continue;
    const bool straggler = wf.code == fc::kStragglerCompute || wf.code == fc::kStragglerData ||
                           wf.code == fc::kStragglerComm || wf.code == fc::kStragglerSync ||
                           wf.code == fc::kStragglerUntraced;
    if (!straggler) continue;
    float peer = ContendedPeerRunQueue(members[wf.named.group], wf.named.worker,
                                       kContentionRunQueue, kContentionPeerRatio, values);
    if (peer < 0) {
      peer = ContendedPeerRunQueue(members[wf.named.group], wf.named.worker,
                                   kContentionLargeRunQueue, kContentionLargePeerRatio, values);
    }
    if (peer < 0 && wf.code == fc::kStragglerUntraced) {
      // Nothing traced explains why the peers wait for it: a clear run-queue excess does.
      peer = ContendedPeerRunQueue(members[wf.named.group], wf.named.worker, kContentionRunQueue,
                                   kContentionLargePeerRatio, values);
    }
    if (peer < 0) continue;
    wf.code = fc::kCpuContention;
    wf.category = FindingCategory::kCpuContention;
    wf.resource = "CPU (run queue)";
    wf.contention_peer_run_queue = peer;
  }
  // Run-queue evidence alone: a starved worker need not show a longer traced function (in
  // DDP it loses its time in backward and the C++ all-reduce, where its peers wait as long).
  // A stricter bar than the relabelling above, since no function corroborates it; the time
  // lost is bounded by the extra share of wall time it spent runnable but not running.
  // A worker named only as contended already, by relabelled straggler functions none of
  // which is material, gets this finding too when it says more: a starved rank is slower in every
  // function, each one alone a little (real-cpu-contention-r3: Block2.forward +4 ms, 3 % of the
  // iteration, as the largest, while the rank waited 0.89 of wall time for a CPU against its peers'
  // 0.58).
  std::vector<bool> named(workers_.size(), false);
  std::vector<double> contended(workers_.size(), -1);  // largest relabelled excess
  for (const auto& wf : wfs) {
    if (wf.dropped || wf.wait_type()) continue;
    if (wf.code == fc::kCpuContention) {
      contended[wf.named.worker] = std::max(contended[wf.named.worker], wf.named.excess());
    } else {
      named[wf.named.worker] = true;
    }
  }
  for (uint32_t g = 0; g < members.size(); ++g) {
    if (members[g].size() < kMinPeers) continue;
    for (uint32_t w : members[g]) {
      if (named[w]) continue;
      const float peer = ContendedPeerRunQueue(members[g], w, kContentionAloneRunQueue,
                                               kContentionAlonePeerRatio, values);
      if (peer < 0) continue;
      const double excess = std::min(1.0, static_cast<double>(workers_[w].run_queue - peer));
      // A material relabelled finding names the function and says it already.
      if (contended[w] >= material_ns_ || excess * iteration_ns_ <= contended[w]) continue;
      WorkerFinding wf;
      wf.code = fc::kCpuContention;
      wf.category = FindingCategory::kCpuContention;
      wf.resource = "CPU (run queue)";
      wf.contention_peer_run_queue = peer;
      wf.run_queue_only = true;
      wf.named.worker = w;
      wf.named.fid = kNone;
      wf.named.group = g;
      wf.named.peers = static_cast<uint32_t>(members[g].size());
      wf.named.median = 0;
      wf.named.value = static_cast<float>(excess * iteration_ns_);  // excess() == lost time
      wfs.push_back(std::move(wf));
    }
  }
}

void Localizer::Impl::FillVictims(Finding& f, const std::vector<uint32_t>& culprits,
                                  const std::vector<uint32_t>& extra) const {
  float culprit_wait = INFINITY;
  for (uint32_t c : culprits) culprit_wait = std::min(culprit_wait, workers_[c].wait_fn_ns);
  std::vector<bool> is_culprit(workers_.size(), false);
  for (uint32_t c : culprits) is_culprit[c] = true;
  const double min_extra_wait = kVictimShare * f.lost_ns_per_iteration;
  std::vector<uint32_t> victims = extra;
  // Waits are only comparable within a peer group (another pipeline stage waits by design).
  std::vector<bool> culprit_group(group_wait_median_.size(), false);
  for (uint32_t c : culprits) culprit_group[worker_group_[c]] = true;
  for (uint32_t w = 0; w < workers_.size(); ++w) {
    if (is_culprit[w] || !culprit_group[worker_group_[w]]) continue;
    if (static_cast<double>(workers_[w].wait_fn_ns) - culprit_wait >= min_extra_wait) {
      victims.push_back(w);
    }
  }
  std::sort(victims.begin(), victims.end());
  victims.erase(std::unique(victims.begin(), victims.end()), victims.end());
  std::erase_if(victims, [&](uint32_t w) { return is_culprit[w]; });
  if (victims.empty()) return;
  std::vector<int32_t> ranks;
  for (uint32_t w : victims) ranks.push_back(workers_[w].rank);
  std::sort(ranks.begin(), ranks.end());
  if (ranks.size() > kMaxListedWorkers) ranks.resize(kMaxListedWorkers);
  f.victims = ranks;
  f.evidence.push_back(
      {"victims (wait for it)", fmt::format("{} (waiting at least {} more per iteration)",
                                            victims.size(), FormatNs(min_extra_wait))});
}

std::vector<Rendered> Localizer::Impl::MergeAndRender(std::vector<WorkerFinding>& wfs) {
  // Group by (code, named function); the worst worker's finding carries the evidence.
  std::vector<size_t> order;
  for (size_t i = 0; i < wfs.size(); ++i) {
    if (!wfs[i].dropped) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = wfs[a];
    const auto& y = wfs[b];
    if (x.code != y.code) return x.code < y.code;
    if (x.named.fid != y.named.fid) return x.named.fid < y.named.fid;
    return x.named.excess() > y.named.excess();
  });
  std::vector<Rendered> out;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    const WorkerFinding& top = wfs[order[i]];
    std::vector<uint32_t> culprits, extra;
    // Untraced findings are per worker (no function to merge on).
    while (j < order.size() && wfs[order[j]].code == top.code &&
           wfs[order[j]].named.fid == top.named.fid && (top.named.fid != kNone || j == i)) {
      culprits.push_back(wfs[order[j]].named.worker);
      for (uint32_t v : wfs[order[j]].extra_victims) extra.push_back(v);
      ++j;
    }
    i = j;
    const Anomaly& a = top.named;
    const uint32_t w = a.worker;
    const std::string who = WorkersPhrase(culprits);
    const bool plural = culprits.size() > 1;
    Finding f;
    f.code = top.code;
    f.category = top.category;
    f.resource = top.resource;
    f.lost_ns_per_iteration = std::min(a.excess(), top.lost_cap);
    f.lost_share = iteration_ns_ > 0 ? f.lost_ns_per_iteration / iteration_ns_ : 0;
    std::sort(culprits.begin(), culprits.end(),
              [&](uint32_t x, uint32_t y) { return workers_[x].rank < workers_[y].rank; });
    for (size_t k = 0; k < culprits.size() && k < kMaxListedWorkers; ++k) {
      f.workers.push_back(workers_[culprits[k]].rank);
    }
    const std::string effect =
        f.lost_ns_per_iteration < a.excess()
            ? fmt::format("+{} here, +{} total wait, {} of the iteration", FormatNs(a.excess()),
                          FormatNs(f.lost_ns_per_iteration), FormatShare(f.lost_share))
            : fmt::format("+{}, {} of the iteration", FormatNs(a.excess()),
                          FormatShare(f.lost_share));
    if (top.run_queue_only) {
      // Run-queue evidence alone (see MarkCpuContention).
      f.title = fmt::format(
          "{} waits for a CPU far more than its peers, which slows every iteration (up to {})", who,
          effect);
      f.evidence.push_back({"time lost per iteration",
                            fmt::format("at most {}: the extra share of wall time {} was "
                                        "runnable but not running, times the median iteration",
                                        FormatNs(a.excess()), who)});
      f.evidence.push_back({"traced functions",
                            "none is longer than its peers': the delay is "
                            "spread over the whole step"});
    } else if (a.fid == kNone) {
      // PT-STRAGGLER-UNTRACED.
      const WorkerRecord& wr = workers_[w];
      f.title = fmt::format(
          "{} is the worker its peers wait for ({}), but none of its traced functions is "
          "longer: the time goes outside traced code",
          who, effect);
      f.evidence.push_back({"collective + sync wait per iteration",
                            fmt::format("{} on {}", FormatNs(wr.wait_fn_ns), who)});
      f.evidence.push_back({fmt::format("peer median ({} workers)", a.peers), FormatNs(a.value)});
      double gap_median = 0;
      {
        std::vector<float> gaps;
        for (uint32_t o = 0; o < workers_.size(); ++o) {
          if (worker_group_[o] == a.group) gaps.push_back(workers_[o].idle_gap_ns);
        }
        gap_median = MedianInPlace(gaps);
      }
      f.evidence.push_back(
          {"idle gaps before calls per iteration",
           fmt::format("{} (peers' median {})", FormatNs(wr.idle_gap_ns), FormatNs(gap_median))});
    } else {
      const FunctionInfo& fn = functions_[a.fid];
      f.function = fn.name;
      f.function_key = fn.key;
      if (a.only_on_some) {
        f.title = fmt::format("{} run{} {} ({}/iter), which {} of {} peers do not run ({})", who,
                              plural ? "" : "s", fn.name, FormatNs(a.value), a.peers - a.present,
                              a.peers, effect);
      } else {
        f.title =
            fmt::format("{} spend{} {}/iter in {}, {:.1f}x {} peers ({})", who, plural ? "" : "s",
                        FormatNs(a.value), fn.name, a.median > 0 ? a.value / a.median : 0.0,
                        plural ? "their" : "its", effect);
      }
      f.evidence.push_back({"time per iteration", fmt::format("{} in {} on {}", FormatNs(a.value),
                                                              fn.name, WorkerName(w))});
      if (a.only_on_some) {
        f.evidence.push_back(
            {"peer group workers running it", fmt::format("{} of {}", a.present, a.peers)});
      } else {
        f.evidence.push_back(
            {fmt::format("peer median ({} workers)", a.peers), FormatNs(a.median)});
        f.evidence.push_back(
            {"robust z-score", fmt::format("{:.1f}", a.scale > 0 ? a.excess() / a.scale : 0.0)});
        // How: slower calls or more calls.
        const double call_ratio = a.peer_calls > 0 ? a.calls / a.peer_calls : 0;
        const double p50_ratio = a.peer_p50 > 0 ? a.p50 / a.peer_p50 : 0;
        std::string how;
        if (call_ratio < 1.2 && p50_ratio < 1.2) {
          how = fmt::format(
              "same calls ({} per iteration, p50 {} vs {}): the extra time is "
              "work between or inside them",
              FormatCount(a.calls), FormatNs(a.p50), FormatNs(a.peer_p50));
        } else if (call_ratio >= 1.2 && call_ratio >= p50_ratio) {
          how =
              fmt::format("more calls: {} per iteration vs {} (p50 {} vs {})", FormatCount(a.calls),
                          FormatCount(a.peer_calls), FormatNs(a.p50), FormatNs(a.peer_p50));
        } else {
          how = fmt::format("slower calls: p50 {} vs {} ({:.1f}x), {} calls per iteration vs {}",
                            FormatNs(a.p50), FormatNs(a.peer_p50), p50_ratio, FormatCount(a.calls),
                            FormatCount(a.peer_calls));
        }
        f.evidence.push_back({"how it differs", how});
      }
      for (const Anomaly& b : top.below) {
        f.evidence.push_back(
            {"time goes into",
             fmt::format("{}: {} -> {} per iteration (+{})", functions_[b.fid].name,
                         FormatNs(b.median), FormatNs(b.value), FormatNs(b.excess()))});
      }
      for (size_t k = 0; k < top.children.size() && k < 3; ++k) {
        const Anomaly& c = top.children[k];
        f.evidence.push_back(
            {"of which", fmt::format("{}: {} -> {} per iteration (+{})", functions_[c.fid].name,
                                     FormatNs(c.median), FormatNs(c.value), FormatNs(c.excess()))});
      }
      if (top.below.empty() && top.children.empty() && has_children_[a.fid]) {
        f.evidence.push_back({"where", fmt::format("in {}'s own code: none of its traced "
                                                   "callees is longer",
                                                   fn.name)});
      }
      if (!IsUserLevel(fn.kind)) {
        int depth = 0;
        for (uint32_t p = fn.parent; p != kNone && depth < kMaxDepth;
             p = functions_[p].parent, ++depth) {
          if (IsUserLevel(functions_[p].kind)) {
            f.evidence.push_back({"called from", functions_[p].name});
            break;
          }
        }
      }
      if (a.critical > 0 || a.peer_critical > 0) {
        f.evidence.push_back({"on the critical path per iteration",
                              fmt::format("{} (peers' median {})", FormatNs(a.critical),
                                          FormatNs(a.peer_critical))});
      }
    }
    if (top.gc_peer_ns >= 0) {
      const std::string gc =
          fmt::format("{}/iter on {} vs {} (peers' median)", FormatNs(workers_[w].gc_ns),
                      WorkerName(w), FormatNs(top.gc_peer_ns));
      f.title = fmt::format("{} (GC pauses: {})", f.title, gc);
      f.evidence.insert(f.evidence.begin(), Evidence{"GC pauses", gc});
    }
    if (top.contention_peer_run_queue >= 0) {
      const WorkerRecord& cw = workers_[w];
      const std::string rq = fmt::format("run-queue delay {} of wall time on {} vs {} on peers",
                                         FormatShare(cw.run_queue), WorkerName(w),
                                         FormatShare(top.contention_peer_run_queue));
      f.title = fmt::format("CPU contention: {}; {}", rq, f.title);
      std::vector<Evidence> first{{"run-queue delay", rq + " (median)"}};
      if (cw.cpu_util >= 0) {
        first.push_back(
            {"CPU utilization", fmt::format("{:.2f} cores on {}", cw.cpu_util, WorkerName(w))});
      }
      f.evidence.insert(f.evidence.begin(), first.begin(), first.end());
    }
    if (plural) {
      f.evidence.push_back(
          {"workers affected", fmt::format("{} (worst: {})", culprits.size(), WorkerName(w))});
    }
    const WorkerRecord& wr = workers_[w];
    if (!hosts_[wr.host].empty()) {
      f.evidence.push_back({"host", fmt::format("{} ({})", hosts_[wr.host], WorkerName(w))});
    }
    if (f.category != FindingCategory::kCommunication &&
        f.category != FindingCategory::kSynchronization && group_wait_median_[a.group] > 0) {
      f.evidence.push_back({"its collective + sync wait",
                            fmt::format("{}/iter on {} (peers' median {}): the others wait "
                                        "for it",
                                        FormatNs(wr.wait_fn_ns), WorkerName(w),
                                        FormatNs(group_wait_median_[a.group]))});
    }
    if (f.category == FindingCategory::kCommunication) {
      f.evidence.push_back({"compute anomalies on other workers",
                            "none: the time is lost "
                            "in communication itself"});
    }
    f.evidence.push_back({"median iteration (job)", FormatNs(iteration_ns_)});
    f.material = f.lost_ns_per_iteration >= material_ns_;
    // Consistency: a straggler's median call is slower, or it makes more calls. When neither
    // explains at least half of the material bar, the excess comes from a few slow calls
    // (preemption, jitter): material only when it is large (kIntermittentFactor x the bar).
    if (f.material && !a.only_on_some && a.peer_p50 > 0 && a.fid != kNone) {
      const double consistent =
          std::max(0.0, static_cast<double>(a.calls) * (a.p50 - a.peer_p50)) +
          std::max(0.0, static_cast<double>(a.calls - a.peer_calls)) * a.peer_p50;
      if (consistent < 0.5 * material_ns_ &&
          f.lost_ns_per_iteration < kIntermittentFactor * material_ns_) {
        f.material = false;
        f.evidence.push_back(
            {"intermittent",
             fmt::format("the median call is not slower (p50 {} vs peers' {}) and there are "
                         "no extra calls: a few slow calls make the excess; below {:.0f}% of "
                         "the iteration this is treated as noise",
                         FormatNs(a.p50), FormatNs(a.peer_p50),
                         100.0 * kIntermittentFactor * options_.material_share)});
      }
    }
    Rendered r;
    r.finding = std::move(f);
    r.wants_victims = top.category != FindingCategory::kCommunication &&
                      top.category != FindingCategory::kSynchronization;
    r.culprits = std::move(culprits);
    r.extra_victims = std::move(extra);
    out.push_back(std::move(r));
  }
  return out;
}

Finding Localizer::Impl::JobFinding(std::string_view code, FindingCategory category,
                                    std::string resource, double lost_ns, uint32_t fid) const {
  Finding f;
  f.code = code;
  f.category = category;
  f.resource = std::move(resource);
  f.lost_ns_per_iteration = lost_ns;
  f.lost_share = iteration_ns_ > 0 ? lost_ns / iteration_ns_ : 0;
  f.material = lost_ns >= material_ns_;
  if (fid != kNone) {
    f.function = functions_[fid].name;
    f.function_key = functions_[fid].key;
  }
  return f;
}

void Localizer::Impl::ExpectationChecks(std::vector<Rendered>& out) {
  const size_t num_workers = workers_.size();
  std::vector<float> values;
  auto job_median = [&](auto get) {
    values.clear();
    for (const auto& wr : workers_) values.push_back(get(wr));
    return MedianInPlace(values);
  };
  // The functions of some kind with the most time (or critical time) per worker, largest
  // first.
  auto top_functions = [&](auto pred, bool by_critical, size_t k) {
    std::vector<uint32_t> fids;
    for (uint32_t fid = 0; fid < functions_.size(); ++fid) {
      if (pred(functions_[fid])) fids.push_back(fid);
    }
    auto weight = [&](uint32_t fid) {
      return by_critical ? functions_[fid].sum_critical_ns : functions_[fid].sum_time_ns;
    };
    std::sort(fids.begin(), fids.end(),
              [&](uint32_t a, uint32_t b) { return weight(a) > weight(b); });
    std::erase_if(fids, [&](uint32_t fid) { return weight(fid) <= 0; });
    if (fids.size() > k) fids.resize(k);
    return fids;
  };
  auto per_worker = [&](double sum) { return sum / static_cast<double>(num_workers); };
  auto caller = [&](uint32_t fid) -> std::string {
    const uint32_t p = functions_[fid].parent;
    return p == kNone ? std::string() : fmt::format(", called from {}", functions_[p].name);
  };
  auto push = [&](Finding f) {
    Rendered r;
    r.finding = std::move(f);
    out.push_back(std::move(r));
  };
  const std::string median_of = fmt::format("median of {} workers", num_workers);

  // Host- / launch-bound: the device idles while the host works.
  {
    values.clear();
    std::vector<float> idle_ns;
    for (const auto& wr : workers_) {
      if (!wr.has_device || wr.mean_iteration_ns <= 0) continue;
      values.push_back(wr.host_only_ns / wr.mean_iteration_ns);
      idle_ns.push_back(wr.host_only_ns);
    }
    const size_t device_workers = values.size();
    const double share = MedianInPlace(values);
    if (device_workers > 0 && share >= kHostBoundShare) {
      const double lost = MedianInPlace(idle_ns);
      Finding f = JobFinding(fc::kHostBound, FindingCategory::kHostOverhead, "CPU", lost, kNone);
      f.material = true;
      if (device_workers < num_workers) {
        // Only the workers with a device can be host-bound: name them.
        for (const auto& wr : workers_) {
          if (wr.has_device && f.workers.size() < kMaxListedWorkers) f.workers.push_back(wr.rank);
        }
        std::sort(f.workers.begin(), f.workers.end());
      }
      f.title = fmt::format(
          "the GPU is idle {} of each iteration while the host works ({}/iter, {}): "
          "the job is host / launch-bound",
          FormatShare(share), FormatNs(lost),
          device_workers < num_workers ? fmt::format("{} workers with a device", device_workers)
                                       : std::string("all workers"));
      f.evidence.push_back({"device idle, host busy",
                            fmt::format("{} ({} of the iteration, median of {} workers with a "
                                        "device)",
                                        FormatNs(lost), FormatShare(share), device_workers)});
      f.evidence.push_back(
          {"device compute per iteration",
           FormatNs(job_median([](const WorkerRecord& wr) { return wr.compute_ns; }))});
      f.evidence.push_back({"threshold", FormatShare(kHostBoundShare)});
      for (uint32_t fid :
           top_functions([](const FunctionInfo& fn) { return IsHostWorkKind(fn.kind); }, true, 3)) {
        f.evidence.push_back({"host function on the critical path",
                              fmt::format("{}: {}/iter (mean of workers)", functions_[fid].name,
                                          FormatNs(per_worker(functions_[fid].sum_critical_ns)))});
      }
      f.evidence.push_back({"median iteration (job)", FormatNs(iteration_ns_)});
      push(std::move(f));
    }
  }

  // Synchronizations on the critical path.
  {
    const double lost = job_median([](const WorkerRecord& wr) { return wr.sync_critical_ns; });
    if (lost >= report_ns_ && lost > 0) {
      auto top = top_functions(
          [](const FunctionInfo& fn) { return fn.kind == EventKind::kSync && fn.outermost_kind; },
          true, 3);
      Finding f = JobFinding(fc::kSyncCritical, FindingCategory::kSynchronization, "GPU", lost,
                             top.empty() ? kNone : top[0]);
      f.title = fmt::format(
          "host-device synchronizations{} sit on the critical path: {}/iter ({} of the "
          "iteration, all workers)",
          f.function.empty() ? "" : " (" + f.function + ")", FormatNs(lost),
          FormatShare(f.lost_share));
      f.evidence.push_back(
          {"sync on the critical path", fmt::format("{} ({})", FormatNs(lost), median_of)});
      for (uint32_t fid : top) {
        const FunctionInfo& fn = functions_[fid];
        f.evidence.push_back({"synchronizing function",
                              fmt::format("{}: {}/iter on the critical path, {} calls/iter "
                                          "(mean of workers){}",
                                          fn.name, FormatNs(per_worker(fn.sum_critical_ns)),
                                          FormatCount(per_worker(fn.sum_calls)), caller(fid))});
      }
      f.evidence.push_back({"median iteration (job)", FormatNs(iteration_ns_)});
      push(std::move(f));
    }
  }

  // Data loading on the critical path.
  {
    const double lost = job_median([](const WorkerRecord& wr) { return wr.data_critical_ns; });
    if (lost >= report_ns_ && lost > 0) {
      auto top = top_functions(
          [](const FunctionInfo& fn) {
            return fn.kind == EventKind::kDataLoad && fn.outermost_kind;
          },
          true, 3);
      Finding f = JobFinding(fc::kDataCritical, FindingCategory::kDataLoading, "data loader", lost,
                             top.empty() ? kNone : top[0]);
      f.title = fmt::format(
          "training waits for data: data loading{} takes {}/iter on the critical path ({} of "
          "the iteration, all workers)",
          f.function.empty() ? "" : " (" + f.function + ")", FormatNs(lost),
          FormatShare(f.lost_share));
      f.evidence.push_back(
          {"data loading on the critical path", fmt::format("{} ({})", FormatNs(lost), median_of)});
      for (uint32_t fid : top) {
        const FunctionInfo& fn = functions_[fid];
        f.evidence.push_back(
            {"data-loading function", fmt::format("{}: {}/iter on the critical path, {} calls/iter "
                                                  "(mean of workers)",
                                                  fn.name, FormatNs(per_worker(fn.sum_critical_ns)),
                                                  FormatCount(per_worker(fn.sum_calls)))});
      }
      f.evidence.push_back({"median iteration (job)", FormatNs(iteration_ns_)});
      push(std::move(f));
    }
  }

  // Garbage collection.
  {
    const double lost = job_median([](const WorkerRecord& wr) { return wr.gc_ns; });
    if (lost >= report_ns_ && lost > 0) {
      auto top = top_functions(
          [](const FunctionInfo& fn) { return fn.kind == EventKind::kGc && fn.outermost_kind; },
          false, 1);
      Finding f = JobFinding(fc::kGc, FindingCategory::kGc, "CPU (Python GC)", lost,
                             top.empty() ? kNone : top[0]);
      f.title = fmt::format(
          "garbage-collector pauses cost {}/iter ({} of the iteration, all "
          "workers)",
          FormatNs(lost), FormatShare(f.lost_share));
      f.evidence.push_back(
          {"GC pauses per iteration", fmt::format("{} ({})", FormatNs(lost), median_of)});
      if (!top.empty()) {
        f.evidence.push_back({"GC pauses per iteration (count)",
                              FormatCount(per_worker(functions_[top[0]].sum_calls))});
      }
      f.evidence.push_back({"median iteration (job)", FormatNs(iteration_ns_)});
      push(std::move(f));
    }
  }

  // Pageable host-device copies.
  {
    const double lost = job_median([](const WorkerRecord& wr) { return wr.pageable_ns; });
    if (lost >= report_ns_ && lost > 0) {
      auto top = top_functions([](const FunctionInfo& fn) { return fn.pageable; }, false, 3);
      Finding f = JobFinding(fc::kPageableMemcpy, FindingCategory::kMemory, "PCIe", lost,
                             top.empty() ? kNone : top[0]);
      f.title = fmt::format(
          "copies from pageable host memory{} take {}/iter ({} of the "
          "iteration, all workers)",
          f.function.empty() ? "" : " (" + f.function + ")", FormatNs(lost),
          FormatShare(f.lost_share));
      f.evidence.push_back(
          {"pageable copies per iteration", fmt::format("{} ({})", FormatNs(lost), median_of)});
      for (uint32_t fid : top) {
        const FunctionInfo& fn = functions_[fid];
        const double bw = fn.sum_time_ns > 0 ? fn.sum_bytes * 1e9 / fn.sum_time_ns : 0;
        f.evidence.push_back(
            {"pageable copy",
             fmt::format("{}: {}/iter, {} per iteration, {}/s achieved (mean of workers){}",
                         fn.name, FormatNs(per_worker(fn.sum_time_ns)),
                         FormatBytes(per_worker(fn.sum_bytes)), FormatBytes(bw), caller(fid))});
      }
      f.evidence.push_back({"median iteration (job)", FormatNs(iteration_ns_)});
      push(std::move(f));
    }
  }

  // Copies (from pinned memory, or between devices) that no kernel overlaps: the GPU waits
  // for them. Pageable copies are the finding above; their time is not counted again here.
  {
    const double lost = job_median([](const WorkerRecord& wr) { return wr.exposed_copy_ns; });
    if (lost >= report_ns_ && lost > 0) {
      auto top = top_functions(
          [](const FunctionInfo& fn) { return fn.kind == EventKind::kMemcpy && !fn.pageable; },
          true, 3);
      Finding f = JobFinding(fc::kSerializedMemcpy, FindingCategory::kMemory, "PCIe", lost,
                             top.empty() ? kNone : top[0]);
      f.title = fmt::format(
          "host-device copies{} run while the GPU computes nothing: {}/iter ({} of the "
          "iteration, all workers)",
          f.function.empty() ? "" : " (" + f.function + ")", FormatNs(lost),
          FormatShare(f.lost_share));
      f.evidence.push_back({"copy time with no kernel running, per iteration",
                            fmt::format("{} ({})", FormatNs(lost), median_of)});
      for (uint32_t fid : top) {
        const FunctionInfo& fn = functions_[fid];
        const double bw = fn.sum_time_ns > 0 ? fn.sum_bytes * 1e9 / fn.sum_time_ns : 0;
        f.evidence.push_back(
            {"copy",
             fmt::format("{}: {}/iter with no kernel running, of {}/iter; {} per "
                         "iteration, {}/s achieved (mean of workers){}",
                         fn.name, FormatNs(per_worker(fn.sum_critical_ns)),
                         FormatNs(per_worker(fn.sum_time_ns)),
                         FormatBytes(per_worker(fn.sum_bytes)), FormatBytes(bw), caller(fid))});
      }
      f.evidence.push_back({"median iteration (job)", FormatNs(iteration_ns_)});
      push(std::move(f));
    }
  }
}

// Hardware evidence relabels, absorbs and adds findings (hardware_findings.h); the findings it
// adds get their victims like any straggler finding.
void Localizer::Impl::ApplyHardwareFindings(std::vector<Rendered>& all) const {
  HardwareFindings::Context ctx;
  ctx.iteration_ns = iteration_ns_;
  ctx.material_ns = material_ns_;
  ctx.report_ns = report_ns_;
  ctx.worker_group = &worker_group_;
  std::vector<Finding*> view;
  for (auto& r : all) view.push_back(&r.finding);
  std::vector<bool> drop(view.size(), false);
  std::vector<HardwareFindings::Added> added = hardware_.Apply(ctx, view, drop);
  size_t kept = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (drop[i]) continue;
    if (kept != i) all[kept] = std::move(all[i]);
    ++kept;
  }
  all.resize(kept);
  for (auto& a : added) {
    Rendered r;
    r.finding = std::move(a.finding);
    r.wants_victims = true;
    r.culprits = std::move(a.culprits);
    all.push_back(std::move(r));
  }
}

Diagnosis Localizer::Impl::Finish() {
  Diagnosis d;
  d.num_workers = static_cast<int32_t>(workers_.size());
  d.notes = std::move(notes_);
  if (workers_.empty()) {
    d.notes.push_back("no worker summaries to diagnose");
    return d;
  }
  {
    std::vector<float> iters;
    for (const auto& wr : workers_) {
      if (wr.median_iteration_ns > 0) iters.push_back(wr.median_iteration_ns);
    }
    iteration_ns_ = MedianInPlace(iters);
  }
  d.median_iteration_ns = iteration_ns_;
  CheckDataQuality(d);
  if (iteration_ns_ <= 0) {
    d.notes.push_back(
        "no iteration or window times in any summary: nothing to compare "
        "(check that the profiles cover at least one iteration)");
    return d;
  }
  material_ns_ = options_.material_share * iteration_ns_;
  report_ns_ = options_.report_share * iteration_ns_;

  // Peer groups. A worker's signature: the functions it runs among those that matter in
  // the job (mean time over the workers running them >= signature_share of the
  // iteration), leaving out collectives / syncs and what they contain (where DDP issues
  // an all-reduce depends on timing) and GC. Presence, not share, so that a straggler's
  // shifted shares do not move it out of its group.
  std::vector<bool> significant(functions_.size(), false);
  for (uint32_t fid = 0; fid < functions_.size(); ++fid) {
    const FunctionInfo& fn = functions_[fid];
    significant[fid] = fn.present > 0 && !fn.under_wait && fn.kind != EventKind::kGc &&
                       fn.sum_time_ns / fn.present >= options_.signature_share * iteration_ns_;
  }
  PeerGroups peer_groups;
  std::vector<uint32_t> signature;
  for (auto& wr : workers_) {
    signature.clear();
    for (uint32_t k = 0; k < wr.num_records; ++k) {
      const FunctionRecord& r = records_[wr.first_record + k];
      if (significant[r.fid] && r.time_ns > 0) signature.push_back(r.fid);
    }
    std::sort(signature.begin(), signature.end());
    wr.signature = peer_groups.AddSignature(signature);
  }
  const std::vector<uint32_t> signature_group = peer_groups.Cluster(options_.peer_jaccard);
  uint32_t num_groups = 0;
  for (uint32_t g : signature_group) num_groups = std::max(num_groups, g + 1);
  std::vector<std::vector<uint32_t>> members(num_groups);
  worker_group_.resize(workers_.size());
  for (uint32_t w = 0; w < workers_.size(); ++w) {
    worker_group_[w] = signature_group[workers_[w].signature];
    members[worker_group_[w]].push_back(w);
  }
  if (num_groups > 1) {
    std::vector<size_t> sizes;
    for (const auto& m : members) sizes.push_back(m.size());
    std::sort(sizes.rbegin(), sizes.rend());
    std::string list;
    for (size_t i = 0; i < sizes.size() && i < 8; ++i) {
      list += (i ? ", " : "") + fmt::format("{}", sizes[i]);
    }
    if (sizes.size() > 8) list += ", ...";
    d.notes.push_back(fmt::format(
        "workers form {} peer groups by the functions they run (sizes {}); each worker is "
        "compared only with its own group",
        num_groups, list));
    size_t small = 0;
    for (const auto& m : members) small += m.size() < kMinPeers ? m.size() : 0;
    if (small > 0) {
      d.notes.push_back(fmt::format(
          "{} worker(s) are in peer groups of fewer than {} workers and were only checked "
          "against expectations",
          small, kMinPeers));
    }
  } else if (workers_.size() < kMinPeers) {
    d.notes.push_back(fmt::format("only {} worker(s): peer comparison needs at least {}",
                                  workers_.size(), kMinPeers));
  }

  has_children_.assign(functions_.size(), false);
  for (const auto& fn : functions_) {
    if (fn.parent != kNone) has_children_[fn.parent] = true;
  }
  std::vector<WorkerFinding> wfs = Collapse(FindAnomalies(members));
  group_wait_median_.assign(members.size(), 0);
  group_work_median_.assign(members.size(), 0);
  {
    std::vector<float> values;
    for (uint32_t g = 0; g < members.size(); ++g) {
      values.clear();
      for (uint32_t w : members[g]) values.push_back(workers_[w].wait_fn_ns);
      group_wait_median_[g] = static_cast<float>(MedianInPlace(values));
      values.clear();
      for (uint32_t w : members[g]) values.push_back(workers_[w].work_ns);
      group_work_median_[g] = static_cast<float>(MedianInPlace(values));
    }
  }
  ResolveVictims(wfs);
  FindUntraced(members, wfs);
  MarkGcStragglers(members, wfs);
  MarkCpuContention(members, wfs);
  std::vector<Rendered> all = MergeAndRender(wfs);
  ExpectationChecks(all);
  ApplyHardwareFindings(all);
  for (auto& f : d.findings) {
    Rendered r;
    r.finding = std::move(f);
    all.push_back(std::move(r));
  }
  d.findings.clear();

  std::stable_sort(all.begin(), all.end(), [](const Rendered& x, const Rendered& y) {
    const Finding& a = x.finding;
    const Finding& b = y.finding;
    if (a.material != b.material) return a.material;
    if (a.lost_ns_per_iteration != b.lost_ns_per_iteration) {
      return a.lost_ns_per_iteration > b.lost_ns_per_iteration;
    }
    if (a.code != b.code) return a.code < b.code;
    return a.workers < b.workers;
  });
  if (all.size() > options_.max_findings) {
    d.notes.push_back(fmt::format("{} more findings below the top {} were left out",
                                  all.size() - options_.max_findings, options_.max_findings));
    all.resize(options_.max_findings);
  }
  for (auto& r : all) {
    if (r.wants_victims) FillVictims(r.finding, r.culprits, r.extra_victims);
    d.findings.push_back(std::move(r.finding));
  }
  return d;
}

Localizer::Localizer(LocalizerOptions options) : impl_(std::make_unique<Impl>(options)) {}
Localizer::~Localizer() = default;
void Localizer::Add(const WorkerSummary& worker) { impl_->Add(worker); }
void Localizer::AddNote(std::string note) { impl_->AddNote(std::move(note)); }
Diagnosis Localizer::Finish() { return impl_->Finish(); }

}  // namespace perftracker
