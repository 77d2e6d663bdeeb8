#include "perftracker/core/units.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace perftracker {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(UnitsTest, DurationPicksAUnitAndThreeDigits) {
  EXPECT_EQ(FormatDuration(0), "0 ns");
  EXPECT_EQ(FormatDuration(-0.0), "0 ns");
  EXPECT_EQ(FormatDuration(812), "812 ns");
  EXPECT_EQ(FormatDuration(12'345), "12.3 µs");
  EXPECT_EQ(FormatDuration(41'234), "41.2 µs");
  EXPECT_EQ(FormatDuration(450'000), "450 µs");
  EXPECT_EQ(FormatDuration(2e6), "2.00 ms");
  EXPECT_EQ(FormatDuration(12'800'000), "12.8 ms");
  EXPECT_EQ(FormatDuration(1'523'000'000), "1.52 s");
  EXPECT_EQ(FormatDuration(120e9), "120 s");
  EXPECT_EQ(FormatDuration(750e9), "12.5 min");
  EXPECT_EQ(FormatDuration(7200e9), "120 min");
  EXPECT_EQ(FormatDuration(-2e6), "-2.00 ms");
  // Rounding up crosses into the next unit instead of printing "1000 µs".
  EXPECT_EQ(FormatDuration(999'700), "1.00 ms");
  EXPECT_EQ(FormatDuration(999.7), "1.00 µs");
  EXPECT_EQ(FormatDuration(999.7e6), "1.00 s");
  EXPECT_EQ(FormatDuration(kNaN), "n/a");
  EXPECT_EQ(FormatDuration(kInf), "n/a");
}

TEST(UnitsTest, ShareIsAPercentageWithAtMostOneDecimal) {
  EXPECT_EQ(FormatShare(1.05), "105%");
  EXPECT_EQ(FormatShare(0.31), "31%");
  EXPECT_EQ(FormatShare(0.0996), "10%");
  EXPECT_EQ(FormatShare(0.042), "4.2%");
  EXPECT_EQ(FormatShare(0.02), "2.0%");
  EXPECT_EQ(FormatShare(0.003), "0.3%");
  EXPECT_EQ(FormatShare(0.0004), "<0.1%");
  EXPECT_EQ(FormatShare(0), "0%");
  EXPECT_EQ(FormatShare(-0.042), "-4.2%");
  EXPECT_EQ(FormatShare(kInf), "n/a");
}

TEST(UnitsTest, BytesInBinaryUnits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1000), "1000 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(3.0 * 1024 * 1024), "3.00 MiB");
  EXPECT_EQ(FormatBytes(1.25 * 1024 * 1024 * 1024), "1.25 GiB");
  EXPECT_EQ(FormatBytes(2.0 * 1024 * 1024 * 1024 * 1024), "2.00 TiB");
  EXPECT_EQ(FormatBytes(kNaN), "n/a");
}

TEST(UnitsTest, RatesInDecimalUnits) {
  EXPECT_EQ(FormatByteRate(812), "812 B/s");
  EXPECT_EQ(FormatByteRate(12.5e6), "12.5 MB/s");
  EXPECT_EQ(FormatByteRate(1.2e9), "1.20 GB/s");
  EXPECT_EQ(FormatByteRate(999.7e6), "1.00 GB/s");
  EXPECT_EQ(FormatBitRate(100e6), "800 Mbit/s");
  EXPECT_EQ(FormatBitRate(1.2e9), "9.60 Gbit/s");
}

TEST(UnitsTest, CountIsWholeOrOneDecimal) {
  EXPECT_EQ(FormatCount(3), "3");
  EXPECT_EQ(FormatCount(3.02), "3");
  EXPECT_EQ(FormatCount(2.5), "2.5");
  EXPECT_EQ(FormatCount(kNaN), "n/a");
}

}  // namespace
}  // namespace perftracker
