#include "perftracker/localize/job_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "perftracker/core/memory_trim.h"
#include "perftracker/core/point_to_point.h"
#include "perftracker/summary/data_quality_counters.h"
#include "perftracker/summary/iteration_breakdown.h"

namespace perftracker::localize {

namespace {

constexpr std::string_view kSeparator = " > ";

// "kind:name" -> (kind, name); false when the text before the first ':' names no kind.
bool ParseFrame(std::string_view frame, EventKind& kind, std::string_view& name) {
  const size_t colon = frame.find(':');
  if (colon == std::string_view::npos) return false;
  const std::string_view kind_name = frame.substr(0, colon);
  for (int k = 0; k < kNumEventKinds; ++k) {
    if (EventKindName(static_cast<EventKind>(k)) == kind_name) {
      kind = static_cast<EventKind>(k);
      name = frame.substr(colon + 1);
      return true;
    }
  }
  return false;
}

}  // namespace

uint32_t JobTable::NameId(std::string_view name) const {
  auto it = name_index_.find(name);
  return it == name_index_.end() ? kNone : it->second;
}

uint32_t JobTable::InternName(std::string_view name) {
  const uint32_t found = NameId(name);
  if (found != kNone) return found;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(name);
  name_views_.push_back(names_.back());
  name_index_.emplace(names_.back(), id);
  if (name.empty()) empty_name_ = id;
  return id;
}

std::string_view JobTable::ExplicitKey(uint32_t fid) const {
  if (!functions_[fid].has_explicit_key) return {};
  return explicit_keys_.at(fid);
}

bool JobTable::KeyDerives(const WorkerSummary& worker, size_t i) {
  const FunctionSummary& f = worker.functions[i];
  if (f.key.empty()) return true;
  // A key given explicitly (a hand-written summary, an old wire form) is checked against its
  // parent's key once per worker and function: with every key explicit (~200 bytes each) this
  // was a quarter of the ingest (issue 11): compare the pieces in place (no substr and its
  // bounds checks), the parent's key in one piece when it is explicit too.
  const std::string_view key = f.key.view();
  const std::string_view kind = EventKindName(f.kind);
  const std::string_view name = f.name.view();
  const size_t leaf = kind.size() + 1 + name.size();
  if (key.size() < leaf) return false;
  const char* tail = key.data() + (key.size() - leaf);
  if (std::string_view(tail, kind.size()) != kind || tail[kind.size()] != ':' ||
      std::string_view(tail + kind.size() + 1, name.size()) != name) {
    return false;
  }
  if (f.parent >= i) return key.size() == leaf;  // a root (or a parent that does not precede it)
  if (key.size() < leaf + kSeparator.size()) return false;
  const size_t split = key.size() - leaf - kSeparator.size();
  if (std::string_view(key.data() + split, kSeparator.size()) != kSeparator) return false;
  const std::string_view prefix(key.data(), split);
  const std::string_view parent_key = worker.functions[f.parent].key.view();
  if (!parent_key.empty()) return prefix == parent_key;
  return worker.KeyIs(f.parent, prefix);
}

uint32_t JobTable::FindKey(std::string_view key) const {
  if (!explicit_index_.empty()) {
    auto it = explicit_index_.find(std::string(key));
    if (it != explicit_index_.end()) return it->second;
  }
  // Walk the frames from the root: each is a node under the previous one.
  uint32_t fid = kNone;
  for (size_t pos = 0;;) {
    const size_t sep = key.find(kSeparator, pos);
    const std::string_view frame =
        key.substr(pos, sep == std::string_view::npos ? std::string_view::npos : sep - pos);
    EventKind kind;
    std::string_view name;
    if (!ParseFrame(frame, kind, name)) return kNone;
    const uint32_t name_id = NameId(name);
    if (name_id == kNone) return kNone;
    fid = FindNode(fid, name_id, kind);
    if (fid == kNone) return kNone;
    if (sep == std::string_view::npos) return fid;
    pos = sep + kSeparator.size();
  }
}

uint32_t JobTable::NewFunction(const FunctionSummary& f, std::string_view name_source) {
  FunctionInfo info;
  std::string_view name = f.name;
  if (name.empty()) {
    // The leaf frame of the key, without its "kind:" prefix.
    const size_t sep = name_source.rfind(kSeparator);
    std::string_view leaf = name_source;
    if (sep != std::string::npos) leaf.remove_prefix(sep + kSeparator.size());
    const size_t colon = leaf.find(':');
    if (colon != std::string_view::npos) leaf.remove_prefix(colon + 1);
    name = leaf.empty() ? name_source : leaf;
  }
  info.name_id = InternName(name);
  const std::string_view display = name_views_[info.name_id];
  info.kind = f.kind;
  info.key_kind = f.kind;
  // Communication issued through torch operators (c10d::allreduce_, functional collectives'
  // wait_tensor, record_param_comms) waits like a collective: DDP runs them inside
  // AccumulateGrad hooks, under whichever gradient completes a bucket, so they must not read
  // as compute.
  if (f.kind == EventKind::kTorchOp && IsTorchCommunicationOp(display)) {
    info.kind = EventKind::kCollective;
  }
  info.pageable = f.kind == EventKind::kMemcpy && (f.name.find("Pageable") != std::string::npos ||
                                                   f.name.find("pageable") != std::string::npos);
  // DtoD / PtoP copies are GPU work (the importers and CUPTI flag them), never host-device
  // or PCIe traffic.
  info.on_device = (f.event_flags & kEventFlagOnDevice) != 0;
  info.device_to_device =
      f.kind == EventKind::kMemcpy && (f.event_flags & kEventFlagDeviceToDevice) != 0;
  if (info.kind == EventKind::kCollective) {
    info.point_to_point = PointToPointOf(display, f.event_flags);
  }
  functions_.push_back(std::move(info));
  return static_cast<uint32_t>(functions_.size() - 1);
}

uint32_t JobTable::InternFunction(const WorkerSummary& worker, size_t i) {
  const FunctionSummary& f = worker.functions[i];
  if (!KeyDerives(worker, i)) {
    auto it = explicit_index_.find(f.key);
    if (it != explicit_index_.end()) return it->second;
    // The same path may already be interned from a summary that derives it.
    const uint32_t found = FindKey(f.key);
    if (found != kNone) return found;
    const uint32_t fid = NewFunction(f, f.key);
    functions_[fid].has_explicit_key = true;
    explicit_keys_.emplace(fid, f.key);
    explicit_index_.emplace(f.key, fid);
    return fid;
  }
  const uint32_t parent = f.parent < i ? fids_[f.parent] : kNone;
  uint32_t name_id = NameId(f.name);
  if (name_id != kNone) {
    const uint32_t found = FindNode(parent, name_id, f.kind);
    if (found != kNone) return found;
  }
  if (!explicit_index_.empty()) {
    // A summary that gave this path as an explicit key interned it first.
    std::string key = parent == kNone ? std::string() : Key(parent) + std::string(kSeparator);
    key += EventKindName(f.kind);
    key += ':';
    key += f.name;
    auto it = explicit_index_.find(key);
    if (it != explicit_index_.end()) return it->second;
  }
  if (name_id == kNone) name_id = InternName(f.name);
  std::string name_source;
  if (f.name.empty()) name_source = worker.Key(i);
  const uint32_t fid = NewFunction(f, name_source);
  FunctionInfo& info = functions_[fid];
  info.key_parent = parent;
  // The display name is the key's leaf name, but for a summary without names (then the
  // leaf of its key is shown).
  info.empty_key_name = info.name_id != name_id;
  IndexNode(fid);
  return fid;
}

uint32_t JobTable::FindNode(uint32_t parent, uint32_t name, EventKind kind) const {
  if (node_slots_.empty()) return kNone;
  const size_t mask = node_slots_.size() - 1;
  for (size_t i = NodeHash(parent, name, kind) & mask;; i = (i + 1) & mask) {
    const uint32_t fid = node_slots_[i];
    if (fid == kNone) return kNone;
    const FunctionInfo& info = functions_[fid];
    if (info.key_parent == parent && KeyName(info) == name && info.key_kind == kind) return fid;
  }
}

void JobTable::IndexNode(uint32_t fid) {
  if (4 * (indexed_nodes_ + 1) > 3 * node_slots_.size()) {
    // Double and re-insert every indexed fid (derived keys).
    std::vector<uint32_t> slots(node_slots_.empty() ? 64 : 2 * node_slots_.size(), kNone);
    const size_t mask = slots.size() - 1;
    for (const uint32_t old : node_slots_) {
      if (old == kNone) continue;
      const FunctionInfo& info = functions_[old];
      size_t i = NodeHash(info.key_parent, KeyName(info), info.key_kind) & mask;
      while (slots[i] != kNone) i = (i + 1) & mask;
      slots[i] = old;
    }
    node_slots_ = std::move(slots);
  }
  const FunctionInfo& info = functions_[fid];
  const size_t mask = node_slots_.size() - 1;
  size_t i = NodeHash(info.key_parent, KeyName(info), info.key_kind) & mask;
  while (node_slots_[i] != kNone) i = (i + 1) & mask;
  node_slots_[i] = fid;
  ++indexed_nodes_;
}

inline bool JobTable::SameFunction(const WorkerSummary& worker, size_t i, uint32_t fid) const {
  const FunctionSummary& f = worker.functions[i];
  const FunctionInfo& info = functions_[fid];
  if (info.has_explicit_key) return SameExplicitKey(f, fid);
  if (info.key_kind != f.kind || name_views_[KeyName(info)] != f.name.view()) return false;
  const uint32_t parent = f.parent < i ? fids_[f.parent] : kNone;
  // An implicit key (the summarizer's and the wire decoder's) derives by definition: test it
  // here, not through the out-of-line KeyDerives call (~20 instructions per worker and
  // function at 10,000 workers, issue 11).
  return info.key_parent == parent && (f.key.empty() || KeyDerives(worker, i));
}

bool JobTable::SameExplicitKey(const FunctionSummary& f, uint32_t fid) const {
  return f.key == ExplicitKey(fid);
}

std::string JobTable::Key(uint32_t fid) const {
  std::vector<uint32_t> chain;
  for (uint32_t cur = fid; cur != kNone; cur = functions_[cur].key_parent) {
    chain.push_back(cur);
    if (functions_[cur].has_explicit_key) break;
  }
  std::string key;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const FunctionInfo& f = functions_[*it];
    if (!key.empty()) key += kSeparator;
    if (f.has_explicit_key) {
      key += ExplicitKey(*it);
      continue;
    }
    key += EventKindName(f.key_kind);
    key += ':';
    key += name_views_[KeyName(f)];
  }
  return key;
}

