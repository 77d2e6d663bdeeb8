#include "perftracker/report/perfetto_writer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace perftracker {
namespace {

// Findings tracks sit above the rank's own tracks, whose tids are 1..tracks.
constexpr int64_t kFindingTidBase = 1'000'000'000;
// A pid for a trace that knows no rank (never collides with a real rank).
constexpr int64_t kUnknownRankPidBase = 1'000'000'000;
// How far inside its slice's end an arrow leaves the culprit's call and enters the wait.
constexpr int64_t kArrowInsetNs = 1000;
// Flush the output buffer past this size.
constexpr size_t kFlushBytes = 1 << 20;

std::string JsonString(std::string_view s) {
  // Names need not be UTF-8 (a truncated or binary name): replace bad bytes, never throw.
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Chrome-trace timestamps are µs; ns are written exactly with three decimals.
std::string Micros(int64_t ns) {
  const bool negative = ns < 0;
  const uint64_t abs = negative ? static_cast<uint64_t>(-(ns + 1)) + 1 : static_cast<uint64_t>(ns);
  return fmt::format("{}{}.{:03}", negative ? "-" : "", abs / 1000, abs % 1000);
}

std::string_view LeafOf(std::string_view key) {
  const size_t at = key.rfind(" > ");
  return at == std::string_view::npos ? key : key.substr(at + 3);
}

// The Kineto category an event of this kind comes from, so that the importer classifies the
// exported event as the same kind again.
std::string_view CategoryOf(const Event& e) {
  const bool device = (e.flags & kEventFlagOnDevice) != 0;
  switch (e.kind) {
    case EventKind::kPythonCall:
      return "python_function";
    case EventKind::kTorchOp:
      return "cpu_op";
    case EventKind::kUserAnnotation:
      return device ? "gpu_user_annotation" : "user_annotation";
    case EventKind::kGpuKernel:
      return "kernel";
    case EventKind::kMemcpy:
      return "gpu_memcpy";
    case EventKind::kMemset:
      return "gpu_memset";
    case EventKind::kKernelLaunch:
      return "cuda_runtime";
    case EventKind::kRuntimeCall:
      return "cuda_runtime";
    case EventKind::kSync:
      return device ? "cuda_sync" : "cuda_runtime";
    case EventKind::kCollective:
      return device ? "kernel" : "cpu_op";
    case EventKind::kGc:
      return "user_annotation";
    case EventKind::kDataLoad:
      return "user_annotation";
    case EventKind::kOptimizerStep:
      return "user_annotation";
    case EventKind::kIteration:
      return device ? "gpu_user_annotation" : "user_annotation";
  }
  return "user_annotation";
}

int64_t PidOf(const RankTrace& r, size_t index) {
  return r.rank >= 0 ? r.rank : kUnknownRankPidBase + static_cast<int64_t>(index);
}

struct Interval {
  int64_t start = 0;
  int64_t end = 0;
  size_t calls = 0;
};

// Everything Write() needs about one rank, computed before anything is written.
struct RankPlan {
  const RankTrace* trace = nullptr;
  int64_t pid = 0;
  PerfettoRankAlignment alignment;
  std::unordered_map<uint32_t, size_t> track_index;  // track id -> index in trace->tracks()
  std::vector<uint32_t> order;                       // event indices written, by track, start
  // The end written for order[i]: the event's end, or the end of the slice that encloses its
  // start on its track when it ends past it (a partial overlap, which a viewer cannot draw on
  // one track: Kineto's µs times often end a child 1 µs after its parent).
  std::vector<int64_t> end_ns;
  uint64_t clipped = 0;
  int64_t clipped_ns = 0;
  std::vector<uint64_t> aggregated_count;  // per track index (+1: unknown track)
  std::vector<int64_t> aggregated_ns;
  uint64_t aggregated = 0;
  int64_t aggregated_total_ns = 0;
  int64_t shift_ns = 0;  // subtracted from raw times: the clock offset less the global shift
  int64_t first_ns = 0;  // written window start (for instants)
};

class Output {
 public:
  explicit Output(std::ostream* out) : out_(out) {}
  void Add(const std::string& json) {
    if (!first_) buf_ += ",\n";
    first_ = false;
    buf_ += json;
    if (buf_.size() > kFlushBytes) Flush();
  }
  void Raw(std::string_view s) { buf_ += s; }
  void Flush() {
    out_->write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

 private:
  std::ostream* out_;
  std::string buf_;
  bool first_ = true;
};

std::string ThreadName(const TrackInfo& t) {
  switch (t.kind) {
    case TrackKind::kHostThread:
      return t.name;
    case TrackKind::kDeviceStream:
      return t.device >= 0 ? fmt::format("GPU {} {}", t.device, t.name) : t.name;
    case TrackKind::kCommunicator:
      return "communicator " + t.name;
  }
  return t.name;
}

int SortIndexOf(TrackKind kind) {
  switch (kind) {
    case TrackKind::kHostThread:
      return 0;
    case TrackKind::kDeviceStream:
      return 1'000;
    case TrackKind::kCommunicator:
      return 2'000;
  }
  return 0;
}

// A rank whose first event lies within a day of 0 has a clock that counts from its trace's
// start (torch 1.13 traces); later ones count from a shared origin (the epoch: NTP keeps
// hosts within milliseconds of each other).
constexpr int64_t kRelativeClockNs = 86'400'000'000'000;
// A rank's trace may hold a few more or fewer calls of a collective than the reference's at
// either end (a live window's span cut by a skewed clock, a trace started a call later):
// the n-th call is paired with the (n + s)-th, for the shift s within this bound whose
// offset is nearest the prior.
constexpr int kMaxCallShift = 3;

int64_t MedianOf(std::vector<int64_t> v) {
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

int64_t Distance(int64_t a, int64_t b) { return a > b ? a - b : b - a; }

struct SideAlignment {
  int64_t offset_ns = 0;
  size_t sync_points = 0;
  int64_t spread_ns = 0;
  bool device_side = false;
  size_t shifted_keys = 0;  // collectives paired with a call shift
};

// The offset of `mine` against `reference` from the collectives both have: per name, the
// call shift whose median end difference is nearest `prior`; then the median and the median
// absolute deviation of all the paired differences.
std::optional<SideAlignment> AlignSide(
    const std::map<std::string_view, std::vector<int64_t>>& mine,
    const std::map<std::string_view, std::vector<int64_t>>& reference, int64_t prior) {
  std::vector<int64_t> diffs;
  size_t shifted = 0;
  for (const auto& [name, a] : mine) {
    auto it = reference.find(name);
    if (it == reference.end()) continue;
    const std::vector<int64_t>& b = it->second;
    const size_t want = std::max<size_t>(1, std::min(a.size(), b.size()) / 2);
    std::vector<int64_t> best;
    int best_shift = 0;
    int64_t best_distance = 0;
    for (int s = -kMaxCallShift; s <= kMaxCallShift; ++s) {
      std::vector<int64_t> d;
      for (size_t k = s < 0 ? static_cast<size_t>(-s) : 0; k < b.size(); ++k) {
        const size_t j = static_cast<size_t>(static_cast<int64_t>(k) + s);
        if (j >= a.size()) break;
        d.push_back(a[j] - b[k]);
      }
      if (d.size() < want) continue;
      const int64_t distance = Distance(MedianOf(d), prior);
      if (best.empty() || distance < best_distance ||
          (distance == best_distance && std::abs(s) < std::abs(best_shift))) {
        best = std::move(d);
        best_shift = s;
        best_distance = distance;
      }
    }
    if (best_shift != 0) ++shifted;
    diffs.insert(diffs.end(), best.begin(), best.end());
  }
  if (diffs.empty()) return std::nullopt;
  SideAlignment out;
  out.offset_ns = MedianOf(diffs);
  out.sync_points = diffs.size();
  for (int64_t& d : diffs) d = Distance(d, out.offset_ns);
  out.spread_ns = MedianOf(std::move(diffs));
  out.shifted_keys = shifted;
  return out;
}

// Ranks on one host read one clock when it counts from the epoch: their offsets are one
// estimate (the median of theirs; 0 on the reference's host), which takes the noise of a
// single rank's collective ends out.
void PoolByHost(size_t reference, const std::vector<int64_t>& first,
                std::vector<PerfettoRankAlignment>* alignment) {
  std::vector<PerfettoRankAlignment>& out = *alignment;
  std::map<std::string, std::vector<size_t>> by_host;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].host.empty() && first[i] >= kRelativeClockNs) by_host[out[i].host].push_back(i);
  }
  for (const auto& [host, members] : by_host) {
    if (members.size() < 2) continue;
    const bool has_reference =
        std::find(members.begin(), members.end(), reference) != members.end();
    std::vector<int64_t> offsets;
    for (size_t i : members) {
      if (i != reference && out[i].sync_points > 0) offsets.push_back(out[i].offset_ns);
    }
    if (!has_reference && offsets.empty()) continue;
    const int64_t offset = has_reference ? 0 : MedianOf(offsets);
    for (size_t i : members) {
      if (i == reference) continue;
      out[i].offset_ns = offset;
      out[i].host_ranks = members.size();
    }
  }
}

}  // namespace

