// import_bench: throughput and peak memory of the Kineto trace importer.
//
// Generates a realistic synthetic torch.profiler trace (object form; cpu_op / cuda_runtime /
// kernel / memcpy / flow mix in the proportions of a real 2-GPU NCCL trace, fractional µs
// timestamps, args like Kineto writes them) into /tmp, imports it with a counting sink on one
// thread, and reports MB/s of uncompressed JSON and the peak RSS of the import (VmHWM, reset
// after generating the file). The file is deleted afterwards.
//
//   import_bench                      runs 10 MB (median of 5) and 500 MB, each in a fresh process
//   import_bench --size-mb 500        one size in this process
//   import_bench --size-mb 10 --runs 1 --gzip     also gzip the file (measures zlib + parse)
//   import_bench --file trace.json.gz --runs 5    an existing trace (kept)
//
// Numbers and the exact commands are recorded in docs/performance.md ("## Import").
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "perftracker/sources/kineto/kineto_importer.h"

namespace perftracker {
namespace {

class CountingSink : public EventSink {
 public:
  void OnTrack(const TrackInfo&) override { ++tracks; }
  void OnEvent(const Event& e) override {
    ++events;
    checksum += static_cast<uint64_t>(e.end_ns - e.start_ns) + e.function_id;
  }
  void OnMetric(const MetricSample&) override {}
  uint64_t tracks = 0;
  uint64_t events = 0;
  uint64_t checksum = 0;
};

long ReadStatusKb(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(status, line)) {
    if (line.compare(0, n, key) == 0) return std::atol(line.c_str() + n);
  }
  return -1;
}

// Deterministic xorshift, so every run writes the same file.
struct Rng {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  uint64_t Below(uint64_t n) { return Next() % n; }
};

const char* const kOps[] = {"aten::empty", "aten::add_", "aten::mm", "aten::addmm", "aten::view",
                            "aten::as_strided", "aten::copy_", "aten::relu", "aten::convolution",
                            "aten::cudnn_convolution", "autograd::engine::evaluate_function: AddmmBackward0",
                            "AddmmBackward0", "aten::sum", "aten::zero_", "aten::fill_", "aten::to"};
const char* const kKernels[] = {
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
    "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 32, true, 1>(float, float, float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float*, float*, float const*, float const*, float)",
    "ampere_sgemm_128x64_nn",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"};

// Writes about `target_bytes` of trace to `path`, streaming (memory does not grow).
uint64_t GenerateTrace(const std::string& path, uint64_t target_bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::vector<char> buf(1 << 20);
  std::setvbuf(f, buf.data(), _IOFBF, buf.size());
  uint64_t written = 0;
  auto out = [&](const char* fmt, auto... args) {
    const int n = std::fprintf(f, fmt, args...);
    written += static_cast<uint64_t>(n);
  };
  out("{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [\n    {\"id\": 0, \"name\": \"NVIDIA A100-PG509-200\", "
      "\"totalGlobalMem\": 42297524224, \"numSms\": 108}\n  ],\n  \"distributedInfo\": {\"backend\": \"nccl\", "
      "\"rank\": 0, \"world_size\": 2},\n  \"traceEvents\": [\n");
  Rng rng;
  uint64_t ts_ns = 4458676388068751;  // µs with 3 decimals, like Kineto writes
  uint64_t ext = 1, corr = 50000, step = 1;
  bool first = true;
  auto sep = [&] {
    if (!first) out(",\n");
    first = false;
  };
  auto fmt_ts = [](uint64_t ns, char* s) { std::snprintf(s, 32, "%llu.%03llu", static_cast<unsigned long long>(ns / 1000), static_cast<unsigned long long>(ns % 1000)); };
  char ts[32], dur[32];
  while (written < target_bytes) {
    // One "iteration" block: a step annotation, then op / launch / kernel groups.
    fmt_ts(ts_ns, ts);
    sep();
    out("  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#%llu\", \"pid\": 2910249, "
        "\"tid\": 2910249, \"ts\": %s, \"dur\": 230564.291, \"args\": {\"External id\": %llu, \"Record function id\": 0, \"Ev Idx\": %llu}}",
        static_cast<unsigned long long>(step++), ts, static_cast<unsigned long long>(ext), static_cast<unsigned long long>(ext));
    ++ext;
    for (int g = 0; g < 400 && written < target_bytes; ++g) {
      const uint64_t op_dur = 2000 + rng.Below(200000);
      fmt_ts(ts_ns, ts);
      fmt_ts(op_dur, dur);
      sep();
      out("  {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"%s\", \"pid\": 2910249, \"tid\": 2919752, \"ts\": %s, \"dur\": %s, "
          "\"args\": {\"External id\": %llu, \"Record function id\": 0, \"Sequence number\": %llu, \"Fwd thread id\": 1, "
          "\"Concrete Inputs\": [\"\", \"\"], \"Input type\": [\"float\", \"Scalar\"], \"Input Dims\": [[%llu, 1024], []], \"Ev Idx\": %llu}}",
          kOps[rng.Below(16)], ts, dur, static_cast<unsigned long long>(ext), static_cast<unsigned long long>(ext / 2),
          static_cast<unsigned long long>(1 + rng.Below(4096)), static_cast<unsigned long long>(ext));
      ++ext;
      if (rng.Below(10) < 6) {  // a launch, its flow, the kernel on the device
        const uint64_t launch_ts = ts_ns + 1000 + rng.Below(900);
        fmt_ts(launch_ts, ts);
        fmt_ts(3000 + rng.Below(9000), dur);
        sep();
        out("  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 2910249, \"tid\": 2919752, "
            "\"ts\": %s, \"dur\": %s, \"args\": {\"External id\": %llu, \"cbid\": 211, \"correlation\": %llu}}",
            ts, dur, static_cast<unsigned long long>(ext - 1), static_cast<unsigned long long>(corr));
        sep();
        out("  {\"ph\": \"s\", \"id\": %llu, \"pid\": 2910249, \"tid\": 2919752, \"ts\": %s, \"cat\": \"ac2g\", \"name\": \"ac2g\"}",
            static_cast<unsigned long long>(corr), ts);
        const uint64_t k_ts = launch_ts + 5000 + rng.Below(50000);
        fmt_ts(k_ts, ts);
        fmt_ts(1000 + rng.Below(400000), dur);
        const bool nccl = rng.Below(50) == 0;
        sep();
        out("  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"%s\", \"pid\": 0, \"tid\": %d, \"ts\": %s, \"dur\": %s, "
            "\"args\": {\"External id\": %llu, \"queued\": 0, \"device\": 0, \"context\": 1, \"stream\": %d, \"correlation\": %llu, "
            "\"registers per thread\": 32, \"shared memory\": 0, \"blocks per SM\": 0.148148, \"warps per SM\": 0.592593, "
            "\"grid\": [16, 1, 1], \"block\": [128, 1, 1], \"est. achieved occupancy %%\": 1}}",
            kKernels[nccl ? 4 : rng.Below(4)], nccl ? 40 : 7, ts, dur, static_cast<unsigned long long>(ext - 1), nccl ? 40 : 7,
            static_cast<unsigned long long>(corr));
        sep();
        out("  {\"ph\": \"f\", \"id\": %llu, \"pid\": 0, \"tid\": 7, \"ts\": %s, \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}",
            static_cast<unsigned long long>(corr), ts);
        ++corr;
      } else if (rng.Below(10) == 0) {
        fmt_ts(ts_ns + 40000, ts);
        sep();
        out("  {\"ph\": \"X\", \"cat\": \"gpu_memcpy\", \"name\": \"Memcpy DtoD (Device -> Device)\", \"pid\": 0, \"tid\": 7, "
            "\"ts\": %s, \"dur\": 5.088, \"args\": {\"External id\": %llu, \"device\": 0, \"context\": 1, \"stream\": 7, "
            "\"correlation\": %llu, \"bytes\": %llu, \"memory bandwidth (GB/s)\": 0.7861635220125787}}",
            ts, static_cast<unsigned long long>(ext - 1), static_cast<unsigned long long>(corr++),
            static_cast<unsigned long long>(4000 + rng.Below(1 << 20)));
      }
      ts_ns += op_dur / 4 + 500 + rng.Below(3000);
    }
  }
  out("\n  ],\n  \"traceName\": \"/tmp/synthetic.json\",\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": 1711964646000000000\n}\n");
  std::fclose(f);
  return written;
}

std::string GzipFile(const std::string& path) {
  const std::string gz = path + ".gz";
  FILE* in = std::fopen(path.c_str(), "rb");
  gzFile out = gzopen(gz.c_str(), "wb6");
  std::vector<char> buf(1 << 20);
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), in)) > 0) gzwrite(out, buf.data(), static_cast<unsigned>(n));
  std::fclose(in);
  gzclose(out);
  return gz;
}

