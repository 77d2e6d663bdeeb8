#include "perftracker/core/agent_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

namespace perftracker {
namespace {

// Rounded up to 64 bytes so that every RingHeader (alignas(64)) stays aligned.
size_t RingStride(uint32_t capacity) {
  const size_t bytes = sizeof(RingHeader) + static_cast<size_t>(capacity) * sizeof(Event);
  return (bytes + 63) / 64 * 64;
}

size_t TotalSize(const AgentShmOptions& o) {
  return sizeof(ShmHeader) + static_cast<size_t>(o.function_capacity) * sizeof(FunctionSlot) +
         static_cast<size_t>(o.num_rings) * RingStride(o.ring_capacity);
}

std::string Errno() { return std::strerror(errno); }

}  // namespace

AgentShm::~AgentShm() {
  if (base_ != nullptr) munmap(base_, size_);
}

StatusOr<std::unique_ptr<AgentShm>> AgentShm::Create(const std::string& path, int32_t rank,
                                                     const AgentShmOptions& options) {
  if (options.num_rings == 0 || options.num_rings > 1024 || options.ring_capacity < 2 ||
      (options.ring_capacity & (options.ring_capacity - 1)) != 0 ||
      options.ring_capacity > (1u << 26) || options.function_capacity == 0 ||
      options.function_capacity > (1u << 22)) {
    return Status::InvalidArgument(
        "agent ring options: need 1..1024 rings, a power-of-two ring size between 2 and 2^26 "
        "events, and 1..2^22 function slots");
  }
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::InvalidArgument(path + ": cannot create: " + Errno());
  const size_t size = TotalSize(options);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const std::string err = Errno();
    close(fd);
    return Status::InvalidArgument(path + ": cannot size to " + std::to_string(size) +
                                   " bytes: " + err);
  }
  StatusOr<std::unique_ptr<AgentShm>> mapped = Map(path, fd, size);
  if (!mapped.ok()) return mapped.status();
  std::unique_ptr<AgentShm> shm = std::move(mapped).value();
  auto* h = new (shm->base_) ShmHeader();
  h->magic = kShmMagic;
  h->version = kShmVersion;
  h->event_size = sizeof(Event);
  h->function_slot_size = sizeof(FunctionSlot);
  h->num_rings = options.num_rings;
  h->ring_capacity = options.ring_capacity;
  h->function_capacity = options.function_capacity;
  h->pid = static_cast<int32_t>(getpid());
  h->rank = rank;
  h->rings_claimed.store(0, std::memory_order_relaxed);
  h->functions_published.store(0, std::memory_order_relaxed);
  h->dropped_no_ring.store(0, std::memory_order_relaxed);
  h->dropped_function_table.store(0, std::memory_order_relaxed);
  shm->AttachLayout(options.function_capacity);
  for (uint32_t r = 0; r < options.num_rings; ++r) {
    new (shm->ring_header(static_cast<int>(r))) RingHeader();
  }
  return shm;
}

StatusOr<std::unique_ptr<AgentShm>> AgentShm::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(path + ": cannot open agent shared memory: " + Errno());
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(ShmHeader)) {
    close(fd);
    return Status::DataLoss(path + ": too small to be a perftracker agent file");
  }
  const auto size = static_cast<size_t>(st.st_size);
  StatusOr<std::unique_ptr<AgentShm>> mapped = Map(path, fd, size);
  if (!mapped.ok()) return mapped.status();
  std::unique_ptr<AgentShm> shm = std::move(mapped).value();
  auto* h = static_cast<ShmHeader*>(shm->base_);
  if (h->magic != kShmMagic || h->version != kShmVersion || h->event_size != sizeof(Event) ||
      h->function_slot_size != sizeof(FunctionSlot)) {
    return Status::DataLoss(path +
                            ": not a perftracker agent file of this version (agent and "
                            "collector must come from the same perftracker build)");
  }
  AgentShmOptions o;
  o.num_rings = h->num_rings;
  o.ring_capacity = h->ring_capacity;
  o.function_capacity = h->function_capacity;
  if (o.ring_capacity == 0 || (o.ring_capacity & (o.ring_capacity - 1)) != 0 ||
      TotalSize(o) != size) {
    return Status::DataLoss(path + ": agent file size does not match its header");
  }
  shm->AttachLayout(o.function_capacity);
  return shm;
}

