// What NCCL pays per operation for perftracker's profiler plugin: the plugin is dlopen()ed
// and called as NCCL calls it (ncclProfiler_v5), its shared-memory file drained by a reader
// every 1024 operations (that cost included, as small as a collector's share would be).
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "perftracker/core/agent_shm.h"
#include "perftracker/sources/nccl/nccl_profiler_api.h"

namespace perftracker {
namespace {

void NoLog(int, unsigned long, const char*, int, const char*, ...) {}

struct Plugin {
  Plugin(const char* grace_ms) {
    path = "/dev/shm/perftracker-bench-nccl-" + std::to_string(getpid());
    setenv("PERFTRACKER_NCCL_SHM", path.c_str(), 1);
    setenv("PERFTRACKER_NCCL_GRACE_MS", grace_ms, 1);
    // The loop runs millions of collectives per second, past what the default 2 ms tail lets
    // the 4096-slot pool hold (2 M/s): 200 us keeps every operation (dropped = 0).
    setenv("PERFTRACKER_NCCL_TAIL_US", "200", 1);
    void* lib = dlopen(PERFTRACKER_NCCL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) std::abort();
    v5 = static_cast<ncclProfiler_v5_t*>(dlsym(lib, "ncclProfiler_v5"));
    int mask = 0;
    if (v5->init(&ctx, 0x1234, &mask, "bench", 1, 8, 0, NoLog) != kNcclSuccess) std::abort();
    reader = std::move(AgentShm::Open(path).value());
  }
  ~Plugin() {
    v5->finalize(ctx);
    unlink(path.c_str());
  }
  void Drain() {
    Event buf[256];
    for (uint32_t r = 0; r < reader->header()->num_rings; ++r) {
      while (reader->Pop(static_cast<int>(r), buf, 256) == 256) {
      }
    }
  }
  std::string path;
  ncclProfiler_v5_t* v5 = nullptr;
  void* ctx = nullptr;
  std::unique_ptr<AgentShm> reader;
};

// A collective and its two kernel-channel children: start, enqueue stop, the channels'
// start / state / stop; the Event is written 2 ms later, by a later call.
void BM_CollectiveWithTwoKernelChannels(benchmark::State& state) {
  Plugin p("1000");
  ncclProfilerEventDescr_v5_t coll{};
  coll.type = kNcclProfileColl;
  coll.coll.func = "AllReduce";
  coll.coll.count = 1 << 20;
  coll.coll.datatype = "ncclFloat32";
  coll.coll.algo = "Ring";
  coll.coll.proto = "Simple";
  ncclProfilerEventDescr_v5_t ch{};
  ch.type = kNcclProfileKernelCh;
  ncclProfilerEventStateArgs_v5_t args{};
  uint64_t n = 0;
  for (auto _ : state) {
    coll.coll.seqNumber = n;
    void* h = nullptr;
    p.v5->startEvent(p.ctx, &h, &coll);
    p.v5->stopEvent(h);
    ch.parentObj = h;
    void* c0 = nullptr;
    void* c1 = nullptr;
    p.v5->startEvent(p.ctx, &c0, &ch);
    p.v5->startEvent(p.ctx, &c1, &ch);
    p.v5->recordEventState(c0, kNcclKernelChStop, &args);
    p.v5->stopEvent(c0);
    p.v5->recordEventState(c1, kNcclKernelChStop, &args);
    p.v5->stopEvent(c1);
    if ((++n & 1023) == 0) p.Drain();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["dropped"] = static_cast<double>(p.reader->TotalDropped());
}
BENCHMARK(BM_CollectiveWithTwoKernelChannels);

// A p2p operation with no child and no grace: written at its stopEvent.
void BM_P2pEnqueueOnly(benchmark::State& state) {
  Plugin p("0");
  ncclProfilerEventDescr_v5_t d{};
  d.type = kNcclProfileP2p;
  d.p2p.func = "Send";
  d.p2p.count = 4096;
  d.p2p.datatype = "ncclInt8";
  d.p2p.peer = 1;
  uint64_t n = 0;
  for (auto _ : state) {
    void* h = nullptr;
    p.v5->startEvent(p.ctx, &h, &d);
    p.v5->stopEvent(h);
    if ((++n & 1023) == 0) p.Drain();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["dropped"] = static_cast<double>(p.reader->TotalDropped());
}
BENCHMARK(BM_P2pEnqueueOnly);

}  // namespace
}  // namespace perftracker

BENCHMARK_MAIN();