// Imports `existing` (a real trace, kept) or a generated trace of `size_mb` (deleted after).
int RunOneSize(uint64_t size_mb, int runs, bool gzip, const std::string& existing) {
  const bool generated = existing.empty();
  const std::string path = generated ? "/tmp/perftracker_import_bench_" + std::to_string(getpid()) +
                                           "_" + std::to_string(size_mb) + "MB.json"
                                     : existing;
  const uint64_t bytes = generated ? GenerateTrace(path, size_mb << 20) : 0;
  std::string import_path = path;
  if (gzip && generated) import_path = GzipFile(path);
  // Warm the page cache so the first run does not measure the disk.
  {
    std::ifstream warm(import_path, std::ios::binary);
    std::vector<char> buf(1 << 20);
    while (warm.read(buf.data(), static_cast<std::streamsize>(buf.size()))) {
    }
  }
  std::ofstream("/proc/self/clear_refs") << "5";  // peak RSS from here on = the import's
  const long rss_before = ReadStatusKb("VmRSS:");
  std::vector<double> mbps;
  KinetoTraceInfo info;
  uint64_t events = 0;
  for (int i = 0; i < runs; ++i) {
    FunctionTable functions;
    CountingSink sink;
    const auto t0 = std::chrono::steady_clock::now();
    auto result = ImportKinetoFile(import_path, &functions, &sink);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!result.ok()) {
      std::fprintf(stderr, "import failed: %s\n", result.status().message().c_str());
      if (generated) std::remove(path.c_str());
      if (generated && gzip) std::remove(import_path.c_str());
      return 1;
    }
    info = *result;
    events = sink.events;
    mbps.push_back(static_cast<double>(info.bytes_read) / 1e6 / secs);
    std::fprintf(stderr, "  run %d: %.1f MB/s\n", i + 1, mbps.back());
  }
  const long hwm = ReadStatusKb("VmHWM:");
  if (generated) std::remove(path.c_str());
  if (generated && gzip) std::remove(import_path.c_str());
  std::vector<double> sorted = mbps;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "%s size=%lluMB%s json_bytes=%llu events_emitted=%llu skipped=%llu malformed=%llu runs=%d "
      "median_MBps=%.1f min_MBps=%.1f max_MBps=%.1f rss_before_import_MB=%.1f peak_rss_import_MB=%.1f "
      "ru_maxrss_MB=%.1f\n",
      generated ? "synthetic" : existing.c_str(), static_cast<unsigned long long>(size_mb),
      gzip ? " (gzip)" : "", static_cast<unsigned long long>(generated ? bytes : info.bytes_read),
      static_cast<unsigned long long>(events), static_cast<unsigned long long>(info.events_skipped),
      static_cast<unsigned long long>(info.events_malformed), runs, median, sorted.front(), sorted.back(),
      static_cast<double>(rss_before) / 1024.0, static_cast<double>(hwm) / 1024.0,
      static_cast<double>(ru.ru_maxrss) / 1024.0);
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace perftracker

int main(int argc, char** argv) {
  uint64_t size_mb = 0;
  int runs = 0;
  bool gzip = false;
  std::string file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--file" && i + 1 < argc) {
      file = argv[++i];
    } else if (a == "--size-mb" && i + 1 < argc) {
      size_mb = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a == "--gzip") {
      gzip = true;
    } else {
      std::fprintf(stderr, "usage: %s [--size-mb N | --file TRACE] [--runs R] [--gzip]\n", argv[0]);
      return 2;
    }
  }
  if (!file.empty()) return perftracker::RunOneSize(0, runs > 0 ? runs : 5, false, file);
  if (size_mb > 0) {
    return perftracker::RunOneSize(size_mb, runs > 0 ? runs : (size_mb <= 50 ? 5 : 1), gzip, "");
  }
  // Both sizes, each in a fresh process so that peak RSS is per size.
  int rc = 0;
  for (const char* size : {"10", "500"}) {
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", argv[0], "--size-mb", size, static_cast<char*>(nullptr));
      std::perror("execl");
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}
