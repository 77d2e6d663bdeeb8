#include "perftracker/sources/nccl/nccl_profiler.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "perftracker/core/function_table.h"
#include "perftracker/core/realtime_clock.h"

namespace perftracker {
namespace {

constexpr size_t kPoolSlots = 4096;
constexpr uint32_t kCommTrackBase = 0x08000000u;
constexpr uint32_t kPeerTrackBase = 0x09000000u;
constexpr uint32_t kDefaultRingEvents = 1u << 16;
constexpr uint32_t kFunctionSlots = 4096;
// A GPU-stamped span may exceed the host-observed one by this much (clock granularity).
constexpr int64_t kGpuSpanSlackNs = 1'000'000;

// Bytes per element of NCCL's datatype names ("ncclFloat32", ...); 0 when unknown.
size_t DatatypeBytes(const char* name) {
  if (name == nullptr) return 0;
  const std::string_view n(name);
  if (n == "ncclInt8" || n == "ncclChar" || n == "ncclUint8" || n == "ncclFloat8e4m3" ||
      n == "ncclFloat8e5m2") {
    return 1;
  }
  if (n == "ncclFloat16" || n == "ncclHalf" || n == "ncclBfloat16") return 2;
  if (n == "ncclInt32" || n == "ncclInt" || n == "ncclUint32" || n == "ncclFloat32" ||
      n == "ncclFloat") {
    return 4;
  }
  if (n == "ncclInt64" || n == "ncclUint64" || n == "ncclFloat64" || n == "ncclDouble") return 8;
  return 0;
}

int64_t EnvInt(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  int64_t x = 0;
  const auto [p, ec] = std::from_chars(v, v + std::strlen(v), x);
  if (ec != std::errc() || *p != '\0' || x < lo || x > hi) return fallback;
  return x;
}

std::string Hex8(uint64_t id) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%08llx", static_cast<unsigned long long>(id & 0xffffffffu));
  return buf;
}

const char* PhaseName(int state) {
  switch (state) {
    case kNcclProxyStepSendGpuWait:
      return "send gpu-wait";
    case kNcclProxyStepSendPeerWaitV4:
      return "send peer-wait";
    case kNcclProxyStepSendWait:
      return "send network";
    case kNcclProxyStepRecvWait:
      return "recv network";
    case kNcclProxyStepRecvFlushWait:
      return "recv flush";
    case kNcclProxyStepRecvGpuWait:
      return "recv gpu-wait";
    default:
      return nullptr;
  }
}

}  // namespace

struct NcclProfiler::Comm {
  uint64_t id = 0;
  int rank = -1;
  int nranks = 0;
  uint32_t index = 0;
  std::string suffix;  // " (comm 1a2b3c4d, 8 ranks)"
};

struct NcclProfiler::Op {
  enum class State : uint8_t { kFree, kLive, kPending };
  State state = State::kFree;
  bool p2p = false;
  int refs = 0;
  int children = 0;  // children ever started
  Comm* comm = nullptr;
  uint32_t function = 0;
  uint64_t payload = 0;
  uint64_t seq = 0;
  int64_t enqueue_start = 0;
  int64_t enqueue_end = 0;
  int64_t first_child_start = 0;
  int64_t last_child_end = 0;
  uint64_t gpu_start = 0;  // earliest kernel-channel start, GPU globaltimer ns (0: none)
  uint64_t gpu_stop = 0;   // latest kernel-channel stop
  int64_t deadline = 0;
};

struct NcclProfiler::Child {
  uint64_t type = 0;
  Op* op = nullptr;        // the collective / p2p (null: none or foreign)
  Child* proxy = nullptr;  // a step's proxy op
  Comm* comm = nullptr;
  int peer = -1;
  int is_send = 0;
  int phase = 0;  // a step's current state (0: none yet)
  int64_t phase_start = 0;
  uint64_t bytes = 0;
  uint64_t gpu_start = 0;  // a kernel channel's GPU stamps
  uint64_t gpu_stop = 0;
};

