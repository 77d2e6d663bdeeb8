#include "perftracker/localize/sketch_median.h"

#include <algorithm>
#include <cstddef>

namespace perftracker::localize {

double SketchMedian::operator()(const QuantileSketch& s) {
  if (s.count() == 0) return 0;
  if (!(s.min() <= s.max())) return s.mean();
  const auto rank = static_cast<uint64_t>(0.5 * static_cast<double>(s.count() - 1));
  if (rank < s.zero_count()) return std::min(0.0, s.max());
  uint64_t seen = s.zero_count();
  const auto& b = s.buckets();
  for (size_t i = 0; i < b.size(); ++i) {
    seen += b[i];
    if (seen > rank) {
      return std::clamp(Value(s.offset() + static_cast<int32_t>(i)), s.min(), s.max());
    }
  }
  return s.max();
}

double SketchMedian::Value(int32_t index) {
  if (index < kLow || index >= kHigh) return QuantileSketch::BucketValue(index);
  if (cache_.empty()) cache_.assign(static_cast<size_t>(kHigh - kLow), -1.0);
  double& v = cache_[static_cast<size_t>(index - kLow)];
  if (v < 0) v = QuantileSketch::BucketValue(index);
  return v;
}

}  // namespace perftracker::localize
