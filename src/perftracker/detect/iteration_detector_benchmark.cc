// Cost of the always-on detector on the training thread: one OnMarker per data-loader next
// and optimizer step once the iteration is learned (the steady state), and CheckHang on
// the timer thread.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "perftracker/detect/iteration_detector.h"

namespace perftracker {
namespace {

void BM_OnMarkerLearned(benchmark::State& state) {
  const auto accumulation = static_cast<int>(state.range(0));  // nexts per step
  IterationDetector detector;
  int64_t t = 1'000'000'000;
  int64_t start = 0, end = 0;
  auto iteration = [&] {
    for (int i = 0; i < accumulation; ++i) {
      detector.OnMarker(Marker::kDataLoaderNext, t += 1000, &start, &end);
    }
    detector.OnMarker(Marker::kOptimizerStep, t += 1000, &start, &end);
  };
  for (int i = 0; i < 100; ++i) iteration();
  if (!detector.learned()) state.SkipWithError("not learned");
  int64_t markers = 0;
  for (auto _ : state) {
    iteration();
    benchmark::DoNotOptimize(detector.CheckSlowdown());
    markers += accumulation + 1;
  }
  state.SetItemsProcessed(markers);
}
BENCHMARK(BM_OnMarkerLearned)->Arg(1)->Arg(8);

void BM_CheckHang(benchmark::State& state) {
  IterationDetector detector;
  int64_t t = 1'000'000'000;
  int64_t start = 0, end = 0;
  for (int i = 0; i < 100; ++i) {
    detector.OnMarker(Marker::kDataLoaderNext, t += 1000, &start, &end);
    detector.OnMarker(Marker::kOptimizerStep, t += 1000, &start, &end);
  }
  for (auto _ : state) benchmark::DoNotOptimize(detector.CheckHang(t + 1000));
}
BENCHMARK(BM_CheckHang);

}  // namespace
}  // namespace perftracker

BENCHMARK_MAIN();