StatusOr<std::unique_ptr<AgentShm>> AgentShm::Map(const std::string& path, int fd, size_t size) {
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Status::InvalidArgument(path + ": mmap failed: " + Errno());
  std::unique_ptr<AgentShm> shm(new AgentShm());
  shm->path_ = path;
  shm->base_ = base;
  shm->size_ = size;
  return shm;
}

void AgentShm::AttachLayout(uint32_t function_capacity) {
  header_ = static_cast<ShmHeader*>(base_);
  functions_ = reinterpret_cast<FunctionSlot*>(static_cast<char*>(base_) + sizeof(ShmHeader));
  rings_ = reinterpret_cast<char*>(functions_ + function_capacity);
}

RingHeader* AgentShm::ring_header(int ring) {
  return reinterpret_cast<RingHeader*>(rings_ + static_cast<size_t>(ring) *
                                                    RingStride(header_->ring_capacity));
}

Event* AgentShm::ring_events(int ring) {
  return reinterpret_cast<Event*>(reinterpret_cast<char*>(ring_header(ring)) + sizeof(RingHeader));
}

int AgentShm::ClaimRing(uint64_t thread_id) {
  const uint32_t r = header_->rings_claimed.fetch_add(1, std::memory_order_acq_rel);
  if (r >= header_->num_rings) return -1;
  ring_header(static_cast<int>(r))->thread_id = thread_id;
  return static_cast<int>(r);
}

bool AgentShm::Push(int ring, const Event& event) {
  RingHeader* rh = ring_header(ring);
  const uint64_t head = rh->head.load(std::memory_order_relaxed);
  const uint64_t tail = rh->tail.load(std::memory_order_acquire);
  if (head - tail >= header_->ring_capacity) {
    rh->dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  ring_events(ring)[head & (header_->ring_capacity - 1)] = event;
  rh->head.store(head + 1, std::memory_order_release);
  return true;
}

size_t AgentShm::Pop(int ring, Event* out, size_t max) {
  RingHeader* rh = ring_header(ring);
  const uint64_t tail = rh->tail.load(std::memory_order_relaxed);
  const uint64_t head = rh->head.load(std::memory_order_acquire);
  size_t n = 0;
  const Event* events = ring_events(ring);
  while (n < max && tail + n < head) {
    out[n] = events[(tail + n) & (header_->ring_capacity - 1)];
    ++n;
  }
  rh->tail.store(tail + n, std::memory_order_release);
  return n;
}

bool AgentShm::PublishFunction(uint32_t id, EventKind kind, std::string_view name,
                               uint32_t parent) {
  if (id >= header_->function_capacity ||
      id != header_->functions_published.load(std::memory_order_relaxed)) {
    return false;
  }
  FunctionSlot& slot = functions_[id];
  slot.id = id;
  slot.parent = parent;
  slot.kind = static_cast<uint8_t>(kind);
  const size_t n = std::min(name.size(), FunctionSlot::kMaxName);
  std::memcpy(slot.name, name.data(), n);
  slot.name_len = static_cast<uint16_t>(n);
  header_->functions_published.store(id + 1, std::memory_order_release);
  return true;
}

uint32_t AgentShm::functions_published() const {
  return std::min(header_->functions_published.load(std::memory_order_acquire),
                  header_->function_capacity);
}

uint64_t AgentShm::TotalDropped() {
  uint64_t total = header_->dropped_no_ring.load(std::memory_order_relaxed) +
                   header_->dropped_function_table.load(std::memory_order_relaxed);
  const uint32_t rings = std::min(header_->num_rings, 1024u);
  for (uint32_t r = 0; r < rings; ++r) {
    total += ring_header(static_cast<int>(r))->dropped.load(std::memory_order_relaxed);
  }
  return total;
}

}  // namespace perftracker
