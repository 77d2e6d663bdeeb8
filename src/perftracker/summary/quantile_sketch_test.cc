#include "perftracker/summary/quantile_sketch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace perftracker {
namespace {

using Buckets = std::vector<uint64_t>;

// The exact quantile under the sketch's rank convention: sorted[floor(q * (n - 1))].
double Exact(const std::vector<double>& sorted, double q) {
  return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
}

std::vector<double> LogNormal(size_t n, double mu, double sigma, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(mu, sigma);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

constexpr double kTolerance = QuantileSketch::kDefaultRelativeAccuracy + 1e-9;
const std::vector<double> kQuantiles = {0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999};

TEST(QuantileSketchTest, RelativeAccuracyOnLogNormalDurations) {
  // Kernel-like durations: median ~ 50 us, a long right tail.
  std::vector<double> values = LogNormal(100000, std::log(50e3), 0.5, 1);
  QuantileSketch sketch;
  for (double v : values) sketch.Add(v);
  std::sort(values.begin(), values.end());
  EXPECT_EQ(sketch.count(), values.size());
  for (double q : kQuantiles) {
    const double exact = Exact(values, q);
    EXPECT_LE(std::abs(sketch.Quantile(q) - exact) / exact, kTolerance) << "q=" << q;
  }
  EXPECT_DOUBLE_EQ(sketch.Quantile(0), values.front());
  EXPECT_DOUBLE_EQ(sketch.Quantile(1), values.back());
  EXPECT_DOUBLE_EQ(sketch.min(), values.front());
  EXPECT_DOUBLE_EQ(sketch.max(), values.back());
  EXPECT_LE(sketch.buckets().size(), static_cast<size_t>(QuantileSketch::kDefaultMaxBuckets));
}

TEST(QuantileSketchTest, MergeOfPartsEqualsSketchOfWhole) {
  // Wide enough that both the parts and the whole collapse their low buckets.
  const std::vector<double> values = LogNormal(30000, std::log(1e5), 1.5, 2);
  QuantileSketch whole;
  QuantileSketch parts[3];
  for (size_t i = 0; i < values.size(); ++i) {
    whole.Add(values[i]);
    parts[i % 3].Add(values[i]);
  }
  parts[1].Add(0.0);
  whole.Add(0.0);
  QuantileSketch merged;
  for (const auto& p : parts) merged.Merge(p);
  EXPECT_EQ(merged.offset(), whole.offset());
  EXPECT_TRUE(std::ranges::equal(merged.buckets(), whole.buckets()));
  EXPECT_EQ(merged.zero_count(), whole.zero_count());
  EXPECT_EQ(merged.count(), whole.count());
  EXPECT_DOUBLE_EQ(merged.min(), whole.min());
  EXPECT_DOUBLE_EQ(merged.max(), whole.max());
  EXPECT_NEAR(merged.sum(), whole.sum(), 1e-9 * whole.sum());
  for (double q : kQuantiles) EXPECT_DOUBLE_EQ(merged.Quantile(q), whole.Quantile(q)) << q;

  // Merging into an empty sketch, and merging an empty one, change nothing.
  QuantileSketch empty;
  merged.Merge(empty);
  EXPECT_TRUE(std::ranges::equal(merged.buckets(), whole.buckets()));
}

TEST(QuantileSketchTest, CollapseKeepsUpperQuantilesAccurate) {
  // Log-uniform over 9 decades: far more than kDefaultMaxBuckets buckets.
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> exponent(0, 9);
  std::vector<double> values(50000);
  for (double& v : values) v = std::pow(10.0, exponent(rng));
  QuantileSketch sketch;
  for (double v : values) sketch.Add(v);
  std::sort(values.begin(), values.end());
  EXPECT_EQ(sketch.buckets().size(), static_cast<size_t>(QuantileSketch::kDefaultMaxBuckets));
  EXPECT_EQ(sketch.count(), values.size());
  // Kept buckets cover [max / gamma^96, max]: about the top 1.7 decades, i.e. q >= ~0.82.
  for (double q : {0.85, 0.9, 0.95, 0.99, 0.999}) {
    const double exact = Exact(values, q);
    EXPECT_LE(std::abs(sketch.Quantile(q) - exact) / exact, kTolerance) << "q=" << q;
  }
  // Collapsed quantiles are under-resolved but never above the truth of the kept range.
  EXPECT_LE(sketch.Quantile(0.5), Exact(values, 0.9));
  EXPECT_DOUBLE_EQ(sketch.Quantile(0), values.front());
}

TEST(QuantileSketchTest, EmptyZeroAndNegativeValues) {
  QuantileSketch empty;
  EXPECT_EQ(empty.count(), 0u);
  EXPECT_EQ(empty.Quantile(0.5), 0);
  EXPECT_EQ(empty.min(), 0);
  EXPECT_EQ(empty.max(), 0);
  EXPECT_EQ(empty.mean(), 0);

  QuantileSketch s;
  s.Add(-5);
  s.Add(0);
  s.Add(10);
  s.Add(std::numeric_limits<double>::quiet_NaN());  // ignored
  EXPECT_EQ(s.count(), 3u);
  EXPECT_EQ(s.zero_count(), 2u);
  EXPECT_DOUBLE_EQ(s.Quantile(0), -5);
  EXPECT_DOUBLE_EQ(s.Quantile(0.5), 0);
  EXPECT_DOUBLE_EQ(s.Quantile(1), 10);
  EXPECT_DOUBLE_EQ(s.sum(), 5);
  EXPECT_DOUBLE_EQ(s.min(), -5);

  QuantileSketch zeros;
  zeros.Add(0, 1000);
  EXPECT_EQ(zeros.count(), 1000u);
  EXPECT_TRUE(zeros.buckets().empty());
  EXPECT_EQ(zeros.Quantile(0.99), 0);
}

TEST(QuantileSketchTest, RestoreRoundTripsAndValidates) {
  QuantileSketch original;
  for (double v : LogNormal(1000, 10, 1, 4)) original.Add(v);
  original.Add(0, 3);
  QuantileSketch restored;
  ASSERT_TRUE(restored.Restore(original.offset(), original.buckets(), original.zero_count(),
                               original.sum(), original.min(), original.max()));
  EXPECT_EQ(restored.count(), original.count());
  EXPECT_TRUE(std::ranges::equal(restored.buckets(), original.buckets()));
  for (double q : kQuantiles) EXPECT_DOUBLE_EQ(restored.Quantile(q), original.Quantile(q));

  QuantileSketch bad;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // Too many buckets.
  EXPECT_FALSE(
      bad.Restore(0, std::vector<uint64_t>(QuantileSketch::kDefaultMaxBuckets + 1, 1), 0, 1, 1, 2));
  // min above max, NaN or infinite bounds on a non-empty sketch.
  EXPECT_FALSE(bad.Restore(0, Buckets{1, 2}, 0, 3, 5, 1));
  EXPECT_FALSE(bad.Restore(0, Buckets{1}, 0, 1, nan, 1));
  EXPECT_FALSE(bad.Restore(0, Buckets{1}, 0, 1, 1, inf));
  EXPECT_FALSE(bad.Restore(0, Buckets{1}, 0, nan, 1, 1));
  // Counts that overflow when added up.
  EXPECT_FALSE(bad.Restore(0, Buckets{UINT64_MAX, 2}, 0, 1, 1, 2));
  // Bucket range that overflows the index type.
  EXPECT_FALSE(bad.Restore(INT32_MAX - 1, Buckets{1, 1, 1}, 0, 1, 1, 2));
  // An empty sketch restores fine.
  EXPECT_TRUE(bad.Restore(0, Buckets{}, 0, 0, 0, 0));
  EXPECT_EQ(bad.count(), 0u);
}

TEST(QuantileSketchTest, CopiesAndMovesKeepTheirOwnBuckets) {
  // One bucket (inline) and many (on the heap): a copy is independent of its source, a
  // moved-from sketch is empty and usable.
  for (const std::vector<double>& values :
       {std::vector<double>{7.0, 7.0}, LogNormal(2000, std::log(1e4), 1.0, 5)}) {
    QuantileSketch a;
    for (double v : values) a.Add(v);
    const Buckets before(a.buckets().begin(), a.buckets().end());
    QuantileSketch copy = a;
    copy.Add(1e9);
    copy.Add(1.0);
    EXPECT_TRUE(std::ranges::equal(a.buckets(), before));
    EXPECT_EQ(copy.count(), a.count() + 2);

    QuantileSketch moved = std::move(a);
    EXPECT_TRUE(std::ranges::equal(moved.buckets(), before));
    EXPECT_EQ(moved.count(), values.size());
    EXPECT_EQ(a.count(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_TRUE(a.buckets().empty());
    a.Add(3.0);
    EXPECT_EQ(a.buckets().size(), 1u);

    copy = moved;  // assigning over a sketch that has buckets of its own
    EXPECT_TRUE(std::ranges::equal(copy.buckets(), before));
    moved = QuantileSketch();
    EXPECT_TRUE(moved.buckets().empty());
  }
}

// Raw state and every quantile of two sketches, bit for bit.
void ExpectSameSketch(const QuantileSketch& a, const QuantileSketch& b) {
  EXPECT_EQ(a.count(), b.count());
  EXPECT_EQ(a.offset(), b.offset());
  EXPECT_TRUE(std::ranges::equal(a.buckets(), b.buckets()));
  EXPECT_EQ(a.zero_count(), b.zero_count());
  EXPECT_EQ(std::bit_cast<uint64_t>(a.sum()), std::bit_cast<uint64_t>(b.sum()));
  EXPECT_EQ(std::bit_cast<uint64_t>(a.min()), std::bit_cast<uint64_t>(b.min()));
  EXPECT_EQ(std::bit_cast<uint64_t>(a.max()), std::bit_cast<uint64_t>(b.max()));
  for (double q : kQuantiles) EXPECT_EQ(a.Quantile(q), b.Quantile(q)) << "q=" << q;
}

TEST(QuantileSketchTest, AOneValueSketchIsSmallAndReadsAsAnyOther) {
  // Most call paths of a Python-stack trace run once: such a sketch holds its value inline
  // (16 bytes, no allocation); its buckets, sum and bounds follow from the value.
  static_assert(sizeof(QuantileSketch) <= 16);
  for (double v : {1234.5, 1.0, 0.0, -0.0, -3.0, 1e15}) {
    QuantileSketch one;
    one.Add(v);
    // The same value through the general form: added twice over a zero count and merged.
    QuantileSketch general;
    general.Add(v, 1);
    QuantileSketch two;
    two.Add(v, 2);
    EXPECT_EQ(two.count(), 2u);
    EXPECT_EQ(one.count(), 1u);
    EXPECT_EQ(one.min(), v);
    EXPECT_EQ(one.max(), v);
    EXPECT_EQ(one.sum(), 0.0 + v);
    EXPECT_EQ(one.zero_count(), v <= 0 ? 1u : 0u);
    EXPECT_EQ(one.buckets().size(), v <= 0 ? 0u : 1u);
    if (v > 0) {
      EXPECT_EQ(one.offset(), QuantileSketch::BucketIndex(v));
    }
    // Restored from its raw state, it is the same sketch; a second value then counts.
    QuantileSketch restored;
    ASSERT_TRUE(restored.Restore(one.offset(), one.buckets(), one.zero_count(), one.sum(),
                                 one.min(), one.max()));
    ExpectSameSketch(restored, one);
    QuantileSketch merged;
    merged.Merge(one);
    merged.Merge(one);
    one.Add(v);
    ExpectSameSketch(one, two);
    ExpectSameSketch(merged, two);
  }
  // One value whose raw state does not follow from it (written elsewhere) keeps it as is.
  QuantileSketch odd;
  ASSERT_TRUE(odd.Restore(5, Buckets{0, 1}, 0, 100, 100, 100));
  EXPECT_EQ(odd.offset(), 5);
  EXPECT_TRUE(std::ranges::equal(odd.buckets(), Buckets{0, 1}));
  QuantileSketch copy = odd;
  EXPECT_EQ(copy.offset(), 5);
  EXPECT_EQ(copy.count(), 1u);
  // An empty restored sketch with a sum keeps it (as the wire said).
  QuantileSketch counted_nothing;
  ASSERT_TRUE(counted_nothing.Restore(3, Buckets{}, 0, 7, 0, 0));
  EXPECT_EQ(counted_nothing.count(), 0u);
  EXPECT_EQ(counted_nothing.sum(), 7);
  EXPECT_EQ(counted_nothing.offset(), 3);
  EXPECT_EQ(counted_nothing.min(), 0);
}

}  // namespace
}  // namespace perftracker
