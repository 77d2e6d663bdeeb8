// RingWriter: the agent's producer side of AgentShm. Each OS thread that records an event
// gets one ring for its lifetime (claimed on its first event, remembered by thread id so
// that a thread keeps its ring across profiling windows); pushing never blocks and never
// allocates: a full ring drops and counts (AgentShm), a thread that finds no free ring drops
// and counts in ShmHeader::dropped_no_ring.
//
// Producer fast path: the writer keeps each ring's head and a cached copy of the consumer's
// tail locally; it re-reads the shared tail only when the ring looks full, and publishes the
// head (release store) every kPublishEvery events and on Flush(), so the consumer's cache
// line is not pulled back and forth on every event. Events pushed but not yet published are
// invisible to the consumer until the next publication (at the latest: Flush at window end).
//
// Threading: RingForCurrentThread() may be called from any thread (a mutex guards the
// thread -> ring map; it is taken once per thread, the result is cached in the caller).
// Push() and Flush() on a ring must be serialized by the caller: the ring's own thread, or
// (the agent's case) the GIL. Only one RingWriter may write into one AgentShm.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "perftracker/core/agent_shm.h"
#include "perftracker/core/event.h"

namespace perftracker {

class RingWriter {
 public:
  static constexpr int kNoRing = -1;

  explicit RingWriter(AgentShm* shm);  // not owned, must outlive this
  RingWriter(const RingWriter&) = delete;
  RingWriter& operator=(const RingWriter&) = delete;

  // The ring of the calling thread, claimed on first use; kNoRing when all rings are taken.
  int RingForCurrentThread();
  // The ring of OS thread `thread_id` (claimed now if it has none). Only for a caller that
  // pushes on that thread's behalf while it cannot push itself (mutual exclusion, e.g. the
  // GIL, is the caller's duty).
  int RingForThread(uint64_t thread_id);
  static constexpr uint32_t kPublishEvery = 16;

  // Pushes `event` into `ring` (the caller's ring). False (and counted) when dropped.
  // Inline: the profile hook calls it once per Python call.
  bool Push(int ring, const Event& event) {
    if (ring < 0) [[unlikely]]
      return DropNoRing();
    Producer& p = producers_[static_cast<size_t>(ring)];
    if (p.head - p.cached_tail >= capacity_) [[unlikely]] {
      if (!Refresh(p)) return false;
    }
    p.events[p.head & (capacity_ - 1)] = event;
    ++p.head;
    if (++p.unpublished >= kPublishEvery) [[unlikely]] {
      p.header->head.store(p.head, std::memory_order_release);
      p.unpublished = 0;
    }
    return true;
  }
  // Publishes every ring's pushed events to the consumer.
  void FlushAll();

  AgentShm* shm() const { return shm_; }
  // Unique per RingWriter instance: lets per-thread caches detect a stale writer.
  uint64_t generation() const { return generation_; }

  // The calling thread's OS thread id (gettid).
  static uint64_t CurrentThreadId();

 private:
  struct Producer {
    RingHeader* header = nullptr;
    Event* events = nullptr;
    uint64_t head = 0;         // next write position (published up to header->head)
    uint64_t cached_tail = 0;  // the consumer's tail, as last read
    uint32_t unpublished = 0;
  };

  // The ring looks full: re-reads the consumer's tail; false (and counted) if still full.
  bool Refresh(Producer& p);
  bool DropNoRing();

  AgentShm* shm_;
  uint64_t generation_;
  uint64_t capacity_;
  std::vector<Producer> producers_;  // one per ring
  std::mutex mu_;
  std::unordered_map<uint64_t, int> ring_of_thread_;
};

}  // namespace perftracker
