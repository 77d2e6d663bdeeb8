// JobTable: the localizer's compact copy of one window's worker summaries (algorithm step 1,
// compact ingest).
//
// Add() interns every function key job-wide (a cursor into the previous worker's key list
// makes the common case, a worker listing the same keys in nearly the same order, a string
// compare instead of a hash lookup) and keeps one 28-byte FunctionRecord per (worker,
// function): time, critical time, idle gap, bytes and calls per iteration, and the p50
// call duration (not the self time: no rule reads it). Records live in fixed-size blocks
// (RecordStore: no reallocation spike at 30 M records). Per worker it keeps a
// WorkerRecord: rank, host, median / mean iteration, the iteration breakdown per
// iteration, and the sums the expectation checks and the culprit / victim rules need
// (outermost collective + sync time, sync and data-loading critical time, GC, pageable
// copies). The summary itself is not kept: 100,000 workers x 300 functions is about 1 GB.
//
// Memory per call path (with Python stacks one trace file holds ~35,000, one per ~2 events,
// and its summary is alive beside this table): a 16-byte FunctionInfo and its record (28
// bytes), plus while adding ~28 bytes of index and scratch that EndIngest() frees before it
// sums the 24-byte FunctionTotals. With one worker (`perftracker diagnose` of one trace
// file) no totals are stored: a function's totals are its one record's, found by binary
// search (the records of the first worker are in fid order, EndIngest() checks it).
// A non-wait function's time excludes the collectives / syncs nested in it (DDP issues
// all-reduces from AccumulateGrad hooks: that is waiting, not work).
//
// Invariants: every FunctionRecord's fid is < functions().size(); a worker's records are
// contiguous, in worker order, and hold each fid at most once (duplicates within a summary
// are summed); function parents always point at interned fids or kNone.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "perftracker/core/point_to_point.h"
#include "perftracker/localize/record_store.h"
#include "perftracker/localize/sketch_median.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker::localize {

inline constexpr uint32_t kNone = UINT32_MAX;
// Parent chains longer than this are treated as cut (guards against cycles).
inline constexpr int kMaxDepth = 256;
// Per-worker notes of one kind beyond this many are summarized.
inline constexpr size_t kMaxNotesPerKind = 10;
// A function encloses a worker's iterations (is not work inside them) when it was called at
// most this many times in a window of two or more iterations (one call open across them,
// counted within them; 1.5 for float rounding) and took at least this share of the mean
// iteration each iteration, or when it was not called within them at all.
inline constexpr double kEnclosingMaxCalls = 1.5;
inline constexpr double kEnclosingMinShare = 0.9;

struct WorkerRecord {
  int32_t rank = -1;
  uint32_t host = 0;
  uint32_t first_record = 0;
  uint32_t num_records = 0;
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
  // Per iteration: time in the outermost functions that run inside its iterations and are
  // not waits (the worker's own work): the roots, or with live Python stacks the calls under
  // the frames that enclose the iterations (`<module>` > ... > `run_rank`, open across the
  // window). A worker that waits longer *because it worked less* arrived early: a victim of
  // noise.
  float work_ns = 0;
  float sync_critical_ns = 0;
  float data_critical_ns = 0;
  float gc_ns = 0;
  float pageable_ns = 0;
  float exposed_copy_ns = 0;  // critical time of the other copies: no kernel overlaps them
  float idle_gap_ns = 0;
  // Per iteration: critical time of the host's own work (root Python / torch / annotation /
  // launch / runtime / optimizer calls, less the waits nested in them): how long host events
  // kept the launching thread busy while the device ran nothing. 0 without host events.
  float host_work_critical_ns = 0;
  // Host metrics over the window (live mode), -1 when not sampled.
  float run_queue = -1;        // run-queue delay / wall time
  float main_run_queue = -1;   // the main (training) thread's alone
  float timeslices = -1;       // times its threads were put on a CPU, per second
  float main_timeslices = -1;  // the main thread's alone
  // The communication threads' (gloo's workers, as its agent named them), summed: run-queue
  // delay / wall time and times put on a CPU per second.
  float comm_run_queue = -1;
  float comm_timeslices = -1;
  float cpu_util = -1;  // cores busy
};

