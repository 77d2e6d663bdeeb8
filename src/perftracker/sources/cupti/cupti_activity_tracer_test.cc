#include "perftracker/sources/cupti/cupti_activity_tracer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "perftracker/core/realtime_clock.h"

namespace perftracker {
namespace {

// A scripted CUPTI: the function-pointer table filled with fakes that record the calls and
// answer what the test says, with the real header's types and callbacks.
struct FakeCupti {
  CUptiResult subscribe_result = CUPTI_SUCCESS;
  std::map<CUpti_ActivityKind, CUptiResult> enable_result;
  bool timestamp_callback_ok = true;
  std::vector<std::string> calls;
  std::vector<CUpti_ActivityKind> enabled;
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  CUpti_TimestampCallbackFunc timestamp = nullptr;
  // Records CUPTI "collected": written into a requested buffer at flush.
  std::vector<CUpti_ActivityKernel10> kernels;
  size_t dropped = 0;
  int subscribers = 0;
};
FakeCupti* fake = nullptr;

CuptiApi FakeApi() {
  CuptiApi api;
  api.subscribe = [](CUpti_SubscriberHandle* h, CUpti_CallbackFunc, void*) {
    fake->calls.push_back("subscribe");
    if (fake->subscribe_result != CUPTI_SUCCESS) return fake->subscribe_result;
    ++fake->subscribers;
    *h = reinterpret_cast<CUpti_SubscriberHandle>(0x1);
    return CUPTI_SUCCESS;
  };
  api.unsubscribe = [](CUpti_SubscriberHandle) {
    fake->calls.push_back("unsubscribe");
    --fake->subscribers;
    return CUPTI_SUCCESS;
  };
  api.register_callbacks = [](CUpti_BuffersCallbackRequestFunc r,
                              CUpti_BuffersCallbackCompleteFunc c) {
    fake->request = r;
    fake->complete = c;
    return CUPTI_SUCCESS;
  };
  api.register_timestamp_callback = [](CUpti_TimestampCallbackFunc f) {
    fake->timestamp = f;
    return fake->timestamp_callback_ok ? CUPTI_SUCCESS : CUPTI_ERROR_NOT_SUPPORTED;
  };
  api.enable = [](CUpti_ActivityKind kind) {
    auto it = fake->enable_result.find(kind);
    if (it != fake->enable_result.end() && it->second != CUPTI_SUCCESS) return it->second;
    fake->enabled.push_back(kind);
    return CUPTI_SUCCESS;
  };
  api.disable = [](CUpti_ActivityKind kind) {
    std::erase(fake->enabled, kind);
    return CUPTI_SUCCESS;
  };
  api.flush_all = [](uint32_t flag) {
    fake->calls.push_back("flush " + std::to_string(flag));
    if (fake->kernels.empty()) return CUPTI_SUCCESS;
    uint8_t* buffer = nullptr;
    size_t size = 0;
    size_t max_records = 0;
    fake->request(&buffer, &size, &max_records);
    if (buffer == nullptr) return CUPTI_SUCCESS;
    const size_t n = std::min(fake->kernels.size(), size / sizeof(CUpti_ActivityKernel10));
    std::memcpy(buffer, fake->kernels.data(), n * sizeof(CUpti_ActivityKernel10));
    fake->kernels.clear();
    fake->complete(nullptr, 0, buffer, size, n * sizeof(CUpti_ActivityKernel10));
    return CUPTI_SUCCESS;
  };
  api.get_next_record = [](uint8_t* buffer, size_t valid, CUpti_Activity** record) {
    uint8_t* next = *record == nullptr
                        ? buffer
                        : reinterpret_cast<uint8_t*>(*record) + sizeof(CUpti_ActivityKernel10);
    if (next + sizeof(CUpti_ActivityKernel10) > buffer + valid) {
      return CUPTI_ERROR_MAX_LIMIT_REACHED;
    }
    *record = reinterpret_cast<CUpti_Activity*>(next);
    return CUPTI_SUCCESS;
  };
  api.get_num_dropped_records = [](CUcontext, uint32_t, size_t* n) {
    *n = fake->dropped;
    return CUPTI_SUCCESS;
  };
  api.get_result_string = [](CUptiResult r, const char** text) {
    *text = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
                : "CUPTI_ERROR_SOMETHING";
    return CUPTI_SUCCESS;
  };
  api.get_callback_name = [](CUpti_CallbackDomain, uint32_t, const char** name) {
    *name = "cudaLaunchKernel_v7000";
    return CUPTI_SUCCESS;
  };
  api.get_timestamp = [](uint64_t* t) {
    *t = 1'000;
    return CUPTI_SUCCESS;
  };
  return api;
}

struct CollectingSink : EventSink {
  void OnTrack(const TrackInfo&) override {}
  void OnEvent(const Event& event) override { events.push_back(event); }
  void OnMetric(const MetricSample&) override {}
  std::vector<Event> events;
};

class CuptiActivityTracerTest : public ::testing::Test {
 protected:
  void SetUp() override { fake = &cupti; }
  void TearDown() override { fake = nullptr; }
  CuptiTracerOptions Options() {
    CuptiTracerOptions o;
    o.buffer_bytes = 64 * 1024;
    o.max_buffers = 2;
    o.log = [this](std::string_view line) { log.emplace_back(line); };
    return o;
  }

