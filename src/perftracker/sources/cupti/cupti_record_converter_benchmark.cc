// CUPTI record conversion speed: a 4 MiB-class buffer of real CUDA 13 record structs (kernel
// records with 32 distinct mangled names, each with its runtime-API launch record), walked the
// way cuptiActivityGetNextRecord walks (8-byte aligned records), converted into a counting sink.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "perftracker/sources/cupti/cupti_record_converter.h"

namespace perftracker {
namespace {

struct CountingSink : EventSink {
  void OnTrack(const TrackInfo&) override {}
  void OnEvent(const Event&) override { ++events; }
  void OnMetric(const MetricSample&) override {}
  uint64_t events = 0;
};

size_t Aligned(size_t n) { return (n + 7) / 8 * 8; }

void BM_ConvertKernelAndLaunchRecords(benchmark::State& state) {
  std::vector<std::string> names;
  for (int i = 0; i < 32; ++i) {
    names.push_back("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_" + std::to_string(i) +
                    "EEEviT0_T1_");
  }
  const size_t pairs = 16384;
  std::vector<uint8_t> buffer;
  for (size_t i = 0; i < pairs; ++i) {
    CUpti_ActivityAPI api;
    std::memset(&api, 0, sizeof(api));
    api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    api.cbid = 211;  // cudaLaunchKernel_v7000
    api.start = 1000 + i * 100;
    api.end = api.start + 5;
    api.threadId = 7;
    api.correlationId = static_cast<uint32_t>(i);
    CUpti_ActivityKernel10 k;
    std::memset(&k, 0, sizeof(k));
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.name = names[i % names.size()].c_str();
    k.start = api.start + 20;
    k.end = k.start + 50;
    k.streamId = 7;
    k.correlationId = static_cast<uint32_t>(i);
    for (const auto& [p, n] : {std::pair<const void*, size_t>{&api, sizeof(api)},
                               std::pair<const void*, size_t>{&k, sizeof(k)}}) {
      const size_t at = buffer.size();
      buffer.resize(at + Aligned(n));
      std::memcpy(buffer.data() + at, p, n);
    }
  }
  const auto next = [](uint8_t* b, size_t valid, CUpti_Activity* cur) -> CUpti_Activity* {
    uint8_t* p = cur == nullptr ? b
                                : reinterpret_cast<uint8_t*>(cur) +
                                      Aligned(CuptiRecordConverter::RecordSize(cur->kind));
    return p + sizeof(CUpti_Activity) <= b + valid ? reinterpret_cast<CUpti_Activity*>(p) : nullptr;
  };
  FunctionTable functions;
  CountingSink sink;
  CuptiRecordConverter converter(
      &functions, &sink, [](bool, uint32_t) -> const char* { return "cudaLaunchKernel_v7000"; });
  for (auto _ : state) converter.ConvertBuffer(buffer.data(), buffer.size(), next);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * pairs * 2));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * buffer.size()));
  if (sink.events != state.iterations() * pairs * 2) state.SkipWithError("events lost");
}
BENCHMARK(BM_ConvertKernelAndLaunchRecords);

}  // namespace
}  // namespace perftracker

BENCHMARK_MAIN();
