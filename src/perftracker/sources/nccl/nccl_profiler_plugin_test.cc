// The NCCL side of the plugin contract, played by a harness: dlopen() the built
// libperftracker_nccl_profiler.so, look up ncclProfiler_v5 (and _v4) as NCCL 2.28 does, and call
// init / startEvent / recordEventState / stopEvent / finalize in NCCL's order (ext-profiler
// README: collective enqueue, kernel-channel and proxy children, proxy step states). The
// Events are then read back from the plugin's shared-memory file as the collector reads it.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "perftracker/core/agent_shm.h"
#include "perftracker/core/realtime_clock.h"
#include "perftracker/sources/nccl/nccl_profiler_api.h"

namespace perftracker {
namespace {

struct Out {
  Event event;
  std::string name;
};

void NcclLog(int, unsigned long, const char*, int, const char*, ...) {}

class NcclPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = dlopen(PERFTRACKER_NCCL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    v5_ = static_cast<ncclProfiler_v5_t*>(dlsym(lib_, "ncclProfiler_v5"));
    v4_ = static_cast<ncclProfiler_v4_t*>(dlsym(lib_, "ncclProfiler_v4"));
    ASSERT_NE(v5_, nullptr);
    ASSERT_NE(v4_, nullptr);
    path_ = "/dev/shm/perftracker-test-nccl-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    setenv("PERFTRACKER_NCCL_SHM", path_.c_str(), 1);
    unsetenv("PERFTRACKER_NCCL_PROXY");
    unsetenv("PERFTRACKER_NCCL_GRACE_MS");
    unsetenv("RANK");
  }
  void TearDown() override {
    unlink(path_.c_str());
    unsetenv("PERFTRACKER_NCCL_SHM");
    // The library stays loaded (as in NCCL's process): its never-destroyed instance is not a
    // leak then, and the next test's init starts from its clean, all-finalized state.
  }

  void* Init(uint64_t comm_id, int rank, int nranks, int* mask) {
    void* ctx = nullptr;
    EXPECT_EQ(v5_->init(&ctx, comm_id, mask, "test comm", 1, nranks, rank, NcclLog), kNcclSuccess);
    EXPECT_NE(ctx, nullptr);
    return ctx;
  }

  static ncclProfilerEventDescr_v5_t Coll(const char* func, size_t count, const char* type,
                                          uint64_t seq) {
    ncclProfilerEventDescr_v5_t d{};
    d.type = kNcclProfileColl;
    d.rank = 2;
    d.coll.seqNumber = seq;
    d.coll.func = func;
    d.coll.count = count;
    d.coll.datatype = type;
    d.coll.nChannels = 2;
    d.coll.algo = "Ring";
    d.coll.proto = "Simple";
    return d;
  }
  static ncclProfilerEventDescr_v5_t Child(uint64_t type, void* parent) {
    ncclProfilerEventDescr_v5_t d{};
    d.type = type;
    d.parentObj = parent;
    d.rank = 2;
    return d;
  }

  // Everything the plugin wrote, as the collector would read it.
  std::vector<Out> ReadAll(int32_t* rank = nullptr) {
    auto shm = AgentShm::Open(path_);
    EXPECT_TRUE(shm.ok()) << shm.status().message();
    std::vector<Out> out;
    if (!shm.ok()) return out;
    if (rank != nullptr) *rank = shm.value()->header()->rank;
    Event buf[64];
    for (uint32_t r = 0; r < shm.value()->header()->num_rings; ++r) {
      size_t n;
      while ((n = shm.value()->Pop(static_cast<int>(r), buf, 64)) > 0) {
        for (size_t i = 0; i < n; ++i) {
          const FunctionSlot& f = shm.value()->function(buf[i].function_id);
          EXPECT_LT(buf[i].function_id, shm.value()->functions_published());
          out.push_back({buf[i], std::string(f.name, f.name_len)});
        }
      }
    }
    return out;
  }
  uint64_t Dropped() {
    auto shm = AgentShm::Open(path_);
    return shm.ok() ? shm.value()->TotalDropped() : 0;
  }

