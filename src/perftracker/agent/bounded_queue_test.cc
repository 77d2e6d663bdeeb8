#include "perftracker/agent/bounded_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace perftracker {
namespace {

TEST(BoundedQueueTest, FullQueueRefusesInsteadOfBlocking) {
  BoundedQueue<int> q(4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(q.TryPush(i));
  EXPECT_FALSE(q.TryPush(99));
  int v = -1;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(q.TryPop(&v));
    EXPECT_EQ(v, i);  // FIFO
  }
  EXPECT_FALSE(q.TryPop(&v));
}

TEST(BoundedQueueTest, ManyProducersOneConsumerLoseNothingThatWasAccepted) {
  BoundedQueue<uint64_t> q(256);
  constexpr int kProducers = 3;
  constexpr uint64_t kEach = 20000;
  std::atomic<uint64_t> accepted_sum{0}, accepted{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint64_t i = 1; i <= kEach; ++i) {
        const uint64_t v = i * kProducers + p;
        if (q.TryPush(v)) {
          accepted_sum += v;
          ++accepted;
        }
      }
    });
  }
  uint64_t sum = 0, count = 0, v = 0;
  std::thread consumer([&] {
    while (!done.load()) {
      if (q.TryPop(&v)) {
        sum += v;
        ++count;
      }
    }
  });
  for (auto& t : producers) t.join();
  done = true;
  consumer.join();
  while (q.TryPop(&v)) {
    sum += v;
    ++count;
  }
  EXPECT_EQ(count, accepted.load());
  EXPECT_EQ(sum, accepted_sum.load());
}

}  // namespace
}  // namespace perftracker
