// ReconnectBackoff: full jitter under a doubling cap. Seeded, so each run draws the same
// waits: every wait stays within its step's bounds, a fleet's waits spread over each step
// (no lockstep), and a reset starts again from the first step.
#include "perftracker/wire/reconnect_backoff.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace perftracker {
namespace {

constexpr int kInitialMs = 200;
constexpr int kMaxMs = 5000;
// The caps of the first steps: 200, 400, 800, 1600, 3200, then 5000 on.
constexpr int kCaps[] = {200, 400, 800, 1600, 3200, 5000, 5000, 5000};

TEST(ReconnectBackoffTest, EachWaitStaysUnderItsStepsCap) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    ReconnectBackoff b(kInitialMs, kMaxMs, seed);
    for (int cap : kCaps) {
      EXPECT_EQ(b.CapMs(), cap);
      const int d = b.NextDelayMs();
      EXPECT_GE(d, 0);
      EXPECT_LE(d, cap);
    }
    b.Reset();
    EXPECT_EQ(b.CapMs(), kInitialMs);
    EXPECT_LE(b.NextDelayMs(), kInitialMs);
  }
}

TEST(ReconnectBackoffTest, TheSameSeedDrawsTheSameWaits) {
  ReconnectBackoff a(kInitialMs, kMaxMs, 42);
  ReconnectBackoff b(kInitialMs, kMaxMs, 42);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.NextDelayMs(), b.NextDelayMs());
}

// 10,000 collectors whose streams broke at once: at each step their next attempts spread
// over the step's whole span (each tenth of it holds about a tenth of them), instead of all
// retrying at the same instant.
TEST(ReconnectBackoffTest, AFleetsWaitsSpreadOverEachStep) {
  constexpr int kCollectors = 10000;
  std::vector<ReconnectBackoff> fleet;
  fleet.reserve(kCollectors);
  for (uint64_t c = 0; c < kCollectors; ++c) fleet.emplace_back(kInitialMs, kMaxMs, 1000 + c);
  for (int cap : kCaps) {
    std::vector<int> tenths(10, 0);
    std::set<int> distinct;
    for (ReconnectBackoff& b : fleet) {
      const int d = b.NextDelayMs();
      ++tenths[static_cast<size_t>(std::min(9, d * 10 / (cap + 1)))];
      distinct.insert(d);
    }
    SCOPED_TRACE(cap);
    for (int n : tenths) {
      EXPECT_GT(n, kCollectors / 10 * 8 / 10) << "a tenth of the span has too few";
      EXPECT_LT(n, kCollectors / 10 * 12 / 10) << "a tenth of the span has too many";
    }
    EXPECT_GT(distinct.size(), static_cast<size_t>(std::min(cap, kCollectors) / 2));
  }
}

}  // namespace
}  // namespace perftracker
