#include "perftracker/sources/python/tsc_clock.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace perftracker {
namespace {

TEST(TscClockTest, AgreesWithClockRealtime) {
  if (!TscClock::Supported()) GTEST_SKIP() << "no invariant TSC on this machine";
  TscClock::Calibrate(20'000'000);
  ASSERT_GT(TscClock::ns_per_tick(), 0);
  const TscClock::Anchor a = TscClock::MakeAnchor();
  for (int i = 0; i < 5; ++i) {
    const int64_t before = RealtimeNs();
    const int64_t tsc_now = TscClock::Now(a);
    const int64_t after = RealtimeNs();
    // Within 50 us of the system clock (calibration error over this short span is ~ns).
    EXPECT_GT(tsc_now, before - 50'000);
    EXPECT_LT(tsc_now, after + 50'000);
  }
}

TEST(TscClockTest, UncalibratedAnchorFallsBackToTheSystemClock) {
  TscClock::Anchor a;  // ns_per_tick == 0
  const int64_t before = RealtimeNs();
  const int64_t now = TscClock::Now(a);
  EXPECT_GE(now, before);
  EXPECT_LE(now, RealtimeNs());
}

}  // namespace
}  // namespace perftracker
