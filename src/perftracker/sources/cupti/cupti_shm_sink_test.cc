#include "perftracker/sources/cupti/cupti_shm_sink.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "perftracker/sources/cupti/cupti_activity_tracer.h"
#include "perftracker/sources/cupti/cupti_record_converter.h"

namespace perftracker {
namespace {

class CuptiShmSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/dev/shm/perftracker-test-cupti-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override { unlink(path_.c_str()); }

  // Converts a launch + kernel pair per correlation id into the sink.
  static void Feed(CuptiShmSink* sink, int pairs) {
    CuptiRecordConverter converter(sink->functions(), sink,
                                   [](bool, uint32_t) { return "cudaLaunchKernel_v7000"; });
    for (int i = 1; i <= pairs; ++i) {
      CUpti_ActivityAPI api;
      std::memset(&api, 0, sizeof(api));
      api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
      api.start = 1000 * i;
      api.end = api.start + 10;
      api.threadId = 9;
      api.correlationId = static_cast<uint32_t>(i);
      ASSERT_TRUE(converter.ConvertRecord(reinterpret_cast<CUpti_Activity*>(&api), sizeof(api)));
      CUpti_ActivityKernel10 k;
      std::memset(&k, 0, sizeof(k));
      k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      k.name = "_Z4gemmv";
      k.start = api.start + 100;
      k.end = k.start + 500;
      k.correlationId = static_cast<uint32_t>(i);
      ASSERT_TRUE(converter.ConvertRecord(reinterpret_cast<CUpti_Activity*>(&k), sizeof(k)));
    }
  }

  std::string path_;
};

TEST_F(CuptiShmSinkTest, EventsAndTheirFunctionsReachTheFileInTheAgentsFormat) {
  auto sink = CuptiShmSink::Create(path_, 3);
  ASSERT_TRUE(sink.ok()) << sink.status().message();
  Feed(sink.value().get(), 2);
  EXPECT_EQ(sink.value()->events(), 4u);

  auto reader = AgentShm::Open(path_);  // as the collector opens it
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  EXPECT_EQ(reader.value()->header()->rank, 3);
  Event out[8];
  ASSERT_EQ(reader.value()->Pop(0, out, 8), 4u);
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i) {
    ASSERT_LT(out[i].function_id, reader.value()->functions_published());
    const FunctionSlot& f = reader.value()->function(out[i].function_id);
    names.emplace_back(f.name, f.name_len);
    EXPECT_EQ(f.kind, static_cast<uint8_t>(out[i].kind));
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"cudaLaunchKernel", "gemm()", "cudaLaunchKernel", "gemm()"}));
  EXPECT_EQ(out[0].correlation, out[1].correlation);  // launch -> kernel
  EXPECT_TRUE(out[1].flags & kEventFlagOnDevice);
  EXPECT_EQ(reader.value()->functions_published(), 2u);
}

TEST_F(CuptiShmSinkTest, AFullRingDropsAndCounts) {
  auto sink = CuptiShmSink::Create(path_, 0, /*ring_events=*/2);
  ASSERT_TRUE(sink.ok());
  Feed(sink.value().get(), 2);  // 4 events into 2 slots, nobody reading
  EXPECT_EQ(sink.value()->events(), 2u);
  EXPECT_EQ(sink.value()->shm()->TotalDropped(), 2u);
}

TEST_F(CuptiShmSinkTest, AnUncreatableFileIsAClearError) {
  auto sink = CuptiShmSink::Create("/nonexistent-dir/perftracker-x-cupti", 0);
  ASSERT_FALSE(sink.ok());
  EXPECT_NE(sink.status().message().find("/nonexistent-dir/perftracker-x-cupti"),
            std::string::npos);
}

// The wiring docs/gpu-sources.md gives the agent, as written there, on this machine: the
// toolkit's libcupti without a driver (or no libcupti) -> one line, no window, no crash.
TEST_F(CuptiShmSinkTest, TheAgentWiringOfTheDocsRunsCleanlyWithoutAGpu) {
  auto sink = CuptiShmSink::Create(path_, 0);
  ASSERT_TRUE(sink.ok());
  CuptiShmSink* out = sink.value().get();
#ifdef PERFTRACKER_TEST_LIBCUPTI
  auto api = LoadCuptiApi(PERFTRACKER_TEST_LIBCUPTI);
#else
  auto api = LoadCuptiApi("/nonexistent/libcupti.so");
#endif
  std::vector<std::string> log;
  CuptiTracerOptions options;
  options.log = [&](std::string_view line) { log.emplace_back(line); };
  auto tracer =
      api.ok()
          ? std::make_unique<CuptiActivityTracer>(api.value(), out->functions(), out, options)
          : std::make_unique<CuptiActivityTracer>(api.status(), out->functions(), out, options);
  const Status st = tracer->Enable();
  tracer->Disable();
  if (!st.ok()) {
    EXPECT_EQ(tracer->state(), CuptiTracerState::kUnavailable);
    EXPECT_EQ(log.size(), 1u);
  }
  EXPECT_EQ(out->events(), 0u);
}

}  // namespace
}  // namespace perftracker