  void* lib_ = nullptr;
  ncclProfiler_v5_t* v5_ = nullptr;
  ncclProfiler_v4_t* v4_ = nullptr;
  std::string path_;
};

void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST_F(NcclPluginTest, InitAsksForCollectivesP2pAndKernelChannels) {
  EXPECT_STREQ(v5_->name, "perftracker");
  int mask = 0;
  void* ctx = Init(0xabcd, 0, 2, &mask);
  EXPECT_EQ(static_cast<uint64_t>(mask), kNcclProfileColl | kNcclProfileP2p | kNcclProfileKernelCh);
  EXPECT_EQ(v5_->finalize(ctx), kNcclSuccess);

  setenv("PERFTRACKER_NCCL_PROXY", "1", 1);
  ctx = Init(0xabcd, 0, 2, &mask);
  EXPECT_TRUE(mask & kNcclProfileProxyOp);
  EXPECT_TRUE(mask & kNcclProfileProxyStep);
  EXPECT_EQ(v5_->finalize(ctx), kNcclSuccess);
}

TEST_F(NcclPluginTest, CollectiveSpansItsKernelChannels) {
  int mask = 0;
  void* ctx = Init(0x1122334455abcdefULL, 2, 4, &mask);
  auto d = Coll("AllReduce", 1 << 20, "ncclFloat32", 7);
  void* coll = nullptr;
  ASSERT_EQ(v5_->startEvent(ctx, &coll, &d), kNcclSuccess);
  ASSERT_NE(coll, nullptr);
  ASSERT_EQ(v5_->stopEvent(coll), kNcclSuccess);  // enqueued: not yet done
  Sleep(2);
  const int64_t kernel_start = RealtimeNs();
  void* ch[2] = {};
  for (int c = 0; c < 2; ++c) {
    auto kd = Child(kNcclProfileKernelCh, coll);
    kd.kernelCh.channelId = static_cast<uint8_t>(c);
    kd.kernelCh.pTimer = 123456789;
    ASSERT_EQ(v5_->startEvent(ctx, &ch[c], &kd), kNcclSuccess);
    ASSERT_NE(ch[c], nullptr);
  }
  Sleep(5);
  ncclProfilerEventStateArgs_v5_t args{};
  args.kernelCh.pTimer = 223456789;
  const int64_t kernel_stop = RealtimeNs();
  for (void* h : ch) {
    EXPECT_EQ(v5_->recordEventState(h, kNcclKernelChStop, &args), kNcclSuccess);
    EXPECT_EQ(v5_->stopEvent(h), kNcclSuccess);
  }
  EXPECT_EQ(v5_->finalize(ctx), kNcclSuccess);

  int32_t rank = -1;
  const std::vector<Out> out = ReadAll(&rank);
  EXPECT_EQ(rank, 2);
  ASSERT_EQ(out.size(), 1u);
  const Event& e = out[0].event;
  EXPECT_EQ(out[0].name, "nccl:AllReduce Ring/Simple (comm 55abcdef, 4 ranks)");
  EXPECT_EQ(e.kind, EventKind::kCollective);
  EXPECT_EQ(e.payload, 4u << 20);  // 1 Mi float32
  EXPECT_EQ(e.correlation, 7u);
  EXPECT_TRUE(e.flags & kEventFlagOnDevice);
  // The span is the kernels' (host-observed), not the enqueue; the GPU stamps (100 ms apart,
  // longer than anything the host saw) are not plausible and are not used.
  EXPECT_GE(e.start_ns, kernel_start);
  EXPECT_GE(e.end_ns, kernel_stop);
  EXPECT_GE(e.duration_ns(), 4'000'000);
  EXPECT_LT(e.duration_ns(), 1'000'000'000);
  EXPECT_EQ(Dropped(), 0u);
}

TEST_F(NcclPluginTest, PlausibleGpuStampsGiveTheDuration) {
  int mask = 0;
  void* ctx = Init(0x99, 0, 2, &mask);
  auto d = Coll("Broadcast", 256, "ncclUint8", 1);
  void* coll = nullptr;
  ASSERT_EQ(v5_->startEvent(ctx, &coll, &d), kNcclSuccess);
  ASSERT_EQ(v5_->stopEvent(coll), kNcclSuccess);
  const uint64_t gpu0 = 1'700'000'000'000'000'000ULL;  // globaltimer, ns
  const uint64_t starts[2] = {gpu0, gpu0 + 1'000};
  const uint64_t stops[2] = {gpu0 + 3'000'000, gpu0 + 2'500'000};
  void* ch[2] = {};
  for (int c = 0; c < 2; ++c) {
    auto kd = Child(kNcclProfileKernelCh, coll);
    kd.kernelCh.pTimer = starts[c];
    ASSERT_EQ(v5_->startEvent(ctx, &ch[c], &kd), kNcclSuccess);
  }
  Sleep(6);  // the host sees more than the GPU's 3 ms (the proxy's polling)
  const int64_t before_stop = RealtimeNs();
  for (int c = 0; c < 2; ++c) {
    ncclProfilerEventStateArgs_v5_t args{};
    args.kernelCh.pTimer = stops[c];
    EXPECT_EQ(v5_->recordEventState(ch[c], kNcclKernelChStop, &args), kNcclSuccess);
    EXPECT_EQ(v5_->stopEvent(ch[c]), kNcclSuccess);
  }
  EXPECT_EQ(v5_->finalize(ctx), kNcclSuccess);
  const std::vector<Out> out = ReadAll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].event.duration_ns(), 3'000'000);  // earliest GPU start to latest GPU stop
  EXPECT_GE(out[0].event.end_ns, before_stop);       // anchored at the host-observed end
}

TEST_F(NcclPluginTest, P2pWithoutChildrenKeepsItsEnqueueSpanAfterTheGrace) {
  setenv("PERFTRACKER_NCCL_GRACE_MS", "0", 1);
  setenv("RANK", "5", 1);  // the job's rank wins over the communicator's
  int mask = 0;
  void* ctx = Init(0x77, 1, 2, &mask);
  ncclProfilerEventDescr_v5_t d{};
  d.type = kNcclProfileP2p;
  d.p2p.func = "Send";
  d.p2p.count = 100;
  d.p2p.datatype = "ncclInt8";
  d.p2p.peer = 3;
  void* h = nullptr;
  const int64_t before = RealtimeNs();
  ASSERT_EQ(v5_->startEvent(ctx, &h, &d), kNcclSuccess);
  ASSERT_EQ(v5_->stopEvent(h), kNcclSuccess);
  const int64_t after = RealtimeNs();
  // Emitted at once (grace 0), before finalize.
  int32_t rank = -1;
  const std::vector<Out> out = ReadAll(&rank);
  EXPECT_EQ(rank, 5);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "nccl:Send peer 3 (comm 00000077, 2 ranks)");
  EXPECT_EQ(out[0].event.payload, 100u);
  EXPECT_FALSE(out[0].event.flags & kEventFlagOnDevice);
  EXPECT_GE(out[0].event.start_ns, before);
  EXPECT_LE(out[0].event.end_ns, after);
  EXPECT_EQ(v5_->finalize(ctx), kNcclSuccess);
  unsetenv("RANK");
}

