#include "perftracker/localize/peer_comparison.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "perftracker/localize/robust_stats.h"
#include "perftracker/localize/saturated_host_rule.h"

namespace perftracker::localize {
namespace {

// An allocator whose resize() leaves new elements of a trivial type uninitialized: the
// bucketed columns below are written in full before they are read, and zero-filling them
// first wrote 8 bytes a record (240 MB at 100,000 workers) for nothing (issue 11).
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}  // NOLINT
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <typename T>
using Column = std::vector<T, DefaultInitAllocator<T>>;

// Up to this many workers, a candidate is compared with its peers without itself: with 3,
// the MAD is the smaller of the two other deviations, so two noisy peers hide a 3x
// straggler (seen on a 3-worker diagnosis of a real job: z 2.8 against its peers' 6.3).
// From 4 workers on, the full-sample MAD is robust to one outlier and leave-one-out only
// sharpens the noise (it flagged time-slicing noise on healthy 4-rank jobs).
constexpr size_t kSmallGroup = 3;

// A frame the worker's iterations run inside: its call began before the first iteration (none
// counted in them) and it spans nearly all of each (`<module>` of a script whose loop marks
// its own steps; with live Python stacks `<module>` > ... > `run_rank`). Its excess is the
// worker's whole iteration excess, work and untraced time together: the program, not a
// function to name. The work in it is compared on its own, and time no traced function
// explains is the untraced-straggler rule's. (A call that begins inside an iteration, however
// long, counts there and stays comparable: a pause in save_checkpoint is a finding.)
bool EnclosesIterations(const FunctionRecord& r, const WorkerRecord& wr) {
  return wr.iterations >= 2 && r.calls == 0 &&
         r.time_ns >= kEnclosingMinShare * wr.mean_iteration_ns;
}

// The group median of fid's time per iteration as worker w's peers see it: the group's
// (absent = 0), or in a tiny group (as the comparison above) the median of the others.
double PeerMedian(const RuleContext& ctx, const std::vector<uint32_t>& ws, uint32_t w, uint32_t fid,
                  const std::vector<uint32_t>& counts, const std::vector<uint32_t>& offsets,
                  const Column<uint32_t>& entries, const Column<float>& times,
                  const std::vector<float>& group_median, std::vector<float>& values) {
  const size_t n = ws.size();
  if (n > kSmallGroup) return group_median[fid];
  const WorkerRecord& wr = ctx.job->workers()[w];
  values.clear();
  for (uint32_t e = offsets[fid] - counts[fid]; e < offsets[fid]; ++e) {
    if (entries[e] < wr.first_record || entries[e] >= wr.first_record + wr.num_records) {
      values.push_back(times[e]);
    }
  }
  values.resize(n - 1, 0.0f);
  return MedianInPlace(values);
}

// After a group's comparison (its buckets still filled: offsets[fid] at the end of fid's):
// for each function anomaly out[group_first..], the sum of its direct callees' positive
// excesses on its worker (callees_excess), and when its largest callee is no anomaly itself
// but holds a majority (kCarriesMajority) of the anomaly's excess, that callee as a carrier
// (Anomaly::carrier) with the numbers the wording needs. One scan of the records of the
// workers with an anomaly (not of the group), then the peers' statistics of the few carriers.
void EmitCarriers(const RuleContext& ctx, const std::vector<uint32_t>& ws, size_t group_first,
                  const std::vector<uint32_t>& counts, const std::vector<uint32_t>& offsets,
                  const Column<uint32_t>& entries, const Column<float>& times,
                  const std::vector<float>& group_median, std::vector<uint32_t>& anomaly_of,
                  std::vector<size_t>& order, std::vector<float>& values,
                  std::vector<Anomaly>& out) {
  const JobTable& job = *ctx.job;
  const std::vector<FunctionInfo>& functions = job.functions();
  const std::vector<WorkerRecord>& workers = job.workers();
  const RecordStore& records = job.records();
  const size_t group_end = out.size();
  order.clear();
  for (size_t k = group_first; k < group_end; ++k) {
    if (!out[k].only_on_some) order.push_back(k);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return out[a].worker < out[b].worker; });
  struct Best {
    size_t anomaly;
    uint32_t record;
    float median;
  };
  std::vector<Best> carriers;
  for (size_t begin = 0; begin < order.size();) {
    const uint32_t w = out[order[begin]].worker;
    size_t end = begin;
    while (end < order.size() && out[order[end]].worker == w) ++end;
    for (size_t i = begin; i < end; ++i) {
      anomaly_of[out[order[i]].fid] = static_cast<uint32_t>(order[i] - group_first + 1);
    }
    const size_t first_best = carriers.size();
    const WorkerRecord& wr = workers[w];
    for (uint32_t k = 0; k < wr.num_records; ++k) {
      const uint32_t idx = wr.first_record + k;
      const FunctionRecord& r = records[idx];
      const uint32_t parent = functions[r.fid].parent;
      if (parent == kNone || anomaly_of[parent] == 0) continue;
      const double median =
          PeerMedian(ctx, ws, w, r.fid, counts, offsets, entries, times, group_median, values);
      const double excess = r.time_ns - median;
      if (excess <= 0) continue;
      const size_t a = group_first + anomaly_of[parent] - 1;
      out[a].callees_excess += static_cast<float>(excess);
      auto it = std::find_if(carriers.begin() + static_cast<std::ptrdiff_t>(first_best),
                             carriers.end(), [&](const Best& b) { return b.anomaly == a; });
      if (it == carriers.end()) {
        carriers.push_back({a, idx, static_cast<float>(median)});
      } else if (excess > records[it->record].time_ns - it->median) {
        *it = {a, idx, static_cast<float>(median)};
      }
    }
    // A callee that is an anomaly itself is the collapse's already.
    carriers.erase(
        std::remove_if(carriers.begin() + static_cast<std::ptrdiff_t>(first_best), carriers.end(),
                       [&](const Best& b) {
                         const FunctionRecord& r = records[b.record];
                         return anomaly_of[r.fid] != 0 ||
                                r.time_ns - b.median <= kCarriesMajority * out[b.anomaly].excess();
                       }),
        carriers.end());
    for (size_t i = begin; i < end; ++i) anomaly_of[out[order[i]].fid] = 0;
    begin = end;
  }
  const size_t n = ws.size();
  for (const Best& b : carriers) {
    const FunctionRecord& r = records[b.record];
    const uint32_t fid = r.fid;
    const uint32_t present = counts[fid];
    const uint32_t bucket = offsets[fid] - present;
    Anomaly c;
    c.worker = out[b.anomaly].worker;
    c.fid = fid;
    c.group = out[b.anomaly].group;
    c.peers = static_cast<uint32_t>(n);
    c.present = present;
    c.carrier = true;
    c.value = r.time_ns;
    c.median = b.median;
    values.assign(times.begin() + bucket, times.begin() + bucket + present);
    values.resize(n, 0.0f);
    c.scale = static_cast<float>(
        RobustScale(MedianAndMadInPlace(values), kScaleRelativeFloor, kScaleAbsoluteFloorNs));
    c.p50 = r.p50_ns;
    c.calls = r.calls;
    c.critical = r.critical_ns;
    values.resize(present);
    for (uint32_t e = 0; e < present; ++e) values[e] = records[entries[bucket + e]].p50_ns;
    c.peer_p50 = static_cast<float>(MedianInPlace(values));
    values.assign(n, 0.0f);
    for (uint32_t e = 0; e < present; ++e) values[e] = records[entries[bucket + e]].calls;
    c.peer_calls = static_cast<float>(MedianInPlace(values));
    values.assign(n, 0.0f);
    for (uint32_t e = 0; e < present; ++e) values[e] = records[entries[bucket + e]].critical_ns;
    c.peer_critical = static_cast<float>(MedianInPlace(values));
    out.push_back(c);
  }
}

}  // namespace