// A (worker, function) whose time per iteration steps up inside the window and stays up
// (FunctionSummary::onset_iteration, summary/step_onset.h). Few records have one: they are
// kept apart, in record order, not in the 28-byte FunctionRecord.
struct OnsetRecord {
  uint64_t record = 0;      // index into records()
  uint32_t iteration = 0;   // first iteration of the higher level
  uint32_t iterations = 0;  // the worker's iterations
  float after_ns = 0;       // time per iteration from the onset on
  // The median call from the onset on, when the step slowed every call: the window's calls'
  // quantile 1 - q/2, q the share of iterations from the onset on (their calls are then the
  // slowest q of the window's). 0: no durations.
  float after_p50_ns = 0;
  // False when collectives / syncs nested in it were taken out of its record's time: the
  // onset's time still holds them, the two are not comparable.
  bool comparable = true;
};

// A function's job-wide sums over the workers that ran it, per iteration (JobTable::Totals,
// summed by JobTable::EndIngest from the records, in worker order; the calls and bytes of
// the few functions a finding cites: JobTable::SumCallsAndBytes).
struct FunctionTotals {
  double sum_time_ns = 0;
  double sum_critical_ns = 0;
  uint32_t present = 0;  // workers that ran it
};

struct FunctionInfo {
  // The leaf name, for display: JobTable::Name(fid), an id into the JobTable's name table
  // (each distinct name is stored once; with Python stacks ~32,000 paths share a few
  // thousand names). No string and no key is stored per path.
  uint32_t name_id = kNone;
  // Identity: the call path (key_parent, key_kind, key name), its key JobTable::Key(fid);
  // the key name is the leaf name (name_id) unless empty_key_name. Or, when a summary gave
  // a key that does not derive from its parent, that key (JobTable::ExplicitKey).
  uint32_t key_parent = kNone;  // the enclosing function in the key (kNone: a root, or explicit)
  uint32_t parent = kNone;
  EventKind kind = EventKind::kTorchOp;
  EventKind key_kind = EventKind::kTorchOp;  // the summary's kind (`kind` may be reclassified)
  // A point-to-point send / receive: by the direction its source flagged (a trace's
  // collective metadata), else by its name (core/point_to_point.h).
  PointToPoint point_to_point = PointToPoint::kNone;
  bool outermost_wait : 1 = false;    // collective / sync without a collective / sync ancestor
  bool under_wait : 1 = false;        // a collective / sync or nested in one
  bool outermost_kind : 1 = false;    // no ancestor of the same kind
  bool pageable : 1 = false;          // a pageable memcpy
  bool on_device : 1 = false;         // runs on a device stream (a kernel, a device collective)
  bool device_to_device : 1 = false;  // a copy between device memories
  bool has_explicit_key : 1 = false;  // its key is JobTable::ExplicitKey(fid)
  // Its key's leaf name is empty (a summary without names): name_id then holds the name
  // shown, the leaf of its key.
  bool empty_key_name : 1 = false;
};
// One per call path of the job (with Python stacks one worker has ~35,000): keep it compact.
static_assert(sizeof(FunctionInfo) == 16, "keep the per-path FunctionInfo compact");

// A worker whose summary has event problems (or nothing at all).
struct WorkerProblem {
  uint32_t worker = 0;
  SummaryStats stats;
  std::string source;
  bool empty = false;
};

