#include "perftracker/localize/hardware_findings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>

#include "perftracker/core/point_to_point.h"
#include "perftracker/core/units.h"
#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/host_bound_check.h"
#include "perftracker/localize/late_onset_rule.h"
#include "perftracker/localize/robust_stats.h"
#include "perftracker/summary/iteration_breakdown.h"
#include "perftracker/summary/step_onset.h"

namespace perftracker {
namespace {

namespace fc = finding_codes;

// A clock this far below its maximum and the job's median clock is throttled.
constexpr double kThrottledClockShare = 0.9;
// Throttle-reason masks at or above this mean carry a reason other than "GPU idle" (0x1).
constexpr double kThrottleReasonFloor = 2;
// Robust outlier margin for device compute, and the relative effect also required.
constexpr double kOutlierZ = 3.5;
constexpr double kMinRelativeEffect = 0.1;
// A device's compute is compared with at least this many workers (HardwareFindings::Apply).
constexpr size_t kMinReference = 3;
// A compute straggler finding "explains" a slow device when it carries this share of the
// device's excess: then one function, not the GPU, is slow.
constexpr double kFunctionExplains = 0.5;
// ... unless the rest of the device's compute is slower by at least this share of the
// function's own relative excess (a slow device: every kernel alike).
constexpr double kRestSlowerAlike = 0.5;
// A link whose burst rate is below this share of the job's median is degraded.
constexpr double kDegradedRateShare = 0.5;
// A link below this share of the median is degraded too when it is a clear outlier of the
// others' rates (robust z >= kOutlierZ): a PCIe link at x8, an NVLink or a NIC with a lane
// down runs at 1/1.5-1/2 of its peers, flat.
constexpr double kMildlyDegradedShare = 0.8;
// A host whose ranks are at least this share of the workers using a host-wide link is compared
// with the other hosts' links, not with the job's median (which its own ranks would set).
constexpr double kLargeHostShare = 0.25;
// A link's samples saw its transfers when their throughput over the functions' time (mean x
// time) accounts for at least this share of the bytes the functions moved on the wire. In a
// collective that waits for a flapping NIC on another host, NVLink's samples are background
// with a burst here and there (74 MB/s mean in 146 ms per iteration): a burst rate from a few
// samples, no onset of its own.
constexpr double kSampledBytesShare = 0.5;
// The spread of link rates is at least this share of the median (sampling jitter).
constexpr double kRateScaleFloor = 0.02;
// A function carries traffic over a link when the link's mean throughput during it is at
// least this share of the function's own achieved bytes/s (a collective within a host
// shows only background traffic on the NIC).
constexpr double kCarriesShare = 0.05;
// Average link state below this means the link went down during the window.
constexpr double kLinkUpFloor = 0.98;
// At a degraded link's rate the bytes take about the transfer time; a rate at which they
// would take longer than this multiple of it was measured on samples that missed them.
constexpr double kConsistentShare = 1.5;
// A worker's TCP delivery rate below this share of its peers' median is a slow link, when
// its bytes per iteration at that rate take at least kSlowLinkExplains of its
// communication time (the slow rate is what the time went to).
constexpr double kSlowLinkShare = 0.2;
constexpr double kSlowLinkExplains = 0.5;
// Tiny kernels: host_bound_check.h.
using localize::kTinyKernelJobShare;
using localize::kTinyKernelNs;

double Median(std::vector<float> v) { return v.empty() ? 0 : MedianInPlace(v); }

// "rank 5", or "3 ranks (worst: rank 5)".
std::string WhoIsAtFault(size_t culprits, int32_t worst_rank) {
  return culprits == 1 ? fmt::format("rank {}", worst_rank)
                       : fmt::format("{} ranks (worst: rank {})", culprits, worst_rank);
}

bool Contains(const std::vector<int32_t>& ranks, int32_t r) {
  return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
}

std::string ThrottleReasons(double mask) {
  const auto m = static_cast<uint64_t>(std::llround(mask));
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {0x2, "applications clocks"}, {0x4, "software power cap"}, {0x8, "hardware slowdown"},
      {0x10, "sync boost"},         {0x20, "software thermal"},  {0x40, "hardware thermal"},
      {0x80, "power brake"}};
  std::string out;
  for (const auto& [bit, name] : kNames) {
    if (m & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out.empty() ? fmt::format("mask 0x{:x} (mean)", m) : fmt::format("0x{:x}: {}", m, out);
}

}  // namespace

// A gloo group's bytes go through TCP sockets on every device: its backend field says so, or,
// in a summary older than the field, the name its live collector gave it ("0 (gloo)").
bool HardwareFindings::SocketsOnly(const CollectiveGroup& group) {
  if (!group.backend.empty()) return group.gloo_only();
  constexpr std::string_view kGloo = " (gloo)";
  return group.name.ends_with(kGloo);
}

void HardwareFindings::Add(const WorkerSummary& worker, std::span<const double> p50s) {
  Record r;
  r.rank = worker.rank;
  auto [it, inserted] = host_index_.try_emplace(worker.host, static_cast<uint32_t>(hosts_.size()));
  if (inserted) {
    hosts_.push_back(worker.host);
    host_workers_.push_back(0);
  }
  r.host = it->second;
  ++host_workers_[r.host];
  const double iters = static_cast<double>(worker.iteration_count());
  if (!worker.iterations.empty()) {
    const IterationBreakdown mean = MeanBreakdown(worker);
    // Device compute: on a worker without a device track the iterations' compute is the
    // host's, and there is no GPU to call slow.
    r.compute_ns = worker.has_device ? static_cast<float>(mean.compute_ns) : 0.0f;
    if (worker.has_device) {
      std::vector<double> per_iteration;
      per_iteration.reserve(worker.iterations.size());
      for (const IterationSummary& it : worker.iterations) {
        per_iteration.push_back(static_cast<double>(it.compute_ns));
      }
      const StepOnset step = FindStepOnset(per_iteration);
      if (step.iteration > 0) {
        r.compute_onset = step.iteration;
        r.compute_after_ns = static_cast<float>(step.after_mean);
        r.compute_iterations = static_cast<uint32_t>(per_iteration.size());
        std::vector<float> before, after;
        for (size_t i = 0; i < worker.iterations.size(); ++i) {
          (i < step.iteration ? before : after)
              .push_back(static_cast<float>(worker.iterations[i].duration_ns));
        }
        r.iteration_step_ns =
            static_cast<float>(std::max(0.0, MedianInPlace(after) - MedianInPlace(before)));
      }
    }
    r.comm_ns = static_cast<float>(mean.communication_ns);
    r.iteration_ns = static_cast<float>(mean.duration_ns);
  }
  double tcp_wire = -1;
  for (const FunctionMetric& m : worker.worker_metrics) {
    switch (m.metric) {
      case Metric::kGpuSmClockMhz:
        r.clock = static_cast<float>(m.mean);
        break;
      case Metric::kGpuSmClockMaxMhz:
        r.clock_max = static_cast<float>(m.mean);
        break;
      case Metric::kGpuThrottleReasons:
        r.throttle = static_cast<float>(m.mean);
        break;
      case Metric::kGpuTemperatureC:
        r.temperature = static_cast<float>(m.mean);
        break;
      case Metric::kGpuPowerWatts:
        r.power = static_cast<float>(m.mean);
        break;
      case Metric::kNicLinkUp:
        r.link_up = static_cast<float>(m.mean);
        break;
      case Metric::kTcpDeliveryRateBytesPerSec:
        r.tcp_rate = static_cast<float>(m.mean);
        break;
      case Metric::kTcpSendBytesPerSec:
        r.tcp_send = static_cast<float>(m.mean);
        break;
      case Metric::kTcpWireSecondsPerSec:
        tcp_wire = m.mean;
        break;
      default:
        break;
    }
  }
  // Its rate: the bytes it delivered over the time they took at the rates sampled while it
  // sent them (weighted by bytes). The mean of the rate samples is the fallback of a collector
  // that sends no wire time: a few samples of a burst at line rate dominate that mean (behind a
  // 25 Mbit/s token bucket, 202 Mbit/s in one window: no finding; tcp_sampler.cc).
  if (tcp_wire >= 0) {
    r.tcp_rate = tcp_wire > 0 && r.tcp_send > 0 ? static_cast<float>(r.tcp_send / tcp_wire) : -1;
  }
  // Link pools and kernel sizes. A collective's calls in a known process group wait in a
  // GroupTraffic of their own until SplitByHost knows the job's hosts; the rest go to the
  // pools now.
  double kernel_calls = 0, tiny_calls = 0;
  Acc nic, nvlink, pcie;
  const CollectiveGroups& cg = worker.collective_groups;
  Grouped grouped;
  grouped.worker = static_cast<uint32_t>(records_.size());
  grouped.iters = iters;
  std::vector<int32_t> slot_of(cg.groups.size(), -1);  // worker's group -> grouped.groups
  auto slot = [&](uint32_t g) {
    if (slot_of[g] < 0) {
      const CollectiveGroup& wg = cg.groups[g];
      auto [it, inserted] = group_index_.try_emplace(std::make_pair(wg.ranks, wg.size),
                                                     static_cast<uint32_t>(groups_.size()));
      if (inserted) groups_.push_back({wg.ranks, wg.size, false});
      if (SocketsOnly(wg)) groups_[it->second].sockets = true;
      slot_of[g] = static_cast<int32_t>(grouped.groups.size());
      grouped.groups.push_back({it->second, {}, {}, 0});
    }
    return static_cast<size_t>(slot_of[g]);
  };
  // The collectives whose time is compared across groups: those on the device when the worker
  // has any (a host op such as nccl:all_reduce, which names no group, only enqueues them).
  bool device_collectives = false;
  for (const FunctionSummary& f : worker.functions) {
    device_collectives |= f.kind == EventKind::kCollective && (f.event_flags & kEventFlagOnDevice);
  }
  size_t next_call = 0;  // cg.calls is sorted by function
  struct Part {
    int32_t slot = -1;  // in grouped.groups; -1: no known group
    double t = 0, bytes = 0, slack = 0;
  };
  std::vector<Part> parts;
  // Sizes read once: the loop's stores keep the compiler from hoisting them (it runs per
  // worker and function, issue 11).
  const size_t num_functions = worker.functions.size();
  const size_t num_calls = cg.calls.size();
  for (size_t i = 0; i < num_functions; ++i) {
    const FunctionSummary& f = worker.functions[i];
    if (f.kind == EventKind::kGpuKernel && f.count > 0) {
      kernel_calls += static_cast<double>(f.count);
      const double p50 = i < p50s.size() && !std::isnan(p50s[i]) ? p50s[i]
                         : f.durations.count() > 0
                             ? sketch_median_(f.durations)
                             : static_cast<double>(f.total_ns) / static_cast<double>(f.count);
      if (p50 < kTinyKernelNs) tiny_calls += static_cast<double>(f.count);
    }
    const bool transfer = f.kind == EventKind::kCollective || f.kind == EventKind::kMemcpy;
    while (next_call < num_calls && cg.calls[next_call].function < i) ++next_call;
    if (!transfer || f.total_ns <= 0) continue;
    const double achieved = f.achieved_bytes_per_s();
    const double t = static_cast<double>(f.total_ns);
    const double slack = static_cast<double>(std::clamp<int64_t>(f.slack_after_ns, 0, f.total_ns));
    const PointToPoint p2p = f.kind == EventKind::kCollective
                                 ? PointToPointOf(f.name, f.event_flags)
                                 : PointToPoint::kNone;
    // Its calls by process group, and the rest (no known group) as one part.
    parts.clear();
    double grouped_t = 0, grouped_bytes = 0;
    for (size_t c = next_call; c < num_calls && cg.calls[c].function == i; ++c) {
      const CollectiveGroupCalls& call = cg.calls[c];
      if (f.kind != EventKind::kCollective || call.group >= cg.groups.size()) continue;
      const double ct =
          std::min(static_cast<double>(std::max<int64_t>(call.total_ns, 0)), t - grouped_t);
      const double cb = std::min(static_cast<double>(call.bytes),
                                 std::max(0.0, static_cast<double>(f.bytes) - grouped_bytes));
      if (ct <= 0) continue;
      parts.push_back({static_cast<int32_t>(slot(call.group)), ct, cb, slack * ct / t});
      grouped_t += ct;
      grouped_bytes += cb;
    }
    if (parts.empty()) {
      parts.push_back({-1, t, static_cast<double>(f.bytes), slack});
    } else if (t - grouped_t > 0) {
      parts.push_back({-1, t - grouped_t,
                       std::max(0.0, static_cast<double>(f.bytes) - grouped_bytes),
                       slack * (t - grouped_t) / t});
    }
    if (f.kind == EventKind::kCollective &&
        (!device_collectives || (f.event_flags & kEventFlagOnDevice))) {
      grouped.collective_ns += t;
      for (const Part& part : parts) {
        if (part.slot >= 0) grouped.groups[static_cast<size_t>(part.slot)].collective_ns += part.t;
      }
    }
    for (const FunctionMetric& m : f.metrics) {
      int link = -1;  // 0 NIC, 1 NVLink, 2 PCIe
      if (f.kind == EventKind::kCollective &&
          (m.metric == Metric::kIbTxBytesPerSec || m.metric == Metric::kNicTxBytesPerSec)) {
        // The NIC's samples are its transmit rate: a point-to-point receive transmits
        // nothing (its time is a wait for its sender; what the NIC carried meanwhile is not
        // its own), a send transmits its payload once.
        if (p2p == PointToPoint::kReceive) continue;
        link = 0;
      } else if (f.kind == EventKind::kCollective && m.metric == Metric::kNvlinkBytesPerSec) {
        link = 1;
      } else if (f.kind == EventKind::kMemcpy && (m.metric == Metric::kPcieRxBytesPerSec ||
                                                  m.metric == Metric::kPcieTxBytesPerSec)) {
        link = 2;
      }
      if (link < 0 || !std::isfinite(m.mean) || m.mean < kCarriesShare * achieved) continue;
      // On the wire a ring all-reduce moves about twice its payload (2 (n-1) / n, NCCL's
      // bus-bandwidth convention); copies move their payload, and so do point-to-point sends
      // on the NIC. (On NVLink, whose samples count both directions, receives and sends are
      // still counted like all-reduces: docs/accuracy.md.)
      const bool once =
          f.kind != EventKind::kCollective || (link == 0 && p2p != PointToPoint::kNone);
      for (const Part& part : parts) {
        Acc* acc = link == 2 ? &pcie : link == 0 ? &nic : &nvlink;
        if (part.slot >= 0) {
          GroupTraffic& g = grouped.groups[static_cast<size_t>(part.slot)];
          acc = link == 0 ? &g.nic : &g.nvlink;
        }
        acc->t += part.t;
        acc->TakeOnset(t, f.onset_iteration, static_cast<double>(f.onset_ns));
        acc->slack += part.slack;
        acc->bytes += part.bytes * (once ? 1 : 2);
        acc->s += part.t * m.mean;
        acc->s2 += part.t * (m.mean * m.mean + m.stddev * m.stddev);
      }
    }
  }
  r.nic = ToPool(nic, iters);
  r.nvlink = ToPool(nvlink, iters);
  r.pcie = ToPool(pcie, iters);
  if (!grouped.groups.empty()) {
    grouped.nic = nic;
    grouped.nvlink = nvlink;
    grouped_.push_back(std::move(grouped));
  }
  if (kernel_calls > 0) r.tiny_kernel_share = static_cast<float>(tiny_calls / kernel_calls);
  records_.push_back(r);
}

// Before its onset a link that degraded inside the window ran like its peers' (at the median
// burst rate R), after it at a lower rate r. The burst rate E[x^2] / E[x] of time-weighted
// samples is the byte-weighted mean of the rates (each sample's time x rate is bytes), and a
// worker moves about the same bytes in every iteration: with k of n iterations before the
// onset, burst = (k R + (n - k) r) / n, so r = (n burst - k R) / (n - k). Returns r, or -1
// without a step onset or when the window's rate is not below R.
double HardwareFindings::RateAfterOnset(const Pool& p, double burst, double median) {
  if (p.onset == 0 || p.onset >= p.iterations || burst >= median) return -1;
  const double k = p.onset;
  const double n = p.iterations;
  const double r = (n * burst - k * median) / (n - k);
  return r > 0 ? r : -1;
}

HardwareFindings::Pool HardwareFindings::ToPool(const Acc& a, double iters) {
  Pool p;
  if (a.t <= 0) return p;
  p.time_ns = static_cast<float>(a.t / iters);
  p.mean = static_cast<float>(a.s / a.t);
  p.mean_sq = static_cast<float>(a.s2 / a.t);
  p.bytes = static_cast<float>(a.bytes / iters);
  p.slack_ns = static_cast<float>(a.slack / iters);
  p.iterations = static_cast<uint32_t>(iters);
  if (a.onset > 0 && a.onset < p.iterations) {
    const double k = a.onset;
    const double after = a.onset_t / (iters - k);
    const double before = (a.largest_t - a.onset_t) / k;
    if (after > before) {
      p.onset = a.onset;
      p.step_ns = static_cast<float>(after - before);
    }
  }
  return p;
}

void HardwareFindings::SplitByHost() {
  if (grouped_.empty()) return;
  // Where each rank runs: its host index, or none (no host name, not in the job).
  constexpr uint32_t kNoHost = UINT32_MAX;
  std::unordered_map<int32_t, uint32_t> host_of;
  for (const Record& r : records_) {
    host_of.try_emplace(r.rank, hosts_[r.host].empty() ? kNoHost : r.host);
  }
  enum class Span : uint8_t { kUnknown, kIntraNode, kInterNode };
  std::vector<Span> span(groups_.size(), Span::kUnknown);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const JobGroup& jg = groups_[g];
    uint32_t first = kNoHost;
    bool all_known = jg.size > 0 && jg.ranks.size() == jg.size;
    for (int32_t rank : jg.ranks) {
      const auto it = host_of.find(rank);
      const uint32_t h = it == host_of.end() ? kNoHost : it->second;
      if (h == kNoHost) {
        all_known = false;
        continue;
      }
      if (first == kNoHost) first = h;
      if (h != first) {
        span[g] = Span::kInterNode;
        break;
      }
    }
    // A gloo group's bytes go through TCP sockets even inside one host (its ranks may be in
    // network namespaces of their own, as e2e_live's slow-link job's are): not NVLink's, and
    // its collectives count as those of an unknown group.
    if (span[g] == Span::kUnknown && all_known && first != kNoHost && !jg.sockets) {
      span[g] = Span::kIntraNode;
    }
  }
  for (Grouped& w : grouped_) {
    Record& r = records_[w.worker];
    Acc nic = w.nic, nvlink = w.nvlink;
    double intra_ns = 0;
    for (const GroupTraffic& g : w.groups) {
      const Span sp = span[g.group];
      if (sp != Span::kIntraNode) nic.Add(g.nic);
      if (sp != Span::kInterNode) nvlink.Add(g.nvlink);
      if (sp == Span::kIntraNode) intra_ns += g.collective_ns;
    }
    r.nic = ToPool(nic, w.iters);
    r.nvlink = ToPool(nvlink, w.iters);
    if (w.collective_ns > 0 && intra_ns > 0) {
      const double inter_share = std::max(0.0, 1 - intra_ns / w.collective_ns);
      r.intra_node_ns = static_cast<float>(intra_ns / w.iters);
      r.comm_ns = static_cast<float>(r.comm_ns * inter_share);
    }
  }
  grouped_.clear();
}

std::string HardwareFindings::HostPhrase(const std::vector<uint32_t>& culprits) const {
  std::map<uint32_t, uint32_t> per_host;
  for (uint32_t w : culprits) ++per_host[records_[w].host];
  std::string whole, list;
  size_t whole_hosts = 0;
  for (const auto& [h, n] : per_host) {
    if (hosts_[h].empty() || n < 2 || n != host_workers_[h]) continue;
    ++whole_hosts;
    if (whole_hosts <= 4) {
      whole += fmt::format("{}{} (all {} ranks)", whole.empty() ? "" : ", ", hosts_[h], n);
    }
  }
  if (whole_hosts > 4) whole += fmt::format(", ... ({} hosts)", whole_hosts);
  return whole;
}

// A NIC or an NVLink fabric belongs to its host: all of the host's ranks that move data over
// it see the same link. A host is named as a whole when at least half of those ranks measured
// the link degraded (the others' samples missed the slow transfers), and not at all
// otherwise (one rank's slow samples are its own noise). Workers without a host name stand
// alone.
void HardwareFindings::WholeHosts(const Pool Record::*pool, std::vector<uint32_t>& culprits,
                                  std::vector<float>& lost) const {
  std::vector<uint32_t> slow(hosts_.size(), 0), users(hosts_.size(), 0);
  for (const Record& r : records_) {
    if ((r.*pool).time_ns > 0) ++users[r.host];
  }
  std::vector<bool> is_culprit(records_.size(), false);
  for (uint32_t w : culprits) {
    ++slow[records_[w].host];
    is_culprit[w] = true;
  }
  auto whole = [&](uint32_t h) { return !hosts_[h].empty() && 2 * slow[h] >= users[h]; };
  std::vector<uint32_t> kept;
  std::vector<float> kept_lost;
  for (size_t i = 0; i < culprits.size(); ++i) {
    const uint32_t h = records_[culprits[i]].host;
    if (hosts_[h].empty() || whole(h)) {
      kept.push_back(culprits[i]);
      kept_lost.push_back(lost[i]);
    }
  }
  for (uint32_t w = 0; w < records_.size(); ++w) {
    const Record& r = records_[w];
    if (is_culprit[w] || (r.*pool).time_ns <= 0 || slow[r.host] == 0 || !whole(r.host)) continue;
    kept.push_back(w);
    kept_lost.push_back(0);  // its samples missed the slow transfers: no estimate of its own
  }
  culprits = std::move(kept);
  lost = std::move(kept_lost);
}

Finding HardwareFindings::LinkFinding(const Context& ctx, const char* link,
                                      const std::vector<uint32_t>& culprits,
                                      const std::vector<float>& lost, float median_rate,
                                      const Pool Record::*pool) const {
  Finding f;
  size_t worst = 0;
  for (size_t i = 1; i < culprits.size(); ++i) {
    if (lost[i] > lost[worst]) worst = i;
  }
  const Record& wr = records_[culprits[worst]];
  const Pool& p = wr.*pool;
  f.lost_ns_per_iteration = lost[worst];
  f.lost_share = ctx.iteration_ns > 0 ? f.lost_ns_per_iteration / ctx.iteration_ns : 0;
  f.evidence.push_back(
      {fmt::format("{} throughput during its transfers", link),
       fmt::format("{} mean, bursts at {} on rank {}{}", FormatByteRate(p.mean),
                   FormatByteRate(p.BurstRate()), wr.rank,
                   hosts_[wr.host].empty() ? "" : fmt::format(" ({})", hosts_[wr.host]))});
  f.evidence.push_back({fmt::format("{} burst rate of the other workers (median)", link),
                        FormatByteRate(median_rate)});
  f.evidence.push_back({"time in transfers over it per iteration",
                        fmt::format("{} on rank {}", FormatDuration(p.time_ns), wr.rank)});
  if (pool == &Record::nic && wr.intra_node_ns > 0) {
    f.evidence.push_back(
        {"collectives inside one host (NVLink), not counted on the NIC",
         fmt::format("{} per iteration on rank {}", FormatDuration(wr.intra_node_ns), wr.rank)});
  }
  f.evidence.push_back(
      {"how the time is estimated",
       fmt::format("its bytes per iteration at its rate minus at the median rate = {}",
                   FormatDuration(f.lost_ns_per_iteration))});
  return f;
}

std::vector<HardwareFindings::Added> HardwareFindings::Apply(const Context& ctx,
                                                             const std::vector<Finding*>& findings,
                                                             std::vector<bool>& drop) const {
  std::vector<Added> out;
  const size_t n = records_.size();
  if (n == 0) return out;
  std::unordered_map<int32_t, uint32_t> by_rank;
  for (uint32_t w = 0; w < n; ++w) by_rank.try_emplace(records_[w].rank, w);
  auto ranks_of = [&](const std::vector<uint32_t>& ws) {
    std::vector<int32_t> r;
    for (uint32_t w : ws) r.push_back(records_[w].rank);
    std::sort(r.begin(), r.end());
    return r;
  };
  auto material = [&](Finding& f) { f.material = f.lost_ns_per_iteration >= ctx.material_ns; };
  // Finding i's named function's times (none given: the defaults, nothing named).
  auto time_of = [&](size_t i) {
    return ctx.function_times && i < ctx.function_times->size() ? (*ctx.function_times)[i]
                                                                : localize::NamedFunctionTime{};
  };
  auto name_hosts = [&](Finding& f, const std::vector<uint32_t>& culprits) {
    const std::string hosts = HostPhrase(culprits);
    if (hosts.empty()) return;
    f.title = fmt::format("host {}: {}", hosts, f.title);
    f.evidence.insert(f.evidence.begin(), Evidence{"hosts at fault", hosts});
  };
  // Finding i becomes `into`'s evidence ("explains"), and is no finding of its own.
  auto explains = [&](size_t i, Finding& into) {
    drop[i] = true;
    into.evidence.push_back(
        {"explains", fmt::format("{}: {}", findings[i]->code, findings[i]->title)});
  };
  // `into` costs at least `lost` per iteration.
  auto raise_lost = [&](Finding& into, double lost) {
    if (lost <= into.lost_ns_per_iteration) return;
    into.lost_ns_per_iteration = lost;
    into.lost_share = ctx.iteration_ns > 0 ? lost / ctx.iteration_ns : 0;
  };
  // Absorbs the findings with one of `codes` whose workers are all among `culprits` (or
  // any, with `any_worker`), returning the largest time they lost and the function named.
  auto absorb = [&](std::initializer_list<std::string_view> codes,
                    const std::vector<uint32_t>& culprits, bool any_worker, Finding& into) {
    const std::vector<int32_t> ranks = ranks_of(culprits);
    double lost = 0;
    for (size_t i = 0; i < findings.size(); ++i) {
      const Finding& f = *findings[i];
      if (drop[i] || std::find(codes.begin(), codes.end(), f.code) == codes.end()) continue;
      bool inside = !f.workers.empty();
      for (int32_t r : f.workers) inside &= Contains(ranks, r);
      if (!inside && !any_worker) continue;
      // Untraced time before the host thread's own code (a pause, Python the profiler did not
      // record) on a worker the link does not serve is a second cause, not the link's doing;
      // before a kernel, copy or collective, a late transfer may be what started it (held-out
      // rnd-s3-037: rank 31's 8.4 ms pause before `forward` was taken into host 2's degraded
      // NIC finding, which then claimed its cost; with process groups, untraced time before
      // pp sends of rnd-s4-022 is the link's effect).
      if (!inside && f.code == fc::kStragglerUntraced && time_of(i).untraced_before_host_code) {
        continue;
      }
      lost = std::max(lost, f.lost_ns_per_iteration);
      if (into.function.empty() && !f.function.empty()) {
        into.function = f.function;
        into.function_key = f.function_key;
      }
      explains(i, into);
    }
    raise_lost(into, lost);
  };

  // --- Slow or throttled devices.
  {
    std::vector<float> clocks, reasons;
    for (const Record& r : records_) {
      if (r.clock > 0) clocks.push_back(r.clock);
      if (r.throttle >= 0) reasons.push_back(r.throttle);
    }
    const double median_clock = Median(clocks);
    const double median_reasons = Median(reasons);
    // Clock evidence per worker: an SM clock well below its maximum and the job's median, or
    // throttle reasons set where the job's median has none.
    std::vector<bool> clocked(n, false);
    for (uint32_t w = 0; w < n; ++w) {
      const Record& r = records_[w];
      const bool low_clock = r.clock > 0 && r.clock_max > 0 &&
                             r.clock < kThrottledClockShare * r.clock_max &&
                             r.clock < kThrottledClockShare * median_clock;
      const bool reasons_set =
          r.throttle >= kThrottleReasonFloor && median_reasons < kThrottleReasonFloor;
      clocked[w] = low_clock || reasons_set;
    }
    // What is compared: a worker's device compute less the code only a minority of its group
    // runs (the compute PT-FUNCTION-ONLY-ON-SOME findings it is in, at their time per
    // iteration: a first or last pipeline stage's embedding or head in a group that spans the
    // stages is that finding, not a slower device); with whom: the workers of its peer group
    // without clock evidence (throttled devices are no reference: when half a group is
    // throttled its median is theirs), all of them when fewer than kMinReference are left.
    std::vector<float> common(n, 0);
    for (uint32_t w = 0; w < n; ++w) common[w] = records_[w].compute_ns;
    for (size_t i = 0; i < findings.size(); ++i) {
      const Finding& f = *findings[i];
      if (drop[i] || f.code != fc::kFunctionOnlyOnSome || f.category != FindingCategory::kCompute ||
          !time_of(i).on_device) {
        continue;
      }
      const float extra = std::max(0.0f, time_of(i).ns);
      for (int32_t rank : f.workers) {
        const auto it = by_rank.find(rank);
        if (it == by_rank.end()) continue;
        float& c = common[it->second];
        if (c > 0) c = std::max(c - extra, 0.5f * c);
      }
    }
    // Each worker at its level from its own onset on (its window level without one): a device
    // that slows down inside the window (throttled from iteration 9 of 12) is diluted to a
    // quarter of its step over the window, under the relative-effect floor, and is compared
    // at its level from the onset on with the group at theirs (a step on every worker, which
    // no device fault makes, then makes no one stand out).
    std::vector<float> level(n, 0);
    for (uint32_t w = 0; w < n; ++w) {
      const Record& r = records_[w];
      level[w] = common[w] + (r.compute_onset > 0 ? r.compute_after_ns - r.compute_ns : 0.0f);
    }
    std::map<uint32_t, std::vector<float>> healthy, all, healthy_level, all_level;
    for (uint32_t w = 0; w < n; ++w) {
      if (common[w] <= 0) continue;
      const uint32_t g = ctx.worker_group ? (*ctx.worker_group)[w] : 0;
      all[g].push_back(common[w]);
      all_level[g].push_back(level[w]);
      if (!clocked[w]) {
        healthy[g].push_back(common[w]);
        healthy_level[g].push_back(level[w]);
      }
    }
    std::map<uint32_t, RobustCenter> centers, level_centers;
    auto center_in = [&](uint32_t w, std::map<uint32_t, std::vector<float>>& healthy_of,
                         std::map<uint32_t, std::vector<float>>& all_of,
                         std::map<uint32_t, RobustCenter>& cache) -> const RobustCenter* {
      const uint32_t g = ctx.worker_group ? (*ctx.worker_group)[w] : 0;
      auto it = cache.find(g);
      if (it != cache.end()) return &it->second;
      std::vector<float>& v = healthy_of[g].size() >= kMinReference ? healthy_of[g] : all_of[g];
      if (v.size() < kMinReference) return nullptr;
      return &cache.emplace(g, MedianAndMadInPlace(v)).first->second;
    };
    auto center_of = [&](uint32_t w) { return center_in(w, healthy, all, centers); };
    std::vector<uint32_t> onset_of(n, 0);
    // The least excess over a group's center that counts: beyond its noise, a share of it,
    // and what the report bothers with.
    auto floor_of = [&](const RobustCenter& c) {
      return std::max(
          {kOutlierZ * RobustScale(c, 0.01, 1000), kMinRelativeEffect * c.median, ctx.report_ns});
    };
    // A throttled device's excess from its onset on, when its window excess is under the
    // floor; 0 when it has no onset, is not over the floor from then on either, or was
    // already slower before it (then the fault did not begin there).
    auto excess_after_onset = [&](uint32_t w, const RobustCenter& window) -> double {
      const Record& r = records_[w];
      if (r.compute_onset == 0 || r.compute_onset >= r.compute_iterations) return 0;
      const RobustCenter* c = center_in(w, healthy_level, all_level, level_centers);
      if (c == nullptr) return 0;
      const double after = level[w] - c->median;
      if (after < floor_of(*c)) return 0;
      const double k = r.compute_onset;
      const double its = r.compute_iterations;
      const double before = (its * common[w] - (its - k) * level[w]) / k;
      if (before - window.median > localize::kBeforeShare * after) return 0;
      // The job loses at most what its iterations grew by from then on: a device that slows
      // down while the job waits for another culprit anyway costs it nothing (held-out
      // rnd-s4-013: rank 8 throttled from iteration 8 of 10, +140 ms of device compute from
      // then on, while every iteration waited ~90 ms for a flapping NIC; the job's
      // iterations did not grow, and the fault cost 0 ms).
      return std::min(after, static_cast<double>(r.iteration_step_ns));
    };
    std::vector<uint32_t> throttled, slow;
    std::vector<float> excess(n, 0);
    std::vector<float> reference_median(n, 0);
    for (uint32_t w = 0; w < n; ++w) {
      const Record& r = records_[w];
      if (r.compute_ns <= 0 || common[w] <= 0) continue;
      const RobustCenter* center = center_of(w);
      if (center == nullptr) continue;
      const RobustCenter& c = *center;
      reference_median[w] = static_cast<float>(c.median + (r.compute_ns - common[w]));
      const double e = common[w] - c.median;
      if (e < floor_of(c)) {
        // Under the floor over the window: a throttled device may have slowed down inside it.
        const double after = clocked[w] ? excess_after_onset(w, c) : 0;
        if (after <= 0) continue;
        excess[w] = static_cast<float>(after);
        onset_of[w] = r.compute_onset;
        throttled.push_back(w);
        continue;
      }
      if (clocked[w]) {
        // Over the floor over the window, and more from a late onset on: judged at its level
        // from then on too, as a straggler function from its onset is (rnd-s2-074: 1.78x from
        // iteration 10 of 12, +16.8 ms/iter over the window, 4.1 %, minor; +45 ms/iter for the
        // job from then on, below an untraced pause that cost 4 ms).
        const double after = excess_after_onset(w, c);
        excess[w] = static_cast<float>(std::max(e, after));
        if (after > e) onset_of[w] = r.compute_onset;
        throttled.push_back(w);
        continue;
      }
      excess[w] = static_cast<float>(e);
      // One function explains it: that straggler finding stands. So does code only this
      // worker (and a minority of its group) runs: extra work, not a slower device. A kernel
      // (with the same layer's other kernels) explains it when it carries kFunctionExplains
      // of the device's excess, unless the device is slow as a whole: every call of the
      // kernel slower (its median call by a similar ratio as its time: one slow layer of a
      // trace without host annotations, whose layers share kernel names, slows one call in
      // L and leaves the median) *and* the rest of the device's work slower by a similar
      // ratio (a slow device slows every kernel, a slow function only its own; without host
      // annotations the backward GEMM holds two thirds of any device's time, so of a slow
      // device's excess too). A host function (an annotated block) has no device time to
      // compare: it explains by what it costs the job.
      bool explained = false;
      for (size_t i = 0; i < findings.size(); ++i) {
        const Finding& f = *findings[i];
        const bool work =
            f.code == fc::kStragglerCompute ||
            (f.code == fc::kFunctionOnlyOnSome && f.category == FindingCategory::kCompute);
        if (drop[i] || !work || !Contains(f.workers, r.rank)) continue;
        const localize::NamedFunctionTime t = time_of(i);
        // Extra code on the device is out of the comparison already (above).
        if (f.code == fc::kFunctionOnlyOnSome && t.on_device) continue;
        if (t.on_device && t.peer_ns > 0 && t.ns > t.peer_ns && t.excess_ns > 0) {
          const double own_ratio = t.ns / t.peer_ns - 1;
          // Its excess over the window (from a late onset on, it is the onset's level).
          const double window_excess = t.excess_ns * t.onset_share;
          // The peers' time in the slow kernels, the named one's parts at its ratio.
          const double slow_peers = window_excess / own_ratio;
          const double rest_peers = c.median - slow_peers;
          const double rest_ratio =
              rest_peers > 0 ? std::max(0.0, e - window_excess) / rest_peers : 0;
          // From a late onset on, its calls are compared from the onset on (p50_ratio): the
          // window's median call of a device slow from iteration 8 of 12 is a healthy one.
          // The ratio to compare it with is then the onset's, the window's over the share.
          const double onset_ratio = own_ratio / t.onset_share;
          const bool every_call = t.p50_ratio - 1 >= kRestSlowerAlike * onset_ratio;
          const bool device_slow = every_call && rest_ratio >= kRestSlowerAlike * own_ratio;
          explained |= window_excess >= kFunctionExplains * e && !device_slow;
          continue;
        }
        explained |= f.lost_ns_per_iteration >= kFunctionExplains * e;
      }
      if (!explained) slow.push_back(w);
    }
    auto device_finding = [&](std::vector<uint32_t> culprits, bool clock_evidence) {
      if (culprits.empty()) return;
      std::sort(culprits.begin(), culprits.end(),
                [&](uint32_t a, uint32_t b) { return excess[a] > excess[b]; });
      const uint32_t w = culprits.front();
      const Record& r = records_[w];
      Added a;
      Finding& f = a.finding;
      f.code = clock_evidence ? fc::kGpuThrottled : fc::kGpuSlow;
      f.category = FindingCategory::kGpuHardware;
      f.resource = "GPU";
      f.lost_ns_per_iteration = excess[w];
      f.lost_share = ctx.iteration_ns > 0 ? excess[w] / ctx.iteration_ns : 0;
      f.workers = ranks_of(culprits);
      const std::string who = WhoIsAtFault(culprits.size(), r.rank);
      if (clock_evidence && onset_of[w] > 0) {
        // Slowed down inside the window: its level from then on, what it is judged by.
        const double peers = r.compute_after_ns - excess[w];
        f.title = fmt::format(
            "{}: the GPU is throttled from iteration {} of {} on ({}), device compute {}/iter "
            "vs {} on its peers (+{})",
            who, onset_of[w] + 1, r.compute_iterations,
            r.clock > 0
                ? fmt::format("SM clock {:.0f} of {:.0f} MHz over the window", r.clock, r.clock_max)
                : "throttle reasons set",
            FormatDuration(r.compute_after_ns), FormatDuration(peers), FormatDuration(excess[w]));
        f.evidence.push_back(
            {"since when",
             fmt::format("from iteration {} of {} on: device compute {}/iter (peers' median {}); "
                         "before it at its peers' level; averaged over the window {}",
                         onset_of[w] + 1, r.compute_iterations, FormatDuration(r.compute_after_ns),
                         FormatDuration(peers), FormatDuration(r.compute_ns))});
      } else if (clock_evidence) {
        f.title = fmt::format(
            "{}: the GPU is throttled ({}), device compute {}/iter vs {} on its peers (+{})", who,
            r.clock > 0 ? fmt::format("SM clock {:.0f} of {:.0f} MHz", r.clock, r.clock_max)
                        : "throttle reasons set",
            FormatDuration(r.compute_ns), FormatDuration(reference_median[w]),
            FormatDuration(excess[w]));
      } else {
        f.title = fmt::format(
            "{}: the GPU is slow: every kernel runs longer, device compute {}/iter vs {} on its "
            "peers (+{}), with no clock or throttle evidence",
            who, FormatDuration(r.compute_ns), FormatDuration(reference_median[w]),
            FormatDuration(excess[w]));
      }
      f.evidence.push_back(
          {"device compute per iteration",
           fmt::format("{} on rank {}, peers' median {}", FormatDuration(r.compute_ns), r.rank,
                       FormatDuration(reference_median[w]))});
      if (r.clock > 0) {
        f.evidence.push_back(
            {"SM clock",
             fmt::format("{:.0f} MHz on rank {} (max {:.0f} MHz), job median {:.0f} MHz", r.clock,
                         r.rank, r.clock_max, median_clock)});
      }
      if (r.throttle >= 0) {
        f.evidence.push_back({"throttle reasons", r.throttle >= kThrottleReasonFloor
                                                      ? ThrottleReasons(r.throttle)
                                                      : "none"});
      }
      if (r.temperature > 0) {
        f.evidence.push_back({"temperature", fmt::format("{:.0f} C", r.temperature)});
      }
      if (r.power > 0) f.evidence.push_back({"power", fmt::format("{:.0f} W", r.power)});
      absorb({fc::kStragglerCompute, fc::kStragglerUntraced, fc::kStragglerSync}, culprits, false,
             f);
      name_hosts(f, culprits);
      material(f);
      a.culprits = culprits;
      out.push_back(std::move(a));
    };
    const size_t first_device = out.size();
    device_finding(throttled, true);
    device_finding(slow, false);
    // A work finding whose culprits are spread over two device findings (a kernel slower on
    // a slow GPU and on a throttled host's, merged by name: held-out rnd-s4-027's four
    // "ranks 0,56-63 spend ... in sm90_xmma_gemm_bf16_dgrad" beside the two device findings,
    // every one material) is theirs too: each of its culprits has its device's cause. It
    // goes to the device finding that holds most of them.
    if (out.size() - first_device >= 2) {
      std::vector<std::vector<int32_t>> device_ranks;
      for (size_t d = first_device; d < out.size(); ++d) {
        device_ranks.push_back(ranks_of(out[d].culprits));
      }
      for (size_t i = 0; i < findings.size(); ++i) {
        const Finding& f = *findings[i];
        if (drop[i] || f.workers.empty() ||
            (f.code != fc::kStragglerCompute && f.code != fc::kStragglerSync)) {
          continue;
        }
        size_t best = 0, best_n = 0, covered = 0;
        for (size_t d = 0; d < device_ranks.size(); ++d) {
          size_t n = 0;
          for (int32_t r : f.workers) n += Contains(device_ranks[d], r) ? 1 : 0;
          covered += n;
          if (n > best_n) best = d, best_n = n;
        }
        if (covered != f.workers.size()) continue;
        Finding& into = out[first_device + best].finding;
        explains(i, into);
        raise_lost(into, f.lost_ns_per_iteration);
        material(into);
      }
    }
  }

  // --- Links: NIC (flapping, degraded), NVLink, PCIe.
  auto link_rule = [&](const Pool Record::*pool, const char* link, std::string_view code,
                       FindingCategory category, std::initializer_list<std::string_view> absorbs,
                       bool skip_flapping, bool host_link) {
    std::vector<float> rates;
    std::vector<uint32_t> host_users(hosts_.size(), 0);
    for (const Record& r : records_) {
      if ((r.*pool).time_ns <= 0) continue;
      rates.push_back((r.*pool).BurstRate());
      ++host_users[r.host];
    }
    if (rates.size() < 3) return;
    const size_t users = rates.size();
    const RobustCenter center = MedianAndMadInPlace(rates);
    // The rate each worker's link is compared with: the job's median. A host-wide link (NIC,
    // NVLink) of a host that holds at least kLargeHostShare of the workers using the link is
    // compared with the other hosts' links instead: with two hosts, one degraded, the job's
    // median falls between the two and the spread of rates spans both (16 ranks, NVLink at
    // 136 against 290 GB/s: median 209, no outlier).
    std::vector<RobustCenter> host_center(hosts_.size(), center);
    if (host_link) {
      for (uint32_t h = 0; h < hosts_.size(); ++h) {
        if (hosts_[h].empty() || host_users[h] < kLargeHostShare * static_cast<double>(users) ||
            users - host_users[h] < 3) {
          continue;
        }
        std::vector<float> others;
        for (const Record& r : records_) {
          if ((r.*pool).time_ns > 0 && r.host != h) others.push_back((r.*pool).BurstRate());
        }
        host_center[h] = MedianAndMadInPlace(others);
      }
    }
    std::vector<uint32_t> culprits;
    std::vector<float> lost;
    // Per worker: the rate its link was compared with, and for a late onset the onset its
    // loss counts from and its rate from then on (0: none).
    std::vector<float> reference_of(n, 0), after_of(n, 0);
    std::vector<uint32_t> onset_of(n, 0);
    for (uint32_t w = 0; w < n; ++w) {
      const Pool& p = records_[w].*pool;
      if (p.time_ns <= 0 ||
          (skip_flapping && records_[w].link_up >= 0 && records_[w].link_up < kLinkUpFloor)) {
        continue;
      }
      const RobustCenter& c = host_center[records_[w].host];
      const double median_rate = c.median;
      const double rate_scale = RobustScale(c, kRateScaleFloor, 0);
      const double rate = p.BurstRate();
      if (rate <= 0 || p.bytes / rate * 1e9 > kConsistentShare * p.time_ns) continue;
      const bool significant = median_rate - rate >= kOutlierZ * rate_scale;
      // A link that degraded inside the window is judged by its rate from the onset on
      // (RateAfterOnset), and costs, per iteration from the onset on, at most the step its
      // largest transfer function took there; when its samples saw the bytes move
      // (kSampledBytesShare): a pool of waits with a burst or two in its samples says nothing
      // of when its link changed, and its step is the wait for another fault.
      const bool sampled = p.mean * p.time_ns / 1e9 >= kSampledBytesShare * p.bytes;
      const double after = significant && sampled ? RateAfterOnset(p, rate, median_rate) : -1;
      const double judged = after > 0 ? after : rate;
      const bool clear_outlier = judged < kMildlyDegradedShare * median_rate && significant;
      if (judged >= kDegradedRateShare * median_rate && !clear_outlier) continue;
      // How much longer its bytes take at its rate than at the median rate.
      double l = p.bytes / judged * 1e9 - p.bytes / median_rate * 1e9;
      if (after > 0) {
        l = std::max(std::min<double>(l, p.step_ns),
                     p.bytes / rate * 1e9 - p.bytes / median_rate * 1e9);
      }
      if (l < ctx.report_ns) continue;
      culprits.push_back(w);
      lost.push_back(static_cast<float>(l));
      reference_of[w] = static_cast<float>(median_rate);
      if (after > 0) {
        onset_of[w] = p.onset;
        after_of[w] = static_cast<float>(after);
      }
    }
    if (host_link) WholeHosts(pool, culprits, lost);
    if (culprits.empty()) return;
    const auto worst =
        static_cast<size_t>(std::max_element(lost.begin(), lost.end()) - lost.begin());
    const uint32_t ww = culprits[worst];
    const float median_rate = reference_of[ww];
    const uint32_t onset = onset_of[ww];
    const double rate_after = after_of[ww];
    Added a;
    a.finding = LinkFinding(ctx, link, culprits, lost, median_rate, pool);
    Finding& f = a.finding;
    f.code = code;
    f.category = category;
    f.resource = link;
    f.workers = ranks_of(culprits);
    std::string who;
    for (size_t i = 0; i < f.workers.size() && i < 8; ++i) {
      who += fmt::format("{}{}", i > 0 ? ", " : "", f.workers[i]);
    }
    if (f.workers.size() > 8) who += fmt::format(", ... ({} in all)", f.workers.size());
    const Pool& wp = records_[ww].*pool;
    const std::string from =
        onset > 0 ? fmt::format(" from iteration {} of {} on", onset + 1, wp.iterations) : "";
    f.title = fmt::format(
        "{} {} on a degraded {} link{}: transfers run flat at {} while the others' links reach {} "
        "(+{} per iteration)",
        culprits.size() == 1 ? "rank" : "ranks", who, link, from,
        FormatByteRate(onset > 0 ? rate_after : wp.BurstRate()), FormatByteRate(median_rate),
        FormatDuration(f.lost_ns_per_iteration));
    if (onset > 0) {
      f.evidence.insert(
          f.evidence.end() - 1,
          Evidence{
              "late onset",
              fmt::format("its transfers take {} more per iteration from iteration {} of {} "
                          "on (rank {}); before it the link ran like the others', its "
                          "window rate {} then means {} from the onset on",
                          FormatDuration(wp.step_ns), onset + 1, wp.iterations, records_[ww].rank,
                          FormatByteRate(wp.BurstRate()), FormatByteRate(rate_after))});
    }
    absorb(absorbs, culprits, code == fc::kNicDegraded, f);
    name_hosts(f, culprits);
    material(f);
    // Transfers whose excess a later pipeline receive waited out cost the job nothing
    // (localize/pipeline_slack.h judges it): the share of the slowest culprit's link time
    // they hold, the least of any culprit.
    a.absorbed_share = 1;
    for (uint32_t w : culprits) {
      const Pool& p = records_[w].*pool;
      a.absorbed_share = std::min(a.absorbed_share, p.time_ns > 0 ? p.slack_ns / p.time_ns : 0.0f);
    }
    a.culprits = std::move(culprits);
    out.push_back(std::move(a));
  };
  // Flapping NIC.
  {
    std::vector<uint32_t> culprits;
    for (uint32_t w = 0; w < n; ++w) {
      if (records_[w].link_up >= 0 && records_[w].link_up < kLinkUpFloor) culprits.push_back(w);
    }
    if (!culprits.empty()) {
      Added a;
      Finding& f = a.finding;
      f.code = fc::kNicFlapping;
      f.category = FindingCategory::kCommunication;
      f.resource = "NIC";
      f.workers = ranks_of(culprits);
      double down = 0, comm = 0;
      for (uint32_t w : culprits) {
        down = std::max(down, 1.0 - records_[w].link_up);
        comm = std::max(comm, static_cast<double>(records_[w].nic.time_ns));
      }
      f.lost_ns_per_iteration = comm * down;
      f.lost_share = ctx.iteration_ns > 0 ? f.lost_ns_per_iteration / ctx.iteration_ns : 0;
      f.title = fmt::format(
          "the NIC of {} went down {} of the window: collectives stall while it is down",
          culprits.size() == 1 ? fmt::format("rank {}", records_[culprits[0]].rank)
                               : fmt::format("{} ranks", culprits.size()),
          FormatShare(down));
      f.evidence.push_back(
          {"link-down samples", fmt::format("{} of the samples", FormatShare(down))});
      f.evidence.push_back({"inter-node transfer time per iteration", FormatDuration(comm)});
      absorb({fc::kStragglerComm, fc::kStragglerUntraced}, culprits, true, f);
      name_hosts(f, culprits);
      material(f);
      a.culprits = std::move(culprits);
      out.push_back(std::move(a));
    }
  }
  // Slow network link of one rank (its own TCP connections). Each worker is compared with
  // the median of the others (leave one out), taken from one sort of all rates.
  {
    std::vector<uint32_t> measured;
    for (uint32_t w = 0; w < n; ++w) {
      if (records_[w].tcp_rate > 0) measured.push_back(w);
    }
    std::sort(measured.begin(), measured.end(),
              [&](uint32_t a, uint32_t b) { return records_[a].tcp_rate < records_[b].tcp_rate; });
    std::vector<float> sorted_rates;
    for (uint32_t w : measured) sorted_rates.push_back(records_[w].tcp_rate);
    std::vector<uint32_t> culprits;
    std::vector<float> lost, peer_rates;
    for (size_t i = 0; measured.size() >= 3 && i < measured.size(); ++i) {
      const Record& r = records_[measured[i]];
      const double peers = SortedMedianWithout(sorted_rates, i);
      // Sorted ascending: once one worker is not slow enough, no later one is.
      if (r.tcp_rate >= kSlowLinkShare * peers) break;
      if (r.tcp_send <= 0 || r.iteration_ns <= 0) continue;
      const double bytes = r.tcp_send * r.iteration_ns / 1e9;  // per iteration
      const double at_rate = bytes / r.tcp_rate * 1e9;
      if (r.comm_ns <= 0 || at_rate < kSlowLinkExplains * r.comm_ns) continue;
      const double l = std::min<double>(at_rate - bytes / peers * 1e9, r.comm_ns);
      if (l < ctx.report_ns) continue;
      culprits.push_back(measured[i]);
      lost.push_back(static_cast<float>(l));
      peer_rates.push_back(static_cast<float>(peers));
    }
    if (!culprits.empty()) {
      const auto worst =
          static_cast<size_t>(std::max_element(lost.begin(), lost.end()) - lost.begin());
      const Record& r = records_[culprits[worst]];
      Added a;
      Finding& f = a.finding;
      f.code = fc::kNetSlowLink;
      f.category = FindingCategory::kCommunication;
      f.resource = "network link";
      f.workers = ranks_of(culprits);
      f.lost_ns_per_iteration = lost[worst];
      f.lost_share = ctx.iteration_ns > 0 ? lost[worst] / ctx.iteration_ns : 0;
      f.title = fmt::format(
          "{} on a slow network link: its connections deliver at {} while its peers' reach {}; "
          "every collective waits for it (+{} per iteration)",
          WhoIsAtFault(culprits.size(), r.rank), FormatBitRate(r.tcp_rate),
          FormatBitRate(peer_rates[worst]), FormatDuration(lost[worst]));
      std::string rates;  // in worker order, the first 8
      size_t listed = 0;
      for (uint32_t w = 0; w < n && listed < 8; ++w) {
        const Record& m = records_[w];
        if (m.tcp_rate <= 0) continue;
        rates += fmt::format("{}rank {} {}", listed++ > 0 ? ", " : "", m.rank,
                             FormatBitRate(m.tcp_rate));
      }
      if (measured.size() > 8) rates += fmt::format(", ... ({} workers)", measured.size());
      f.evidence.push_back({"TCP delivery rate (bytes delivered / their time at it)", rates});
      f.evidence.push_back(
          {"bytes it sends per iteration",
           fmt::format("{:.2f} MB: {} at its rate, of {} {}communication per iteration",
                       r.tcp_send * r.iteration_ns / 1e15,
                       FormatDuration(r.tcp_send * r.iteration_ns / r.tcp_rate),
                       FormatDuration(r.comm_ns), r.intra_node_ns > 0 ? "inter-node " : "")});
      f.evidence.push_back(
          {"how the time is estimated",
           "its bytes per iteration at its rate minus at its peers' median rate, at most its "
           "communication time"});
      absorb({fc::kStragglerComm, fc::kStragglerUntraced}, culprits, true, f);
      name_hosts(f, culprits);
      material(f);
      a.culprits = std::move(culprits);
      out.push_back(std::move(a));
    }
  }
  link_rule(&Record::nic, "NIC", fc::kNicDegraded, FindingCategory::kCommunication,
            {fc::kStragglerComm, fc::kStragglerUntraced}, true, true);
  link_rule(&Record::nvlink, "NVLink", fc::kLinkDegraded, FindingCategory::kCommunication,
            {fc::kStragglerComm}, false, true);
  link_rule(&Record::pcie, "PCIe", fc::kLinkDegraded, FindingCategory::kMemory,
            {fc::kStragglerMemcpy}, false, false);

  // --- Launch-bound.
  {
    std::vector<float> tiny;
    for (const Record& r : records_) {
      if (r.tiny_kernel_share >= 0) tiny.push_back(r.tiny_kernel_share);
    }
    const double share = Median(tiny);
    if (!tiny.empty() && share >= kTinyKernelJobShare) {
      for (size_t i = 0; i < findings.size(); ++i) {
        Finding& f = *findings[i];
        if (drop[i] || f.code != fc::kHostBound) continue;
        f.code = fc::kLaunchBound;
        f.title = fmt::format("{} of the kernel launches are tiny (median call under {}): {}",
                              FormatShare(share), FormatDuration(kTinyKernelNs), f.title);
        f.evidence.insert(f.evidence.begin(),
                          Evidence{"tiny kernels",
                                   fmt::format("{} of kernel calls have a median duration under {} "
                                               "(median of workers)",
                                               FormatShare(share), FormatDuration(kTinyKernelNs))});
      }
    }
    // A launch-bound job's compute stragglers on host code whose workers are mostly its
    // launch-bound workers (every worker when it names none: host_bound_check.h), or include
    // them all (the first stage and the next one, whose forward follows it closely), are that
    // launching, seen by the peer comparison: a pipeline's first stage launches its forward
    // while the later stages wait in their receives, its last stage the backward, and when
    // every stage runs the same tiny kernels they are all "peers", so the first stage "runs
    // forward for real, against its peers' 0 ns" though the forward's calls take as long on
    // every stage. The launch-bound finding explains them; its time stays the idle GPU's.
    for (size_t i = 0; i < findings.size(); ++i) {
      if (drop[i] || findings[i]->code != fc::kLaunchBound) continue;
      const std::vector<int32_t>& bound = findings[i]->workers;
      for (size_t j = 0; j < findings.size(); ++j) {
        const Finding& f = *findings[j];
        if (j == i || drop[j] || f.code != fc::kStragglerCompute || f.resource == "GPU") continue;
        size_t inside = 0;
        for (int32_t r : f.workers) inside += bound.empty() || Contains(bound, r) ? 1 : 0;
        bool covers = !bound.empty();
        for (int32_t r : bound) covers &= Contains(f.workers, r);
        if (f.workers.empty() || (2 * inside < f.workers.size() && !covers)) continue;
        explains(j, *findings[i]);
      }
    }
  }
  return out;
}

}  // namespace perftracker