NcclProfiler& NcclProfiler::Get() {
  static NcclProfiler* instance = new NcclProfiler();  // never destroyed: NCCL may call at exit
  return *instance;
}

void NcclProfiler::Say(const std::string& line) {
  std::fprintf(stderr, "perftracker nccl profiler: %s\n", line.c_str());
}

bool NcclProfiler::OpenOutput(int rank, ncclDebugLogger_t /*log*/) {
  std::string path;
  if (const char* p = std::getenv("PERFTRACKER_NCCL_SHM"); p != nullptr && *p != '\0') {
    path = p;
  } else if (const char* run = std::getenv("PERFTRACKER_RUN_ID"); run != nullptr && *run != '\0') {
    path = std::string("/dev/shm/perftracker-") + run + "-" + std::to_string(getpid()) + "-nccl";
  } else {
    if (!said_no_output_) {
      said_no_output_ = true;
      Say("neither PERFTRACKER_RUN_ID (set by `perftracker run`) nor PERFTRACKER_NCCL_SHM is set: "
          "the plugin is disabled for this process");
    }
    return false;
  }
  AgentShmOptions o;
  o.num_rings = 1;
  o.ring_capacity =
      static_cast<uint32_t>(EnvInt("PERFTRACKER_NCCL_RING_EVENTS", kDefaultRingEvents, 2, 1 << 24));
  if ((o.ring_capacity & (o.ring_capacity - 1)) != 0) o.ring_capacity = kDefaultRingEvents;
  o.function_capacity = kFunctionSlots;
  const int32_t shm_rank = static_cast<int32_t>(EnvInt("RANK", rank, 0, 1 << 30));
  auto shm = AgentShm::Create(path, shm_rank, o);
  if (!shm.ok()) {
    Say(shm.status().message() + ": the plugin is disabled for this process");
    return false;
  }
  shm_ = std::move(shm.value());
  ring_ = shm_->ClaimRing(static_cast<uint64_t>(gettid()));  // ring 0 of a fresh file
  functions_.clear();
  pool_.assign(kPoolSlots, Op{});
  pool_next_ = 0;
  pending_.clear();
  pending_tail_.clear();
  grace_ns_ = EnvInt("PERFTRACKER_NCCL_GRACE_MS", 1000, 0, 3'600'000) * 1'000'000;
  tail_grace_ns_ = EnvInt("PERFTRACKER_NCCL_TAIL_US", 2000, 0, 1'000'000) * 1'000;
  proxy_ = EnvInt("PERFTRACKER_NCCL_PROXY", 0, 0, 1) == 1;
  return true;
}

ncclResult_t NcclProfiler::Init(void** context, uint64_t comm_id, int* activation_mask,
                                const char* comm_name, int nodes, int nranks, int rank,
                                ncclDebugLogger_t log) {
  (void)comm_name;
  (void)nodes;
  if (context == nullptr || activation_mask == nullptr) return kNcclInvalidUsage;
  *context = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (live_comms_ == 0 && !OpenOutput(rank, log)) {
    *activation_mask = 0;
    return kNcclInternalError;  // NCCL disables the plugin
  }
  auto* comm = new (std::nothrow) Comm();
  if (comm == nullptr) return kNcclInternalError;
  comm->id = comm_id;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->index = next_comm_index_++;
  comm->suffix = " (comm " + Hex8(comm_id) + ", " + std::to_string(nranks) + " ranks)";
  ++live_comms_;
  ++stats_.communicators;
  uint64_t mask = kNcclProfileColl | kNcclProfileP2p | kNcclProfileKernelCh;
  if (proxy_) mask |= kNcclProfileProxyOp | kNcclProfileProxyStep;
  *activation_mask = static_cast<int>(mask);
  *context = comm;
  return kNcclSuccess;
}

