#include "perftracker/summary/quantile_sketch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <new>
#include <span>

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

QuantileSketch::QuantileSketch(const QuantileSketch& other) : mode_(kEmpty) { *this = other; }

// A moved-from sketch is empty.
QuantileSketch::QuantileSketch(QuantileSketch&& other) noexcept : mode_(kEmpty) {
  *this = std::move(other);
}

QuantileSketch& QuantileSketch::operator=(const QuantileSketch& other) {
  if (this == &other) return *this;
  Release();
  if (other.mode_ == kState) {
    const State& from = *other.state_;
    State* st = NewState(Capacity(from.size));
    const uint32_t capacity = st->capacity;
    *st = from;
    st->capacity = capacity;
    std::copy(from.buckets(), from.buckets() + from.size, st->buckets());
    state_ = st;
  } else {
    single_ = other.mode_ == kSingle ? other.single_ : 0;
  }
  mode_ = other.mode_;
  return *this;
}

QuantileSketch& QuantileSketch::operator=(QuantileSketch&& other) noexcept {
  if (this == &other) return *this;
  Release();
  if (other.mode_ == kState) {
    state_ = other.state_;
  } else {
    single_ = other.mode_ == kSingle ? other.single_ : 0;
  }
  mode_ = other.mode_;
  other.mode_ = kEmpty;  // the source is left empty (not half of a sketch)
  other.single_ = 0;
  return *this;
}

QuantileSketch::~QuantileSketch() { Release(); }

uint32_t QuantileSketch::Capacity(uint32_t size) {
  if (size == 0) return 0;
  return std::min(std::bit_ceil(size), static_cast<uint32_t>(kDefaultMaxBuckets));
}

QuantileSketch::State* QuantileSketch::NewState(uint32_t capacity) {
  void* block = ::operator new(sizeof(State) + sizeof(uint64_t) * capacity);
  State* st = new (block) State;
  st->capacity = capacity;
  return st;
}

void QuantileSketch::Release() {
  if (mode_ == kState) {
    state_->~State();
    ::operator delete(state_);
  }
  mode_ = kEmpty;
  single_ = 0;
}

QuantileSketch::State* QuantileSketch::MutableState() {
  if (mode_ == kState) return state_;
  const bool had_value = mode_ == kSingle;
  const double value = single_;
  State* st = NewState(had_value && value > 0 ? 1 : 0);
  if (had_value) {
    // Exactly what adding `value` to an empty sketch holds.
    st->count = 1;
    st->sum = 0.0 + value;
    st->min = st->max = value;
    if (value <= 0) {
      st->zero_count = 1;
    } else {
      st->offset = BucketIndex(value);
      st->size = 1;
      st->buckets()[0] = 1;
    }
  }
  state_ = st;
  mode_ = kState;
  return st;
}

void QuantileSketch::EnsureRange(int32_t index) {
  State* st = state_;
  if (st->size == 0) {
    if (st->capacity < 1) {
      State* grown = NewState(1);
      const uint32_t capacity = grown->capacity;
      *grown = *st;
      grown->capacity = capacity;
      ::operator delete(st);
      state_ = st = grown;
    }
    st->offset = index;
    st->size = 1;
    st->buckets()[0] = 0;
    return;
  }
  const int64_t top = int64_t{st->offset} + st->size - 1;
  if (index >= st->offset && index <= top) return;
  const int64_t hi = std::max<int64_t>(top, index);
  // At most kDefaultMaxBuckets remain: the lowest buckets collapse into the lowest kept one.
  const int64_t lo =
      std::max<int64_t>(std::min<int64_t>(st->offset, index), hi - kDefaultMaxBuckets + 1);
  uint64_t next[kDefaultMaxBuckets] = {};
  const uint64_t* cur = st->buckets();
  for (uint32_t i = 0; i < st->size; ++i) {
    next[std::max<int64_t>(st->offset + int64_t{i}, lo) - lo] += cur[i];
  }
  const auto size = static_cast<uint32_t>(hi - lo + 1);
  if (Capacity(size) > st->capacity) {
    State* grown = NewState(Capacity(size));
    const uint32_t capacity = grown->capacity;
    *grown = *st;
    grown->capacity = capacity;
    ::operator delete(st);
    state_ = st = grown;
  }
  st->size = size;
  std::copy(next, next + size, st->buckets());
  st->offset = static_cast<int32_t>(lo);
}

