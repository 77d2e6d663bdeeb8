// The NCCL profiler plugin's shared-memory file read the way the collector reads an agent's:
// AgentShm::Open + AgentRings + the window summarizer. Pins that what the plugin writes
// (sources/nccl) summarizes as collectives with their bytes, before the collector opens these
// files on its own (docs/gpu-sources.md, "Collector side").
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "perftracker/collector/agent_rings.h"
#include "perftracker/core/realtime_clock.h"
#include "perftracker/sources/nccl/nccl_profiler_api.h"

namespace perftracker {
namespace {

void NoLog(int, unsigned long, const char*, int, const char*, ...) {}

TEST(NcclPluginFile, AgentRingsSummarizesThePluginsCollectives) {
  const std::string path = "/dev/shm/perftracker-test-collector-nccl-" + std::to_string(getpid());
  setenv("PERFTRACKER_NCCL_SHM", path.c_str(), 1);
  setenv("PERFTRACKER_NCCL_TAIL_US", "0", 1);
  void* lib = dlopen(PERFTRACKER_NCCL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto* v5 = static_cast<ncclProfiler_v5_t*>(dlsym(lib, "ncclProfiler_v5"));
  ASSERT_NE(v5, nullptr);

  WindowSpec window;
  window.id = 1;
  window.start_ns = RealtimeNs();
  window.duration_ns = 60'000'000'000;
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(v5->init(&ctx, 0xc0ffee, &mask, "dp", 1, 4, 1, NoLog), kNcclSuccess);
  for (uint64_t seq = 0; seq < 3; ++seq) {
    ncclProfilerEventDescr_v5_t d{};
    d.type = kNcclProfileColl;
    d.coll.seqNumber = seq;
    d.coll.func = "AllReduce";
    d.coll.count = 1 << 20;
    d.coll.datatype = "ncclFloat32";
    d.coll.algo = "Ring";
    d.coll.proto = "LL128";
    void* coll = nullptr;
    ASSERT_EQ(v5->startEvent(ctx, &coll, &d), kNcclSuccess);
    v5->stopEvent(coll);
    ncclProfilerEventDescr_v5_t ch{};
    ch.type = kNcclProfileKernelCh;
    ch.parentObj = coll;
    void* k = nullptr;
    v5->startEvent(ctx, &k, &ch);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    v5->stopEvent(k);
  }

  auto shm = AgentShm::Open(path);
  ASSERT_TRUE(shm.ok()) << shm.status().message();
  WorkerInfo worker;
  worker.rank = 1;
  worker.world_size = 4;
  worker.pid = getpid();
  worker.host = "gpuhost";
  AgentRings rings(std::move(shm.value()), worker);
  rings.BeginWindow(window);
  while (rings.Drain(1024) == 1024) {
  }
  rings.TruncateWindow(RealtimeNs());
  const WorkerSummary summary = rings.FinishWindow();
  ASSERT_EQ(v5->finalize(ctx), kNcclSuccess);
  unlink(path.c_str());

  const FunctionSummary* all_reduce = nullptr;
  for (const FunctionSummary& f : summary.functions) {
    if (f.name == "nccl:AllReduce Ring/LL128 (comm 00c0ffee, 4 ranks)") all_reduce = &f;
  }
  ASSERT_NE(all_reduce, nullptr);
  EXPECT_EQ(all_reduce->kind, EventKind::kCollective);
  EXPECT_EQ(all_reduce->count, 3u);
  EXPECT_EQ(all_reduce->bytes, 3u * (4u << 20));
  EXPECT_GE(all_reduce->total_ns, 3 * 3'000'000);
  EXPECT_EQ(summary.stats.dropped_events, 0u);
  EXPECT_EQ(rings.stats().malformed_events, 0u);
}

}  // namespace
}  // namespace perftracker
