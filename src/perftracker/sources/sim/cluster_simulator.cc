#include "perftracker/sources/sim/cluster_simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

namespace perftracker {
namespace {

constexpr uint32_t kHostTrack = 1;
constexpr uint32_t kComputeStream = 2;
constexpr uint32_t kCommStream = 3;
// Pipeline sends run on a stream of their own, as torch runs point-to-point operations on the
// stream of their own communicator: a send is asynchronous (compute goes on while the
// activation is in flight), so on the collectives' stream it would overlap the collective
// launched next, and a consumer nests overlapping events of one stream (the data-parallel
// all-reduce of a rank whose last backward send was still in flight became a call inside the
// send, under `backward`: a function "only on some" of its stage).
constexpr uint32_t kSendStream = 4;
// Process group ids (Event::group) when the job names them (ScenarioJob::process_groups).
constexpr uint16_t kTpGroup = 1, kDpGroup = 2, kPpGroup = 3;

// Nominal hardware (an H100-class node): SM clock, link rates in bytes/s.
constexpr double kClockMaxMhz = 1980;
constexpr double kNvlinkRate = 300e9;
constexpr double kNicRate = 45e9;
constexpr double kPcieRate = 24e9;
constexpr double kBackgroundRate = 0.05e9;  // management traffic on an idle link
// NVML throttle reason: software thermal slowdown.
constexpr double kThrottleSwThermal = 0x20;
// Host-side costs, ns.
constexpr double kLaunchNs = 8e3;
constexpr double kLaunchGapNs = 4e3;
constexpr double kSyncWakeNs = 20e3;
constexpr double kDataLoadNs = 1.5e6;
constexpr double kOptimizerHostNs = 0.3e6;
// Sampling periods, ns.
constexpr int64_t kGpuSamplePeriod = 10'000'000;
constexpr int64_t kLinkSamplePeriod = 2'000'000;
// Flapping NIC: period of the link's down/up cycle.
constexpr double kFlapPeriodNs = 300e6;
// Launch-bound jobs: each layer is this many tiny kernels.
constexpr int kTinyKernelsPerLayer = 48;
constexpr double kTinyKernelNs = 6e3;
constexpr double kTinyGapNs = 18e3;  // Python between two launches

enum class Link : uint8_t { kNic = 0, kNvlink = 1, kPcie = 2 };

struct Xfer {
  int64_t start = 0;
  int64_t end = 0;
  float rate = 0;
  Link link = Link::kNic;
};

struct FaultState {
  double kernel_factor = 1;  // all kernels
  double module_factor = 1;  // one layer's kernels (slow_compute)
  double data_factor = 1;
  double host_factor = 1;  // launches and data loading (CPU contention)
  double gc_ns = 0;
  double untraced_ns = 0;  // a stall outside every traced function, per iteration
  double memcpy_factor = 1;
  bool throttled = false;
  double clock = kClockMaxMhz;
  double run_queue = 0.02;
};

struct RankState {
  std::mt19937_64 rng;
  double host = 0;   // host thread cursor
  double dev = 0;    // compute stream cursor
  double comm = 0;   // send stream cursor
  double speed = 1;  // persistent per-rank speed factor
  uint32_t correlation = 1;
  std::vector<Event> events;
  std::vector<Xfer> xfers;
  FaultState fault;
  double ann_start = 0;
  double layer_start = 0;
};

}  // namespace

class ClusterSimulator::Impl {
 public:
  explicit Impl(const Scenario& s) : s_(s), job_(s.job) {
    const auto n = static_cast<size_t>(job_.ranks);
    ranks_.resize(n);
    for (size_t r = 0; r < n; ++r) {
      ranks_[r].rng.seed(job_.seed * 0x9E3779B97F4A7C15ull + r * 0xBF58476D1CE4E5B9ull + 1);
      ranks_[r].speed = 1 + Clamp3(Normal(ranks_[r])) * job_.noise / 3;
    }
    host_nic_factor_.assign(static_cast<size_t>(job_.hosts()), 1.0);
    host_nvlink_factor_.assign(static_cast<size_t>(job_.hosts()), 1.0);
    host_flap_down_.assign(static_cast<size_t>(job_.hosts()), 0.0);
    Intern();
    // Model size sets compute and bytes.
    const double scale = std::clamp(std::sqrt(job_.model_params_b / 7.0), 0.5, 2.0);
    fwd_ns_ = 2.5e6 * scale;
    act_bytes_ = 16e6 * scale;
    grad_bytes_ = std::clamp(job_.model_params_b * 1e9 * 2 / (job_.tp * job_.pp) / 64, 8e6, 1e9);
  }

