#include "perftracker/summary/quantile_sketch.h"

#include <algorithm>
#include <bit>
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

QuantileSketch::QuantileSketch(const QuantileSketch& other) { *this = other; }

// A moved-from sketch is empty.
QuantileSketch::QuantileSketch(QuantileSketch&& other) noexcept { *this = std::move(other); }

QuantileSketch& QuantileSketch::operator=(const QuantileSketch& other) {
  if (this == &other) return *this;
  Assign(other.data(), other.size_);
  offset_ = other.offset_;
  zero_count_ = other.zero_count_;
  count_ = other.count_;
  sum_ = other.sum_;
  min_ = other.min_;
  max_ = other.max_;
  return *this;
}

QuantileSketch& QuantileSketch::operator=(QuantileSketch&& other) noexcept {
  if (this == &other) return *this;
  Release();
  if (other.size_ > 1) {
    heap_ = other.heap_;
  } else {
    inline_bucket_ = other.inline_bucket_;
  }
  size_ = other.size_;
  offset_ = other.offset_;
  zero_count_ = other.zero_count_;
  count_ = other.count_;
  sum_ = other.sum_;
  min_ = other.min_;
  max_ = other.max_;
  // The source is left empty (not half of a sketch: counts without buckets).
  other.size_ = 0;
  other.inline_bucket_ = 0;
  other.offset_ = 0;
  other.zero_count_ = other.count_ = 0;
  other.sum_ = other.min_ = other.max_ = 0;
  return *this;
}

QuantileSketch::~QuantileSketch() { Release(); }

uint32_t QuantileSketch::Capacity(uint32_t size) {
  if (size <= 1) return 0;
  return std::min(std::bit_ceil(size), static_cast<uint32_t>(kDefaultMaxBuckets));
}

void QuantileSketch::Release() {
  if (size_ > 1) delete[] heap_;
  size_ = 0;
  inline_bucket_ = 0;
}

void QuantileSketch::Assign(const uint64_t* from, uint32_t size) {
  if (Capacity(size) != Capacity(size_)) {
    Release();
    if (size > 1) heap_ = new uint64_t[Capacity(size)];
  }
  size_ = size;
  std::copy(from, from + size, data());
}

void QuantileSketch::EnsureRange(int32_t index) {
  if (size_ == 0) {
    offset_ = index;
    size_ = 1;
    inline_bucket_ = 0;
    return;
  }
  const int64_t top = int64_t{offset_} + size_ - 1;
  if (index >= offset_ && index <= top) return;
  const int64_t hi = std::max<int64_t>(top, index);
  // At most kDefaultMaxBuckets remain: the lowest buckets collapse into the lowest kept one.
  const int64_t lo =
      std::max<int64_t>(std::min<int64_t>(offset_, index), hi - kDefaultMaxBuckets + 1);
  uint64_t next[kDefaultMaxBuckets] = {};
  const uint64_t* cur = data();
  for (uint32_t i = 0; i < size_; ++i) {
    next[std::max<int64_t>(offset_ + int64_t{i}, lo) - lo] += cur[i];
  }
  Assign(next, static_cast<uint32_t>(hi - lo + 1));
  offset_ = static_cast<int32_t>(lo);
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
  data()[index - offset_] += times;
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
  const uint64_t* theirs = other.data();
  for (uint32_t i = 0; i < other.size_; ++i) {
    if (theirs[i] == 0) continue;
    int32_t index = other.offset_ + static_cast<int32_t>(i);
    EnsureRange(index);
    index = std::max(index, offset_);
    data()[index - offset_] += theirs[i];
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
  const uint64_t* buckets = data();
  for (uint32_t i = 0; i < size_; ++i) {
    seen += buckets[i];
    if (seen > rank) {
      return std::clamp(BucketValue(offset_ + static_cast<int32_t>(i)), min_, max_);
    }
  }
  return max_;
}

bool QuantileSketch::Restore(int32_t offset, std::span<const uint64_t> buckets, uint64_t zero_count,
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
  Assign(buckets.data(), static_cast<uint32_t>(buckets.size()));
  zero_count_ = zero_count;
  count_ = total;
  sum_ = sum;
  min_ = min;
  max_ = max;
  return true;
}

}  // namespace perftracker
