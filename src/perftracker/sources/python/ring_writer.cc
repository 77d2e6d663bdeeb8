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
    : shm_(shm),
      generation_(g_next_generation.fetch_add(1, std::memory_order_relaxed)),
      capacity_(shm->header()->ring_capacity),
      producers_(shm->header()->num_rings) {
  for (uint32_t r = 0; r < producers_.size(); ++r) {
    Producer& p = producers_[r];
    p.header = shm->ring_header(static_cast<int>(r));
    // The file format (agent_shm.h): each ring is its RingHeader followed by its events.
    p.events = reinterpret_cast<Event*>(reinterpret_cast<char*>(p.header) + sizeof(RingHeader));
    p.head = p.header->head.load(std::memory_order_relaxed);
    p.cached_tail = p.header->tail.load(std::memory_order_acquire);
  }
}

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

bool RingWriter::DropNoRing() {
  shm_->header()->dropped_no_ring.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool RingWriter::Refresh(Producer& p) {
  p.cached_tail = p.header->tail.load(std::memory_order_acquire);
  if (p.head - p.cached_tail < capacity_) return true;
  p.header->head.store(p.head, std::memory_order_release);  // let the consumer catch up
  p.unpublished = 0;
  p.header->dropped.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void RingWriter::FlushAll() {
  for (Producer& p : producers_) {
    if (p.unpublished == 0) continue;
    p.header->head.store(p.head, std::memory_order_release);
    p.unpublished = 0;
  }
}

}  // namespace perftracker