void QuantileSketch::Add(double value, uint64_t times) {
  if (times == 0 || std::isnan(value)) return;
  if (mode_ == kEmpty && times == 1) {
    single_ = value;
    mode_ = kSingle;
    return;
  }
  State* st = MutableState();
  if (st->count == 0) {
    st->min = st->max = value;
  } else {
    st->min = std::min(st->min, value);
    st->max = std::max(st->max, value);
  }
  st->count += times;
  st->sum += value * static_cast<double>(times);
  if (value <= 0) {
    st->zero_count += times;
    return;
  }
  int32_t index = BucketIndex(value);
  EnsureRange(index);
  st = state_;
  // A value below a collapsed range lands in the lowest bucket.
  index = std::max(index, st->offset);
  st->buckets()[index - st->offset] += times;
}

void QuantileSketch::Merge(const QuantileSketch& other) {
  if (other.count() == 0) return;
  if (count() == 0) {
    *this = other;
    return;
  }
  State* st = MutableState();
  st->min = std::min(st->min, other.min());
  st->max = std::max(st->max, other.max());
  st->count += other.count();
  st->sum += other.sum();
  st->zero_count += other.zero_count();
  const std::span<const uint64_t> theirs = other.buckets();
  const int32_t their_offset = other.offset();
  for (uint32_t i = 0; i < theirs.size(); ++i) {
    if (theirs[i] == 0) continue;
    int32_t index = their_offset + static_cast<int32_t>(i);
    EnsureRange(index);
    st = state_;
    index = std::max(index, st->offset);
    st->buckets()[index - st->offset] += theirs[i];
  }
}

double QuantileSketch::Quantile(double q) const {
  const uint64_t n = count();
  if (n == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  if (q == 0) return min();
  if (q == 1) return max();
  const auto rank = static_cast<uint64_t>(q * static_cast<double>(n - 1));
  const uint64_t zeros = zero_count();
  if (rank < zeros) return std::min(0.0, max());
  uint64_t seen = zeros;
  const std::span<const uint64_t> b = buckets();
  const int32_t first = offset();
  for (uint32_t i = 0; i < b.size(); ++i) {
    seen += b[i];
    if (seen > rank) {
      return std::clamp(BucketValue(first + static_cast<int32_t>(i)), min(), max());
    }
  }
  return max();
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
  Release();
  auto same = [](double a, double b) {
    return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
  };
  if (total == 0 && buckets.empty() && offset == 0 && same(sum, 0.0)) return true;  // empty
  // One value whose raw state is exactly what adding it to an empty sketch gives: held inline.
  if (total == 1 && same(min, max) && same(sum, 0.0 + min)) {
    const bool derived = min <= 0
                             ? zero_count == 1 && buckets.empty() && offset == 0
                             : zero_count == 0 && buckets.size() == 1 && offset == BucketIndex(min);
    if (derived) {
      single_ = min;
      mode_ = kSingle;
      return true;
    }
  }
  State* st = NewState(Capacity(static_cast<uint32_t>(buckets.size())));
  st->count = total;
  st->size = static_cast<uint32_t>(buckets.size());
  st->offset = offset;
  st->zero_count = zero_count;
  st->sum = sum;
  st->min = min;
  st->max = max;
  std::copy(buckets.begin(), buckets.end(), st->buckets());
  state_ = st;
  mode_ = kState;
  return true;
}

}  // namespace perftracker
