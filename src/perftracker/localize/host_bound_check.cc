#include "perftracker/localize/host_bound_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "perftracker/core/rank_list.h"
#include "perftracker/core/units.h"
#include "perftracker/localize/expectation_checks.h"
#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {
namespace {

namespace fc = finding_codes;

// Device idle while the host works, as a share of the iteration, that makes a job
// host-bound.
constexpr double kHostBoundShare = 0.3;
// A worker's launches ran when its trace shows kernels for at least this share of them...
constexpr double kMinLaunchesRun = 0.5;
// ... judged from this many launches in the window on.
constexpr double kMinLaunches = 50;

// A CUDA / HIP runtime call (not a launch, not a synchronization) whose median call takes
// this long is a one-off: the first CUDA call creating the context (seconds), loading a
// module, a first large allocation. In steady state the runtime's calls take microseconds.
constexpr double kOneOffCallNs = 100e6;
// The window is called the job's initialization when such calls take this share of the
// host-bound idle time.
constexpr double kOneOffShare = 0.5;

// Kernel launches and kernels that ran, in the window, and the time per iteration in
// one-off runtime calls (kOneOffCallNs): one scan of a device worker's records.
struct LaunchCounts {
  double launches = 0;
  double kernels = 0;
  double one_off_ns = 0;
  // Compute kernel calls (not collectives), and those whose median call is under
  // kTinyKernelNs, per iteration.
  double compute_kernels = 0;
  double tiny_kernels = 0;
};

LaunchCounts CountLaunches(const JobTable& job, const WorkerRecord& wr) {
  LaunchCounts c;
  for (uint32_t k = 0; k < wr.num_records; ++k) {
    const FunctionRecord& r = job.records()[wr.first_record + k];
    const FunctionInfo& info = job.functions()[r.fid];
    if (info.kind == EventKind::kKernelLaunch) c.launches += r.calls;
    // A collective's kernel (NCCL's, RCCL's) runs on the device too: a tensor-parallel job
    // launches one or two per layer beside its compute kernels.
    if (info.kind == EventKind::kGpuKernel ||
        (info.kind == EventKind::kCollective && info.on_device)) {
      c.kernels += r.calls;
    }
    if (info.kind == EventKind::kRuntimeCall && r.p50_ns >= kOneOffCallNs)
      c.one_off_ns += r.time_ns;
    if (info.kind == EventKind::kGpuKernel) {
      c.compute_kernels += r.calls;
      if (r.p50_ns < kTinyKernelNs) c.tiny_kernels += r.calls;
    }
  }
  c.launches *= wr.iterations;
  c.kernels *= wr.iterations;
  return c;
}

// The evidence both host-bound findings end with (the host functions on the critical path,
// the job's median iteration), then the finding into `out`.
void AddHostFunctionsAndEmit(const RuleContext& ctx, Finding f, std::vector<RenderedFinding>& out) {
  const JobTable& job = *ctx.job;
  const size_t num_workers = job.workers().size();
  for (uint32_t fid : TopFunctions(
           job, [](const FunctionInfo& fn) { return IsHostWorkKind(fn.kind); }, true, 3)) {
    const FunctionTotals& fn = job.Totals(fid);
    f.evidence.push_back(
        {"host function on the critical path",
         fmt::format("{}: {}/iter (mean of workers)", job.Name(fid),
                     FormatDuration(fn.sum_critical_ns / static_cast<double>(num_workers)))});
  }
  f.evidence.push_back({"median iteration (job)", FormatDuration(ctx.iteration_ns)});
  RenderedFinding r;
  r.finding = std::move(f);
  out.push_back(std::move(r));
}

// The launch-bound check under kHostBoundShare (host_bound_check.h): `judged` are the device
// workers, `shares` and `idle_ns` their device-idle-while-the-host-works share and time.
void CheckLaunchBound(const RuleContext& ctx, const std::vector<uint32_t>& judged,
                      const std::vector<float>& shares, const std::vector<float>& idle_ns,
                      double tiny_share, double launches, std::vector<RenderedFinding>& out) {
  if (tiny_share < kTinyKernelJobShare || launches < kMinLaunches) return;
  const JobTable& job = *ctx.job;
  const double floor = ctx.options->material_share;
  // The job median first: when it reaches the floor, the finding is the job's, as the
  // host-bound one; else the workers that reach it on their own (a pipeline's first stage).
  std::vector<float> sorted = shares;
  const bool job_wide = MedianInPlace(sorted) >= floor;
  std::vector<int32_t> ranks;
  std::vector<float> bound_shares, bound_idle;
  for (size_t i = 0; i < judged.size(); ++i) {
    if (!job_wide && shares[i] < floor) continue;
    ranks.push_back(job.workers()[judged[i]].rank);
    bound_shares.push_back(shares[i]);
    bound_idle.push_back(idle_ns[i]);
  }
  const size_t bound = ranks.size();
  if (bound < kMinPeers) return;
  const double share = MedianInPlace(bound_shares);
  const double lost = MedianInPlace(bound_idle);
  Finding f = JobFinding(ctx, fc::kLaunchBound, FindingCategory::kHostOverhead, "CPU", lost, kNone);
  f.material = true;
  const size_t num_workers = job.workers().size();
  std::string who = "all workers";
  if (bound < num_workers) {
    std::sort(ranks.begin(), ranks.end());
    who = bound == judged.size() && judged.size() < num_workers
              ? fmt::format("{} workers with a device", bound)
              : fmt::format("ranks {}", FormatRanks(ranks, 40, ","));
    for (size_t i = 0; i < bound && i < kMaxListedWorkers; ++i) f.workers.push_back(ranks[i]);
  }
  f.title = fmt::format(
      "{} of the kernel calls are tiny (median call under {}) and the GPU is idle {} of each "
      "iteration while the host launches them ({}/iter, {}): the job is launch-bound",
      FormatShare(tiny_share), FormatDuration(kTinyKernelNs), FormatShare(share),
      FormatDuration(lost), who);
  f.evidence.push_back(
      {"tiny kernels",
       fmt::format("{} of kernel calls have a median duration under {} (median "
                   "of workers), {:.0f} kernel launches per iteration",
                   FormatShare(tiny_share), FormatDuration(kTinyKernelNs), launches)});
  f.evidence.push_back(
      {"device idle, host busy",
       fmt::format("{} ({} of the iteration, median of the {} of {} workers with a device "
                   "whose GPU idles at least {} while the host works; host events that are not "
                   "waits)",
                   FormatDuration(lost), FormatShare(share), bound, judged.size(),
                   FormatShare(floor))});
  if (bound < judged.size()) {
    f.evidence.push_back({"the others",
                          "their GPUs idle less while their host works: they wait for these "
                          "workers (a pipeline's later stages wait in their receives)"});
  }
  AddHostFunctionsAndEmit(ctx, std::move(f), out);
}

}  // namespace

