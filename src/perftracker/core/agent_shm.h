// AgentShm: the shared-memory file between one training process (the agent, producer) and
// the node collector (consumer). This header IS the agent<->collector record format.
//
// Layout (one file in /dev/shm, mapped by both sides; all offsets fixed by the header):
//   ShmHeader
//   FunctionSlot[function_capacity]   append-only function table (id i lives in slot i)
//   for each of num_rings rings: RingHeader, Event[ring_capacity]
//
// Rings are single-producer / single-consumer: a producer thread claims one ring for its
// lifetime (rings_claimed); the collector is the only consumer. Push never blocks and never
// allocates: a full ring drops the event and counts it (RingHeader::dropped). A thread
// beyond num_rings drops everything it would write and counts it in ShmHeader.
//
// Function slots are written by the agent (under its own lock: interning happens once per
// new call path, not per call) and published by a release store of functions_published;
// the collector reads slots below an acquire load of it. An event's function id is always
// published before the event is pushed, so the consumer can always resolve it.
//
// Versioning: magic + version + record sizes are checked by Open(); a mismatch is a clear
// error, never a misread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "perftracker/core/event.h"
#include "perftracker/core/status.h"

namespace perftracker {

inline constexpr uint32_t kShmMagic = 0x31525450;  // "PTR1"
inline constexpr uint16_t kShmVersion = 1;

struct alignas(64) ShmHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t event_size;
  uint32_t function_slot_size;
  uint32_t num_rings;
  uint32_t ring_capacity;  // events per ring, a power of two
  uint32_t function_capacity;
  int32_t pid;
  int32_t rank;
  std::atomic<uint32_t> rings_claimed;
  std::atomic<uint32_t> functions_published;
  std::atomic<uint64_t> dropped_no_ring;         // events of threads that found no free ring
  std::atomic<uint64_t> dropped_function_table;  // events whose function did not fit the table
};

struct FunctionSlot {
  static constexpr size_t kMaxName = 240;
  uint32_t id;
  uint32_t parent;  // FunctionTable::kNoParent for a root
  uint8_t kind;     // EventKind
  uint8_t reserved;
  uint16_t name_len;
  uint32_t reserved2;
  char name[kMaxName];
};
static_assert(sizeof(FunctionSlot) == 256);

struct alignas(64) RingHeader {
  std::atomic<uint64_t> head;  // next write position (producer)
  char pad0[56];
  std::atomic<uint64_t> tail;  // next read position (consumer)
  char pad1[56];
  std::atomic<uint64_t> dropped;  // events dropped because the ring was full
  uint64_t thread_id;             // OS thread id of the producer
  char pad2[48];
};
static_assert(sizeof(RingHeader) == 192);
static_assert(sizeof(ShmHeader) % 64 == 0 && sizeof(FunctionSlot) % 64 == 0,
              "every ring header must start 64-byte aligned");

struct AgentShmOptions {
  uint32_t num_rings = 16;
  uint32_t ring_capacity = 1u << 16;  // 64 Ki events x 40 B = 2.5 MiB per ring
  uint32_t function_capacity = 1u << 14;
};

class AgentShm {
 public:
  ~AgentShm();
  AgentShm(const AgentShm&) = delete;
  AgentShm& operator=(const AgentShm&) = delete;

  // Agent side: creates (truncating) the file at `path` (e.g. /dev/shm/perftracker-...).
  static StatusOr<std::unique_ptr<AgentShm>> Create(const std::string& path, int32_t rank,
                                                    const AgentShmOptions& options);
  // Collector side: maps an existing file and validates its header.
  static StatusOr<std::unique_ptr<AgentShm>> Open(const std::string& path);

  ShmHeader* header() { return header_; }
  const std::string& path() const { return path_; }
  size_t size_bytes() const { return size_; }

  // --- producer (agent) ---
  // Claims a ring for the calling thread; returns -1 when all rings are taken.
  int ClaimRing(uint64_t thread_id);
  // Never blocks: false (and dropped++) when the ring is full.
  bool Push(int ring, const Event& event);
  // Publishes function `id` (must equal the number published so far). False when full.
  bool PublishFunction(uint32_t id, EventKind kind, std::string_view name, uint32_t parent);

  // --- consumer (collector) ---
  // Pops up to `max` events from ring `ring` into `out`; returns how many.
  size_t Pop(int ring, Event* out, size_t max);
  uint32_t functions_published() const;
  const FunctionSlot& function(uint32_t id) const { return functions_[id]; }
  RingHeader* ring_header(int ring);
  // Total events dropped so far (full rings, no ring, function table full).
  uint64_t TotalDropped();

 private:
  AgentShm() = default;
  // Maps `size` bytes of `fd` (and closes it) into a new AgentShm with no layout yet.
  static StatusOr<std::unique_ptr<AgentShm>> Map(const std::string& path, int fd, size_t size);
  // Points header_, functions_ and rings_ into the mapping (fixed offsets, see above).
  void AttachLayout(uint32_t function_capacity);
  Event* ring_events(int ring);

  std::string path_;
  void* base_ = nullptr;
  size_t size_ = 0;
  ShmHeader* header_ = nullptr;
  FunctionSlot* functions_ = nullptr;
  char* rings_ = nullptr;
};

}  // namespace perftracker