std::vector<Anomaly> ComparePeers(const RuleContext& ctx) {
  const JobTable& job = *ctx.job;
  const LocalizerOptions& options = *ctx.options;
  const std::vector<std::vector<uint32_t>>& members = ctx.peers->members;
  const std::vector<WorkerRecord>& workers = job.workers();
  const RecordStore& records = job.records();
  const double report_ns = ctx.report_ns;
  std::vector<Anomaly> out;
  // Per fid, allocated for the first group that is compared (a job of one worker, e.g. one
  // trace file with ~35,000 call paths, has none).
  std::vector<uint32_t> counts;
  std::vector<uint32_t> offsets;
  std::vector<uint32_t> touched;
  Column<uint32_t> entries;  // record indices bucketed by fid
  Column<float> times;       // their time per iteration, same order (contiguous reads)
  std::vector<float> values;
  // Per fid, for the group being compared: its median time per iteration over the group
  // (absent = 0), and which anomaly of the worker being scanned it is (index + 1, 0: none).
  std::vector<float> group_median;
  std::vector<uint32_t> anomaly_of;
  std::vector<size_t> order;  // the group's anomalies, by worker
  // Host load, for the workers that did more CPU work than their peers on a saturated host.
  const std::vector<HostLoad> hosts = LoadPerHost(job);
  for (uint32_t g = 0; g < members.size(); ++g) {
    const auto& ws = members[g];
    const size_t n = ws.size();
    if (n < kMinPeers) continue;
    const std::vector<uint32_t> cpu_outliers = CpuOutliersOnSaturatedHosts(ctx, hosts, ws);
    auto worker_of = [&](uint32_t idx) {
      return *(
          std::upper_bound(ws.begin(), ws.end(), idx,
                           [&](uint32_t v, uint32_t w) { return v < workers[w].first_record; }) -
          1);
    };
    // Compared with its peers without itself too: a tiny group's worker, and one whose extra
    // CPU time on a saturated host says it did more work (CpuOutliersOnSaturatedHosts).
    auto leave_one_out = [&](uint32_t idx) {
      return n <= kSmallGroup ||
             (!cpu_outliers.empty() &&
              std::binary_search(cpu_outliers.begin(), cpu_outliers.end(), worker_of(idx)));
    };
    if (counts.empty()) {
      counts.assign(job.functions().size(), 0);
      offsets.assign(job.functions().size(), 0);
      group_median.assign(job.functions().size(), 0.0f);
      anomaly_of.assign(job.functions().size(), 0);
    }
    const size_t group_first = out.size();
    // Counting sort of the group's records by function.
    touched.clear();
    uint64_t total = 0;
    for (uint32_t w : ws) {
      const WorkerRecord& wr = workers[w];
      records.ForEach(wr.first_record, wr.num_records, [&](uint64_t, const FunctionRecord& r) {
        if (counts[r.fid]++ == 0) touched.push_back(r.fid);
      });
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
      const WorkerRecord& wr = workers[w];
      records.ForEach(wr.first_record, wr.num_records, [&](uint64_t idx, const FunctionRecord& r) {
        const uint32_t pos = offsets[r.fid]++;
        entries[pos] = static_cast<uint32_t>(idx);
        times[pos] = r.time_ns;
      });
    }
    // offsets[fid] now points at the end of its bucket.
    for (uint32_t fid : touched) {
      const uint32_t present = counts[fid];
      const uint32_t end = offsets[fid];
      const uint32_t begin = end - present;
      const size_t first_anomaly = out.size();
      group_median[fid] = 0;  // a function a minority runs: the median worker does not
      auto emit = [&](uint32_t idx, float median, float scale, bool minority) {
        const FunctionRecord& r = records[idx];
        // The worker owning record idx: records are contiguous per worker, in order.
        const uint32_t owner = worker_of(idx);
        if (EnclosesIterations(r, workers[owner])) return;
        Anomaly a;
        a.worker = owner;
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
        group_median[fid] = static_cast<float>(c.median);
        // The relative-effect and reporting floors alone rule most functions out: then the
        // MAD (a second selection pass) is not needed.
        const double floor = c.median + std::max(options.min_relative_effect * c.median, report_ns);
        if (max_value <= floor) continue;
        std::copy(times.begin() + begin, times.begin() + end, values.begin());
        std::fill(values.begin() + present, values.end(), 0.0f);
        c = MedianAndMadInPlace(values);
        const double scale = RobustScale(c, kScaleRelativeFloor, kScaleAbsoluteFloorNs);
        const double threshold = std::max(floor, c.median + options.outlier_z * scale);
        for (uint32_t e = begin; e < end; ++e) {
          if (times[e] > threshold) {
            emit(entries[e], static_cast<float>(c.median), static_cast<float>(scale), false);
          } else if (times[e] > floor && leave_one_out(entries[e])) {
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
                peers.median + std::max(options.min_relative_effect * peers.median, report_ns);
            if (times[e] > std::max(peer_floor, peers.median + options.outlier_z * peer_scale)) {
              emit(entries[e], static_cast<float>(peers.median), static_cast<float>(peer_scale),
                   false);
            }
          }
        }
      } else {
        for (uint32_t e = begin; e < end; ++e) {
          if (times[e] >= report_ns) emit(entries[e], 0, 0, true);
        }
      }
      if (out.size() > first_anomaly) {
        // How the anomalous workers differ: the group's p50 (over the workers running the
        // function) and calls / critical time per iteration (absent workers count 0).
        values.resize(present);
        for (uint32_t e = begin; e < end; ++e) values[e - begin] = records[entries[e]].p50_ns;
        const auto peer_p50 = static_cast<float>(MedianInPlace(values));
        values.resize(n);
        std::fill(values.begin(), values.end(), 0.0f);
        for (uint32_t e = begin; e < end; ++e) values[e - begin] = records[entries[e]].calls;
        const auto peer_calls = static_cast<float>(MedianInPlace(values));
        std::fill(values.begin(), values.end(), 0.0f);
        for (uint32_t e = begin; e < end; ++e) {
          values[e - begin] = records[entries[e]].critical_ns;
        }
        const auto peer_critical = static_cast<float>(MedianInPlace(values));
        for (size_t k = first_anomaly; k < out.size(); ++k) {
          out[k].peer_p50 = peer_p50;
          out[k].peer_calls = peer_calls;
          out[k].peer_critical = peer_critical;
        }
      }
    }
    EmitCarriers(ctx, ws, group_first, counts, offsets, entries, times, group_median, anomaly_of,
                 order, values, out);
    for (uint32_t fid : touched) counts[fid] = 0;
  }
  return out;
}

}  // namespace perftracker::localize