  void Run();
  void Emit(int32_t rank, EventSink& sink) const;

  const Scenario& s_;
  const ScenarioJob& job_;
  FunctionTable table_;
  std::vector<RankState> ranks_;
  int64_t onset_ns_ = -1;
  int64_t end_ns_ = 0;
  std::vector<double> host_nic_factor_, host_nvlink_factor_, host_flap_down_;

 private:
  double fwd_ns_ = 0;      // one layer's forward kernel
  double act_bytes_ = 0;   // activations per microbatch (tp all-reduce, pp send)
  double grad_bytes_ = 0;  // gradients per rank (dp all-reduce)

  struct Fn {
    uint32_t iteration, data, forward, backward, launch, memcpy_call, memcpy, fwd_kernel,
        bwd_kernel, embed_kernel, head_kernel, tiny_fwd, tiny_bwd, tp_allreduce, dp_allreduce, send,
        recv, optimizer, adam, sync, gc;
    std::vector<uint32_t> layers;
  } fn_{};

  static double Clamp3(double x) { return std::clamp(x, -3.0, 3.0); }
  static double Normal(RankState& r) { return std::normal_distribution<double>(0, 1)(r.rng); }
  double Jitter(RankState& r) const {
    double j = 1 + Clamp3(Normal(r)) * job_.noise;
    // Rare hiccups: a preempted kernel or a slow page fault.
    if (std::uniform_real_distribution<double>(0, 1)(r.rng) < 0.002) j *= 1.5;
    return std::max(0.2, j);
  }

  void Intern() {
    auto in = [&](EventKind k, std::string_view n) { return table_.Intern(k, n); };
    fn_.iteration = in(EventKind::kIteration, "ProfilerStep");
    fn_.data = in(EventKind::kDataLoad, "DataLoader.__next__");
    fn_.forward = in(EventKind::kUserAnnotation, "forward");
    fn_.backward = in(EventKind::kUserAnnotation, "backward");
    fn_.launch = in(EventKind::kKernelLaunch, "cudaLaunchKernel");
    fn_.memcpy_call = in(EventKind::kRuntimeCall, "cudaMemcpyAsync");
    fn_.memcpy = in(EventKind::kMemcpy, "Memcpy HtoD (Pinned -> Device)");
    fn_.fwd_kernel = in(EventKind::kGpuKernel, "sm90_xmma_gemm_bf16_fprop");
    fn_.bwd_kernel = in(EventKind::kGpuKernel, "sm90_xmma_gemm_bf16_dgrad");
    fn_.embed_kernel = in(EventKind::kGpuKernel, "embedding_fwd_kernel");
    fn_.head_kernel = in(EventKind::kGpuKernel, "lm_head_softmax_xent_kernel");
    fn_.tiny_fwd = in(EventKind::kGpuKernel, "vectorized_elementwise_kernel");
    fn_.tiny_bwd = in(EventKind::kGpuKernel, "elementwise_grad_kernel");
    fn_.tp_allreduce = in(EventKind::kCollective, "ncclDevKernel_AllReduce (tp group)");
    fn_.dp_allreduce = in(EventKind::kCollective, "ncclDevKernel_AllReduce (dp group)");
    fn_.send = in(EventKind::kCollective, "ncclDevKernel_SendRecv send (pp)");
    fn_.recv = in(EventKind::kCollective, "ncclDevKernel_SendRecv recv (pp)");
    fn_.optimizer = in(EventKind::kOptimizerStep, "Optimizer.step");
    fn_.adam = in(EventKind::kGpuKernel, "multi_tensor_apply_adam_kernel");
    fn_.sync = in(EventKind::kSync, "cudaStreamSynchronize");
    fn_.gc = in(EventKind::kGc, "gc collect generation 2");
    for (int l = 0; l < job_.layers_per_stage; ++l) {
      fn_.layers.push_back(in(EventKind::kUserAnnotation, fmt::format("layer{}", l)));
    }
  }

  int32_t StageOf(int32_t r) const { return r / (job_.dp * job_.tp); }
  int32_t StageSize() const { return job_.dp * job_.tp; }