NcclProfiler::Op* NcclProfiler::AllocOp() {
  for (size_t i = 0; i < pool_.size(); ++i) {
    Op& op = pool_[(pool_next_ + i) % pool_.size()];
    if (op.state == Op::State::kFree) {
      pool_next_ = (pool_next_ + i + 1) % pool_.size();
      op = Op{};
      return &op;
    }
  }
  return nullptr;
}

NcclProfiler::Op* NcclProfiler::AsOp(void* p) {
  if (p == nullptr || pool_.empty()) return nullptr;
  // Compared as integers: `p` may point anywhere (another object, another process's memory).
  const auto begin = reinterpret_cast<uintptr_t>(pool_.data());
  const auto c = reinterpret_cast<uintptr_t>(p);
  if (c < begin || c >= begin + pool_.size() * sizeof(Op) || (c - begin) % sizeof(Op) != 0) {
    return nullptr;
  }
  return static_cast<Op*>(p);
}

uint32_t NcclProfiler::FunctionLocked(const std::string& name) {
  auto it = functions_.find(name);
  if (it != functions_.end()) return it->second;
  const uint32_t id = shm_->functions_published();
  if (!shm_->PublishFunction(id, EventKind::kCollective, name, FunctionTable::kNoParent)) {
    return UINT32_MAX;
  }
  functions_.emplace(name, id);
  return id;
}

