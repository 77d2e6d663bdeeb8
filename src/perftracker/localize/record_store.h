// RecordStore: the localizer's per-(worker, function) records in fixed-size blocks, so that
// 30 M records (a gigabyte) grow without a reallocation copy of the whole array. A block is
// allocated, not written: its pages become resident as records fill them (one trace file's
// few thousand records do not cost the 7 MiB block).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace perftracker::localize {

// Per iteration values of one function on one worker.
struct FunctionRecord {
  uint32_t fid = 0;
  float time_ns = 0;      // inclusive time per iteration
  float p50_ns = 0;       // median call duration
  float calls = 0;        // calls per iteration
  float critical_ns = 0;  // critical-path time per iteration
  float idle_gap_ns = 0;  // idle gap before calls, per iteration
  float bytes = 0;        // bytes per iteration
};
// No self time: no rule reads it (issue 11: 4 bytes a record, 120 MB at 100,000 workers).
static_assert(sizeof(FunctionRecord) == 28, "keep the per-(worker, function) record compact");

class RecordStore {
 public:
  static constexpr size_t kRecordsPerBlock = size_t{1} << 18;

  uint64_t size() const { return size_; }
  FunctionRecord& operator[](uint64_t i) {
    return blocks_[i / kRecordsPerBlock][i % kRecordsPerBlock];
  }
  const FunctionRecord& operator[](uint64_t i) const {
    return blocks_[i / kRecordsPerBlock][i % kRecordsPerBlock];
  }
  // Calls f(index, record) for the records [first, first + count), in order, a block at a
  // time: without operator[]'s block lookup per record (the localizer's passes over all
  // records, 30 M at 100,000 workers; issue 11).
  template <typename F>
  void ForEach(uint64_t first, uint64_t count, F&& f) const {
    const uint64_t end = first + count;
    while (first < end) {
      const uint64_t block_end = std::min(end, (first / kRecordsPerBlock + 1) * kRecordsPerBlock);
      const FunctionRecord* r = &(*this)[first];
      for (uint64_t i = first; i < block_end; ++i, ++r) f(i, *r);
      first = block_end;
    }
  }
  // Records [first, first + count) as one array when they lie in one block, else null.
  FunctionRecord* Contiguous(uint64_t first, uint64_t count) {
    if (count == 0 || first + count > size_) return nullptr;
    if (first / kRecordsPerBlock != (first + count - 1) / kRecordsPerBlock) return nullptr;
    return &(*this)[first];
  }
  void push_back(const FunctionRecord& r) {
    if (size_ % kRecordsPerBlock == 0) {
      void* block = std::malloc(kRecordsPerBlock * sizeof(FunctionRecord));
      if (block == nullptr) throw std::bad_alloc();
      blocks_.emplace_back(static_cast<FunctionRecord*>(block));
    }
    std::construct_at(&(*this)[size_++], r);
  }

 private:
  struct Free {
    void operator()(FunctionRecord* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<FunctionRecord[], Free>> blocks_;
  uint64_t size_ = 0;
};

}  // namespace perftracker::localize