  void Push(RankState& r, uint32_t fid, EventKind kind, uint32_t track, double start, double end,
            uint64_t payload = 0, uint32_t corr = 0) {
    Event e;
    e.start_ns = static_cast<int64_t>(std::llround(start));
    e.end_ns = std::max(e.start_ns, static_cast<int64_t>(std::llround(end)));
    e.function_id = fid;
    e.kind = kind;
    e.track_id = track;
    e.payload = payload;
    e.correlation = corr;
    if (track != kHostTrack) e.flags = kEventFlagOnDevice;
    r.events.push_back(e);
  }

  // A launch on the host; returns its correlation id and the time the device may start.
  std::pair<uint32_t, double> Launch(RankState& r, uint32_t fid = UINT32_MAX) {
    const double d = kLaunchNs * r.fault.host_factor * Jitter(r);
    const uint32_t corr = r.correlation++;
    Push(r, fid == UINT32_MAX ? fn_.launch : fid,
         fid == UINT32_MAX ? EventKind::kKernelLaunch : EventKind::kRuntimeCall, kHostTrack, r.host,
         r.host + d, 0, corr);
    const double ready = r.host + d + 2e3;
    r.host += d + kLaunchGapNs * r.fault.host_factor;
    return {corr, ready};
  }

  void Kernel(RankState& r, uint32_t fid, double ns) {
    auto [corr, ready] = Launch(r);
    const double start = std::max(r.dev, ready);
    const double d = ns * r.speed * r.fault.kernel_factor * Jitter(r);
    Push(r, fid, EventKind::kGpuKernel, kComputeStream, start, start + d, 0, corr);
    r.dev = start + d;
  }

  void TinyKernels(RankState& r, uint32_t fid) {
    for (int k = 0; k < kTinyKernelsPerLayer; ++k) {
      auto [corr, ready] = Launch(r);
      r.host += kTinyGapNs * Jitter(r);
      const double start = std::max(r.dev, ready);
      const double d = kTinyKernelNs * r.speed * r.fault.kernel_factor * Jitter(r);
      Push(r, fid, EventKind::kGpuKernel, kComputeStream, start, start + d, 0, corr);
      r.dev = start + d;
    }
  }

  bool LinkDown(int32_t host, double t) const {
    const double down = host_flap_down_[static_cast<size_t>(host)];
    if (down <= 0) return false;
    const double phase = std::fmod(t + 37e6 * host, kFlapPeriodNs);
    return phase < down * kFlapPeriodNs;
  }
  // When a transfer of `bytes` starting at t0 at `rate` ends on `host` (flaps pause it).
  double TransferEnd(int32_t host, double t0, double bytes, double rate) const {
    if (host_flap_down_[static_cast<size_t>(host)] <= 0) return t0 + bytes / rate * 1e9;
    double t = t0, left = bytes;
    constexpr double kStep = 1e6;
    for (int guard = 0; left > 0 && guard < 1'000'000; ++guard) {
      if (!LinkDown(host, t)) left -= rate * kStep / 1e9;
      t += kStep;
    }
    return t;
  }

  // A collective over `members` (rank ids) on the comm stream; compute waits for it.
  void Collective(const std::vector<int32_t>& members, uint32_t fid, double bytes) {
    const size_t n = members.size();
    bool intra = true;
    const int32_t h0 = job_.HostOf(members[0]);
    for (int32_t m : members) intra &= job_.HostOf(m) == h0;
    const double eff =
        n > 1 ? 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) * bytes : bytes;
    double t0 = 0;
    std::vector<std::pair<uint32_t, double>> launched(n);
    for (size_t i = 0; i < n; ++i) {
      RankState& r = ranks_[static_cast<size_t>(members[i])];
      auto [corr, ready] = Launch(r);
      launched[i] = {corr, std::max(r.dev, ready)};
      t0 = std::max(t0, launched[i].second);
    }
    std::vector<double> own_end(n);
    double end = t0;
    for (size_t i = 0; i < n; ++i) {
      const int32_t h = job_.HostOf(members[i]);
      RankState& r = ranks_[static_cast<size_t>(members[i])];
      double rate = intra ? kNvlinkRate * host_nvlink_factor_[static_cast<size_t>(h)]
                          : kNicRate * host_nic_factor_[static_cast<size_t>(h)];
      rate /= Jitter(r);
      own_end[i] = intra ? t0 + eff / rate * 1e9 : TransferEnd(h, t0, eff, rate);
      end = std::max(end, own_end[i] + 5e3);
      r.xfers.push_back({static_cast<int64_t>(t0), static_cast<int64_t>(own_end[i]),
                         static_cast<float>(rate), intra ? Link::kNvlink : Link::kNic});
    }
    for (size_t i = 0; i < n; ++i) {
      RankState& r = ranks_[static_cast<size_t>(members[i])];
      Push(r, fid, EventKind::kCollective, kCommStream, launched[i].second, end,
           static_cast<uint64_t>(bytes), launched[i].first);
      r.dev = end;
    }
  }

