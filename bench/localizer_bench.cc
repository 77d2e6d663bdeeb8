// Localizer scale benchmark: N synthetic workers of a synchronous data-parallel job, 300
// functions each (realistic call-path keys: train_step > Model.forward > layer_i >
// TransformerBlock.forward > aten ops > kernels), 3 % noise per worker and function, one
// injected straggler (one layer's matmul kernel 4x slower on one rank; everyone else
// waits for it in the all-reduce). Measures Add + Finish wall time and peak RSS, and checks
// the straggler is the top material finding.
//
// Run one size per process so that peak RSS is that size's:
//   localizer_bench --workers 100000
// --rotate-keys lists each worker's functions in a different order (rotated by rank), which
// defeats the localizer's same-position key cache: every key then costs a hash lookup.
// (The rotated copy is made outside the timed Add.)
// --implicit-keys leaves every key implicit (FunctionSummary::key empty: it derives from the
// parent's key, the kind and the name), as the summarizer and the wire decoder hand summaries
// to the localizer; by default every function carries its key explicitly (198 bytes on
// average), which the localizer checks against its parent's key per worker and function.
// --saturated-hosts gives every worker host metrics of a saturated host (its threads wait for
// a CPU 1.5x as long as they run) and the straggler 50 % more CPU time per iteration than its
// peers: the saturated-host rule (localize/saturated_host_rule.h) and the leave-one-out CPU
// comparison of peer_comparison run on every host.
// Exit status: 0 = found and within targets, 1 = straggler not found, 2 = bad usage,
// 3 = found but over the targets (--max-seconds, --max-rss-mb).
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "perftracker/pipeline/diagnosis_pipeline.h"

namespace {

using perftracker::EventKind;
using perftracker::FunctionSummary;
using perftracker::WorkerSummary;

constexpr int kLayers = 24;
constexpr int kIterations = 20;
constexpr double kIterationNs = 150e6;
constexpr double kNoise = 0.03;
constexpr int kSlowLayer = 13;
constexpr double kSlowFactor = 4.0;

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// Cheap deterministic pseudo-random numbers (splitmix64).
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Roughly normal(0, 1): sum of 4 uniforms, rescaled.
  double Normal() {
    double sum = 0;
    for (int i = 0; i < 4; ++i) sum += static_cast<double>(Next() >> 11) * 0x1.0p-53;
    return (sum - 2.0) * std::sqrt(3.0);
  }
};

// The template job: keys, kinds, parents and each leaf's base time per iteration.
struct Template {
  WorkerSummary summary;
  std::vector<double> leaf_ns;  // base self time per iteration (0 for pure parents)
  std::vector<uint32_t> calls;  // calls per iteration
  size_t slow_kernel = 0;       // the function the straggler is slow in
  size_t all_reduce = 0;
  std::string slow_annotation;  // the user-level function the finding should name

  size_t AddFn(const std::string& parent_key, uint32_t parent, EventKind kind,
               const std::string& name, double self_ns, uint32_t calls_per_iter) {
    FunctionSummary f;
    f.key = (parent_key.empty() ? "" : parent_key + " > ") +
            std::string(perftracker::EventKindName(kind)) + ":" + name;
    f.name = name;
    f.kind = kind;
    f.parent = parent;
    summary.functions.push_back(std::move(f));
    leaf_ns.push_back(self_ns);
    calls.push_back(calls_per_iter);
    return summary.functions.size() - 1;
  }
};

