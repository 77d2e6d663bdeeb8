// How fast the collector drains an agent's ring and summarizes its events: the events per
// second one drain thread keeps up with (an agent producing more fills its rings, which then
// drop and count).
//   build-*/src/perftracker/collector/agent_rings_benchmark
#include <unistd.h>

#include <cstdint>
#include <string>

#include <benchmark/benchmark.h>

#include "perftracker/collector/agent_rings.h"

namespace perftracker {
namespace {

// Pushes `steps` iterations of a step() call holding `leaves` calls of 100 distinct
// functions (call paths train > step > leafN), as the agent writes them (at return).
void PushSteps(AgentShm* shm, int ring, int64_t* t, int steps, int leaves) {
  for (int s = 0; s < steps; ++s) {
    const int64_t step_start = *t;
    for (int l = 0; l < leaves; ++l) {
      Event e;
      e.start_ns = *t;
      e.end_ns = *t + 500;
      e.function_id = 2 + static_cast<uint32_t>(l % 100);
      e.kind = EventKind::kPythonCall;
      e.track_id = 1;
      shm->Push(ring, e);
      *t += 600;
    }
    Event e;
    e.start_ns = step_start;
    e.end_ns = *t;
    e.function_id = 1;
    e.kind = EventKind::kPythonCall;
    e.track_id = 1;
    shm->Push(ring, e);
    *t += 100;
  }
}

void BM_DrainAndSummarize(benchmark::State& state) {
  const std::string path = "/dev/shm/perftracker-rings-bench-" + std::to_string(getpid());
  AgentShmOptions o;
  o.num_rings = 1;
  o.ring_capacity = 1u << 17;
  o.function_capacity = 1024;
  auto agent = AgentShm::Create(path, 0, o);
  auto mine = AgentShm::Open(path);
  unlink(path.c_str());
  if (!agent.ok() || !mine.ok()) {
    state.SkipWithError("cannot create the shared-memory file");
    return;
  }
  AgentShm* shm = agent.value().get();
  shm->PublishFunction(0, EventKind::kPythonCall, "train.py:5 train", UINT32_MAX);
  shm->PublishFunction(1, EventKind::kPythonCall, "train.py:9 step", 0);
  for (uint32_t i = 0; i < 100; ++i) {
    shm->PublishFunction(2 + i, EventKind::kPythonCall, "model.py:" + std::to_string(i) + " f", 1);
  }
  const int ring = shm->ClaimRing(1);
  WorkerInfo worker;
  worker.rank = 0;
  AgentRings rings(std::move(mine.value()), worker);
  const int64_t t0 = 1'700'000'000'000'000'000;
  rings.BeginWindow(WindowSpec{1, t0, int64_t{1} << 50, WindowReason::kManual});
  int64_t t = t0 + 1000;
  const int leaves = static_cast<int>(state.range(0));
  const int steps = 100'000 / (leaves + 1);
  int64_t events = 0;
  for (auto _ : state) {
    state.PauseTiming();
    PushSteps(shm, ring, &t, steps, leaves);
    state.ResumeTiming();
    size_t n = 0;
    while ((n = rings.Drain(1u << 17)) > 0) events += static_cast<int64_t>(n);
  }
  state.SetItemsProcessed(events);
  benchmark::DoNotOptimize(rings.FinishWindow());
}
BENCHMARK(BM_DrainAndSummarize)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace perftracker

BENCHMARK_MAIN();