void PerfettoWriter::AddRank(const RankTrace* rank) { ranks_.push_back(rank); }

std::vector<PerfettoRankAlignment> PerfettoWriter::EstimateAlignment() const {
  // Per rank and side (host, device): collective name -> its calls' end times, in order.
  using Ends = std::map<std::string_view, std::vector<int64_t>>;
  std::vector<std::array<Ends, 2>> ends(ranks_.size());
  std::vector<int64_t> first(ranks_.size(), 0);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const RankTrace& r = *ranks_[i];
    bool any = false;
    for (const Event& e : r.events()) {
      first[i] = any ? std::min(first[i], e.start_ns) : e.start_ns;
      any = true;
      if (e.kind != EventKind::kCollective || e.function_id >= r.functions().size()) continue;
      const size_t side = (e.flags & kEventFlagOnDevice) != 0 ? 1 : 0;
      ends[i][side][r.functions().Get(e.function_id).name].push_back(e.end_ns);
    }
    for (Ends& side : ends[i]) {
      for (auto& [name, v] : side) std::sort(v.begin(), v.end());
    }
  }
  size_t reference = 0;
  for (size_t i = 1; i < ranks_.size(); ++i) {
    if (ranks_[i]->rank < ranks_[reference]->rank) reference = i;
  }
  std::vector<PerfettoRankAlignment> out(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    out[i].rank = ranks_[i]->rank;
    out[i].host = ranks_[i]->host;
    if (i == reference) continue;
    // What the offset should be near: 0 for clocks that count from the epoch (NTP keeps
    // hosts within milliseconds), the difference of the first events for relative clocks
    // (each rank's trace starts with the same step).
    const bool absolute = first[i] >= kRelativeClockNs && first[reference] >= kRelativeClockNs;
    const int64_t prior = absolute ? 0 : first[i] - first[reference];
    std::optional<SideAlignment> best;
    for (size_t side = 0; side < 2; ++side) {
      std::optional<SideAlignment> a = AlignSide(ends[i][side], ends[reference][side], prior);
      if (!a) continue;
      // Device-side ends (the collective's kernel) are the true sync points; host-side ones
      // of asynchronous collectives end at enqueue. Take the side whose ends agree best.
      if (!best || a->spread_ns < best->spread_ns ||
          (a->spread_ns == best->spread_ns && side == 1)) {
        best = a;
        best->device_side = side == 1;
      }
    }
    if (!best) continue;
    out[i].offset_ns = best->offset_ns;
    out[i].sync_points = best->sync_points;
    out[i].spread_ns = best->spread_ns;
    out[i].device_side = best->device_side;
    out[i].shifted_keys = best->shifted_keys;
  }
  PoolByHost(reference, first, &out);
  return out;
}