TEST_F(NcclPluginTest, ProxyStepStatesBecomeNetworkWaitPhasesPerPeer) {
  setenv("PERFTRACKER_NCCL_PROXY", "1", 1);
  int mask = 0;
  void* ctx = Init(0xfeed, 0, 2, &mask);
  auto d = Coll("AllGather", 1024, "ncclBfloat16", 3);
  void* coll = nullptr;
  ASSERT_EQ(v5_->startEvent(ctx, &coll, &d), kNcclSuccess);
  ASSERT_EQ(v5_->stopEvent(coll), kNcclSuccess);
  auto od = Child(kNcclProfileProxyOp, coll);
  od.proxyOp.pid = getpid();
  od.proxyOp.peer = 1;
  od.proxyOp.isSend = 1;
  od.proxyOp.nSteps = 1;
  void* op = nullptr;
  ASSERT_EQ(v5_->startEvent(ctx, &op, &od), kNcclSuccess);
  auto sd = Child(kNcclProfileProxyStep, op);
  sd.proxyStep.step = 0;
  void* step = nullptr;
  ASSERT_EQ(v5_->startEvent(ctx, &step, &sd), kNcclSuccess);
  ncclProfilerEventStateArgs_v5_t args{};
  args.proxyStep.transSize = 0;
  v5_->recordEventState(step, kNcclProxyStepSendGpuWait, &args);
  Sleep(1);
  v5_->recordEventState(step, kNcclProxyStepSendPeerWaitV4, &args);
  Sleep(1);
  args.proxyStep.transSize = 65536;
  v5_->recordEventState(step, kNcclProxyStepSendWait, &args);
  Sleep(3);
  v5_->stopEvent(step);
  v5_->recordEventState(op, kNcclProxyOpInProgressV4, nullptr);
  v5_->stopEvent(op);
  EXPECT_EQ(v5_->finalize(ctx), kNcclSuccess);

  const std::vector<Out> out = ReadAll();
  std::vector<std::string> names;
  const Out* network = nullptr;
  const Out* coll_out = nullptr;
  for (const Out& o : out) {
    names.push_back(o.name);
    if (o.name.find("send network") != std::string::npos) network = &o;
    if (o.name.find("AllGather") != std::string::npos) coll_out = &o;
  }
  ASSERT_EQ(out.size(), 4u) << ::testing::PrintToString(names);
  EXPECT_EQ(names[0], "nccl:net send gpu-wait peer 1 (comm 0000feed, 2 ranks)");
  EXPECT_EQ(names[1], "nccl:net send peer-wait peer 1 (comm 0000feed, 2 ranks)");
  ASSERT_NE(network, nullptr);
  EXPECT_EQ(network->event.payload, 65536u);
  EXPECT_GE(network->event.duration_ns(), 2'000'000);
  ASSERT_NE(coll_out, nullptr);
  EXPECT_EQ(coll_out->event.payload, 2048u);                // 1024 bf16
  EXPECT_TRUE(coll_out->event.flags & kEventFlagOnDevice);  // spanned by its proxy op
  EXPECT_NE(network->event.track_id, coll_out->event.track_id);
}