  // Pipeline point-to-point: `to` receives what `from` sent at `sent` (from's send stream).
  double Send(int32_t from, double bytes) {
    RankState& r = ranks_[static_cast<size_t>(from)];
    auto [corr, ready] = Launch(r);
    const double start = std::max({r.dev, ready, r.comm});
    const int32_t h = job_.HostOf(from);
    const double rate = kNicRate * host_nic_factor_[static_cast<size_t>(h)] / Jitter(r);
    const double end = TransferEnd(h, start, bytes, rate);
    r.xfers.push_back({static_cast<int64_t>(start), static_cast<int64_t>(end),
                       static_cast<float>(rate), Link::kNic});
    Push(r, fn_.send, EventKind::kCollective, kSendStream, start, end, static_cast<uint64_t>(bytes),
         corr);
    r.comm = end;
    return end;
  }
  void Recv(int32_t to, double arrived, double bytes) {
    RankState& r = ranks_[static_cast<size_t>(to)];
    auto [corr, ready] = Launch(r);
    const double start = std::max(r.dev, ready);
    const double end = std::max(start + 20e3, arrived);
    Push(r, fn_.recv, EventKind::kCollective, kCommStream, start, end, static_cast<uint64_t>(bytes),
         corr);
    r.dev = end;
  }

  void ApplyFaults(int32_t iteration);
  void Layer(int32_t stage, int32_t mb, int32_t layer, bool backward);
};

void ClusterSimulator::Impl::ApplyFaults(int32_t iteration) {
  for (const ScenarioFault& f : s_.faults) {
    if (f.start != iteration) continue;
    const double m = std::max(f.magnitude, 1.0);
    std::vector<int32_t> targets = s_.TargetRanks(f);
    if (targets.empty()) {
      for (int32_t r = 0; r < job_.ranks; ++r) targets.push_back(r);
    }
    if (onset_ns_ < 0 || ranks_[static_cast<size_t>(targets[0])].host < onset_ns_) {
      onset_ns_ = static_cast<int64_t>(ranks_[static_cast<size_t>(targets[0])].host);
    }
    for (int32_t h : f.hosts) {
      if (f.kind == FaultKind::kNicDegraded) host_nic_factor_[static_cast<size_t>(h)] = 1 / m;
      if (f.kind == FaultKind::kNvlinkDegraded) host_nvlink_factor_[static_cast<size_t>(h)] = 1 / m;
      if (f.kind == FaultKind::kNicFlapping) host_flap_down_[static_cast<size_t>(h)] = 1 - 1 / m;
    }
    for (int32_t t : targets) {
      FaultState& st = ranks_[static_cast<size_t>(t)].fault;
      switch (f.kind) {
        case FaultKind::kGpuThrottle:
          st.kernel_factor = m;
          st.throttled = true;
          st.clock = kClockMaxMhz / m;
          break;
        case FaultKind::kGpuSlow:
          st.kernel_factor = m;
          break;
        case FaultKind::kSlowCompute:
          st.module_factor = m;
          break;
        case FaultKind::kPcieDegraded:
          st.memcpy_factor = m;
          break;
        case FaultKind::kSlowData:
        case FaultKind::kSlowDataAll:
          st.data_factor = m;
          break;
        case FaultKind::kCpuContention:
          st.host_factor = m;
          st.run_queue = 0.45;
          break;
        case FaultKind::kGc:
        case FaultKind::kGcAll:
          st.gc_ns = m * 1e6;
          break;
        case FaultKind::kUntracedPause:
          st.untraced_ns = m * 1e6;
          break;
        default:
          break;
      }
    }
  }
}

