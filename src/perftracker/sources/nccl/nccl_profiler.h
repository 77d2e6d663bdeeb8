// NcclProfiler: the logic of perftracker's NCCL profiler plugin (libperftracker_nccl_profiler.so,
// loaded by NCCL through NCCL_PROFILER_PLUGIN; the exported ncclProfiler_v5 / _v4 structs in
// nccl_profiler_plugin.cc only translate the descriptors and call this).
//
// Output. The plugin runs inside the training process but is not the Python agent, so it does
// not write into the agent's file (whose function table has a single writer, the agent); it
// creates its own file in the same format (core/agent_shm.h): /dev/shm/perftracker-<run
// id>-<pid>-nccl, next to the agent's /dev/shm/perftracker-<run id>-<pid>
// (PERFTRACKER_NCCL_SHM overrides the path). One ring (PERFTRACKER_NCCL_RING_EVENTS, default
// 65536 events): every NCCL thread that emits (the enqueuing threads, the proxy threads) pushes
// under the plugin's mutex, so the ring has one producer at a time however many threads NCCL
// runs; a full ring drops and counts, as for the agent. Functions are published in the file's
// table (interned under the same mutex, once per distinct name).
//
// What becomes an Event (kind kCollective, payload = count x datatype size as NCCL reports
// them, correlation = the collective's sequence number in its communicator, track = the
// communicator):
//   collective  "nccl:AllReduce Ring/Simple (comm 1a2b3c4d, 8 ranks)"
//   p2p         "nccl:Send peer 3 (comm 1a2b3c4d, 8 ranks)"
// Timing: NCCL's stopEvent for a collective only says it was enqueued (ext-profiler README).
// Its execution is seen through its children: kernel-channel events (always requested) and
// proxy operations (requested with PERFTRACKER_NCCL_PROXY=1). The Event spans the first
// child's start to the last child's stop (flagged kEventFlagOnDevice), both on the host clock
// when NCCL's proxy thread observes them; when the kernel channels carry GPU globaltimer
// stamps (start in the descriptor, stop in the KernelChStop state) and their span is
// plausible (no longer than the host-observed span plus 1 ms), the Event keeps the host end and
// takes its duration from the GPU stamps, which do not include the proxy's polling delay at
// the start. An operation that
// got no child within the grace time (PERFTRACKER_NCCL_GRACE_MS, default 1000 ms after its
// enqueue) is emitted with its enqueue span instead; after its last child stops, an operation
// waits PERFTRACKER_NCCL_TAIL_US (2000) more for stragglers. The pool (4096 slots) thus holds
// 4096 operations per tail time (2 M/s by default); beyond that operations are dropped and
// counted. Collectives
// are reference counted (enqueue + live children) in a fixed pool of slots that stay
// allocated until the last communicator is finalized, so a late child never touches freed
// memory; a child that arrives after its collective was emitted is counted (late_children).
//
// Optional network wait states (PERFTRACKER_NCCL_PROXY=1): each proxy step's phases become
// events on a per-(communicator, peer, direction) track: "nccl:net send gpu-wait peer 3",
// "... send peer-wait ...", "... send network ..." (payload = bytes of the step),
// "nccl:net recv network peer 3", "... recv flush ...", "... recv gpu-wait ...".
//
// Never blocks NCCL on perftracker: no I/O after init, no waiting on the collector; a short
// mutex guards the pool and interning. Every failure is counted or said once; only init may
// return an error (then NCCL disables the plugin), as the plugin README asks.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "perftracker/core/agent_shm.h"
#include "perftracker/sources/nccl/nccl_profiler_api.h"

namespace perftracker {

// A version-neutral event descriptor (the plugin copies v4 / v5 descriptors into it).
struct NcclEventDescr {
  uint64_t type = 0;
  void* parent = nullptr;
  int rank = -1;
  const char* func = nullptr;
  const char* datatype = nullptr;
  const char* algo = nullptr;
  const char* proto = nullptr;
  size_t count = 0;
  uint64_t seq = 0;
  int peer = -1;
  pid_t pid = 0;
  int is_send = 0;
  int step = 0;
  uint8_t channels = 0;
  uint64_t gpu_timer = 0;  // kernel channel start: the GPU's globaltimer (ns)
};

struct NcclProfilerStats {
  uint64_t communicators = 0;
  uint64_t operations = 0;       // collectives + p2p started
  uint64_t events = 0;           // Events pushed (operations + proxy phases)
  uint64_t enqueue_only = 0;     // operations emitted without any child (launch span only)
  uint64_t gpu_timed = 0;        // operations whose duration came from GPU stamps
  uint64_t late_children = 0;    // children of an operation already emitted
  uint64_t foreign_parents = 0;  // proxy ops of another process (PXN) or unknown parents
  uint64_t no_slot = 0;          // operations dropped: every pool slot in use
  uint64_t bad_input = 0;        // null descriptors, unknown event types ...
};

class NcclProfiler {
 public:
  // The process-wide instance (never destroyed: NCCL may call until exit).
  static NcclProfiler& Get();

  ncclResult_t Init(void** context, uint64_t comm_id, int* activation_mask, const char* comm_name,
                    int nodes, int nranks, int rank, ncclDebugLogger_t log);
  ncclResult_t StartEvent(void* context, void** handle, const NcclEventDescr& d);
  ncclResult_t StopEvent(void* handle);
  // `value`: the bytes transferred so far for proxy-step states, the GPU globaltimer for
  // ncclProfilerKernelChStop, else 0.
  ncclResult_t RecordEventState(void* handle, ncclProfilerEventState_t state, uint64_t value);
  ncclResult_t Finalize(void* context);

  NcclProfilerStats stats();

 private:
  struct Comm;
  struct Op;
  struct Child;

  NcclProfiler() = default;
  bool OpenOutput(int rank, ncclDebugLogger_t log);
  Op* AllocOp();
  Op* AsOp(void* p);
  void ReleaseLocked(Op* op, int64_t now);
  void EmitLocked(Op* op);
  void ExpirePendingLocked(int64_t now, bool all);
  uint32_t FunctionLocked(const std::string& name);
  void Push(const Event& ev);
  void EmitPhase(Child* step, int phase_state, int64_t start, int64_t end);
  void Say(const std::string& line);

  std::mutex mu_;
  int live_comms_ = 0;
  uint32_t next_comm_index_ = 0;
  std::unique_ptr<AgentShm> shm_;
  int ring_ = 0;
  std::vector<Op> pool_;
  size_t pool_next_ = 0;
  std::deque<size_t> pending_;       // released without children: waiting grace_ns_
  std::deque<size_t> pending_tail_;  // released after children: waiting tail_grace_ns_
  std::unordered_map<std::string, uint32_t> functions_;
  int64_t grace_ns_ = 1'000'000'000;
  int64_t tail_grace_ns_ = 2'000'000;
  bool proxy_ = false;
  bool said_no_output_ = false;
  NcclProfilerStats stats_;
};

}  // namespace perftracker
