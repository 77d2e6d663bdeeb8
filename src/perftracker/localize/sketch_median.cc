#include "perftracker/localize/sketch_median.h"

#include <algorithm>
#include <cstddef>
#include <span>

namespace perftracker::localize {

double SketchMedian::operator()(const QuantileSketch& s) {
  const uint64_t count = s.count();
  if (count == 0) return 0;
  // Each accessor once (this runs once per (worker, function)).
  const double lo = s.min();
  const double hi = s.max();
  if (!(lo <= hi)) return s.mean();
  const uint64_t zeros = s.zero_count();
  // All values equal and positive (a sketch of one value, or of one value added `times`
  // times): the median is that value. The path below gives it too, bit for bit: with no
  // zeros the rank is never below them, a bucket value clamped to [lo, lo] is lo (lo > 0
  // rules out +0 / -0, which compare equal with different bits), and so is the
  // fall-through `hi`. This skips the rank, offset() and buckets() (for a one-value sketch
  // offset() takes a log, BucketIndex); see docs/performance.md (issue 11).
  if (zeros == 0 && lo == hi && lo > 0) return lo;
  const auto rank = static_cast<uint64_t>(0.5 * static_cast<double>(count - 1));
  if (rank < zeros) return std::min(0.0, hi);
  uint64_t seen = zeros;
  const std::span<const uint64_t> b = s.buckets();
  for (size_t i = 0; i < b.size(); ++i) {
    seen += b[i];
    if (seen > rank) return std::clamp(Value(s.offset() + static_cast<int32_t>(i)), lo, hi);
  }
  return hi;
}

double SketchMedian::Value(int32_t index) {
  if (index < kLow || index >= kHigh) return QuantileSketch::BucketValue(index);
  if (cache_.empty()) cache_.assign(static_cast<size_t>(kHigh - kLow), -1.0);
  double& v = cache_[static_cast<size_t>(index - kLow)];
  if (v < 0) v = QuantileSketch::BucketValue(index);
  return v;
}

}  // namespace perftracker::localize