  FakeCupti cupti;
  FunctionTable functions;
  CollectingSink sink;
  std::vector<std::string> log;
};

TEST_F(CuptiActivityTracerTest, WindowEnablesKindsThenFlushesRecordsIntoTheSink) {
  CuptiActivityTracer tracer(FakeApi(), &functions, &sink, Options());
  ASSERT_TRUE(tracer.Enable().ok());
  EXPECT_EQ(tracer.state(), CuptiTracerState::kActive);
  EXPECT_EQ(cupti.enabled, (std::vector<CUpti_ActivityKind>{
                               CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                               CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET,
                               CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_RUNTIME}));
  ASSERT_NE(cupti.timestamp, nullptr);  // CLOCK_REALTIME timestamps registered
  const auto now = static_cast<int64_t>(cupti.timestamp());
  EXPECT_GT(now, int64_t{1'600'000'000} * 1'000'000'000);  // realtime ns, not a boot clock

  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof(k));
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = "gemm";
  k.start = 5'000;
  k.end = 6'000;
  k.correlationId = 9;
  cupti.kernels = {k, k};
  cupti.dropped = 3;
  tracer.Disable();
  EXPECT_EQ(tracer.state(), CuptiTracerState::kIdle);
  EXPECT_TRUE(cupti.enabled.empty());
  EXPECT_EQ(cupti.subscribers, 0);
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(sink.events[0].kind, EventKind::kGpuKernel);
  EXPECT_EQ(sink.events[0].start_ns, 5'000);  // no offset: the callback gives realtime
  EXPECT_EQ(tracer.converter_stats().dropped_by_cupti, 3u);
  EXPECT_EQ(tracer.stats().buffers_completed, 1u);
  EXPECT_TRUE(log.empty());

  // A second window works the same.
  ASSERT_TRUE(tracer.Enable().ok());
  tracer.Disable();
  EXPECT_EQ(tracer.stats().windows, 2u);
}

TEST_F(CuptiActivityTracerTest, WithoutTimestampCallbackTheOffsetIsMeasured) {
  cupti.timestamp_callback_ok = false;
  CuptiActivityTracer tracer(FakeApi(), &functions, &sink, Options());
  ASSERT_TRUE(tracer.Enable().ok());
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof(k));
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = "gemm";
  k.start = 1'000;  // "now" on the fake CUPTI clock
  k.end = 2'000;
  cupti.kernels = {k};
  tracer.Disable();
  ASSERT_EQ(sink.events.size(), 1u);
  // 1'000 on CUPTI's clock was "now" at Enable(): within a second of realtime now.
  EXPECT_NEAR(static_cast<double>(sink.events[0].start_ns), static_cast<double>(RealtimeNs()), 1e9);
  EXPECT_EQ(sink.events[0].duration_ns(), 1'000);
}

TEST_F(CuptiActivityTracerTest, AnotherSubscriberMakesItBackOffAndSaySoOnce) {
  cupti.subscribe_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  CuptiActivityTracer tracer(FakeApi(), &functions, &sink, Options());
  const Status st = tracer.Enable();
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(tracer.state(), CuptiTracerState::kBackedOff);
  EXPECT_TRUE(cupti.enabled.empty());
  EXPECT_FALSE(tracer.Enable().ok());
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("MULTIPLE_SUBSCRIBERS"), std::string::npos) << log[0];
  EXPECT_NE(log[0].find("torch.profiler"), std::string::npos) << log[0];
  EXPECT_EQ(tracer.stats().back_offs, 2u);
  tracer.Disable();  // nothing to undo
  EXPECT_EQ(std::count(cupti.calls.begin(), cupti.calls.end(), "unsubscribe"), 0);

  // The other client went away: the next window traces.
  cupti.subscribe_result = CUPTI_SUCCESS;
  ASSERT_TRUE(tracer.Enable().ok());
  EXPECT_EQ(tracer.state(), CuptiTracerState::kActive);
  tracer.Disable();
}

TEST_F(CuptiActivityTracerTest, AKindThatCannotBeEnabledUndoesTheOthers) {
  cupti.enable_result[CUPTI_ACTIVITY_KIND_SYNCHRONIZATION] = CUPTI_ERROR_NOT_COMPATIBLE;
  CuptiActivityTracer tracer(FakeApi(), &functions, &sink, Options());
  EXPECT_FALSE(tracer.Enable().ok());
  EXPECT_EQ(tracer.state(), CuptiTracerState::kBackedOff);
  EXPECT_TRUE(cupti.enabled.empty());  // kernel, memcpy, memset were enabled and undone
  EXPECT_EQ(cupti.subscribers, 0);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("cuptiActivityEnable"), std::string::npos) << log[0];
}

TEST_F(CuptiActivityTracerTest, NoDriverIsUnavailableForGood) {
  cupti.subscribe_result = CUPTI_ERROR_NOT_INITIALIZED;
  CuptiActivityTracer tracer(FakeApi(), &functions, &sink, Options());
  EXPECT_FALSE(tracer.Enable().ok());
  EXPECT_EQ(tracer.state(), CuptiTracerState::kUnavailable);
  cupti.subscribe_result = CUPTI_SUCCESS;
  EXPECT_FALSE(tracer.Enable().ok());  // permanent: not retried
  EXPECT_EQ(std::count(cupti.calls.begin(), cupti.calls.end(), "subscribe"), 1);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("cannot initialize"), std::string::npos) << log[0];
}

