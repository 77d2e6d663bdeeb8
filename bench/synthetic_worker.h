// SyntheticWorker (benchmarks only): a realistic WorkerSummary without a trace: a
// transformer-like training step pushed through the WindowSummarizer (summary_size_bench
// measures its encoded size; server_load_bench uploads it from thousands of collectors).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "perftracker/core/event.h"
#include "perftracker/core/function_table.h"
#include "perftracker/core/metric_sample.h"
#include "perftracker/summary/window_summarizer.h"

namespace perftracker {

// A synthetic training step on one GPU worker. Function sites form a realistic tree:
//   python:train.py(212): train_step
//     python:.../module.py(1501): _call_impl > python:model.py(L): Block<i>.forward  (x6)
//       annotation:block<i>.{attn,mlp}
//         torch_op:aten::{linear,mm,add,gelu,softmax,...} + runtime:cudaLaunchKernel
//         kernel:<long templated name>   (linked by correlation)
//   data_load, optimizer_step (+ its ops), collective:nccl:all_reduce and its kernel.
class SyntheticWorker {
 public:
  explicit SyntheticWorker(uint64_t seed = 7) : rng_(seed), summarizer_(&functions_) {
    summarizer_.OnTrack({kMain, TrackKind::kHostThread, -1, "thread main"});
    summarizer_.OnTrack({kCompute, TrackKind::kDeviceStream, 0, "stream 7"});
    summarizer_.OnTrack({kComm, TrackKind::kDeviceStream, 0, "stream 13"});
  }

  WorkerSummary Run(int iterations) {
    int64_t t = 1'700'000'000'000'000'000;
    for (int it = 0; it < iterations; ++it) t = Iteration(it, t);
    WorkerSummary s = summarizer_.Finish();
    s.rank = 0;
    s.host = "synthetic-node-0";
    s.source = "synthetic";
    return s;
  }

 private:
  static constexpr uint32_t kMain = 1, kCompute = 2, kComm = 3;
  static constexpr int kBlocks = 6;  // transformer blocks: sets the function count (~300)

  int64_t Duration(double median_ns, double sigma) {
    std::lognormal_distribution<double> d(std::log(median_ns), sigma);
    return std::max<int64_t>(1, static_cast<int64_t>(d(rng_)));
  }

  void Emit(uint32_t track, EventKind kind, const std::string& name, int64_t start, int64_t end,
            uint32_t correlation = 0, uint64_t payload = 0) {
    Event e;
    e.start_ns = start;
    e.end_ns = end;
    e.kind = kind;
    e.function_id = functions_.Intern(kind, name);
    e.track_id = track;
    e.correlation = correlation;
    e.payload = payload;
    summarizer_.OnEvent(e);
  }