// Inline: the ingest asks them per worker and function (issue 11).
inline bool IsUserLevel(EventKind kind) {
  return kind == EventKind::kPythonCall || kind == EventKind::kUserAnnotation ||
         kind == EventKind::kDataLoad || kind == EventKind::kOptimizerStep;
}
inline bool IsWaitKind(EventKind kind) {
  return kind == EventKind::kCollective || kind == EventKind::kSync;
}
// A function of the host thread: its idle gap is the thread's own. A device stream idles
// whenever its host is late, for traced reasons too.
inline bool OnHostThread(EventKind kind) {
  return kind != EventKind::kGpuKernel && kind != EventKind::kMemcpy &&
         kind != EventKind::kMemset && kind != EventKind::kCollective;
}
inline bool IsHostWorkKind(EventKind kind) {
  return kind == EventKind::kPythonCall || kind == EventKind::kTorchOp ||
         kind == EventKind::kUserAnnotation || kind == EventKind::kKernelLaunch ||
         kind == EventKind::kRuntimeCall || kind == EventKind::kOptimizerStep;
}

class JobTable {
 public:
  // Adds one worker; a note about the table's capacity goes to `notes`.
  void Add(const WorkerSummary& worker, std::vector<std::string>& notes);
  // The p50 call duration (FunctionRecord::p50_ns before its rounding to float) of each
  // function of the worker added last, by its index in the summary; NaN where Add() made no
  // record of it. Valid until the next Add() or EndIngest().
  std::span<const double> LastP50s() const { return p50s_; }
  // Ends the ingest: frees what only Add() needs (the call-path index, the name index, the
  // previous worker's positions, per-path scratch: ~30 bytes a path), then sums each
  // function's totals (24 bytes a path, so they do not coexist with that scratch at the
  // peak). Call once, after the last Add(), before the rules run.
  void EndIngest();

  const std::vector<WorkerRecord>& workers() const { return workers_; }
  const std::vector<FunctionInfo>& functions() const { return functions_; }
  // Job-wide sums per function, by fid (after EndIngest()).
  FunctionTotals Totals(uint32_t fid) const;
  // The calls and bytes per iteration of each of `fids` summed over the workers that ran it,
  // as the totals are summed (one pass over the records: for the few functions a finding
  // cites).
  void SumCallsAndBytes(const std::vector<uint32_t>& fids, std::vector<double>& calls,
                        std::vector<double>& bytes) const;
  const RecordStore& records() const { return records_; }
  const std::vector<std::string>& hosts() const { return hosts_; }
  const std::vector<WorkerProblem>& problems() const { return problems_; }
  // The onset of `fid` on worker `w`, or null.
  const OnsetRecord* OnsetOf(uint32_t w, uint32_t fid) const;
  // The process groups worker `w` ran collectives in (not point to point: a pipeline's sends
  // cross its stages), as ids into CollectiveGroupRanks(): sorted, unique. Empty when the
  // sources know no groups (summary/collective_groups.h) or the worker has no rank.
  std::span<const uint32_t> WorkerGroups(uint32_t w) const {
    return {worker_groups_.data() + worker_groups_begin_[w],
            worker_groups_begin_[w + 1] - worker_groups_begin_[w]};
  }
  // The global ranks a group lists (maybe only its first members: CollectiveGroup), each
  // distinct list once job-wide.
  const std::vector<int32_t>& CollectiveGroupRanks(uint32_t id) const { return groups_[id]; }
  // Sources of workers without a rank (the first kMaxNotesPerKind; empty strings after).
  const std::vector<std::string>& unranked_sources() const { return unranked_sources_; }

