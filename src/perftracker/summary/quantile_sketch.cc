#include "perftracker/summary/quantile_sketch.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace perftracker {
namespace {

constexpr double kAlpha = QuantileSketch::kDefaultRelativeAccuracy;
const double kGamma = (1 + kAlpha) / (1 - kAlpha);
const double kLogGamma = std::log(kGamma);

}  // namespace

int32_t QuantileSketch::BucketIndex(double value) {
  return static_cast<int32_t>(std::ceil(std::log(value) / kLogGamma));
}

double QuantileSketch::BucketValue(int32_t index) {
  return 2 * std::pow(kGamma, index) / (kGamma + 1);
}

void QuantileSketch::EnsureRange(int32_t index) {
  if (buckets_.empty()) {
    offset_ = index;
    buckets_.assign(1, 0);
    return;
  }
  const int32_t top = offset_ + static_cast<int32_t>(buckets_.size()) - 1;
  if (index > top) {
    buckets_.resize(buckets_.size() + static_cast<size_t>(index - top), 0);
  } else if (index < offset_) {
    buckets_.insert(buckets_.begin(), static_cast<size_t>(offset_ - index), 0);
    offset_ = index;
  }
  // Collapse the lowest buckets so that at most kDefaultMaxBuckets remain.
  if (buckets_.size() > static_cast<size_t>(kDefaultMaxBuckets)) {
    const size_t excess = buckets_.size() - kDefaultMaxBuckets;
    uint64_t folded = 0;
    for (size_t i = 0; i <= excess; ++i) folded += buckets_[i];
    buckets_.erase(buckets_.begin(), buckets_.begin() + static_cast<std::ptrdiff_t>(excess));
    buckets_[0] = folded;
    offset_ += static_cast<int32_t>(excess);
  }
}

void QuantileSketch::Add(double value, uint64_t times) {
  if (times == 0 || std::isnan(value)) return;
  if (count_ == 0) {
    min_ = max_ = value;
  } else {
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }
  count_ += times;
  sum_ += value * static_cast<double>(times);
  if (value <= 0) {
    zero_count_ += times;
    return;
  }
  int32_t index = BucketIndex(value);
  EnsureRange(index);
  index = std::max(index, offset_);  // a value below a collapsed range lands in the lowest bucket
  buckets_[static_cast<size_t>(index - offset_)] += times;
}

void QuantileSketch::Merge(const QuantileSketch& other) {
  if (other.count_ == 0) return;
  if (count_ == 0) {
    *this = other;
    return;
  }
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  count_ += other.count_;
  sum_ += other.sum_;
  zero_count_ += other.zero_count_;
  for (size_t i = 0; i < other.buckets_.size(); ++i) {
    if (other.buckets_[i] == 0) continue;
    int32_t index = other.offset_ + static_cast<int32_t>(i);
    EnsureRange(index);
    index = std::max(index, offset_);
    buckets_[static_cast<size_t>(index - offset_)] += other.buckets_[i];
  }
}

double QuantileSketch::Quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  if (q == 0) return min_;
  if (q == 1) return max_;
  const auto rank = static_cast<uint64_t>(q * static_cast<double>(count_ - 1));
  if (rank < zero_count_) return std::min(0.0, max_);
  uint64_t seen = zero_count_;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (seen > rank) {
      return std::clamp(BucketValue(offset_ + static_cast<int32_t>(i)), min_, max_);
    }
  }
  return max_;
}

bool QuantileSketch::Restore(int32_t offset, std::vector<uint64_t> buckets, uint64_t zero_count,
                             double sum, double min, double max) {
  if (buckets.size() > static_cast<size_t>(kDefaultMaxBuckets)) return false;
  // The highest bucket index must be representable.
  if (!buckets.empty() &&
      offset > std::numeric_limits<int32_t>::max() - static_cast<int32_t>(buckets.size() - 1)) {
    return false;
  }
  uint64_t total = zero_count;
  for (uint64_t b : buckets) {
    if (b > std::numeric_limits<uint64_t>::max() - total) return false;  // count overflow
    total += b;
  }
  if (!std::isfinite(sum)) return false;
  if (total > 0 && (!std::isfinite(min) || !std::isfinite(max) || min > max)) return false;
  offset_ = offset;
  buckets_ = std::move(buckets);
  zero_count_ = zero_count;
  count_ = total;
  sum_ = sum;
  min_ = min;
  max_ = max;
  return true;
}

}  // namespace perftracker