Template MakeTemplate(size_t num_functions) {
  Template t;
  auto key = [&](size_t i) { return t.summary.functions[i].key; };
  auto idx = [](size_t i) { return static_cast<uint32_t>(i); };
  const size_t root = t.AddFn("", FunctionSummary::kNoParent, EventKind::kPythonCall,
                              "train.py(212): train_step", 1e6, 1);
  t.AddFn(key(root), idx(root), EventKind::kDataLoad,
          "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 4e6, 1);
  const size_t fwd = t.AddFn(key(root), idx(root), EventKind::kPythonCall,
                             "model.py(140): GPTModel.forward", 0.2e6, 1);
  const size_t bwd = t.AddFn(key(root), idx(root), EventKind::kUserAnnotation,
                             "autograd::engine::evaluate_function: backward", 0.5e6, 1);
  const size_t opt = t.AddFn(key(root), idx(root), EventKind::kOptimizerStep,
                             "Optimizer.step#AdamW.step", 0.5e6, 1);
  t.AddFn(key(opt), idx(opt), EventKind::kTorchOp, "aten::_foreach_addcdiv_", 3e6, 1);
  t.AddFn(key(opt), idx(opt), EventKind::kTorchOp, "aten::_foreach_mul_", 2e6, 1);
  struct Op {
    const char* op;
    const char* kernel;
    double ns;
    uint32_t calls;
  };
  const Op ops[] = {
      {"aten::layer_norm",
       "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>",
       0.15e6, 2},
      {"aten::linear", "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", 3.6e6, 4},
      {"aten::scaled_dot_product_attention",
       "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
       "cutlass::bfloat16_t>>",
       0.7e6, 1},
      {"aten::gelu",
       "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", 0.12e6,
       1},
      {"aten::add",
       "void at::native::vectorized_elementwise_kernel<4, "
       "at::native::CUDAFunctor_add<c10::BFloat16>>",
       0.05e6, 2},
  };
  for (int l = 0; l < kLayers && t.summary.functions.size() + 12 <= num_functions; ++l) {
    const size_t ann = t.AddFn(key(fwd), idx(fwd), EventKind::kUserAnnotation,
                               fmt::format("layer_{}", l), 0.05e6, 1);
    const size_t blk = t.AddFn(key(ann), idx(ann), EventKind::kPythonCall,
                               "model.py(88): TransformerBlock.forward", 0.1e6, 1);
    for (const Op& op : ops) {
      const size_t o = t.AddFn(key(blk), idx(blk), EventKind::kTorchOp, op.op, 0.02e6, op.calls);
      const size_t k = t.AddFn(key(o), idx(o), EventKind::kGpuKernel, op.kernel, op.ns, op.calls);
      if (l == kSlowLayer && std::strcmp(op.op, "aten::linear") == 0) {
        t.slow_kernel = k;
        t.slow_annotation = fmt::format("layer_{}", l);
      }
    }
  }
  // Backward ops up to the requested function count.
  for (int i = 0; t.summary.functions.size() + 2 < num_functions; ++i) {
    t.AddFn(key(bwd), idx(bwd), EventKind::kTorchOp,
            fmt::format("autograd::engine::evaluate_function: MmBackward0#{}", i), 0.3e6, 2);
  }
  t.AddFn(key(root), idx(root), EventKind::kSync, "cudaStreamSynchronize", 0.02e6, 1);
  t.all_reduce = t.AddFn(key(root), idx(root), EventKind::kCollective, "nccl:all_reduce", 0, 4);
  t.summary.host = "node0";
  t.summary.has_device = true;
  for (int i = 0; i < kIterations; ++i) {
    perftracker::IterationSummary it;
    it.start_ns = static_cast<int64_t>(i * kIterationNs);
    it.duration_ns = static_cast<int64_t>(kIterationNs);
    t.summary.iterations.push_back(it);
  }
  t.summary.window_end_ns = static_cast<int64_t>(kIterations * kIterationNs);
  for (size_t i = 0; i < t.summary.functions.size(); ++i) {
    auto& f = t.summary.functions[i];
    f.count = static_cast<uint64_t>(t.calls[i]) * kIterations;
    const double per_call = std::max(t.leaf_ns[i], 1e4) / t.calls[i];
    f.durations.Add(per_call, f.count);
  }
  return t;
}

// Fills `w` (a copy of the template, reused across workers) with worker `rank`'s numbers.
void FillWorker(const Template& t, int32_t rank, bool straggler, bool saturated, Rng& rng,
                WorkerSummary& w, std::vector<double>& inclusive) {
  const size_t n = t.summary.functions.size();
  w.rank = rank;
  w.host = fmt::format("node{}", rank / 8);
  if (saturated) {
    // CPU seconds per second and run-queue wait per second, as the live sampler reports them.
    const double cpu = 0.6 * (1 + kNoise * rng.Normal()) * (straggler ? 1.5 : 1.0);
    w.worker_metrics = {
        {perftracker::Metric::kCpuUtilization, cpu, 0},
        {perftracker::Metric::kRunQueueDelayFraction, 0.9 * (1 + kNoise * rng.Normal()), 0}};
  }
  inclusive.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    double self = t.leaf_ns[i] * (1 + kNoise * rng.Normal());
    if (straggler && i == t.slow_kernel) self *= kSlowFactor;
    inclusive[i] += std::max(self, 0.0);
  }
  // Parents come before children: accumulate inclusive time bottom-up.
  for (size_t i = n; i-- > 1;) {
    const uint32_t p = t.summary.functions[i].parent;
    if (p != FunctionSummary::kNoParent && i != t.all_reduce) inclusive[p] += inclusive[i];
  }
  // The all-reduce absorbs the rest of the iteration: the others wait for the straggler.
  const double work = inclusive[0];
  const double wait = 0.98 * kIterationNs - work;
  inclusive[t.all_reduce] = std::max(wait, 1e5);
  inclusive[0] += inclusive[t.all_reduce];
  for (size_t i = 0; i < n; ++i) {
    auto& f = w.functions[i];
    f.total_ns = static_cast<int64_t>(inclusive[i] * kIterations);
    f.self_ns = static_cast<int64_t>(t.leaf_ns[i] * kIterations);
    f.critical_ns = f.kind == EventKind::kGpuKernel ? f.total_ns : 0;
  }
  if (straggler) {
    auto& f = w.functions[t.slow_kernel];
    f.durations = perftracker::QuantileSketch();
    f.durations.Add(inclusive[t.slow_kernel] / t.calls[t.slow_kernel], f.count);
  }
}

}  // namespace