  // "rank 3", or "worker #5 (no rank)".
  std::string WorkerName(uint32_t w) const;
  // "rank 3" or "ranks 1, 4, 6, 7 and 2 more".
  std::string WorkersPhrase(const std::vector<uint32_t>& ws) const;
  // Whether `ancestor` is among fid's callers as the call-path collapse follows them
  // (CollapseParent: an op's enclosing op, else its key's parent), so that a chain of nested
  // ops is one path. After EndIngest().
  bool IsAncestor(uint32_t ancestor, uint32_t fid) const;
  // The op that encloses fid's calls although fid's key skips it (an op in an op), where
  // every worker that lists fid gives the same one as FunctionSummary::enclosing_op (the op
  // that enclosed most of its calls there), or kNone. After EndIngest().
  uint32_t EnclosingOp(uint32_t fid) const;
  // Where the workers disagree on fid's enclosing op (EnclosingOp(fid) is kNone): the op that
  // enclosed most of fid's calls on worker w, or kNone. A worker that runs an op inside code
  // only it runs (aten::mm inside an extra aten::matmul, where its peers' aten::mm run in
  // the backward pass) names that code; the call-path collapse uses it on that worker only.
  // Meaningful for the functions w lists. After EndIngest().
  uint32_t WorkerEnclosingOp(uint32_t w, uint32_t fid) const;
  // The caller the call-path collapse follows: fid's enclosing op where it has one (the
  // ops between fid and its key's parent), else its parent.
  uint32_t CollapseParent(uint32_t fid) const {
    const uint32_t op = EnclosingOp(fid);
    return op != kNone ? op : functions_[fid].parent;
  }
  // The names along fid's call path, outermost first: "backward > layer2 > dgrad".
  std::string PathName(uint32_t fid) const;
  // The function's leaf name, for display.
  std::string_view Name(uint32_t fid) const { return name_views_[functions_[fid].name_id]; }
  // The function's key ("kind:name" frames from the root, joined by " > "), built on demand.
  std::string Key(uint32_t fid) const;
  // The key a summary gave fid when it does not derive from its parent, else empty.
  std::string_view ExplicitKey(uint32_t fid) const;

