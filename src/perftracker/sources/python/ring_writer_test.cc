#include "perftracker/sources/python/ring_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace perftracker {
namespace {

class RingWriterTest : public ::testing::Test {
 protected:
  void Make(uint32_t rings, uint32_t capacity) {
    path_ = "/dev/shm/perftracker-test-ringwriter-" + std::to_string(getpid());
    AgentShmOptions o;
    o.num_rings = rings;
    o.ring_capacity = capacity;
    o.function_capacity = 4;
    auto shm = AgentShm::Create(path_, 3, o);
    ASSERT_TRUE(shm.ok()) << shm.status().message();
    shm_ = std::move(shm.value());
  }
  void TearDown() override { unlink(path_.c_str()); }
  std::string path_;
  std::unique_ptr<AgentShm> shm_;
};

TEST_F(RingWriterTest, RecordsArriveUnchangedInTheThreadsRing) {
  Make(2, 8);
  RingWriter writer(shm_.get());
  const int ring = writer.RingForCurrentThread();
  ASSERT_EQ(ring, 0);
  EXPECT_EQ(writer.RingForCurrentThread(), ring);  // one ring per thread, for its lifetime
  EXPECT_EQ(shm_->ring_header(ring)->thread_id, RingWriter::CurrentThreadId());
  Event ev;
  ev.start_ns = 1'700'000'000'000'000'000;
  ev.end_ns = ev.start_ns + 1234;
  ev.payload = 4096;
  ev.function_id = 7;
  ev.track_id = 0;
  ev.kind = EventKind::kCollective;
  ASSERT_TRUE(writer.Push(ring, ev));

  auto reader = AgentShm::Open(path_);  // the collector's view
  ASSERT_TRUE(reader.ok());
  Event out[4];
  EXPECT_EQ((*reader)->Pop(ring, out, 4), 0u);  // not published yet
  writer.FlushAll();
  ASSERT_EQ((*reader)->Pop(ring, out, 4), 1u);
  EXPECT_EQ(out[0].start_ns, ev.start_ns);
  EXPECT_EQ(out[0].duration_ns(), 1234);
  EXPECT_EQ(out[0].payload, 4096u);
  EXPECT_EQ(out[0].function_id, 7u);
  EXPECT_EQ(out[0].kind, EventKind::kCollective);
  EXPECT_EQ((*reader)->header()->rank, 3);
}

TEST_F(RingWriterTest, FullRingDropsAndCountsNoRingDropsAndCounts) {
  Make(1, 4);
  RingWriter writer(shm_.get());
  const int ring = writer.RingForCurrentThread();
  Event ev;
  int pushed = 0;
  for (int i = 0; i < 10; ++i) pushed += writer.Push(ring, ev) ? 1 : 0;
  EXPECT_EQ(pushed, 4);
  EXPECT_EQ(shm_->ring_header(ring)->dropped.load(), 6u);

  int other_ring = 0;
  std::thread t([&] {
    other_ring = writer.RingForCurrentThread();
    writer.Push(other_ring, ev);
  });
  t.join();
  EXPECT_EQ(other_ring, RingWriter::kNoRing);  // the only ring is taken
  EXPECT_EQ(shm_->header()->dropped_no_ring.load(), 1u);
  EXPECT_EQ(shm_->TotalDropped(), 7u);
}

TEST_F(RingWriterTest, ConsumerDrainingMakesRoomAgainAndOrderIsKept) {
  Make(1, 64);
  RingWriter writer(shm_.get());
  const int ring = writer.RingForCurrentThread();
  auto reader = AgentShm::Open(path_);
  ASSERT_TRUE(reader.ok());
  Event out[64];
  int64_t next_expected = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    Event ev;
    ev.start_ns = i;
    while (!writer.Push(ring, ev)) {
      const size_t n = (*reader)->Pop(ring, out, 64);
      for (size_t k = 0; k < n; ++k) EXPECT_EQ(out[k].start_ns, next_expected++);
    }
  }
  writer.FlushAll();
  for (size_t n; (n = (*reader)->Pop(ring, out, 64)) > 0;) {
    for (size_t k = 0; k < n; ++k) EXPECT_EQ(out[k].start_ns, next_expected++);
  }
  EXPECT_EQ(next_expected, 1000);
}

}  // namespace
}  // namespace perftracker
