#include "perftracker/agent/agent_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace perftracker {
namespace {

using ::testing::HasSubstr;

TEST(AgentOptionsTest, EmptyGivesDefaults) {
  auto o = ParseAgentOptions("");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->shm.num_rings, AgentShmOptions{}.num_rings);
  EXPECT_EQ(o->detector.learn_repeats, 10);
  EXPECT_EQ(o->detector.window_iterations, 50);
}

TEST(AgentOptionsTest, KeyValuePairs) {
  auto o = ParseAgentOptions(
      "rings=4, ring_events=1024;hang_factor=3.5 min_hang_ms=250,hang_longest_factor=2");
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->shm.num_rings, 4u);
  EXPECT_EQ(o->shm.ring_capacity, 1024u);
  EXPECT_DOUBLE_EQ(o->detector.hang_factor, 3.5);
  EXPECT_DOUBLE_EQ(o->detector.hang_longest_factor, 2.0);
  EXPECT_EQ(o->detector.min_hang_ns, 250'000'000);
}

TEST(AgentOptionsTest, GpuTracingIsOffAutoOrAlways) {
  EXPECT_EQ(ParseAgentOptions("")->gpu_tracing, 1);  // auto: where torch uses CUDA
  EXPECT_EQ(ParseAgentOptions("gpu_tracing=0")->gpu_tracing, 0);
  EXPECT_EQ(ParseAgentOptions("gpu_tracing=2")->gpu_tracing, 2);
  auto bad = ParseAgentOptions("gpu_tracing=3");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("gpu_tracing"));
}

TEST(AgentOptionsTest, JsonObject) {
  auto o = ParseAgentOptions(R"({"window_iterations": 20, "slowdown_ratio": "0.1"})");
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->detector.window_iterations, 20);
  EXPECT_DOUBLE_EQ(o->detector.slowdown_ratio, 0.1);
}

TEST(AgentOptionsTest, ErrorsNameTheKeyAndTheFix) {
  auto unknown = ParseAgentOptions("ringz=4");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown option 'ringz'"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("ring_events"));

  auto not_pow2 = ParseAgentOptions("ring_events=1000");
  ASSERT_FALSE(not_pow2.ok());
  EXPECT_THAT(not_pow2.status().message(), HasSubstr("power of two"));

  auto range = ParseAgentOptions("rings=0");
  ASSERT_FALSE(range.ok());
  EXPECT_THAT(range.status().message(), HasSubstr("out of range"));

  EXPECT_FALSE(ParseAgentOptions("rings=four").ok());
  EXPECT_FALSE(ParseAgentOptions("rings").ok());
  EXPECT_FALSE(ParseAgentOptions("{not json").ok());
}

TEST(AgentOptionsTest, EvalHookCanBeTurnedOff) {
  EXPECT_TRUE(ParseAgentOptions("")->eval_hook);
  EXPECT_FALSE(ParseAgentOptions("eval_hook=0")->eval_hook);
  EXPECT_TRUE(ParseAgentOptions("eval_hook=1")->eval_hook);
  auto bad = ParseAgentOptions("eval_hook=2");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("eval_hook"));
}

}  // namespace
}  // namespace perftracker
