#include "perftracker/core/agent_shm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>
#include <vector>

namespace perftracker {
namespace {

std::string TempPath(const char* tag) {
  return "/tmp/perftracker-shm-test-" + std::to_string(getpid()) + "-" + tag;
}

TEST(AgentShmTest, ProducerConsumerAcrossMappings) {
  const std::string path = TempPath("pc");
  AgentShmOptions o;
  o.num_rings = 2;
  o.ring_capacity = 1024;
  o.function_capacity = 8;
  auto agent = AgentShm::Create(path, 3, o);
  ASSERT_TRUE(agent.ok()) << agent.status().message();
  auto collector = AgentShm::Open(path);
  ASSERT_TRUE(collector.ok()) << collector.status().message();
  EXPECT_EQ((*collector)->header()->rank, 3);

  ASSERT_TRUE((*agent)->PublishFunction(0, EventKind::kPythonCall, "train_step", UINT32_MAX));
  EXPECT_FALSE((*agent)->PublishFunction(5, EventKind::kPythonCall, "gap", UINT32_MAX));
  const int ring = (*agent)->ClaimRing(42);
  ASSERT_EQ(ring, 0);

  constexpr uint64_t kN = 200000;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN; ++i) {
      Event e;
      e.start_ns = static_cast<int64_t>(i);
      e.end_ns = static_cast<int64_t>(i + 1);
      while (!(*agent)->Push(ring, e)) std::this_thread::yield();
    }
  });
  std::vector<Event> buf(256);
  uint64_t expected = 0;
  while (expected < kN) {
    const size_t n = (*collector)->Pop(ring, buf.data(), buf.size());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i].start_ns, static_cast<int64_t>(expected++));
  }
  producer.join();
  EXPECT_EQ((*collector)->functions_published(), 1u);
  EXPECT_EQ(std::string_view((*collector)->function(0).name, (*collector)->function(0).name_len),
            "train_step");
  unlink(path.c_str());
}

TEST(AgentShmTest, FullRingDropsAndCountsNeverBlocks) {
  const std::string path = TempPath("full");
  AgentShmOptions o;
  o.num_rings = 1;
  o.ring_capacity = 4;
  o.function_capacity = 1;
  auto agent = AgentShm::Create(path, 0, o);
  ASSERT_TRUE(agent.ok());
  const int ring = (*agent)->ClaimRing(1);
  for (int i = 0; i < 10; ++i) (*agent)->Push(ring, Event{});
  EXPECT_EQ((*agent)->TotalDropped(), 6u);
  EXPECT_EQ((*agent)->ClaimRing(2), -1);  // only one ring
  unlink(path.c_str());
}

TEST(AgentShmTest, OpenRejectsForeignFiles) {
  const std::string path = TempPath("bad");
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::string junk(4096, 'x');
  fwrite(junk.data(), 1, junk.size(), f);
  fclose(f);
  auto shm = AgentShm::Open(path);
  ASSERT_FALSE(shm.ok());
  EXPECT_NE(shm.status().message().find("not a perftracker agent file"), std::string::npos);
  unlink(path.c_str());
  EXPECT_FALSE(AgentShm::Open(path).ok());
}

TEST(AgentShmTest, RejectsBadOptions) {
  AgentShmOptions o;
  o.ring_capacity = 1000;  // not a power of two
  auto shm = AgentShm::Create(TempPath("opt"), 0, o);
  ASSERT_FALSE(shm.ok());
  EXPECT_NE(shm.status().message().find("power-of-two"), std::string::npos);
}

}  // namespace
}  // namespace perftracker