// Parents and outermost flags of the functions first interned by this worker.
void JobTable::ResolveNewFunctions(const WorkerSummary& worker, const std::vector<uint32_t>& fids,
                                   size_t first_new_fid) {
  for (size_t i = 0; i < fids.size(); ++i) {
    const uint32_t fid = fids[i];
    if (fid < first_new_fid) continue;
    FunctionInfo& info = functions_[fid];
    if (info.parent == kNone) info.parent = info.key_parent;
    if (info.parent != kNone) continue;
    const uint32_t p = worker.functions[i].parent;
    if (p < fids.size() && fids[p] != fid) {
      info.parent = fids[p];
    } else {
      // No (valid) parent index: the key's prefix names the caller, if it was summarized.
      // (A derived key has no prefix here: its parent is its key's, set when interned.)
      std::string_view prefix = ExplicitKey(fid);
      for (size_t sep = prefix.rfind(kSeparator); sep != std::string_view::npos;
           sep = prefix.rfind(kSeparator)) {
        prefix = prefix.substr(0, sep);
        const uint32_t found = FindKey(prefix);
        if (found != kNone && found != fid) {
          info.parent = found;
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

// Inline: pass 3 asks it per worker and function (issue 11).
inline bool JobTable::OnlyEnclosedBy(uint32_t parent, uint32_t w, uint32_t first) const {
  int depth = 0;
  for (uint32_t a = parent; a != kNone; a = functions_[a].parent) {
    if (++depth > kMaxDepth) return false;
    const Listing& listing = listings_[a];
    // A caller with no record of this worker had no call in its iterations: it encloses them.
    if (listing.listed_by != w + 1 || listing.record == kNone) continue;
    if (!enclosing_[listing.record - first]) return false;
  }
  return true;
}

void JobTable::Add(const WorkerSummary& worker, std::vector<std::string>& notes) {
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
    const IterationBreakdown mean = MeanBreakdown(worker);
    wr.mean_iteration_ns = static_cast<float>(mean.duration_ns);
    wr.compute_ns = static_cast<float>(mean.compute_ns);
    wr.communication_ns = static_cast<float>(mean.communication_ns);
    wr.wait_ns = static_cast<float>(mean.wait_ns);
    wr.data_ns = static_cast<float>(mean.data_ns);
    wr.host_only_ns = static_cast<float>(mean.host_only_ns);
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
  if (HasDataQualityProblem(st) || empty) {
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
  // At most n new functions: reserve them at once (a doubling vector would briefly hold the
  // old and a twice-larger array; one worker with Python stacks interns ~32,000 paths), and
  // grow geometrically when workers keep adding a few.
  if (functions_.capacity() < functions_.size() + n) {
    functions_.reserve(std::max(functions_.size() + n, functions_.capacity() * 3 / 2));
  }
  size_t cursor = 0;
  for (size_t i = 0; i < n; ++i) {
    if (cursor < prev_fids_.size() && SameFunction(worker, i, prev_fids_[cursor])) {
      fids_[i] = prev_fids_[cursor++];
    } else {
      fids_[i] = InternFunction(worker, i);
      const uint32_t fid = fids_[i];
      if (fid < listings_.size() && listings_[fid].listed_by == w) {
        cursor = listings_[fid].position + 1;
      }
    }
  }
  // Positions of this worker's keys, for the next worker's cursor resync.
  listings_.resize(functions_.size());
  for (size_t i = 0; i < n; ++i) listings_[fids_[i]] = {w + 1, static_cast<uint32_t>(i), kNone};
  if (functions_.size() > first_new_fid) ResolveNewFunctions(worker, fids_, first_new_fid);
  // Enclosing ops (FunctionSummary::enclosing_op): the first worker's per function, and each
  // later worker's where it differs (WorkerEnclosingOp). A link holds job-wide only where
  // every worker that lists the function gives the same op: where none differs (EndIngest).
  enclosing_first_.resize(functions_.size(), kEnclosingUnseen);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t e = worker.functions[i].enclosing_op;
    const uint32_t op = e < n && fids_[e] != fids_[i] ? fids_[e] : kNone;
    uint32_t& first = enclosing_first_[fids_[i]];
    if (first == kEnclosingUnseen) {
      first = op;
    } else if (op != first) {
      worker_enclosing_.push_back({w, fids_[i], op});
    }
  }

  wr.first_record = static_cast<uint32_t>(records_.size());
  if (records_.size() + n >= UINT32_MAX) {
    if (!records_full_) {
      notes.push_back(fmt::format(
          "function records exceed the localizer's capacity at worker {}: the functions of "
          "later workers are ignored (diagnose fewer workers or a smaller window)",
          w));
    }
    records_full_ = true;
  }
  // Pass 1: one record per function (a key listed twice is summed into its first record).
  p50s_.assign(n, std::numeric_limits<double>::quiet_NaN());
  for (size_t i = 0; i < n && !records_full_; ++i) {
    const FunctionSummary& f = worker.functions[i];
    if (f.count == 0 && f.total_ns <= 0) continue;
    const uint32_t fid = fids_[i];
    FunctionRecord r;
    r.fid = fid;
    r.time_ns = static_cast<float>(std::max(static_cast<double>(f.total_ns), 0.0) / iters);
    r.calls = static_cast<float>(static_cast<double>(f.count) / iters);
    p50s_[i] =
        f.durations.count() > 0
            ? sketch_median_(f.durations)
            : (f.count > 0 ? static_cast<double>(f.total_ns) / static_cast<double>(f.count) : 0);
    r.p50_ns = static_cast<float>(p50s_[i]);
    r.critical_ns = static_cast<float>(static_cast<double>(f.critical_ns) / iters);
    r.idle_gap_ns = static_cast<float>(static_cast<double>(f.idle_gap_before_ns) / iters);
    r.bytes = static_cast<float>(static_cast<double>(f.bytes) / iters);
    Listing& listing = listings_[fid];
    if (listing.record != kNone) {
      FunctionRecord& prev = records_[listing.record];
      prev.time_ns += r.time_ns;
      prev.calls += r.calls;
      prev.critical_ns += r.critical_ns;
      prev.idle_gap_ns += r.idle_gap_ns;
      prev.bytes += r.bytes;
    } else {
      listing.record = static_cast<uint32_t>(records_.size());
      const size_t its = worker.iterations.size();
      if (f.onset_iteration > 0 && f.onset_iteration < its && f.onset_ns >= 0) {
        OnsetRecord o;
        o.record = records_.size();
        o.iteration = f.onset_iteration;
        o.iterations = static_cast<uint32_t>(its);
        o.after_ns = static_cast<float>(static_cast<double>(f.onset_ns) /
                                        static_cast<double>(its - f.onset_iteration));
        const double q = static_cast<double>(its - f.onset_iteration) / static_cast<double>(its);
        o.after_p50_ns =
            f.durations.count() > 0 ? static_cast<float>(f.durations.Quantile(1 - 0.5 * q)) : 0;
        onsets_.push_back(o);
      }
      records_.push_back(r);
    }
  }
  const uint32_t first = wr.first_record;
  const auto count = static_cast<uint32_t>(records_.size() - first);
  // The passes below index the worker's records as one array (through the RecordStore each
  // access cost a block lookup: ~20 instructions a record over the three passes, issue 11);
  // records that straddle two blocks are worked on in a copy, written back after pass 2.
  FunctionRecord* recs = records_.Contiguous(first, count);
  if (recs == nullptr && count > 0) {
    straddling_.resize(count);
    for (uint32_t k = 0; k < count; ++k) straddling_[k] = records_[first + k];
    recs = straddling_.data();
  }
  // Before pass 2 changes the times: the functions that enclose the iterations rather than
  // run inside them (with live Python stacks every call of the training loop hangs under the
  // frames that started the process, `<module>` > ... > `run_rank`: one call open across the
  // whole window, or none counted at all for the outermost).
  enclosing_.assign(count, 0);
  if (wr.iterations >= 2 && !worker.iterations.empty()) {
    for (uint32_t k = 0; k < count; ++k) {
      const FunctionRecord& r = recs[k];
      enclosing_[k] = r.calls == 0 || (r.calls * iters <= kEnclosingMaxCalls &&
                                       r.time_ns >= kEnclosingMinShare * wr.mean_iteration_ns);
    }
  }
  // Pass 2: a non-wait function's time excludes the collectives / syncs nested in it, so
  // that waiting inside a compute function (DDP all-reduces issued from AccumulateGrad
  // hooks, a .item() inside a block) reads as waiting, not as work.
  for (uint32_t k = 0; k < count; ++k) {
    const FunctionRecord& r = recs[k];
    if (!functions_[r.fid].outermost_wait) continue;
    int depth = 0;
    for (uint32_t a = functions_[r.fid].parent; a != kNone && depth < kMaxDepth;
         a = functions_[a].parent, ++depth) {
      const Listing& listing = listings_[a];
      if (listing.listed_by != w + 1 || listing.record == kNone) continue;
      const uint32_t pos = listing.record;
      FunctionRecord& anc = recs[pos - first];
      anc.time_ns = std::max(anc.time_ns - r.time_ns, 0.0f);
      if (!onsets_.empty() && onsets_.back().record >= pos) {
        auto it = std::lower_bound(onsets_.begin(), onsets_.end(), uint64_t{pos},
                                   [](const OnsetRecord& o, uint64_t i) { return o.record < i; });
        if (it != onsets_.end() && it->record == pos) it->comparable = false;
      }
    }
  }
  if (recs == straddling_.data()) {
    for (uint32_t k = 0; k < count; ++k) records_[first + k] = straddling_[k];
  }
  // Pass 3: per-worker sums (the job-wide ones: EndIngest).
  for (uint32_t k = 0; k < count; ++k) {
    const FunctionRecord& r = recs[k];
    const FunctionInfo& info = functions_[r.fid];
    if (info.outermost_wait) wr.wait_fn_ns += r.time_ns;
    if (!IsWaitKind(info.kind) && info.kind != EventKind::kIteration && !enclosing_[k] &&
        OnlyEnclosedBy(info.parent, w, first)) {
      wr.work_ns += r.time_ns;
    }
    if (info.parent == kNone && IsHostWorkKind(info.kind)) {
      wr.host_work_critical_ns += r.critical_ns;
    }
    if (info.outermost_wait && !info.on_device && info.parent != kNone) {
      uint32_t root = info.parent;
      for (int depth = 0; functions_[root].parent != kNone && depth < kMaxDepth; ++depth) {
        root = functions_[root].parent;
      }
      // A host-side wait inside host work (a .item() in a block, a blocking recv) is not
      // work; a device collective's time is device time, not host time.
      if (IsHostWorkKind(functions_[root].kind)) wr.host_work_critical_ns -= r.critical_ns;
    }
    if (info.outermost_kind) {
      if (info.kind == EventKind::kSync) wr.sync_critical_ns += r.critical_ns;
      if (info.kind == EventKind::kDataLoad) wr.data_critical_ns += r.critical_ns;
      if (info.kind == EventKind::kGc) wr.gc_ns += r.time_ns;
    }
    if (info.pageable) wr.pageable_ns += r.time_ns;
    if (info.kind == EventKind::kMemcpy && !info.pageable && !info.device_to_device) {
      wr.exposed_copy_ns += r.critical_ns;
    }
    wr.idle_gap_ns += r.idle_gap_ns;
  }
  wr.host_work_critical_ns = std::max(wr.host_work_critical_ns, 0.0f);
  wr.num_records = count;
  // Host metrics: the window-wide level when the summary has it, else the time-weighted
  // level over the root functions that carry one. Those roots are found once, not once per
  // metric (seven scans of every function per worker were 3 % of the ingest).
  metric_roots_.clear();
  for (size_t i = 0; i < n; ++i) {
    const FunctionSummary& f = worker.functions[i];
    if (f.parent == FunctionSummary::kNoParent && f.total_ns > 0 && !f.metrics.empty()) {
      metric_roots_.push_back(static_cast<uint32_t>(i));
    }
  }
  auto host_metric = [&](Metric metric) -> float {
    for (const FunctionMetric& m : worker.worker_metrics) {
      if (m.metric == metric && std::isfinite(m.mean)) return static_cast<float>(m.mean);
    }
    double weight = 0, sum = 0;
    for (const uint32_t i : metric_roots_) {
      const FunctionSummary& f = worker.functions[i];
      for (const FunctionMetric& m : f.metrics) {
        if (m.metric != metric || !std::isfinite(m.mean)) continue;
        weight += static_cast<double>(f.total_ns);
        sum += static_cast<double>(f.total_ns) * m.mean;
      }
    }
    return weight > 0 ? static_cast<float>(sum / weight) : -1.0f;
  };
  wr.run_queue = host_metric(Metric::kRunQueueDelayFraction);
  wr.main_run_queue = host_metric(Metric::kMainThreadRunQueueFraction);
  wr.timeslices = host_metric(Metric::kTimeslicesPerSec);
  wr.main_timeslices = host_metric(Metric::kMainThreadTimeslicesPerSec);
  wr.comm_run_queue = host_metric(Metric::kCommThreadRunQueueFraction);
  wr.comm_timeslices = host_metric(Metric::kCommThreadTimeslicesPerSec);
  wr.cpu_util = host_metric(Metric::kCpuUtilization);
  // The process groups of its collectives (WorkerGroups): a group of one, or one that lists
  // no rank, tells nothing about who works with whom. Each distinct list is kept once.
  if (worker.rank >= 0) {
    const CollectiveGroups& cg = worker.collective_groups;
    const size_t first = worker_groups_.size();
    for (const CollectiveGroupCalls& call : cg.calls) {
      if (call.group >= cg.groups.size() || call.function >= worker.functions.size()) continue;
      const FunctionSummary& f = worker.functions[call.function];
      if (f.kind != EventKind::kCollective ||
          PointToPointOf(f.name, f.event_flags) != PointToPoint::kNone) {
        continue;
      }
      const std::vector<int32_t>& ranks = cg.groups[call.group].ranks;
      if (ranks.empty() || std::max<size_t>(cg.groups[call.group].size, ranks.size()) < 2) {
        continue;
      }
      uint64_t h = 1469598103934665603ull;
      for (int32_t r : ranks) h = (h ^ static_cast<uint32_t>(r)) * 1099511628211ull;
      auto& ids = group_index_[h];
      uint32_t id = kNone;
      for (uint32_t c : ids) {
        if (groups_[c] == ranks) id = c;
      }
      if (id == kNone) {
        id = static_cast<uint32_t>(groups_.size());
        groups_.push_back(ranks);
        ids.push_back(id);
      }
      worker_groups_.push_back(id);
    }
    const auto from = worker_groups_.begin() + static_cast<std::ptrdiff_t>(first);
    std::sort(from, worker_groups_.end());
    worker_groups_.erase(std::unique(from, worker_groups_.end()), worker_groups_.end());
  }
  worker_groups_begin_.push_back(static_cast<uint32_t>(worker_groups_.size()));
  prev_fids_.swap(fids_);
  workers_.push_back(wr);
}

void JobTable::EndIngest() {
  // swap, not clear(): clear() keeps the capacity.
  std::vector<uint32_t>().swap(node_slots_);
  indexed_nodes_ = 0;
  std::unordered_map<std::string, uint32_t>().swap(explicit_index_);
  std::unordered_map<std::string_view, uint32_t>().swap(name_index_);
  std::unordered_map<std::string, uint32_t>().swap(host_index_);
  std::vector<uint32_t>().swap(prev_fids_);
  std::vector<Listing>().swap(listings_);
  std::vector<uint32_t>().swap(fids_);
  std::vector<uint8_t>().swap(enclosing_);
  // The ops of the functions the workers disagree on: the first worker's per fid, and the
  // others' where they differ from it (already in worker_enclosing_). What is left in
  // enclosing_first_ is every worker's op: the job-wide links.
  disputed_first_.clear();
  for (const WorkerEnclosing& e : worker_enclosing_) {
    uint32_t& first = enclosing_first_[e.fid];
    if (first == kEnclosingUnseen) continue;  // already kept
    disputed_first_.emplace_back(e.fid, first < functions_.size() ? first : kNone);
    first = kEnclosingUnseen;
  }
  std::sort(disputed_first_.begin(), disputed_first_.end());
  enclosing_links_.clear();
  for (uint32_t fid = 0; fid < enclosing_first_.size(); ++fid) {
    if (enclosing_first_[fid] < functions_.size())
      enclosing_links_.emplace_back(fid, enclosing_first_[fid]);
  }
  std::sort(worker_enclosing_.begin(), worker_enclosing_.end(),
            [](const WorkerEnclosing& a, const WorkerEnclosing& b) {
              return a.worker != b.worker ? a.worker < b.worker : a.fid < b.fid;
            });
  worker_enclosing_.shrink_to_fit();
  std::vector<uint32_t>().swap(enclosing_first_);
  std::vector<FunctionRecord>().swap(straddling_);
  std::vector<uint32_t>().swap(metric_roots_);
  std::unordered_map<uint64_t, std::vector<uint32_t>>().swap(group_index_);
  std::vector<double>().swap(p50s_);
  // What was just freed lies in the heap between the records, FunctionInfos and names, in
  // pieces each smaller than totals_ (one block of 24 bytes a path), which therefore takes
  // new pages: handed back first, the freed pages do not stay resident beside the totals and
  // the rules (with Python stacks ~35,000 paths a file, where the localizer is the peak:
  // sglang bs_32 30.6 -> 30.0 MiB, b200 eager_trace 25.6 -> 25.2).
  ReturnFreedMemoryToSystem();
  // One worker whose records are in fid order (the first worker's are: it interns its
  // functions in list order, and its first record of each is made as it is listed): a
  // function's totals are its record's, or none (Totals()). Not stored: with Python stacks
  // ~35,000 paths a file, 24 bytes each, beside the summary at the localizer's peak.
  totals_are_records_ = workers_.size() == 1;
  for (uint64_t k = 1; k < records_.size() && totals_are_records_; ++k) {
    totals_are_records_ = records_[k - 1].fid < records_[k].fid;
  }
  if (totals_are_records_) return;
  // A record is final once its worker is added (pass 2 adjusts only its own worker's):
  // summed in record order, the totals are what summing at each Add would give.
  totals_.assign(functions_.size(), FunctionTotals{});
  records_.ForEach(0, records_.size(), [&](uint64_t, const FunctionRecord& r) {
    FunctionTotals& t = totals_[r.fid];
    ++t.present;
    t.sum_time_ns += r.time_ns;
    t.sum_critical_ns += r.critical_ns;
  });
}

FunctionTotals JobTable::Totals(uint32_t fid) const {
  if (!totals_are_records_) return totals_[fid];
  // The sums EndIngest() would make of one record: 0 + its value, exact in a double.
  uint64_t lo = 0, hi = records_.size();
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (records_[mid].fid < fid) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  FunctionTotals t;
  if (lo < records_.size() && records_[lo].fid == fid) {
    t.present = 1;
    t.sum_time_ns = records_[lo].time_ns;
    t.sum_critical_ns = records_[lo].critical_ns;
  }
  return t;
}

void JobTable::SumCallsAndBytes(const std::vector<uint32_t>& fids, std::vector<double>& calls,
                                std::vector<double>& bytes) const {
  calls.assign(fids.size(), 0);
  bytes.assign(fids.size(), 0);
  if (fids.empty()) return;
  for (uint64_t k = 0; k < records_.size(); ++k) {
    const FunctionRecord& r = records_[k];
    for (size_t i = 0; i < fids.size(); ++i) {
      if (fids[i] != r.fid) continue;
      calls[i] += r.calls;
      bytes[i] += r.bytes;
    }
  }
}

const OnsetRecord* JobTable::OnsetOf(uint32_t w, uint32_t fid) const {
  if (w >= workers_.size() || onsets_.empty()) return nullptr;
  const WorkerRecord& wr = workers_[w];
  for (uint32_t k = 0; k < wr.num_records; ++k) {
    const uint64_t idx = uint64_t{wr.first_record} + k;
    if (records_[idx].fid != fid) continue;
    auto it = std::lower_bound(onsets_.begin(), onsets_.end(), idx,
                               [](const OnsetRecord& o, uint64_t i) { return o.record < i; });
    return it != onsets_.end() && it->record == idx && it->comparable ? &*it : nullptr;
  }
  return nullptr;
}

std::string JobTable::PathName(uint32_t fid) const {
  std::vector<std::string_view> names;
  for (uint32_t f = fid; f != kNone && f < functions_.size() && names.size() < kMaxDepth;
       f = functions_[f].parent) {
    names.push_back(Name(f));
  }
  std::string out;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (!out.empty()) out += " > ";
    out += *it;
  }
  return out;
}

std::string JobTable::WorkerName(uint32_t w) const {
  const WorkerRecord& wr = workers_[w];
  if (wr.rank >= 0) return fmt::format("rank {}", wr.rank);
  return fmt::format("worker #{} (no rank)", w);
}

std::string JobTable::WorkersPhrase(const std::vector<uint32_t>& ws) const {
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

uint32_t JobTable::EnclosingOp(uint32_t fid) const {
  auto it = std::lower_bound(enclosing_links_.begin(), enclosing_links_.end(),
                             std::pair<uint32_t, uint32_t>{fid, 0});
  return it != enclosing_links_.end() && it->first == fid ? it->second : kNone;
}

uint32_t JobTable::WorkerEnclosingOp(uint32_t w, uint32_t fid) const {
  auto first = std::lower_bound(disputed_first_.begin(), disputed_first_.end(),
                                std::pair<uint32_t, uint32_t>{fid, 0});
  if (first == disputed_first_.end() || first->first != fid) return kNone;
  auto it = std::lower_bound(worker_enclosing_.begin(), worker_enclosing_.end(), w,
                             [fid](const WorkerEnclosing& e, uint32_t worker) {
                               return e.worker != worker ? e.worker < worker : e.fid < fid;
                             });
  if (it != worker_enclosing_.end() && it->worker == w && it->fid == fid) return it->op;
  return first->second;
}

bool JobTable::IsAncestor(uint32_t ancestor, uint32_t fid) const {
  int depth = 0;
  for (uint32_t a = CollapseParent(fid); a != kNone && depth < kMaxDepth;
       a = CollapseParent(a), ++depth) {
    if (a == ancestor) return true;
  }
  return false;
}

}  // namespace perftracker::localize
