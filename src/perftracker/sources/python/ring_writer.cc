#include "perftracker/sources/python/ring_writer.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

namespace perftracker {
namespace {

std::atomic<uint64_t> g_next_generation{1};

struct ThreadRingCache {
  uint64_t generation = 0;
  int ring = RingWriter::kNoRing;
};
thread_local ThreadRingCache t_ring_cache;

}  // namespace

RingWriter::RingWriter(AgentShm* shm)
    : shm_(shm), generation_(g_next_generation.fetch_add(1, std::memory_order_relaxed)) {}

uint64_t RingWriter::CurrentThreadId() { return static_cast<uint64_t>(syscall(SYS_gettid)); }

int RingWriter::RingForCurrentThread() {
  ThreadRingCache& cache = t_ring_cache;
  if (cache.generation == generation_) return cache.ring;
  const int ring = RingForThread(CurrentThreadId());
  cache.generation = generation_;
  cache.ring = ring;
  return ring;
}

int RingWriter::RingForThread(uint64_t thread_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ring_of_thread_.find(thread_id);
  if (it != ring_of_thread_.end()) return it->second;
  const int ring = shm_->ClaimRing(thread_id);
  ring_of_thread_.emplace(thread_id, ring);
  return ring;
}

bool RingWriter::Push(int ring, const Event& event) {
  if (ring < 0) {
    shm_->header()->dropped_no_ring.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return shm_->Push(ring, event);
}

}  // namespace perftracker
