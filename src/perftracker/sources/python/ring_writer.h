// RingWriter: the agent's producer side of AgentShm. Each OS thread that records an event
// gets one ring for its lifetime (claimed on its first event, remembered by thread id so
// that a thread keeps its ring across profiling windows); pushing never blocks and never
// allocates: a full ring drops and counts (AgentShm), a thread that finds no free ring drops
// and counts in ShmHeader::dropped_no_ring.
//
// Threading: RingForCurrentThread() may be called from any thread (a mutex guards the
// thread -> ring map; it is taken once per thread, the result is cached in the caller).
// Push() on a ring must only be called by the thread that owns it (SPSC rings).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

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
  // Pushes `event` into `ring` (the caller's ring). False (and counted) when dropped.
  bool Push(int ring, const Event& event);

  AgentShm* shm() const { return shm_; }
  // Unique per RingWriter instance: lets per-thread caches detect a stale writer.
  uint64_t generation() const { return generation_; }

  // The calling thread's OS thread id (gettid).
  static uint64_t CurrentThreadId();

 private:
  AgentShm* shm_;
  uint64_t generation_;
  std::mutex mu_;
  std::unordered_map<uint64_t, int> ring_of_thread_;
};

}  // namespace perftracker