void CheckHostBound(const RuleContext& ctx, std::vector<RenderedFinding>& out,
                    std::vector<std::string>& notes) {
  const JobTable& job = *ctx.job;
  const std::vector<WorkerRecord>& workers = job.workers();
  const size_t num_workers = workers.size();
  std::vector<float> values;
  std::vector<float> idle_ns;
  std::vector<float> data_idle_ns;
  std::vector<float> one_off_ns;  // every device worker's (LaunchCounts::one_off_ns)
  size_t not_run = 0;
  std::vector<uint32_t> judged;    // the workers behind `values`, same order
  std::vector<float> tiny_shares;  // per judged worker with compute kernels
  std::vector<float> launches;     // per judged worker, per iteration
  // The device idle time that host work explains: the host's own events (not its waits:
  // a stage blocked in a pipeline recv or a sync idles the GPU without being host-bound)
  // keeping the launching thread busy while the device ran nothing. A trace without host
  // events has none, and is never host-bound.
  for (const auto& wr : workers) {
    if (!wr.has_device || wr.mean_iteration_ns <= 0) continue;
    const LaunchCounts launched = CountLaunches(job, wr);
    one_off_ns.push_back(static_cast<float>(launched.one_off_ns));
    if (launched.launches >= kMinLaunches &&
        launched.kernels < kMinLaunchesRun * launched.launches) {
      if (++not_run <= kMaxNotesPerKind) {
        notes.push_back(fmt::format(
            "{}: {:.0f} kernel launches, {:.0f} kernels ran in the window: its launches went "
            "into something that did not run them here (a CUDA / HIP graph being captured "
            "records its launches without running them; or the trace lost the device's "
            "activity), so its idle GPU is not judged as host overhead; profile the graph's "
            "replay to see the GPU's work",
            job.WorkerName(static_cast<uint32_t>(&wr - workers.data())), launched.launches,
            launched.kernels));
      }
      continue;
    }
    // The GPU idling while the host loads data is data loading's time (PT-DATA-CRITICAL
    // names it), not host overhead: counted once, there.
    const float data_idle = std::min(wr.host_only_ns, std::max(0.0f, wr.data_critical_ns));
    const float idle = std::min(wr.host_only_ns - data_idle, wr.host_work_critical_ns);
    values.push_back(idle / wr.mean_iteration_ns);
    idle_ns.push_back(idle);
    data_idle_ns.push_back(data_idle);
    judged.push_back(static_cast<uint32_t>(&wr - workers.data()));
    if (launched.compute_kernels > 0) {
      tiny_shares.push_back(static_cast<float>(launched.tiny_kernels / launched.compute_kernels));
    }
    launches.push_back(static_cast<float>(launched.launches / wr.iterations));
  }
  if (not_run > kMaxNotesPerKind) {
    notes.push_back(fmt::format("... and {} more workers whose launches ran no kernel here",
                                not_run - kMaxNotesPerKind));
  }
  const size_t device_workers = values.size();
  if (device_workers == 0) return;
  // The launch-bound check reads the workers' shares in `judged` order: the median of a copy.
  std::vector<float> shares = values;
  const double share = MedianInPlace(shares);
  if (share < kHostBoundShare) {
    CheckLaunchBound(ctx, judged, values, idle_ns, MedianInPlace(tiny_shares),
                     MedianInPlace(launches), out);
    return;
  }
  const double lost = MedianInPlace(idle_ns);
  Finding f = JobFinding(ctx, fc::kHostBound, FindingCategory::kHostOverhead, "CPU", lost, kNone);
  f.material = true;
  if (device_workers < num_workers) {
    // Only the workers with a device can be host-bound: name them.
    for (const auto& wr : workers) {
      if (wr.has_device && f.workers.size() < kMaxListedWorkers) f.workers.push_back(wr.rank);
    }
    std::sort(f.workers.begin(), f.workers.end());
  }
  const std::string who = device_workers < num_workers
                              ? fmt::format("{} workers with a device", device_workers)
                              : std::string("all workers");
  // A window that holds the job's CUDA initialization (a trace of its first iteration, or of
  // a script without iterations): the host is in one-off runtime calls, which no steady
  // state repeats. Said as such, with what to profile instead.
  const double one_off = MedianInPlace(one_off_ns);
  if (one_off >= kOneOffShare * lost) {
    std::string calls;
    int listed = 0;
    for (uint32_t fid : TopFunctions(
             job, [](const FunctionInfo& fn) { return fn.kind == EventKind::kRuntimeCall; }, false,
             3)) {
      const double per_worker = job.Totals(fid).sum_time_ns / static_cast<double>(device_workers);
      if (per_worker < kOneOffCallNs) continue;
      calls +=
          fmt::format("{}{} {}", listed++ ? ", " : "", job.Name(fid), FormatDuration(per_worker));
    }
    f.title = fmt::format(
        "the GPU is idle {} of each iteration while the host is in one-off CUDA runtime calls "
        "({}{}; {}): the window holds the job's CUDA initialization, not its steady state",
        FormatShare(share), calls, ctx.per_word(), who);
    f.evidence.push_back(
        {"one-off runtime calls",
         fmt::format("{}{} (median of {} workers with a device): runtime calls (not launches "
                     "or synchronizations) whose median call takes {} or more, as the first "
                     "CUDA call creating the context does",
                     FormatDuration(one_off), ctx.per(), device_workers,
                     FormatDuration(kOneOffCallNs))});
    f.evidence.push_back(
        {"what to do",
         "profile iterations after warm-up (torch.profiler.schedule(wait=..., warmup=...)) to "
         "see the job's steady state"});
  } else {
    f.title = fmt::format(
        "the GPU is idle {} of each iteration while the host works ({}/iter, {}): "
        "the job is host / launch-bound",
        FormatShare(share), FormatDuration(lost), who);
  }
  f.evidence.push_back({"device idle, host busy",
                        fmt::format("{} ({} of the iteration, median of {} workers with a "
                                    "device; host events that are not waits)",
                                    FormatDuration(lost), FormatShare(share), device_workers)});
  values.clear();
  for (const auto& wr : workers) values.push_back(wr.compute_ns);
  f.evidence.push_back({"device compute per iteration", FormatDuration(MedianInPlace(values))});
  const double data_idle = MedianInPlace(data_idle_ns);
  if (data_idle > 0) {
    f.evidence.push_back(
        {"device idle while data loads (not counted here)", FormatDuration(data_idle)});
  }
  f.evidence.push_back({"threshold", FormatShare(kHostBoundShare)});
  AddHostFunctionsAndEmit(ctx, std::move(f), out);
}

}  // namespace perftracker::localize