void NcclProfiler::Push(const Event& ev) {
  if (!shm_) return;
  if (ev.function_id == UINT32_MAX) {
    shm_->header()->dropped_function_table.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // One ring, pushed to under mu_ (every caller holds it): a single producer at a time,
  // whichever NCCL thread it is.
  if (shm_->Push(ring_, ev)) ++stats_.events;
}

ncclResult_t NcclProfiler::StartEvent(void* context, void** handle, const NcclEventDescr& d) {
  if (handle == nullptr) return kNcclSuccess;
  *handle = nullptr;
  auto* comm = static_cast<Comm*>(context);
  const int64_t now = RealtimeNs();
  std::lock_guard<std::mutex> lock(mu_);
  if (comm == nullptr || !shm_) {
    ++stats_.bad_input;
    return kNcclSuccess;
  }
  ExpirePendingLocked(now, false);
  if (d.type == kNcclProfileColl || d.type == kNcclProfileP2p) {
    Op* op = AllocOp();
    if (op == nullptr) {
      ++stats_.no_slot;
      shm_->header()->dropped_no_ring.fetch_add(1, std::memory_order_relaxed);
      return kNcclSuccess;
    }
    const bool p2p = d.type == kNcclProfileP2p;
    std::string name = "nccl:";
    name += d.func != nullptr ? d.func : "?";
    if (p2p) {
      name += " peer " + std::to_string(d.peer);
    } else {
      name += std::string(" ") + (d.algo != nullptr ? d.algo : "?") + "/" +
              (d.proto != nullptr ? d.proto : "?");
    }
    name += comm->suffix;
    const size_t elem = DatatypeBytes(d.datatype);
    if (elem == 0 || d.func == nullptr) ++stats_.bad_input;
    op->state = Op::State::kLive;
    op->p2p = p2p;
    op->refs = 1;  // the enqueue
    op->comm = comm;
    op->function = FunctionLocked(name);
    op->payload = static_cast<uint64_t>(d.count) * (elem == 0 ? 1 : elem);
    op->seq = p2p ? 0 : d.seq;
    op->enqueue_start = now;
    ++stats_.operations;
    *handle = op;
    return kNcclSuccess;
  }
  if (d.type == kNcclProfileKernelCh || d.type == kNcclProfileProxyOp ||
      d.type == kNcclProfileProxyStep) {
    auto* child = new (std::nothrow) Child();
    if (child == nullptr) return kNcclSuccess;
    child->type = d.type;
    child->comm = comm;
    Op* parent = nullptr;
    if (d.type == kNcclProfileProxyStep) {
      // The parent is a proxy op (a Child): only trusted through the handles we gave out,
      // which NCCL passes back as parentObj in this process.
      child->proxy = static_cast<Child*>(d.parent);
      if (child->proxy != nullptr) {
        child->peer = child->proxy->peer;
        child->is_send = child->proxy->is_send;
        parent = child->proxy->op;
      }
    } else if (d.type == kNcclProfileProxyOp && d.pid != getpid()) {
      ++stats_.foreign_parents;  // PXN: the parent lives in another process
    } else {
      parent = AsOp(d.parent);
      if (parent == nullptr && d.parent != nullptr) ++stats_.foreign_parents;
    }
    if (d.type == kNcclProfileProxyOp) {
      child->peer = d.peer;
      child->is_send = d.is_send;
    }
    if (d.type == kNcclProfileKernelCh) child->gpu_start = d.gpu_timer;
    if (parent != nullptr && parent->state == Op::State::kFree) {
      ++stats_.late_children;
      parent = nullptr;
    }
    if (parent != nullptr && d.type != kNcclProfileProxyStep) {
      if (parent->state == Op::State::kPending) parent->state = Op::State::kLive;
      ++parent->refs;
      if (parent->children++ == 0) parent->first_child_start = now;
    }
    child->op = d.type == kNcclProfileProxyStep ? nullptr : parent;
    *handle = child;
    return kNcclSuccess;
  }
  ++stats_.bad_input;  // a type we did not ask for
  return kNcclSuccess;
}

void NcclProfiler::ReleaseLocked(Op* op, int64_t now) {
  if (--op->refs > 0) return;
  op->state = Op::State::kPending;
  // Two queues, one per grace, so that each one's deadlines come in order.
  const bool had_children = op->children > 0;
  op->deadline = now + (had_children ? tail_grace_ns_ : grace_ns_);
  (had_children ? pending_tail_ : pending_).push_back(static_cast<size_t>(op - pool_.data()));
  ExpirePendingLocked(now, false);
}

void NcclProfiler::ExpirePendingLocked(int64_t now, bool all) {
  for (std::deque<size_t>* queue : {&pending_tail_, &pending_}) {
    while (!queue->empty()) {
      Op& head = pool_[queue->front()];
      // A slot revived by a child, emitted through another entry, or reused: its entry here
      // is stale (a reused slot is pending under its own, later, entry as well).
      if (head.state != Op::State::kPending || head.refs != 0) {
        queue->pop_front();
        continue;
      }
      if (!all && head.deadline > now) break;
      queue->pop_front();
      EmitLocked(&head);
    }
  }
}

void NcclProfiler::EmitLocked(Op* op) {
  Event ev;
  ev.kind = EventKind::kCollective;
  ev.function_id = op->function;
  ev.payload = op->payload;
  ev.correlation = static_cast<uint32_t>(op->seq);
  ev.track_id = kCommTrackBase | (op->comm->index & 0xffffffu);
  if (op->children > 0) {
    ev.start_ns = op->first_child_start;
    ev.end_ns = std::max(op->last_child_end, ev.start_ns);
    ev.flags = kEventFlagOnDevice;
    if (op->gpu_start != 0 && op->gpu_stop > op->gpu_start) {
      const auto gpu_ns = static_cast<int64_t>(op->gpu_stop - op->gpu_start);
      if (gpu_ns <= ev.end_ns - op->enqueue_start + kGpuSpanSlackNs) {
        ev.start_ns = std::max(ev.end_ns - gpu_ns, op->enqueue_start);
        ++stats_.gpu_timed;
      }
    }
  } else {
    ev.start_ns = op->enqueue_start;
    ev.end_ns = std::max(op->enqueue_end, ev.start_ns);
    ++stats_.enqueue_only;
  }
  op->state = Op::State::kFree;
  Push(ev);
}

void NcclProfiler::EmitPhase(Child* step, int phase_state, int64_t start, int64_t end) {
  const char* phase = PhaseName(phase_state);
  if (phase == nullptr || step->comm == nullptr) return;
  std::string name =
      std::string("nccl:net ") + phase + " peer " + std::to_string(step->peer) + step->comm->suffix;
  Event ev;
  ev.kind = EventKind::kCollective;
  ev.function_id = FunctionLocked(name);
  ev.start_ns = start;
  ev.end_ns = std::max(start, end);
  const bool network =
      phase_state == kNcclProxyStepSendWait || phase_state == kNcclProxyStepRecvWait;
  ev.payload = network ? step->bytes : 0;
  ev.track_id = kPeerTrackBase | ((step->comm->index & 0xffu) << 16) |
                (static_cast<uint32_t>(step->is_send != 0) << 15) |
                (static_cast<uint32_t>(step->peer) & 0x7fffu);
  Push(ev);
}

ncclResult_t NcclProfiler::StopEvent(void* handle) {
  if (handle == nullptr) return kNcclSuccess;
  const int64_t now = RealtimeNs();
  std::lock_guard<std::mutex> lock(mu_);
  if (!shm_) return kNcclSuccess;
  if (Op* op = AsOp(handle); op != nullptr) {
    if (op->state == Op::State::kFree || op->enqueue_end != 0) {
      ++stats_.bad_input;  // stopped twice
      return kNcclSuccess;
    }
    op->enqueue_end = now;
    ReleaseLocked(op, now);
    return kNcclSuccess;
  }
  auto* child = static_cast<Child*>(handle);
  if (child->type == kNcclProfileProxyStep && child->phase != 0) {
    EmitPhase(child, child->phase, child->phase_start, now);
  }
  if (child->op != nullptr && child->op->state != Op::State::kFree) {
    Op* op = child->op;
    if (child->gpu_start != 0 && child->gpu_stop > child->gpu_start) {
      op->gpu_start =
          op->gpu_start == 0 ? child->gpu_start : std::min(op->gpu_start, child->gpu_start);
      op->gpu_stop = std::max(op->gpu_stop, child->gpu_stop);
    }
    child->op->last_child_end = std::max(child->op->last_child_end, now);
    ReleaseLocked(child->op, now);
  }
  delete child;
  return kNcclSuccess;
}

ncclResult_t NcclProfiler::RecordEventState(void* handle, ncclProfilerEventState_t state,
                                            uint64_t value) {
  if (handle == nullptr) return kNcclSuccess;
  const int64_t now = RealtimeNs();
  std::lock_guard<std::mutex> lock(mu_);
  if (!shm_ || AsOp(handle) != nullptr) return kNcclSuccess;  // operations have no states
  auto* child = static_cast<Child*>(handle);
  if (child->type == kNcclProfileKernelCh && state == kNcclKernelChStop) {
    child->gpu_stop = value;
    return kNcclSuccess;
  }
  if (child->type != kNcclProfileProxyStep || PhaseName(state) == nullptr) return kNcclSuccess;
  if (value != 0) child->bytes = value;
  if (child->phase != 0 && child->phase != state) {
    EmitPhase(child, child->phase, child->phase_start, now);
  }
  if (child->phase != state) {
    child->phase = state;
    child->phase_start = now;
  }
  return kNcclSuccess;
}

ncclResult_t NcclProfiler::Finalize(void* context) {
  auto* comm = static_cast<Comm*>(context);
  if (comm == nullptr) return kNcclSuccess;
  std::lock_guard<std::mutex> lock(mu_);
  // Emit this communicator's operations that are still open or waiting for children.
  for (Op& op : pool_) {
    if (op.comm == comm && op.state != Op::State::kFree) EmitLocked(&op);
  }
  delete comm;
  if (--live_comms_ == 0) {
    pending_.clear();
    pending_tail_.clear();
    shm_.reset();  // the file stays for the collector; the next init creates a new one
  }
  return kNcclSuccess;
}

NcclProfilerStats NcclProfiler::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace perftracker
