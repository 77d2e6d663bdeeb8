// BoundedQueue: a fixed-capacity lock-free multi-producer multi-consumer queue (Vyukov's
// bounded MPMC queue). The agent's training thread(s) put small fixed-size messages in it
// (TryPush never blocks, never allocates; false when full: the caller drops and counts),
// the agent's control thread takes them out.
//
// Invariant: cell i's sequence number says whose turn it is: seq == pos -> free for the
// producer claiming position pos; seq == pos + 1 -> filled, for the consumer at pos.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <type_traits>

namespace perftracker {

template <typename T>
class BoundedQueue {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  // `capacity` must be a power of two.
  explicit BoundedQueue(size_t capacity) : mask_(capacity - 1), cells_(new Cell[capacity]) {
    for (size_t i = 0; i < capacity; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  bool TryPush(const T& value) {
    size_t pos = enqueue_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      const size_t seq = cell.seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos);
      if (diff == 0) {
        if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          cell.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = enqueue_.load(std::memory_order_relaxed);
      }
    }
  }

  bool TryPop(T* out) {
    size_t pos = dequeue_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      const size_t seq = cell.seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos + 1);
      if (diff == 0) {
        if (dequeue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          *out = cell.value;
          cell.seq.store(pos + mask_ + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // empty
      } else {
        pos = dequeue_.load(std::memory_order_relaxed);
      }
    }
  }

 private:
  struct Cell {
    std::atomic<size_t> seq;
    T value;
  };
  const size_t mask_;
  std::unique_ptr<Cell[]> cells_;
  alignas(64) std::atomic<size_t> enqueue_{0};
  alignas(64) std::atomic<size_t> dequeue_{0};
};

}  // namespace perftracker