void ClusterSimulator::Impl::Layer(int32_t stage, int32_t mb, int32_t layer, bool backward) {
  const int32_t first = stage * StageSize();
  const bool launch_bound = std::any_of(s_.faults.begin(), s_.faults.end(), [](const auto& f) {
    return f.kind == FaultKind::kLaunchBound;
  });
  const bool host_sync = std::any_of(s_.faults.begin(), s_.faults.end(),
                                     [](const auto& f) { return f.kind == FaultKind::kHostSync; });
  double sync_wake = 0;
  for (const auto& f : s_.faults) {
    if (f.kind == FaultKind::kHostSync) sync_wake = std::max(1.0, f.magnitude) * 1e6;
  }
  const int32_t slow_layer = job_.layers_per_stage / 2;
  for (int32_t r = first; r < first + StageSize(); ++r) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    st.layer_start = st.host;
    if (launch_bound) {
      TinyKernels(st, backward ? fn_.tiny_bwd : fn_.tiny_fwd);
    } else {
      double ns = backward ? 2 * fwd_ns_ : fwd_ns_;
      if (layer == slow_layer) ns *= st.fault.module_factor;
      if (!backward && layer == 0 && stage == 0) Kernel(st, fn_.embed_kernel, 0.3 * fwd_ns_);
      Kernel(st, backward ? fn_.bwd_kernel : fn_.fwd_kernel, ns);
      if (!backward && layer == job_.layers_per_stage - 1 && stage == job_.pp - 1) {
        Kernel(st, fn_.head_kernel, 0.5 * fwd_ns_);
      }
    }
    if (host_sync && !backward && mb == 0) {
      // loss.item()-like: the host waits for the device, then wakes up late.
      const double end = std::max(st.host, st.dev) + sync_wake * Jitter(st);
      Push(st, fn_.sync, EventKind::kSync, kHostTrack, st.host, end);
      st.host = end;
    }
  }
  if (job_.tp > 1) {
    std::vector<int32_t> members;
    for (int32_t g = first; g < first + StageSize(); g += job_.tp) {
      members.clear();
      for (int32_t t = 0; t < job_.tp; ++t) members.push_back(g + t);
      Collective(members, fn_.tp_allreduce, act_bytes_);
    }
  }
  for (int32_t r = first; r < first + StageSize(); ++r) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    Push(st, fn_.layers[static_cast<size_t>(layer)], EventKind::kUserAnnotation, kHostTrack,
         st.layer_start, st.host);
  }
}