TEST_F(NcclPluginTest, BadAndAbsentInputsAreHarmless) {
  int mask = 0;
  void* ctx = Init(0x1, 0, 2, &mask);
  void* h = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(v5_->startEvent(ctx, &h, nullptr), kNcclSuccess);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(v5_->startEvent(ctx, nullptr, nullptr), kNcclSuccess);
  EXPECT_EQ(v5_->stopEvent(nullptr), kNcclSuccess);
  EXPECT_EQ(v5_->recordEventState(nullptr, kNcclKernelChStop, nullptr), kNcclSuccess);
  auto d = Coll(nullptr, 10, nullptr, 1);  // no names at all
  d.coll.algo = nullptr;
  d.coll.proto = nullptr;
  EXPECT_EQ(v5_->startEvent(nullptr, &h, &d), kNcclSuccess);  // no context
  EXPECT_EQ(h, nullptr);
  auto unknown = Child(kNcclProfileGroupApi, nullptr);  // a type the plugin did not ask for
  EXPECT_EQ(v5_->startEvent(ctx, &h, &unknown), kNcclSuccess);
  EXPECT_EQ(h, nullptr);
  // A kernel channel whose parent is not ours, a proxy op from another process (PXN).
  auto stray = Child(kNcclProfileKernelCh, reinterpret_cast<void*>(0x1234));
  void* stray_h = nullptr;
  EXPECT_EQ(v5_->startEvent(ctx, &stray_h, &stray), kNcclSuccess);
  EXPECT_EQ(v5_->stopEvent(stray_h), kNcclSuccess);
  auto pxn = Child(kNcclProfileProxyOp, reinterpret_cast<void*>(0x5678));
  pxn.proxyOp.pid = getpid() + 1;
  void* pxn_h = nullptr;
  EXPECT_EQ(v5_->startEvent(ctx, &pxn_h, &pxn), kNcclSuccess);
  EXPECT_EQ(v5_->stopEvent(pxn_h), kNcclSuccess);
  // The nameless collective, stopped twice.
  void* coll = nullptr;
  EXPECT_EQ(v5_->startEvent(ctx, &coll, &d), kNcclSuccess);
  EXPECT_EQ(v5_->stopEvent(coll), kNcclSuccess);
  EXPECT_EQ(v5_->stopEvent(coll), kNcclSuccess);
  EXPECT_EQ(v5_->finalize(nullptr), kNcclSuccess);
  EXPECT_EQ(v5_->finalize(ctx), kNcclSuccess);
  const std::vector<Out> out = ReadAll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "nccl:? ?/? (comm 00000001, 2 ranks)");
  EXPECT_EQ(out[0].event.payload, 10u);  // unknown datatype: counted as bytes
}

