#include "perftracker/localize/job_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>

namespace perftracker::localize {

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

uint32_t JobTable::InternFunction(const FunctionSummary& f) {
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
    // DtoD / PtoP copies are GPU work (the importers and CUPTI flag them), never host-device
    // or PCIe traffic.
    info.on_device = (f.event_flags & kEventFlagOnDevice) != 0;
    info.device_to_device =
        f.kind == EventKind::kMemcpy && (f.event_flags & kEventFlagDeviceToDevice) != 0;
    functions_.push_back(std::move(info));
    stamp_.push_back(0);
    stamp_pos_.push_back(0);
  }
  return it->second;
}

// Parents and outermost flags of the functions first interned by this worker.
void JobTable::ResolveNewFunctions(const WorkerSummary& worker, const std::vector<uint32_t>& fids,
                                   size_t first_new_fid) {
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
  if (st.dropped_events + st.malformed_events + st.out_of_order_events + st.deep_events > 0 ||
      empty) {
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
      notes.push_back(fmt::format(
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
}

std::string JobTable::PathName(uint32_t fid) const {
  std::vector<const std::string*> names;
  for (uint32_t f = fid; f != kNone && f < functions_.size() && names.size() < kMaxDepth;
       f = functions_[f].parent) {
    names.push_back(&functions_[f].name);
  }
  std::string out;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (!out.empty()) out += " > ";
    out += **it;
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

bool JobTable::IsAncestor(uint32_t ancestor, uint32_t fid) const {
  int depth = 0;
  for (uint32_t a = functions_[fid].parent; a != kNone && depth < kMaxDepth;
       a = functions_[a].parent, ++depth) {
    if (a == ancestor) return true;
  }
  return false;
}

}  // namespace perftracker::localize