void ClusterSimulator::Impl::Run() {
  const int32_t stages = job_.pp;
  const int32_t mbs = job_.microbatches;
  const int32_t layers = job_.layers_per_stage;
  // sent[m][r]: when the activation (forward) or gradient (backward) of microbatch m that
  // rank r sent arrives.
  std::vector<std::vector<double>> sent(static_cast<size_t>(mbs),
                                        std::vector<double>(ranks_.size(), 0));
  std::vector<double> it_start(ranks_.size());
  std::vector<double> ann(ranks_.size());
  for (int32_t it = 0; it < job_.iterations; ++it) {
    ApplyFaults(it);
    for (auto& r : ranks_) {
      const size_t i = static_cast<size_t>(&r - ranks_.data());
      it_start[i] = r.host;
      if (r.fault.gc_ns > 0) {
        const double d = r.fault.gc_ns * Jitter(r);
        Push(r, fn_.gc, EventKind::kGc, kHostTrack, r.host, r.host + d);
        r.host += d;
      }
      const double d = kDataLoadNs * r.fault.data_factor * r.fault.host_factor * Jitter(r);
      Push(r, fn_.data, EventKind::kDataLoad, kHostTrack, r.host, r.host + d);
      r.host += d;
      // The batch's host-to-device copy.
      auto [corr, ready] = Launch(r, fn_.memcpy_call);
      const double bytes = 32e6;
      const double start = std::max(r.dev, ready);
      const double cd = bytes / kPcieRate * 1e9 * r.fault.memcpy_factor * Jitter(r);
      Push(r, fn_.memcpy, EventKind::kMemcpy, kComputeStream, start, start + cd,
           static_cast<uint64_t>(bytes), corr);
      r.xfers.push_back({static_cast<int64_t>(start), static_cast<int64_t>(start + cd),
                         static_cast<float>(bytes / cd * 1e9), Link::kPcie});
      r.dev = start + cd;
      // A sleep or untraced Python between the batch and the forward pass: no event, no
      // run-queue delay.
      if (r.fault.untraced_ns > 0) r.host += r.fault.untraced_ns * Jitter(r);
      ann[i] = r.host;
    }
    // Forward, stage by stage.
    for (int32_t s = 0; s < stages; ++s) {
      const int32_t first = s * StageSize();
      for (int32_t m = 0; m < mbs; ++m) {
        if (s > 0) {
          for (int32_t r = first; r < first + StageSize(); ++r) {
            Recv(r, sent[static_cast<size_t>(m)][static_cast<size_t>(r - StageSize())], act_bytes_);
          }
        }
        for (int32_t l = 0; l < layers; ++l) Layer(s, m, l, false);
        if (s + 1 < stages) {
          for (int32_t r = first; r < first + StageSize(); ++r) {
            sent[static_cast<size_t>(m)][static_cast<size_t>(r)] = Send(r, act_bytes_);
          }
        }
      }
      for (int32_t r = first; r < first + StageSize(); ++r) {
        RankState& st = ranks_[static_cast<size_t>(r)];
        Push(st, fn_.forward, EventKind::kUserAnnotation, kHostTrack, ann[static_cast<size_t>(r)],
             st.host);
        ann[static_cast<size_t>(r)] = st.host;
      }
    }
    // Backward, in reverse stage order.
    for (int32_t s = stages - 1; s >= 0; --s) {
      const int32_t first = s * StageSize();
      for (int32_t m = 0; m < mbs; ++m) {
        if (s + 1 < stages) {
          for (int32_t r = first; r < first + StageSize(); ++r) {
            Recv(r, sent[static_cast<size_t>(m)][static_cast<size_t>(r + StageSize())], act_bytes_);
          }
        }
        for (int32_t l = layers - 1; l >= 0; --l) Layer(s, m, l, true);
        if (s > 0) {
          for (int32_t r = first; r < first + StageSize(); ++r) {
            sent[static_cast<size_t>(m)][static_cast<size_t>(r)] = Send(r, act_bytes_);
          }
        }
      }
      for (int32_t r = first; r < first + StageSize(); ++r) {
        RankState& st = ranks_[static_cast<size_t>(r)];
        Push(st, fn_.backward, EventKind::kUserAnnotation, kHostTrack, ann[static_cast<size_t>(r)],
             st.host);
      }
    }
    // Data-parallel gradient all-reduce: two buckets per group (same stage, same tp index).
    if (job_.dp > 1) {
      std::vector<int32_t> members;
      for (int32_t s = 0; s < stages; ++s) {
        for (int32_t t = 0; t < job_.tp; ++t) {
          members.clear();
          for (int32_t d = 0; d < job_.dp; ++d)
            members.push_back(s * StageSize() + d * job_.tp + t);
          for (int b = 0; b < 2; ++b) Collective(members, fn_.dp_allreduce, grad_bytes_ / 2);
        }
      }
    }
    for (auto& r : ranks_) {
      const size_t i = static_cast<size_t>(&r - ranks_.data());
      const double opt_start = r.host;
      r.host += kOptimizerHostNs * r.fault.host_factor * Jitter(r);
      for (int k = 0; k < 2; ++k) Kernel(r, fn_.adam, 0.75e6);
      Push(r, fn_.optimizer, EventKind::kOptimizerStep, kHostTrack, opt_start, r.host);
      r.comm = std::max(r.comm, r.dev);
      const double end = std::max(r.host, std::max(r.dev, r.comm)) + kSyncWakeNs * Jitter(r);
      Push(r, fn_.sync, EventKind::kSync, kHostTrack, r.host, end);
      r.host = end;
      r.dev = std::max(r.dev, end);
      Push(r, fn_.iteration, EventKind::kIteration, kHostTrack, it_start[i], r.host);
      end_ns_ = std::max(end_ns_, static_cast<int64_t>(r.host));
    }
  }
}