 private:
  // The derived-key node (key_parent, key_name, key_kind) of a fid, or kNone: an
  // open-addressing index of fids (load at most 3/4, 4 bytes a slot) keyed by those fields
  // of FunctionInfo, so a call path costs no hash node of its own (with Python stacks one
  // worker holds ~35,000 paths).
  uint32_t FindNode(uint32_t parent, uint32_t name, EventKind kind) const;
  // Indexes fid by its (key_parent, key_name, key_kind); it must not be indexed yet.
  void IndexNode(uint32_t fid);
  static uint64_t NodeHash(uint32_t parent, uint32_t name, EventKind kind) {
    const uint64_t h = ((uint64_t{parent} << 32) | name) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29) ^ static_cast<uint64_t>(kind);
  }
  // Function i of `worker`: its fid, interned from its parent's fid (fids_[p]), kind and
  // name when its key derives from them, else from its explicit key.
  uint32_t InternFunction(const WorkerSummary& worker, size_t i);
  // Whether function i's key is its parent's key + its leaf (or, for a root, its leaf).
  static bool KeyDerives(const WorkerSummary& worker, size_t i);
  // Whether function i of `worker` is fid (fids_ of its parent already set). Inline (in
  // job_table.cc): the ingest asks it once per worker and function.
  bool SameFunction(const WorkerSummary& worker, size_t i, uint32_t fid) const;
  // SameFunction for an fid whose key was given explicitly.
  bool SameExplicitKey(const FunctionSummary& f, uint32_t fid) const;
  // The fid whose key is `key`, or kNone.
  uint32_t FindKey(std::string_view key) const;
  uint32_t NameId(std::string_view name) const;
  // NameId(name), interning the name first when it is new.
  uint32_t InternName(std::string_view name);
  uint32_t NewFunction(const FunctionSummary& f, std::string_view name_source);
  // The id of fid's key leaf name (derived keys only).
  uint32_t KeyName(const FunctionInfo& info) const {
    return info.empty_key_name ? empty_name_ : info.name_id;
  }
  // Whether every caller of a function of worker `w` (whose records start at `first`),
  // from `parent` up, encloses the worker's iterations (enclosing_).
  bool OnlyEnclosedBy(uint32_t parent, uint32_t w, uint32_t first) const;
  void ResolveNewFunctions(const WorkerSummary& worker, const std::vector<uint32_t>& fids,
                           size_t first_new_fid);

  // Job-wide function table.
  std::vector<FunctionInfo> functions_;
  std::vector<FunctionTotals> totals_;  // by fid, from EndIngest(); empty when...
  // ...one worker's records, in fid order, are the totals (EndIngest(); Totals()).
  bool totals_are_records_ = false;
  std::vector<uint32_t> node_slots_;  // fids, kNone = empty; size a power of two
  size_t indexed_nodes_ = 0;
  std::unordered_map<std::string, uint32_t> explicit_index_;  // explicit key -> fid
  std::unordered_map<uint32_t, std::string> explicit_keys_;   // fid -> explicit key
  std::deque<std::string> names_;                             // name id -> leaf name
  // Views of names_ by id (a deque's operator[] costs a division; SameFunction compares a
  // name per worker and function).
  std::vector<std::string_view> name_views_;
  std::unordered_map<std::string_view, uint32_t> name_index_;  // views into names_
  uint32_t empty_name_ = kNone;                                // the id of ""
  std::vector<uint32_t> prev_fids_;  // the previous worker's fids by position (cache)
  // Per fid, of the last worker that listed it (`listed_by` - 1): its position in that
  // worker's list (the next worker's cursor resync) and its record there (kNone: none).
  struct Listing {
    uint32_t listed_by = 0;
    uint32_t position = 0;
    uint32_t record = kNone;
  };
  std::vector<Listing> listings_;
  std::vector<uint32_t> fids_;  // scratch
  // By fid during the ingest: the enclosing op the first worker that listed it gave
  // (kEnclosingUnseen: none listed it yet; kNone: it gave none). Each later worker whose op
  // differs from it is one WorkerEnclosing: one entry per disagreement, none where the workers
  // agree. EndIngest() sorts them by worker and fid, keeps the first workers' ops of the
  // disputed fids in disputed_first_ and the undisputed (fid, op) pairs in enclosing_links_,
  // both sorted.
  static constexpr uint32_t kEnclosingUnseen = kNone - 1;
  std::vector<uint32_t> enclosing_first_;
  std::vector<std::pair<uint32_t, uint32_t>> enclosing_links_;
  struct WorkerEnclosing {
    uint32_t worker;
    uint32_t fid;
    uint32_t op;
  };
  std::vector<WorkerEnclosing> worker_enclosing_;
  std::vector<std::pair<uint32_t, uint32_t>> disputed_first_;
  std::vector<double> p50s_;  // LastP50s()
  // Scratch of Add(): the worker's root functions that carry host metrics, in list order.
  std::vector<uint32_t> metric_roots_;
  // Scratch of Add(), by the worker's record: 1 when the function encloses its iterations.
  std::vector<uint8_t> enclosing_;
  // Scratch of Add(): a copy of the worker's records when they straddle two of the
  // RecordStore's blocks (rare: once per block), so that its passes index one array.
  std::vector<FunctionRecord> straddling_;

  // Workers.
  std::vector<WorkerRecord> workers_;
  std::vector<uint32_t> worker_groups_;           // WorkerGroups(), all workers'
  std::vector<uint32_t> worker_groups_begin_{0};  // per worker; one more at the end
  std::vector<std::vector<int32_t>> groups_;      // CollectiveGroupRanks()
  std::unordered_map<uint64_t, std::vector<uint32_t>> group_index_;  // hash -> ids
  RecordStore records_;
  std::vector<OnsetRecord> onsets_;  // sorted by record
  std::vector<std::string> hosts_;
  std::unordered_map<std::string, uint32_t> host_index_;
  std::vector<WorkerProblem> problems_;
  std::vector<std::string> unranked_sources_;
  bool records_full_ = false;
  SketchMedian sketch_median_;
};

}  // namespace perftracker::localize
