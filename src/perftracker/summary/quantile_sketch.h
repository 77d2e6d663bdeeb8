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
// accuracy. Values <= 0 are counted in zero_count.
//
// Memory: a summary holds one sketch per call path, and with Python stacks most paths run
// once, so a sketch of one value is that value (16 bytes, no allocation: its bucket, sum,
// min and max follow from it). A second value moves the sketch to a heap block holding the
// rest of its state and its buckets (Capacity(size) entries, a power of two up to
// kDefaultMaxBuckets), allocated once per growth, not twice.
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

  // The accessors are inline: the localizer reads them per (worker, function), 30 M times at
  // 100,000 workers (issue 11; an out-of-line call each was half of SketchMedian's cost).
  uint64_t count() const { return mode_ == kState ? state_->count : mode_ == kSingle ? 1 : 0; }
  double sum() const {
    // A single value's sum is 0 + value, as adding it to an empty sketch gives (-0 -> +0).
    return mode_ == kState ? state_->sum : mode_ == kSingle ? 0.0 + single_ : 0;
  }
  double min() const {
    if (mode_ == kState) return state_->count ? state_->min : 0;
    return mode_ == kSingle ? single_ : 0;
  }
  double max() const {
    if (mode_ == kState) return state_->count ? state_->max : 0;
    return mode_ == kSingle ? single_ : 0;
  }
  double mean() const {
    const uint64_t n = count();
    return n ? sum() / static_cast<double>(n) : 0;
  }

  // Raw state, for the wire form and tests.
  int32_t offset() const {
    if (mode_ == kState) return state_->offset;
    return mode_ == kSingle && single_ > 0 ? BucketIndex(single_) : 0;
  }
  std::span<const uint64_t> buckets() const {
    if (mode_ == kState) return {state_->buckets(), state_->size};
    if (mode_ == kSingle && single_ > 0) return {&kOne, 1};
    return {};
  }
  uint64_t zero_count() const {
    if (mode_ == kState) return state_->zero_count;
    return mode_ == kSingle && single_ <= 0 ? 1 : 0;
  }
  // Rebuilds a sketch from its raw state (the wire decoder). Returns false if inconsistent.
  bool Restore(int32_t offset, std::span<const uint64_t> buckets, uint64_t zero_count, double sum,
               double min, double max);

  static int32_t BucketIndex(double value);
  static double BucketValue(int32_t index);

 private:
  // The state of a sketch of two or more values (or of one value that does not follow from
  // it, e.g. restored from the wire), followed by its buckets.
  struct State {
    uint64_t count = 0;
    uint32_t size = 0;      // buckets in use
    uint32_t capacity = 0;  // buckets allocated after the header
    int32_t offset = 0;
    uint64_t zero_count = 0;
    double sum = 0;
    double min = 0;
    double max = 0;
    uint64_t* buckets() { return reinterpret_cast<uint64_t*>(this + 1); }
    const uint64_t* buckets() const { return reinterpret_cast<const uint64_t*>(this + 1); }
  };
  enum Mode : uint8_t { kEmpty, kSingle, kState };
  // One bucket holding the only value of a single-value sketch (buckets()).
  static constexpr uint64_t kOne = 1;

  // This sketch as a State (allocated from an empty or single-value sketch).
  State* MutableState();
  static State* NewState(uint32_t capacity);
  // Makes room for bucket `index` in state_, reallocating it as needed.
  void EnsureRange(int32_t index);
  // Heap entries allocated for `size` buckets (a power of two, at most kDefaultMaxBuckets).
  static uint32_t Capacity(uint32_t size);
  void Release();

  union {
    double single_;  // kSingle: the one value
    State* state_;   // kState
  };
  Mode mode_ = kEmpty;
};

}  // namespace perftracker