  // A torch op with its launch and kernel; returns the host end time.
  int64_t Op(const std::string& op, const std::string& kernel, int64_t t, double kernel_ns) {
    const int64_t host = Duration(15'000, 0.4);
    const uint32_t corr = ++correlation_;
    Emit(kMain, EventKind::kTorchOp, op, t, t + host);
    Emit(kMain, EventKind::kRuntimeCall, "cudaLaunchKernel", t + host / 2, t + host / 2 + 3000,
         corr);
    device_t_ = std::max(device_t_, t + host / 2 + 5000);
    const int64_t k = Duration(kernel_ns, 0.6);
    Emit(kCompute, EventKind::kGpuKernel, kernel, device_t_, device_t_ + k, corr);
    device_t_ += k + Duration(2000, 0.5);
    return t + host;
  }

  int64_t Iteration(int it, int64_t t) {
    const int64_t step_start = t;
    const std::string step = "ProfilerStep#" + std::to_string(it);
    const int64_t py_start = t;
    t += Duration(200'000, 0.3);
    Emit(kMain, EventKind::kDataLoad,
         "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t,
         t + Duration(3'000'000, 1.0));
    t += 3'000'000;
    static const char* kOps[][2] = {
        {"aten::linear",
         "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
         "(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)"},
        {"aten::add",
         "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add"
         "<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>,"
         " at::detail::Array<char*, 3>)"},
        {"aten::gelu",
         "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernel"
         "Impl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()"
         "() const::{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::"
         "Array<char*, 2> >(int, ...)"},
        {"aten::native_layer_norm",
         "void at::native::(anonymous namespace)::vectorized_layer_norm"
         "_kernel<float, float>(int, float, float const*, float const*, "
         "float const*, float*, float*, float*)"},
        {"aten::_softmax",
         "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10,"
         " false, false>(float*, float const*, int, int, int, bool const*, int, "
         "bool)"},
        {"aten::bmm", "ampere_sgemm_128x64_nn"},
        {"aten::mul",
         "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor"
         "<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
         "at::detail::Array<char*, 3> >(int, ...)"},
    };
    for (int block = 0; block < kBlocks; ++block) {
      const std::string fwd =
          "model.py(" + std::to_string(40 + block * 17) + "): TransformerBlock.forward";
      const int64_t fwd_start = t;
      for (const char* part : {"attn", "mlp"}) {
        const std::string ann = "block" + std::to_string(block) + "." + part;
        const int64_t ann_start = t;
        const int64_t ann_events_t = t + 1000;
        int64_t u = ann_events_t;
        const int n_ops = part[0] == 'a' ? 5 : 4;
        std::vector<std::pair<int64_t, int64_t>> ops;
        for (int o = 0; o < n_ops; ++o) {
          const auto& op = kOps[(block + o + (part[0] == 'a' ? 0 : 3)) % 7];
          u = Op(op[0], op[1], u, 50'000.0 * (1 + o)) + Duration(3000, 0.5);
        }
        t = u + 2000;
        Emit(kMain, EventKind::kUserAnnotation, ann, ann_start, t);
      }
      t += 1000;
      Emit(kMain, EventKind::kPythonCall, fwd, fwd_start, t);
      Emit(kMain, EventKind::kPythonCall, "torch/nn/modules/module.py(1501): _call_impl",
           fwd_start - 500, t + 500);
      t += 2000;
    }
    // Backward and gradient all-reduce.
    for (int b = 0; b < 24; ++b) {
      const std::string name = "autograd::engine::evaluate_function: " +
                               std::string(b % 2 ? "AddmmBackward0" : "NativeLayerNormBackward0");
      const int64_t s = t;
      t = Op(kOps[b % 7][0], kOps[(b + 2) % 7][1], t + 500, 80'000) + 1000;
      Emit(kMain, EventKind::kTorchOp, name, s, t);
    }
    for (int bucket = 0; bucket < 4; ++bucket) {
      const uint32_t corr = ++correlation_;
      Emit(kMain, EventKind::kCollective, "nccl:all_reduce", t, t + 20'000, corr);
      Emit(kMain, EventKind::kRuntimeCall, "cudaLaunchKernel", t + 5000, t + 8000, corr);
      const int64_t c = Duration(4'000'000, 0.3);
      const int64_t cs = std::max(t, device_t_);
      Emit(kComm, EventKind::kCollective, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
           cs, cs + c, corr, 25u << 20);
      t += 30'000;
    }
    const int64_t opt = t;
    for (int p = 0; p < 6; ++p) {
      t = Op(p % 2 ? "aten::_foreach_add_" : "aten::_foreach_mul_",
             "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
             "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
             "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::multiplies<float>, float>(...)",
             t, 30'000) +
          500;
    }
    Emit(kMain, EventKind::kOptimizerStep, "Optimizer.step#AdamW.step", opt, t);
    const int64_t sync = std::max(t, device_t_);
    Emit(kMain, EventKind::kSync, "cudaDeviceSynchronize", t, sync + 10'000);
    t = sync + 20'000;
    Emit(kMain, EventKind::kPythonCall, "train.py(212): train_step", py_start, t);
    Emit(kMain, EventKind::kIteration, step, step_start, t);
    // Hardware samples every 100 us.
    for (int64_t s = step_start; s < t; s += 100'000) {
      Sample(Metric::kGpuSmActivity, s, std::uniform_real_distribution<double>(0.3, 0.95)(rng_));
      Sample(Metric::kGpuDramActivity, s, std::uniform_real_distribution<double>(0.1, 0.6)(rng_));
      Sample(Metric::kGpuSmClockMhz, s, 1410);
      Sample(Metric::kNicTxBytesPerSec, s,
             1e9 * std::uniform_real_distribution<double>(0, 12)(rng_));
      Sample(Metric::kCpuUtilization, s, std::uniform_real_distribution<double>(0.8, 1.0)(rng_));
      Sample(Metric::kRunQueueDelayFraction, s,
             std::uniform_real_distribution<double>(0, 0.05)(rng_));
    }
    return t + Duration(100'000, 0.5);
  }

  void Sample(Metric m, int64_t t, double v) {
    MetricSample s;
    s.metric = m;
    s.time_ns = t;
    s.value = v;
    summarizer_.OnMetric(s);
  }

  std::mt19937_64 rng_{7};
  FunctionTable functions_;
  WindowSummarizer summarizer_;
  uint32_t correlation_ = 0;
  int64_t device_t_ = 0;
};

// Rank r of a job whose every worker runs `base`: every function's and iteration's times
// scaled by their own 1 + 3 % x normal (seeded by the rank: the same every time), times
// `slow` (1.4: a straggler). The host is left as in `base`.
inline WorkerSummary JitteredWorker(const WorkerSummary& base, int32_t r, double slow) {
  constexpr double kJitter = 0.03;
  WorkerSummary s = base;
  s.rank = r;
  std::mt19937_64 rng(static_cast<uint64_t>(r) * 7919 + 1);
  std::normal_distribution<double> noise(1.0, kJitter);
  const auto scale = [&](int64_t& v, double f) {
    v = static_cast<int64_t>(static_cast<double>(v) * f);
  };
  for (auto& f : s.functions) {
    const double x = std::max(0.5, noise(rng)) * slow;
    scale(f.total_ns, x);
    scale(f.self_ns, x);
    scale(f.critical_ns, x);
  }
  for (auto& it : s.iterations) {
    const double x = std::max(0.5, noise(rng)) * slow;
    scale(it.duration_ns, x);
    scale(it.compute_ns, x);
    scale(it.communication_ns, x);
    scale(it.wait_ns, x);
    scale(it.data_ns, x);
    scale(it.host_only_ns, x);
  }
  return s;
}

}  // namespace perftracker