TEST_F(CuptiActivityTracerTest, BuffersAreBoundedAndDenialsCounted) {
  CuptiActivityTracer tracer(FakeApi(), &functions, &sink, Options());
  ASSERT_TRUE(tracer.Enable().ok());
  uint8_t* b[3] = {};
  size_t size[3] = {};
  size_t max_records = 0;
  for (int i = 0; i < 3; ++i) cupti.request(&b[i], &size[i], &max_records);
  EXPECT_NE(b[0], nullptr);
  EXPECT_EQ(size[0], 64u * 1024);
  EXPECT_NE(b[1], nullptr);
  EXPECT_EQ(b[2], nullptr);  // max_buffers = 2
  EXPECT_EQ(size[2], 0u);
  EXPECT_EQ(tracer.stats().buffers_denied, 1u);
  cupti.complete(nullptr, 0, b[0], size[0], 0);
  cupti.complete(nullptr, 0, b[1], size[1], 0);
  uint8_t* again = nullptr;
  size_t again_size = 0;
  cupti.request(&again, &again_size, &max_records);  // a returned buffer is reused
  EXPECT_TRUE(again == b[0] || again == b[1]);
  cupti.complete(nullptr, 0, again, again_size, 0);
  tracer.Disable();
}

TEST(CuptiActivityTracerLoad, MissingLibraryIsSaidOnce) {
  auto api = LoadCuptiApi("/nonexistent/libcupti.so");
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.status().message().find("cannot load libcupti"), std::string::npos);
  std::vector<std::string> log;
  CuptiTracerOptions o;
  o.log = [&](std::string_view line) { log.emplace_back(line); };
  FunctionTable functions;
  CollectingSink sink;
  CuptiActivityTracer tracer(api.status(), &functions, &sink, o);
  EXPECT_FALSE(tracer.Enable().ok());
  EXPECT_FALSE(tracer.Enable().ok());
  EXPECT_EQ(tracer.state(), CuptiTracerState::kUnavailable);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("/nonexistent/libcupti.so"), std::string::npos) << log[0];
}

#ifdef PERFTRACKER_TEST_LIBCUPTI
// The real libcupti of this toolkit, on a machine without a GPU driver: loading works, and
// the first CUPTI call fails cleanly (unavailable, said once), or, with a GPU, traces.
TEST(CuptiActivityTracerLoad, AnAlreadyLoadedCopyWinsOverTheHint) {
  auto first = LoadCuptiApi("", PERFTRACKER_TEST_LIBCUPTI);  // the hint, nothing loaded yet
  ASSERT_TRUE(first.ok()) << first.status().message();
  // A wrong hint now: the copy already in the process is used, never a second one.
  auto again = LoadCuptiApi("", "/nonexistent/libcupti.so");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again.value().subscribe, first.value().subscribe);
  // An explicit path is only that path.
  EXPECT_FALSE(LoadCuptiApi("/nonexistent/libcupti.so", PERFTRACKER_TEST_LIBCUPTI).ok());
}

TEST(CuptiActivityTracerLoad, RealLibcuptiWithoutDriverFailsCleanly) {
  auto api = LoadCuptiApi(PERFTRACKER_TEST_LIBCUPTI);
  ASSERT_TRUE(api.ok()) << api.status().message();
  std::vector<std::string> log;
  CuptiTracerOptions o;
  o.log = [&](std::string_view line) { log.emplace_back(line); };
  FunctionTable functions;
  CollectingSink sink;
  {
    CuptiActivityTracer tracer(api.value(), &functions, &sink, o);
    const Status st = tracer.Enable();
    if (st.ok()) {
      GTEST_LOG_(INFO) << "a GPU driver is present: CUPTI tracing is active";
      tracer.Disable();
      EXPECT_EQ(tracer.state(), CuptiTracerState::kIdle);
    } else {
      EXPECT_NE(tracer.state(), CuptiTracerState::kActive);
      ASSERT_EQ(log.size(), 1u);
      EXPECT_NE(log[0].find("CUPTI"), std::string::npos) << log[0];
      GTEST_LOG_(INFO) << "without a driver: " << log[0];
    }
  }
}
#endif

}  // namespace
}  // namespace perftracker