void ClusterSimulator::Impl::Emit(int32_t rank, EventSink& sink) const {
  const RankState& r = ranks_[static_cast<size_t>(rank)];
  const int32_t local = rank % job_.gpus_per_host;
  const int32_t host = job_.HostOf(rank);
  if (job_.host_trace) sink.OnTrack({kHostTrack, TrackKind::kHostThread, -1, "thread main"});
  sink.OnTrack({kComputeStream, TrackKind::kDeviceStream, local, "stream 7"});
  sink.OnTrack({kCommStream, TrackKind::kDeviceStream, local, "stream 13"});
  if (job_.pp > 1) sink.OnTrack({kSendStream, TrackKind::kDeviceStream, local, "stream 17"});
  std::vector<Event> events = r.events;
  if (!job_.host_trace) {
    // A device-only trace: host events dropped; the iteration markers become the GPU-side
    // twins Kineto writes on the compute stream.
    std::erase_if(events, [](const Event& e) {
      return e.track_id == kHostTrack && e.kind != EventKind::kIteration;
    });
    for (Event& e : events) {
      if (e.kind != EventKind::kIteration) continue;
      e.track_id = kComputeStream;
      e.flags = kEventFlagOnDevice;
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.track_id != b.track_id) return a.track_id < b.track_id;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  if (job_.process_groups) {
    // This rank's groups: its tensor-parallel group (consecutive ranks of one replica of its
    // stage), its data-parallel group (the same tp index of every replica of its stage) and
    // its pipeline (the same place in every stage: sends and receives).
    const int32_t stage = StageOf(rank), in_stage = rank % StageSize();
    ProcessGroupInfo tp{kTpGroup, "tp", {}, 0, "nccl"}, dp{kDpGroup, "dp", {}, 0, "nccl"},
        pp{kPpGroup, "pp", {}, 0, "nccl"};
    const int32_t replica_first = stage * StageSize() + in_stage / job_.tp * job_.tp;
    for (int32_t k = 0; k < job_.tp; ++k) tp.ranks.push_back(replica_first + k);
    for (int32_t d = 0; d < job_.dp; ++d)
      dp.ranks.push_back(stage * StageSize() + d * job_.tp + in_stage % job_.tp);
    for (int32_t st = 0; st < job_.pp; ++st) pp.ranks.push_back(st * StageSize() + in_stage);
    for (ProcessGroupInfo* g : {&tp, &dp, &pp}) {
      g->size = static_cast<uint32_t>(g->ranks.size());
      sink.OnProcessGroup(*g);
    }
    for (Event& e : events) {
      if (e.function_id == fn_.tp_allreduce) e.group = kTpGroup;
      if (e.function_id == fn_.dp_allreduce) e.group = kDpGroup;
      if (e.function_id == fn_.send || e.function_id == fn_.recv) e.group = kPpGroup;
    }
  }
  for (const Event& e : events) sink.OnEvent(e);

  // Samples. A private generator per rank keeps Emit() deterministic and thread-safe.
  std::mt19937_64 rng(job_.seed * 0xD1B54A32D192ED03ull + static_cast<uint64_t>(rank) + 7);
  std::normal_distribution<double> normal(0, 1);
  auto noisy = [&](double v, double rel) { return v * (1 + Clamp3(normal(rng)) * rel); };
  const auto src = static_cast<uint32_t>(local);
  auto sample = [&](Metric m, int64_t t, double v, uint32_t source) {
    MetricSample s;
    s.metric = m;
    s.time_ns = t;
    s.value = v;
    s.source = source;
    sink.OnMetric(s);
  };
  // Device busy time per GPU sample period, from the device events (sorted by start).
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (const Event& e : events) {
    if (e.track_id != kHostTrack && e.kind != EventKind::kCollective) {
      busy.emplace_back(e.start_ns, e.end_ns);
    }
  }
  std::sort(busy.begin(), busy.end());
  size_t bi = 0;
  const FaultState& fs = r.fault;
  for (int64_t t = kGpuSamplePeriod; t <= end_ns_; t += kGpuSamplePeriod) {
    const int64_t from = t - kGpuSamplePeriod;
    double ns = 0;
    while (bi < busy.size() && busy[bi].second <= from) ++bi;
    for (size_t k = bi; k < busy.size() && busy[k].first < t; ++k) {
      ns += static_cast<double>(std::min(t, busy[k].second) - std::max(from, busy[k].first));
    }
    const double util = std::clamp(ns / static_cast<double>(kGpuSamplePeriod), 0.0, 1.0);
    // Faults apply from their onset on: the state at the end of the run is the fault's.
    const bool on = onset_ns_ >= 0 && t >= onset_ns_;
    const bool throttled = on && fs.throttled;
    sample(Metric::kGpuUtilization, t, util, src);
    sample(Metric::kGpuSmActivity, t, util * noisy(0.85, 0.02), src);
    sample(Metric::kGpuSmClockMhz, t, throttled ? noisy(fs.clock, 0.01) : noisy(1975, 0.002), src);
    sample(Metric::kGpuSmClockMaxMhz, t, kClockMaxMhz, src);
    sample(Metric::kGpuThrottleReasons, t, throttled ? kThrottleSwThermal : 0, src);
    sample(Metric::kGpuTemperatureC, t, throttled ? noisy(88, 0.01) : noisy(62, 0.03), src);
    sample(Metric::kGpuPowerWatts, t, noisy(throttled ? 380 : 300 + 350 * util, 0.03), src);
    sample(Metric::kRunQueueDelayFraction, t,
           std::clamp(noisy(on ? fs.run_queue : 0.02, 0.2), 0.0, 1.0), 0);
    sample(Metric::kCpuUtilization, t, noisy(0.9, 0.05), 0);
    // As many turns on a CPU whether starved or not: a starved rank waits longer for each.
    sample(Metric::kTimeslicesPerSec, t, noisy(200, 0.05), 0);
    sample(Metric::kNicLinkUp, t, LinkDown(host, static_cast<double>(t)) ? 0 : 1, src);
  }
  // Link throughput: a point sample is the rate of the transfer running at that time.
  for (Link link : {Link::kNic, Link::kNvlink, Link::kPcie}) {
    std::vector<Xfer> xs;
    for (const Xfer& x : r.xfers) {
      if (x.link == link) xs.push_back(x);
    }
    std::sort(xs.begin(), xs.end(), [](const Xfer& a, const Xfer& b) { return a.start < b.start; });
    const Metric metric = link == Link::kNic      ? Metric::kIbTxBytesPerSec
                          : link == Link::kNvlink ? Metric::kNvlinkBytesPerSec
                                                  : Metric::kPcieRxBytesPerSec;
    size_t k = 0;
    // Offset per rank so that samples do not all fall on the same phase of the program.
    for (int64_t t = kLinkSamplePeriod / 2 + (rank * 131'071) % kLinkSamplePeriod; t <= end_ns_;
         t += kLinkSamplePeriod) {
      while (k < xs.size() && xs[k].end <= t) ++k;
      double v = noisy(kBackgroundRate, 0.3);
      for (size_t j = k; j < xs.size() && xs[j].start <= t; ++j) {
        if (xs[j].end > t) {
          const bool down = link == Link::kNic && LinkDown(host, static_cast<double>(t));
          v += down ? 0 : noisy(xs[j].rate, 0.02);
          break;
        }
      }
      sample(metric, t, v, src);
    }
  }
}

ClusterSimulator::ClusterSimulator(const Scenario& scenario)
    : impl_(std::make_unique<Impl>(scenario)) {}
ClusterSimulator::~ClusterSimulator() = default;
void ClusterSimulator::Run() { impl_->Run(); }
int32_t ClusterSimulator::num_ranks() const { return impl_->job_.ranks; }
std::string ClusterSimulator::HostName(int32_t rank) const {
  return fmt::format("node{:04d}", impl_->job_.HostOf(rank));
}
const FunctionTable& ClusterSimulator::functions() const { return impl_->table_; }
int64_t ClusterSimulator::fault_onset_ns() const { return impl_->onset_ns_; }
uint64_t ClusterSimulator::total_events() const {
  uint64_t n = 0;
  for (const auto& r : impl_->ranks_) n += r.events.size();
  return n;
}
std::vector<double> ClusterSimulator::IterationNs() const {
  std::vector<double> sum(static_cast<size_t>(std::max(impl_->job_.iterations, 0)), 0.0);
  for (const auto& r : impl_->ranks_) {
    size_t k = 0;
    for (const Event& e : r.events) {
      if (e.kind != EventKind::kIteration || k >= sum.size()) continue;
      sum[k++] += static_cast<double>(e.duration_ns());
    }
  }
  for (double& s : sum) s /= std::max<double>(1, static_cast<double>(impl_->ranks_.size()));
  return sum;
}
void ClusterSimulator::Emit(int32_t rank, EventSink& sink) const { impl_->Emit(rank, sink); }

}  // namespace perftracker