TEST_F(NcclPluginTest, WithoutRunIdInitFailsAndNcclDisablesThePlugin) {
  unsetenv("PERFTRACKER_NCCL_SHM");
  unsetenv("PERFTRACKER_RUN_ID");
  void* ctx = reinterpret_cast<void*>(0x1);
  int mask = -1;
  ::testing::internal::CaptureStderr();
  EXPECT_NE(v5_->init(&ctx, 1, &mask, "c", 1, 2, 0, NcclLog), kNcclSuccess);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(ctx, nullptr);
  EXPECT_EQ(mask, 0);
  EXPECT_NE(err.find("PERFTRACKER_RUN_ID"), std::string::npos) << err;
}

TEST_F(NcclPluginTest, RunIdNamesTheFileNextToTheAgents) {
  unsetenv("PERFTRACKER_NCCL_SHM");
  const std::string run = "gputest" + std::to_string(getpid());
  setenv("PERFTRACKER_RUN_ID", run.c_str(), 1);
  path_ = "/dev/shm/perftracker-" + run + "-" + std::to_string(getpid()) + "-nccl";
  int mask = 0;
  void* ctx = Init(0x2, 0, 2, &mask);
  EXPECT_EQ(access(path_.c_str(), F_OK), 0) << path_;
  EXPECT_EQ(v5_->finalize(ctx), kNcclSuccess);
  unsetenv("PERFTRACKER_RUN_ID");
}

TEST_F(NcclPluginTest, Version4EntryPoints) {
  setenv("PERFTRACKER_NCCL_GRACE_MS", "0", 1);
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(v4_->init(&ctx, &mask, "v4 comm", 0xbeef, 1, 8, 3, NcclLog), kNcclSuccess);
  ncclProfilerEventDescr_v4_t d{};
  d.type = static_cast<uint8_t>(kNcclProfileColl);
  d.coll.seqNumber = 11;
  d.coll.func = "ReduceScatter";
  d.coll.count = 8;
  d.coll.datatype = "ncclFloat64";
  d.coll.algo = "Tree";
  d.coll.proto = "LL";
  void* h = nullptr;
  ASSERT_EQ(v4_->startEvent(ctx, &h, &d), kNcclSuccess);
  ASSERT_EQ(v4_->stopEvent(h), kNcclSuccess);
  ASSERT_EQ(v4_->finalize(ctx), kNcclSuccess);
  const std::vector<Out> out = ReadAll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "nccl:ReduceScatter Tree/LL (comm 0000beef, 8 ranks)");
  EXPECT_EQ(out[0].event.payload, 64u);
  EXPECT_EQ(out[0].event.correlation, 11u);
}

}  // namespace
}  // namespace perftracker