Status PerfettoWriter::Write(const Diagnosis& diagnosis, std::ostream* out) {
  stats_ = {};
  std::vector<size_t> by_rank(ranks_.size());
  for (size_t i = 0; i < by_rank.size(); ++i) by_rank[i] = i;
  std::stable_sort(by_rank.begin(), by_rank.end(),
                   [&](size_t a, size_t b) { return ranks_[a]->rank < ranks_[b]->rank; });
  const std::vector<PerfettoRankAlignment> alignment = EstimateAlignment();
  int32_t reference_rank = -1;
  if (!by_rank.empty()) reference_rank = ranks_[by_rank.front()]->rank;

  // Events a live recording did not keep (over its per-rank cap) count as aggregated.
  uint64_t not_recorded = 0;
  for (const RankTrace* r : ranks_) {
    stats_.events_total += r->events().size();
    not_recorded += r->not_recorded_count();
  }
  // Traces with relative times (each rank's starts near 0) would get negative times once
  // aligned: every rank is then shifted by the same amount, which keeps the alignment.
  int64_t global_shift_ns = 0;
  const bool capped = stats_.events_total > options_.max_events;

  // Plan each rank: which events are written (the cap), in which order.
  std::vector<RankPlan> plans(ranks_.size());
  std::unordered_map<int32_t, size_t> plan_of_rank;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    RankPlan& p = plans[i];
    const RankTrace& r = *ranks_[i];
    p.trace = &r;
    p.pid = PidOf(r, i);
    p.alignment = alignment[i];
    plan_of_rank.emplace(r.rank, i);
    for (size_t t = 0; t < r.tracks().size(); ++t) p.track_index.emplace(r.tracks()[t].track_id, t);
    p.aggregated_count.assign(r.tracks().size() + 1, 0);
    p.aggregated_ns.assign(r.tracks().size() + 1, 0);
    const std::vector<Event>& ev = r.events();
    if (!ev.empty()) {
      int64_t first = ev.front().start_ns;
      for (const Event& e : ev) first = std::min(first, e.start_ns);
      p.first_ns = first - p.alignment.offset_ns;
    }
    p.shift_ns = p.alignment.offset_ns;
    // The share of the cap: proportional to the rank's events.
    size_t budget = ev.size();
    if (capped) {
      budget = static_cast<size_t>(static_cast<double>(options_.max_events) *
                                   static_cast<double>(ev.size()) /
                                   static_cast<double>(stats_.events_total));
    }
    int64_t threshold = INT64_MIN;  // keep events longer than this, then ties up to the budget
    size_t ties_left = 0;
    if (budget < ev.size()) {
      std::vector<int64_t> durations;
      durations.reserve(ev.size());
      for (const Event& e : ev) durations.push_back(e.duration_ns());
      if (budget == 0) {
        threshold = INT64_MAX;
      } else {
        auto nth = durations.begin() + static_cast<std::ptrdiff_t>(budget - 1);
        std::nth_element(durations.begin(), nth, durations.end(), std::greater<>());
        threshold = *nth;
        size_t longer = 0;
        for (int64_t d : durations) longer += d > threshold ? 1 : 0;
        ties_left = budget - longer;
      }
    }
    p.order.reserve(std::min(budget, ev.size()));
    for (size_t k = 0; k < ev.size(); ++k) {
      const int64_t d = ev[k].duration_ns();
      bool keep = budget >= ev.size() || d > threshold;
      if (!keep && d == threshold && ties_left > 0) {
        keep = true;
        --ties_left;
      }
      if (keep) {
        p.order.push_back(static_cast<uint32_t>(k));
      } else {
        auto it = p.track_index.find(ev[k].track_id);
        const size_t t = it == p.track_index.end() ? r.tracks().size() : it->second;
        ++p.aggregated_count[t];
        p.aggregated_ns[t] += d;
        ++p.aggregated;
        p.aggregated_total_ns += d;
      }
    }
    std::sort(p.order.begin(), p.order.end(), [&](uint32_t a, uint32_t b) {
      const Event& x = ev[a];
      const Event& y = ev[b];
      if (x.track_id != y.track_id) return x.track_id < y.track_id;
      if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
      return x.end_ns > y.end_ns;  // parents before their children
    });
    // Slices of one track nest: a slice that starts inside another and ends past it is
    // clipped at that one's end, and counted.
    p.end_ns.resize(p.order.size());
    std::vector<int64_t> open;  // ends of the slices enclosing the current start
    for (size_t i = 0; i < p.order.size(); ++i) {
      const Event& e = ev[p.order[i]];
      if (i > 0 && ev[p.order[i - 1]].track_id != e.track_id) open.clear();
      while (!open.empty() && open.back() <= e.start_ns) open.pop_back();
      int64_t end = e.end_ns;
      if (!open.empty() && end > open.back()) {
        ++p.clipped;
        p.clipped_ns += end - open.back();
        end = open.back();
      }
      p.end_ns[i] = end;
      open.push_back(end);
    }
    stats_.events_clipped += p.clipped;
    stats_.clipped_ns += p.clipped_ns;
    if (!ev.empty()) global_shift_ns = std::max(global_shift_ns, -p.first_ns);
    for (const auto& [track_id, n] : r.not_recorded()) {
      auto it = p.track_index.find(track_id);
      const size_t t = it == p.track_index.end() ? r.tracks().size() : it->second;
      p.aggregated_count[t] += n.count;
      p.aggregated_ns[t] += n.ns;
      p.aggregated += n.count;
      p.aggregated_total_ns += n.ns;
    }
    stats_.events_written += p.order.size();
    stats_.events_aggregated += p.aggregated;
  }
  stats_.events_total += not_recorded;

  for (RankPlan& p : plans) {
    p.shift_ns -= global_shift_ns;
    p.first_ns += global_shift_ns;
  }

  Output o(out);
  nlohmann::ordered_json other;
  other["generator"] = options_.generator;
  other["max_events"] = options_.max_events;
  other["events_total"] = stats_.events_total;
  other["events_written"] = stats_.events_written;
  other["events_aggregated"] = stats_.events_aggregated;
  other["events_clipped"] = stats_.events_clipped;
  other["clipped_ns"] = stats_.clipped_ns;
  other["clock_reference_rank"] = reference_rank;
  other["time_shift_ns"] = global_shift_ns;
  nlohmann::ordered_json rank_list = nlohmann::ordered_json::array();
  for (size_t i : by_rank) {
    const RankPlan& p = plans[i];
    rank_list.push_back({{"rank", p.trace->rank},
                         {"host", p.trace->host},
                         {"source", p.trace->source},
                         {"clock_offset_ns", p.alignment.offset_ns},
                         {"sync_points", p.alignment.sync_points},
                         {"sync_spread_ns", p.alignment.spread_ns},
                         {"sync_side", p.alignment.device_side ? "device" : "host"},
                         {"host_ranks_pooled", p.alignment.host_ranks},
                         {"events", p.trace->events().size() + p.trace->not_recorded_count()},
                         {"events_not_recorded", p.trace->not_recorded_count()},
                         {"events_aggregated", p.aggregated},
                         {"aggregated_ns", p.aggregated_total_ns},
                         {"events_clipped", p.clipped},
                         {"clipped_ns", p.clipped_ns}});
  }
  other["ranks"] = std::move(rank_list);
  o.Raw("{\"displayTimeUnit\":\"ms\",\"otherData\":");
  o.Raw(other.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  o.Raw(",\"traceEvents\":[\n");

  // Ranks: metadata, then their events.
  for (size_t i : by_rank) {
    RankPlan& p = plans[i];
    const RankTrace& r = *p.trace;
    const std::string host = r.host.empty() ? "unknown host" : r.host;
    const std::string label = r.rank >= 0 ? fmt::format("rank {} ({})", r.rank, host)
                                          : fmt::format("{} ({})", r.source, host);
    o.Add(fmt::format(R"({{"ph":"M","pid":{},"tid":0,"name":"process_name","args":{{"name":{}}}}})",
                      p.pid, JsonString(label)));
    o.Add(fmt::format(
        R"({{"ph":"M","pid":{},"tid":0,"name":"process_sort_index","args":{{"sort_index":{}}}}})",
        p.pid, p.pid));
    std::string clock;
    if (r.rank == reference_rank) {
      clock = "clock reference";
    } else if (p.alignment.host_ranks > 1 && p.alignment.sync_points == 0) {
      clock = fmt::format("clock offset {:+.3f} ms vs rank {} (the clock of its host's {} ranks)",
                          static_cast<double>(p.alignment.offset_ns) / 1e6, reference_rank,
                          p.alignment.host_ranks);
    } else if (p.alignment.sync_points == 0) {
      clock =
          fmt::format("clock not aligned: no collective in common with rank {}", reference_rank);
    } else {
      clock = fmt::format(
          "clock offset {:+.3f} ms vs rank {} ({} {}-side collective ends, spread {:.3f} ms{})",
          static_cast<double>(p.alignment.offset_ns) / 1e6, reference_rank, p.alignment.sync_points,
          p.alignment.device_side ? "device" : "host",
          static_cast<double>(p.alignment.spread_ns) / 1e6,
          p.alignment.host_ranks > 1
              ? fmt::format("; shared by its host's {} ranks", p.alignment.host_ranks)
              : std::string());
    }
    if (p.aggregated > p.trace->not_recorded_count()) {
      clock += fmt::format("; {} short events aggregated (over the {} event cap)",
                           p.aggregated - p.trace->not_recorded_count(), options_.max_events);
    }
    if (p.trace->not_recorded_count() > 0) {
      clock += fmt::format("; {} events not recorded (over the live recording's cap), counted",
                           p.trace->not_recorded_count());
    }
    o.Add(fmt::format(
        R"({{"ph":"M","pid":{},"tid":0,"name":"process_labels","args":{{"labels":{}}}}})", p.pid,
        JsonString(clock)));
    o.Add(fmt::format(
        R"({{"ph":"M","pid":{},"tid":0,"name":"perftracker_rank","args":{{"rank":{},"clock_offset_ns":{},"sync_points":{},"sync_spread_ns":{},"sync_side":"{}","host_ranks_pooled":{},"clock_reference_rank":{},"events":{},"events_aggregated":{},"aggregated_ns":{},"events_clipped":{},"clipped_ns":{},"source":{}}}}})",
        p.pid, r.rank, p.alignment.offset_ns, p.alignment.sync_points, p.alignment.spread_ns,
        p.alignment.device_side ? "device" : "host", p.alignment.host_ranks, reference_rank,
        r.events().size(), p.aggregated, p.aggregated_total_ns, p.clipped, p.clipped_ns,
        JsonString(r.source)));
    for (size_t t = 0; t < r.tracks().size(); ++t) {
      const TrackInfo& track = r.tracks()[t];
      const int64_t tid = static_cast<int64_t>(t) + 1;
      std::string args = fmt::format(R"("name":{})", JsonString(ThreadName(track)));
      if (p.aggregated_count[t] > 0) {
        args += fmt::format(R"(,"events_aggregated":{},"aggregated_ns":{})", p.aggregated_count[t],
                            p.aggregated_ns[t]);
      }
      o.Add(fmt::format(R"({{"ph":"M","pid":{},"tid":{},"name":"thread_name","args":{{{}}}}})",
                        p.pid, tid, args));
      o.Add(fmt::format(
          R"({{"ph":"M","pid":{},"tid":{},"name":"thread_sort_index","args":{{"sort_index":{}}}}})",
          p.pid, tid, SortIndexOf(track.kind) + static_cast<int>(t)));
    }

    std::vector<std::string> names(r.functions().size());
    std::vector<uint32_t> step(r.tracks().size() + 1, 0);
    const std::string unknown_name = JsonString("?");
    for (size_t i = 0; i < p.order.size(); ++i) {
      const Event& e = r.events()[p.order[i]];
      auto it = p.track_index.find(e.track_id);
      const size_t t = it == p.track_index.end() ? r.tracks().size() : it->second;
      const int64_t tid = static_cast<int64_t>(t) + 1;
      std::string name;
      if (e.kind == EventKind::kIteration) {
        name = JsonString(fmt::format("ProfilerStep#{}", step[t]++));
      } else if (e.function_id < names.size()) {
        if (names[e.function_id].empty()) {
          names[e.function_id] = JsonString(r.functions().Get(e.function_id).name);
        }
        name = names[e.function_id];
      } else {
        name = unknown_name;
      }
      std::string args;
      const bool device = (e.flags & kEventFlagOnDevice) != 0;
      if (device) {
        const int32_t dev = t < r.tracks().size() ? r.tracks()[t].device : -1;
        args += fmt::format(R"("device":{},"stream":{})", std::max(dev, 0), tid);
      }
      if (e.kind == EventKind::kMemcpy || e.kind == EventKind::kMemset) {
        args += fmt::format(R"({}"bytes":{})", args.empty() ? "" : ",", e.payload);
      } else if (e.kind == EventKind::kCollective && e.payload > 0) {
        args += fmt::format(R"({}"In msg nelems":{},"dtype":"Byte")", args.empty() ? "" : ",",
                            e.payload);
      }
      if (e.correlation != 0) {
        args += fmt::format(R"({}"correlation":{})", args.empty() ? "" : ",", e.correlation);
      }
      o.Add(fmt::format(
          R"({{"ph":"X","cat":"{}","name":{},"pid":{},"tid":{},"ts":{},"dur":{},"args":{{{}}}}})",
          CategoryOf(e), name, p.pid, tid, Micros(e.start_ns - p.shift_ns),
          Micros(p.end_ns[i] - e.start_ns), args));
    }
  }

  // The diagnosis, drawn on the timeline.
  uint64_t flow_id = 1;
  for (size_t f = 0; f < diagnosis.findings.size(); ++f) {
    const Finding& finding = diagnosis.findings[f];
    const int64_t tid = kFindingTidBase + static_cast<int64_t>(f);
    const std::string track_name = fmt::format("perftracker #{} {}", f + 1, finding.code);
    const std::string leaf(LeafOf(finding.function_key.empty() ? std::string_view(finding.function)
                                                               : finding.function_key));
    const std::string common_args = fmt::format(
        R"("code":{},"message":{},"function":{},"call_path":{},"resource":{},"lost_ms_per_iteration":{:.3f},"material":{})",
        JsonString(finding.code), JsonString(finding.title), JsonString(finding.function),
        JsonString(finding.function_key), JsonString(finding.resource),
        finding.lost_ns_per_iteration / 1e6, finding.material ? "true" : "false");
    std::vector<size_t> culprits;
    if (finding.workers.empty()) {
      culprits = by_rank;
    } else {
      for (int32_t w : finding.workers) {
        auto it = plan_of_rank.find(w);
        if (it != plan_of_rank.end()) culprits.push_back(it->second);
      }
    }
    auto declare_track = [&](const RankPlan& p) {
      o.Add(
          fmt::format(R"({{"ph":"M","pid":{},"tid":{},"name":"thread_name","args":{{"name":{}}}}})",
                      p.pid, tid, JsonString(track_name)));
      o.Add(fmt::format(
          R"({{"ph":"M","pid":{},"tid":{},"name":"thread_sort_index","args":{{"sort_index":{}}}}})",
          p.pid, tid, -1000 + static_cast<int64_t>(f)));
    };
    // Culprits: a slice over each (merged) call of the function.
    std::vector<std::pair<size_t, Interval>> flow_sources;  // (plan, culprit interval)
    for (size_t c : culprits) {
      const RankPlan& p = plans[c];
      const RankTrace& r = *p.trace;
      std::vector<Interval> calls;
      if (!leaf.empty()) {
        std::vector<int8_t> matches(r.functions().size(), -1);
        for (const Event& e : r.events()) {
          if (e.function_id >= matches.size()) continue;
          int8_t& m = matches[e.function_id];
          // A call path's leaf is "kind:name"; a finding without one names the function only.
          if (m < 0) {
            m = (finding.function_key.empty() ? r.functions().Get(e.function_id).name
                                              : LeafOf(r.functions().Key(e.function_id))) == leaf
                    ? 1
                    : 0;
          }
          if (m == 1) {
            calls.push_back({e.start_ns - p.shift_ns, e.end_ns - p.shift_ns, 1});
          }
        }
      }
      declare_track(p);
      if (calls.empty()) {
        o.Add(fmt::format(
            R"({{"ph":"i","s":"t","cat":"perftracker","name":{},"pid":{},"tid":{},"ts":{},"args":{{{},"note":{}}}}})",
            JsonString(finding.code), p.pid, tid, Micros(p.first_ns), common_args,
            JsonString(leaf.empty() ? "the finding names no function"
                                    : "no call of this function in this rank's events")));
        ++stats_.annotations;
        continue;
      }
      std::sort(calls.begin(), calls.end(),
                [](const Interval& a, const Interval& b) { return a.start < b.start; });
      std::vector<Interval> merged;
      for (const Interval& iv : calls) {
        if (!merged.empty() && iv.start <= merged.back().end) {
          merged.back().end = std::max(merged.back().end, iv.end);
          ++merged.back().calls;
        } else {
          merged.push_back(iv);
        }
      }
      const size_t drawn = std::min(merged.size(), options_.max_slices_per_finding);
      for (size_t k = 0; k < drawn; ++k) {
        const Interval& iv = merged[k];
        std::string extra = fmt::format(R"(,"calls":{})", iv.calls);
        if (k == 0 && drawn < merged.size()) {
          extra += fmt::format(R"(,"slices_not_drawn":{})", merged.size() - drawn);
        }
        o.Add(fmt::format(
            R"({{"ph":"X","cat":"perftracker","name":{},"pid":{},"tid":{},"ts":{},"dur":{},"args":{{{}{}}}}})",
            JsonString(finding.code + " " + finding.function), p.pid, tid, Micros(iv.start),
            Micros(iv.end - iv.start), common_args, extra));
        ++stats_.annotations;
        if (!finding.workers.empty()) flow_sources.emplace_back(c, iv);
      }
    }
    // Victims: the collective each waited in until the culprit's call ended, and an arrow.
    std::vector<size_t> victims;
    for (int32_t v : finding.victims) {
      auto it = plan_of_rank.find(v);
      if (it == plan_of_rank.end()) continue;
      if (std::find(finding.workers.begin(), finding.workers.end(), v) != finding.workers.end()) {
        continue;
      }
      victims.push_back(it->second);
    }
    if (victims.empty() || flow_sources.empty()) continue;
    std::sort(flow_sources.begin(), flow_sources.end(),
              [](const auto& a, const auto& b) { return a.second.end < b.second.end; });
    const size_t per_victim = std::max<size_t>(1, options_.max_flows_per_finding / victims.size());
    std::set<std::pair<int64_t, int64_t>> anchors;  // (pid, ns) of the arrow ends drawn
    for (size_t v : victims) {
      const RankPlan& p = plans[v];
      const RankTrace& r = *p.trace;
      std::vector<Interval> waits;  // aligned collectives, by end
      for (const Event& e : r.events()) {
        if (e.kind == EventKind::kCollective) {
          waits.push_back({e.start_ns - p.shift_ns, e.end_ns - p.shift_ns, 1});
        }
      }
      std::sort(waits.begin(), waits.end(),
                [](const Interval& a, const Interval& b) { return a.end < b.end; });
      declare_track(p);
      Interval last_drawn{INT64_MIN, INT64_MIN, 0};
      size_t drawn = 0;
      for (const auto& [c, iv] : flow_sources) {
        if (drawn >= per_victim) break;
        auto w = std::lower_bound(waits.begin(), waits.end(), iv.end,
                                  [](const Interval& a, int64_t t) { return a.end < t; });
        if (w == waits.end()) continue;
        // One slice per wait on the victim's track; waits that overlap one already drawn
        // point at that one (slices on a track must nest).
        if (w->start >= last_drawn.end) {
          last_drawn = *w;
          o.Add(fmt::format(
              R"({{"ph":"X","cat":"perftracker","name":{},"pid":{},"tid":{},"ts":{},"dur":{},"args":{{{},"culprit_rank":{}}}}})",
              JsonString(fmt::format("waits for rank {}", plans[c].trace->rank)), p.pid, tid,
              Micros(w->start), Micros(w->end - w->start), common_args, plans[c].trace->rank));
          ++stats_.annotations;
        }
        // From the end of the culprit's call to the end of the wait it released: never back
        // in time. Each arrow end is the start of a short slice inside the call or the wait
        // (their last µs): Perfetto and chrome://tracing bind a flow event to the slice
        // that encloses it, Chrome DevTools only to a slice of the same cat that starts at
        // its ts, and such a slice is both. One per point, however many arrows share it.
        const int64_t from = iv.end - std::min<int64_t>((iv.end - iv.start) / 2, kArrowInsetNs);
        const int64_t to =
            last_drawn.end -
            std::min<int64_t>((last_drawn.end - last_drawn.start) / 2, kArrowInsetNs);
        if (to < from) continue;  // the wait drawn ended before this call: no arrow
        if (anchors.insert({plans[c].pid, from}).second) {
          o.Add(fmt::format(
              R"({{"ph":"X","cat":"perftracker","name":"end of the call","pid":{},"tid":{},"ts":{},"dur":{},"args":{{{}}}}})",
              plans[c].pid, tid, Micros(from), Micros(iv.end - from), common_args));
          ++stats_.annotations;
        }
        if (anchors.insert({p.pid, to}).second) {
          o.Add(fmt::format(
              R"({{"ph":"X","cat":"perftracker","name":"end of the wait","pid":{},"tid":{},"ts":{},"dur":{},"args":{{{}}}}})",
              p.pid, tid, Micros(to), Micros(last_drawn.end - to), common_args));
          ++stats_.annotations;
        }
        o.Add(fmt::format(
            R"({{"ph":"s","id":{},"cat":"perftracker","name":{},"pid":{},"tid":{},"ts":{}}})",
            flow_id, JsonString(finding.code), plans[c].pid, tid, Micros(from)));
        o.Add(fmt::format(
            R"({{"ph":"f","bp":"e","id":{},"cat":"perftracker","name":{},"pid":{},"tid":{},"ts":{}}})",
            flow_id, JsonString(finding.code), p.pid, tid, Micros(to)));
        ++flow_id;
        ++stats_.flows;
        ++drawn;
      }
    }
  }
  o.Raw("\n]}\n");
  o.Flush();
  out->flush();
  if (!*out) return Status::Internal("the Perfetto trace could not be written");
  return Status::Ok();
}

}  // namespace perftracker