int main(int argc, char** argv) {
  long workers = 1000;
  long functions = 300;
  double max_seconds = 10;
  double max_rss_mb = 4096;
  bool rotate = false;
  bool implicit_keys = false;
  bool saturated = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        fmt::print(stderr, "{} needs a value\n", a);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--workers") {
      workers = std::atol(next());
    } else if (a == "--functions") {
      functions = std::atol(next());
    } else if (a == "--max-seconds") {
      max_seconds = std::atof(next());
    } else if (a == "--max-rss-mb") {
      max_rss_mb = std::atof(next());
    } else if (a == "--rotate-keys") {
      rotate = true;
    } else if (a == "--implicit-keys") {
      implicit_keys = true;
    } else if (a == "--saturated-hosts") {
      saturated = true;
    } else {
      fmt::print(stderr,
                 "usage: localizer_bench [--workers N] [--functions F] [--max-seconds S] "
                 "[--max-rss-mb M] [--rotate-keys | --implicit-keys] [--saturated-hosts]\n");
      return 2;
    }
  }
  if (workers < 3 || functions < 40) {
    fmt::print(stderr, "need --workers >= 3 and --functions >= 40\n");
    return 2;
  }
  if (rotate && implicit_keys) {
    // A rotated list puts children before their parents: their keys cannot derive.
    fmt::print(stderr, "--rotate-keys needs explicit keys (not --implicit-keys)\n");
    return 2;
  }
  Template t = MakeTemplate(static_cast<size_t>(functions));
  size_t key_bytes = 0;
  for (size_t i = 0; i < t.summary.functions.size(); ++i) key_bytes += t.summary.KeySize(i);
  if (implicit_keys) {
    for (FunctionSummary& f : t.summary.functions) f.key = perftracker::SharedString();
  }
  const int32_t straggler = static_cast<int32_t>(workers / 2 + 7) % static_cast<int32_t>(workers);
  const double rss_before = PeakRssMb();

  using Clock = std::chrono::steady_clock;
  // Summaries are localized as they come (none kept): one worker's copy is reused for all.
  perftracker::PipelineOptions pipeline_options;
  pipeline_options.keep_summaries = false;
  perftracker::DiagnosisPipeline pipeline(pipeline_options);
  WorkerSummary w = t.summary;
  WorkerSummary rotated = t.summary;
  std::vector<double> inclusive;
  Rng rng{42};
  Clock::duration add_time{};
  const auto wall_start = Clock::now();
  for (long r = 0; r < workers; ++r) {
    const bool slow = r == straggler;
    FillWorker(t, static_cast<int32_t>(r), slow, saturated, rng, w, inclusive);
    if (rotate) {
      const size_t n = w.functions.size();
      const size_t k = static_cast<size_t>(r) % n;
      for (size_t i = 0; i < n; ++i) {
        FunctionSummary& dst = rotated.functions[(i + k) % n];
        dst = w.functions[i];
        if (dst.parent != FunctionSummary::kNoParent) {
          dst.parent = static_cast<uint32_t>((dst.parent + k) % n);
        }
      }
      rotated.rank = w.rank;
      rotated.host = w.host;
    }
    const auto a0 = Clock::now();
    pipeline.AddSummary(rotate ? rotated : w);
    add_time += Clock::now() - a0;
    if (slow) w.functions[t.slow_kernel].durations = t.summary.functions[t.slow_kernel].durations;
  }
  const auto f0 = Clock::now();
  const perftracker::Diagnosis d = pipeline.Diagnose();
  const auto f1 = Clock::now();
  const double add_s = std::chrono::duration<double>(add_time).count();
  const double finish_s = std::chrono::duration<double>(f1 - f0).count();
  const double wall_s = std::chrono::duration<double>(f1 - wall_start).count();
  const double rss = PeakRssMb();

  bool found = false;
  std::string top = "(no finding)";
  if (!d.findings.empty()) {
    const auto& f = d.findings[0];
    top = f.title;
    found = f.material && f.workers.size() == 1 && f.workers[0] == straggler &&
            f.function == t.slow_annotation;
  }
  size_t material = 0;
  for (const auto& f : d.findings) material += f.material ? 1 : 0;
  fmt::print("workers={} functions={} avg_key_bytes={:.0f} iterations={}{}{}\n", workers,
             t.summary.functions.size(),
             static_cast<double>(key_bytes) / static_cast<double>(t.summary.functions.size()),
             kIterations,
             rotate          ? " rotate-keys"
             : implicit_keys ? " implicit-keys"
                             : "",
             saturated ? " saturated-hosts" : "");
  fmt::print(
      "add_s={:.3f} finish_s={:.3f} localize_s={:.3f} (add+finish) wall_s={:.3f} "
      "(incl. generating summaries)\n",
      add_s, finish_s, add_s + finish_s, wall_s);
  fmt::print("peak_rss_mb={:.0f} (before ingest {:.0f})\n", rss, rss_before);
  fmt::print("findings={} material={} straggler=rank {} found={}\n", d.findings.size(), material,
             straggler, found ? "yes" : "no");
  fmt::print("top: {}\n", top);
  if (!found) return 1;
  if (add_s + finish_s > max_seconds || rss > max_rss_mb) {
    fmt::print("OVER TARGET: {:.2f} s (max {}), {:.0f} MB (max {})\n", add_s + finish_s,
               max_seconds, rss, max_rss_mb);
    return 3;
  }
  return 0;
}
