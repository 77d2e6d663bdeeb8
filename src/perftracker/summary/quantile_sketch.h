// QuantileSketch: a mergeable, bounded duration distribution (DDSketch, Masson et al.,
// VLDB 2019) with a relative-accuracy guarantee.
//
// Why DDSketch: duration distributions are long-tailed and what we compare across workers
// is relative ("rank 3's p50 of this function is 2x its peers'"). DDSketch gives every
// quantile within a relative error alpha of the true value, merges exactly (bucket counts
// add, so merging per-worker or per-window sketches is lossless), and its size depends on
// the spread of the values, not on their number. t-digest merges only approximately and
// KLL gives rank, not value, error.
//
// Algorithm: a value v > 0 falls in bucket i = ceil(log_gamma(v)), gamma = (1+a)/(1-a);
// every value in bucket i is within a relative error a of 2*gamma^i/(gamma+1). Buckets are
// a dense array from offset_. When the span would exceed max_buckets, the lowest buckets
// are collapsed into one ("collapsing lowest" DDSketch): the upper quantiles, where
// stragglers show, stay exact to alpha; only quantiles inside the collapsed low tail lose
// accuracy. Values <= 0 are counted in zero_count_.
//
// Memory: a summary holds one sketch per call path, and with Python stacks most paths run
// once (one bucket), so a single bucket lives inline; more go to the heap, in a buffer of
// Capacity(size) entries (a power of two up to kDefaultMaxBuckets). 56 bytes, no
// allocation for a one-bucket sketch.
#pragma once

#include <cstdint>
#include <span>

namespace perftracker {

class QuantileSketch {
 public:
  static constexpr double kDefaultRelativeAccuracy = 0.02;
  static constexpr int kDefaultMaxBuckets = 96;

  QuantileSketch() = default;
  QuantileSketch(const QuantileSketch& other);
  QuantileSketch(QuantileSketch&& other) noexcept;
  QuantileSketch& operator=(const QuantileSketch& other);
  QuantileSketch& operator=(QuantileSketch&& other) noexcept;
  ~QuantileSketch();

  void Add(double value, uint64_t times = 1);
  // Exact merge; both sketches must share relative accuracy (all perftracker sketches do).
  void Merge(const QuantileSketch& other);
  // q in [0,1]. Returns 0 for an empty sketch.
  double Quantile(double q) const;

  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  double min() const { return count_ ? min_ : 0; }
  double max() const { return count_ ? max_ : 0; }
  double mean() const { return count_ ? sum_ / static_cast<double>(count_) : 0; }

  // Raw state, for the wire form and tests.
  int32_t offset() const { return offset_; }
  std::span<const uint64_t> buckets() const { return {data(), size_}; }
  uint64_t zero_count() const { return zero_count_; }
  // Rebuilds a sketch from its raw state (the wire decoder). Returns false if inconsistent.
  bool Restore(int32_t offset, std::span<const uint64_t> buckets, uint64_t zero_count, double sum,
               double min, double max);

  static int32_t BucketIndex(double value);
  static double BucketValue(int32_t index);

 private:
  void EnsureRange(int32_t index);
  // Heap entries allocated for `size` buckets (0 for at most one: it is inline).
  static uint32_t Capacity(uint32_t size);
  uint64_t* data() { return size_ <= 1 ? &inline_bucket_ : heap_; }
  const uint64_t* data() const { return size_ <= 1 ? &inline_bucket_ : heap_; }
  // Replaces the buckets with `size` copies from `from`, reallocating as needed.
  void Assign(const uint64_t* from, uint32_t size);
  void Release();

  union {
    uint64_t inline_bucket_ = 0;  // size_ <= 1
    uint64_t* heap_;              // size_ > 1: Capacity(size_) entries
  };
  uint32_t size_ = 0;
  int32_t offset_ = 0;
  uint64_t zero_count_ = 0;
  uint64_t count_ = 0;
  double sum_ = 0;
  double min_ = 0;
  double max_ = 0;
};

}  // namespace perftracker
