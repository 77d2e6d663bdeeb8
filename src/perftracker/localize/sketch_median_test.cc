#include "perftracker/localize/sketch_median.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace perftracker::localize {
namespace {

// SketchMedian is QuantileSketch::Quantile(0.5), only cheaper: the localizer's records and
// findings must not move by one ulp, so every case compares the bits.
void ExpectSameBits(SketchMedian& median, const QuantileSketch& s, const char* what) {
  const double want = s.Quantile(0.5);
  const double got = median(s);
  EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(want))
      << what << ": SketchMedian " << got << ", Quantile(0.5) " << want;
}

TEST(SketchMedianTest, EmptyAndOneValueSketches) {
  SketchMedian median;
  ExpectSameBits(median, QuantileSketch(), "empty");
  for (double v : {1.0, 1e-3, 123456.789, 1e30, 0.0, -0.0, -5.0}) {
    QuantileSketch one;
    one.Add(v);
    ExpectSameBits(median, one, "one value");
    QuantileSketch repeated;  // one value added many times (a heap state, one bucket)
    repeated.Add(v, 7);
    ExpectSameBits(median, repeated, "one value, 7 times");
    QuantileSketch twice;
    twice.Add(v);
    twice.Add(v);
    ExpectSameBits(median, twice, "one value, added twice");
  }
}

TEST(SketchMedianTest, RestoredSketchesWithEqualMinAndMax) {
  SketchMedian median;
  const int32_t index = QuantileSketch::BucketIndex(50e3);
  struct Case {
    const char* what;
    std::vector<uint64_t> buckets;
    uint64_t zeros;
    double value;  // min and max
  } cases[] = {
      {"one bucket", {3}, 0, 50e3},
      {"more zeros than half (inconsistent, accepted)", {1}, 3, 50e3},
      {"fewer zeros than half (inconsistent, accepted)", {3}, 1, 50e3},
      {"zeros only, min = max = -0", {}, 4, -0.0},
      {"zeros only, min = max = 0", {}, 4, 0.0},
      {"buckets, min = max = 0 (inconsistent, accepted)", {5}, 0, 0.0},
  };
  for (const Case& c : cases) {
    QuantileSketch s;
    const int32_t offset = c.buckets.empty() ? 0 : index;
    const double sum =
        c.value * static_cast<double>(c.zeros + (c.buckets.empty() ? 0 : c.buckets[0]));
    ASSERT_TRUE(s.Restore(offset, c.buckets, c.zeros, sum, c.value, c.value)) << c.what;
    ExpectSameBits(median, s, c.what);
  }
}

TEST(SketchMedianTest, ManySketchesOfVaryingValues) {
  SketchMedian median;
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> duration(std::log(50e3), 1.5);
  std::uniform_int_distribution<int> size(1, 40);
  std::uniform_int_distribution<int> kind(0, 9);
  for (int n = 0; n < 2000; ++n) {
    QuantileSketch s;
    const int values = size(rng);
    for (int i = 0; i < values; ++i) {
      const int k = kind(rng);
      if (k == 0) {
        s.Add(0.0);  // zero-length events
      } else if (k == 1) {
        s.Add(duration(rng) * 1e12);  // far outliers: collapse the lowest buckets
      } else {
        s.Add(duration(rng), static_cast<uint64_t>(k));
      }
    }
    ExpectSameBits(median, s, "random");
  }
}

}  // namespace
}  // namespace perftracker::localize
