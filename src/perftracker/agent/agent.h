// Agent: everything perftracker runs inside one training process, tied together.
//
//   training thread (GIL)                control thread (no GIL)          GIL worker
//   ─────────────────────                ───────────────────────          ──────────
//   OnMarker ─► IterationDetector        connects to $PERFTRACKER_SOCKET  runs GIL tasks:
//     ├─ iteration/trigger ─► outbox ──► sends JSON lines (hello, ...)     profiler Start/
//     └─ (in a window) events ─► rings   receives window / dump_stacks ──► Stop, stacks
//                                        timers: window edges, CheckHang
//
// Always on: the detector, fed by the Python wrappers of DataLoader next() and
// Optimizer.step() (a few hundred ns per marker, no lock, no syscall, no allocation once
// learned). The training thread only puts fixed-size messages into a bounded lock-free
// outbox (full -> dropped and counted); it never waits for the collector.
//
// Windows: the collector's `window` message schedules [start_ns, start_ns + duration_ns);
// at the start the GIL worker installs the PythonProfiler on every thread, at the end it
// removes it and the control thread reports window_done with the window's event and drop
// counts. Only one window at a time (a window arriving during another is ignored and
// counted). The detector is re-armed after a window (its baseline is forgotten: the
// profiled iterations were slower on purpose) and slowdown triggers are muted during one.
//
// Collector faults: connect failures and broken connections are retried with exponential
// back-off (100 ms .. reconnect_max); messages that cannot be sent are dropped and counted;
// one line on stderr the first time; the training job is never slowed, blocked or killed
// (MSG_NOSIGNAL, non-blocking socket).
//
// The end of training: a job that ends is silent (DataLoader workers join, the process
// group is destroyed, the interpreter shuts down), and that silence is not a hang. The Python
// half calls TrainingEnded() from destroy_process_group() and as the interpreter begins to
// exit (threading's atexit, before it joins threads); the hang check then stops until the
// next marker, and the collector hears `ended`.
//
// Lifetime: Create() and Stop() with the GIL held (Stop releases it while joining the
// threads); Stop is called from atexit, before the interpreter finalizes; nothing happens
// at static destruction. In a forked child the agent is abandoned (AbandonAfterFork): its
// threads do not exist there, the parent's shared memory is left alone. Around a fork the
// control thread and the GIL worker stand still (ForkGate): the child inherits no lock of
// theirs held halfway (an allocator's above all).
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "perftracker/agent/agent_options.h"
#include "perftracker/agent/bounded_queue.h"
#include "perftracker/agent/control_channel.h"
#include "perftracker/agent/gil_worker.h"
#include "perftracker/agent/gpu_tracing.h"
#include "perftracker/core/agent_shm.h"
#include "perftracker/core/status.h"
#include "perftracker/core/window_reason.h"
#include "perftracker/detect/iteration_detector.h"
#include "perftracker/sources/python/python_profiler.h"

namespace perftracker {

inline constexpr int kAgentProtocolVersion = 1;  // `version` in hello (docs/agent-protocol.md)

struct AgentConfig {
  std::string socket_path;  // empty: no collector (benchmarks, tests)
  std::string shm_path;
  int rank = -1;
  int local_rank = -1;
  int world_size = -1;
  std::string host;
  AgentOptions options;
};

struct AgentStats {
  uint64_t markers = 0;
  uint64_t markers_skipped = 0;  // a marker arrived while another thread fed the detector
  uint64_t iterations = 0;
  uint64_t triggers = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_dropped = 0;  // outbox full, not connected, or the socket broke
  uint64_t connects = 0;
  uint64_t connect_failures = 0;
  uint64_t messages_received = 0;
  uint64_t unknown_messages = 0;
  uint64_t malformed_messages = 0;
  uint64_t oversized_messages = 0;  // collector lines over ControlChannel::kMaxLineIn, dropped
  uint64_t windows = 0;
  uint64_t windows_ignored = 0;
  uint64_t stack_dumps = 0;
  uint64_t window_events = 0;   // over all windows
  uint64_t window_dropped = 0;  // over all windows
  uint64_t configs_applied = 0;
  uint64_t process_groups = 0;          // declared (DeclareProcessGroup)
  uint64_t process_groups_dropped = 0;  // not declared: the table was full
  uint64_t comm_threads = 0;            // named (NoteCommThread)
  uint64_t comm_threads_dropped = 0;    // not named: the table was full
};

inline constexpr uint32_t kMaxProcessGroups = 1024;    // per process
inline constexpr size_t kMaxProcessGroupRanks = 4096;  // listed in one `process_group`
inline constexpr uint32_t kMaxCommThreads = 16;        // named per process

class Agent {
 public:
  // GIL held. Creates the shared memory and starts the agent's threads.
  static StatusOr<std::unique_ptr<Agent>> Create(AgentConfig config);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // GIL held. Sends bye, joins the threads, removes every hook, unlinks the shared memory.
  void Stop();
  // GIL held, in a forked child: forget everything without touching the parent's threads.
  void AbandonAfterFork();

  // --- training thread, GIL held ---
  void OnMarker(Marker marker, std::string_view name, int64_t start_ns, int64_t end_ns);
  // `group`: the DeclareProcessGroup id of the process group it ran in (0: not known).
  void RecordCollective(std::string_view name, int64_t start_ns, int64_t end_ns, uint64_t bytes,
                        bool nest = true, uint16_t group = 0);
  // A torch.distributed process group (the default group, new_group's, or one a collective
  // ran in that the agent had not seen): its name, backend, the global ranks of its members
  // (at most kMaxProcessGroupRanks of them; `size` says how many there are) -> the id its
  // collectives carry in Event::group, 1..kMaxProcessGroups; 0 when the table is full
  // (counted). Sent to the collector as `process_group` (docs/agent-protocol.md) after every
  // hello, so a collector that (re)connects later knows them too. Not on the hot path: once
  // per group. GIL held (the GIL serializes the writers of the table).
  uint16_t DeclareProcessGroup(std::string_view name, std::string_view backend,
                               const std::vector<int32_t>& ranks, uint32_t size);
  // A collective this process started on thread `issuer_tid` (an OS thread id) completed on
  // the calling thread (GIL held: called from the completion callback, e.g. of DDP's
  // all-reduce future). When the two differ, the caller is a communication thread of the
  // process (gloo's worker threads run the all-reduce and complete its future; NCCL's and
  // already-completed futures run their callbacks on the issuing thread, which names
  // nothing). Kept once, at most kMaxCommThreads (more are counted), and sent to the
  // collector as `comm_thread` (docs/agent-protocol.md) after every hello: its host sampler
  // measures their run-queue wait as a role of its own. A syscall and a scan of a few slots.
  void NoteCommThread(int64_t issuer_tid);
  // GIL held. Names thread `tid` of this process a communication thread outright (the Python
  // half saw it appear while torch built a process group's backend: gloo's socket loop and
  // workers, NCCL's watchdog). The main thread is never one.
  void NameCommThread(int32_t tid);
  void SetRank(int rank, int local_rank, int world_size);
  // Any thread. The training ended (`detail`: destroy_process_group, interpreter exit): the
  // hang check stops until the next marker (a job that ends is silent, not hung) and the
  // collector hears `ended` once per end.
  void TrainingEnded(std::string_view detail);
  bool recording() const { return recording_.load(std::memory_order_relaxed); }

  // Schedules a window exactly like the collector's `window` message (tests, manual use).
  void RequestWindow(int64_t window, int64_t start_ns, int64_t duration_ns);
  // GIL held. Synchronous window on the calling thread, for benchmarks.
  void ProfileNow(int64_t duration_ns);
  ProfilerCounts ProfileStop();
  // GIL held. `fn()` returns all threads' Python stacks as text (used for dump_stacks).
  void SetStackDumper(PyObject* fn);
  // GIL held. `fn()` says whether this window's GPU work can be traced with CUPTI:
  // (0, "") this process does not use CUDA; (1, libcupti hint or "") trace; (2, reason) skip.
  void SetGpuProbe(PyObject* fn);
  GpuTracing* gpu_tracing() { return gpu_.get(); }
  // GIL held (released meanwhile). Another CUPTI client is about to start in this process
  // (`who`: torch.profiler, from the Python half's hook on its preparation, before Kineto
  // initializes CUPTI): a window's GPU tracing ends now (GpuTracing::YieldTo). True when it
  // did; false, at the cost of an uncontended lock, when no window traces.
  bool YieldGpuTracing(const std::string& who);

  PythonProfiler* profiler() { return profiler_.get(); }
  const std::string& shm_path() const { return config_.shm_path; }
  int rank() const { return rank_.load(std::memory_order_relaxed); }
  AgentStats stats() const;

 private:
  // A message to the collector: queued by the hooks (fixed size, no allocation), sent as
  // JSON by the control thread. Each type fills only its own fields.
  struct OutMessage {
    enum class Type : uint8_t { kIteration, kTrigger, kWindowDone, kEnded };
    Type type = Type::kIteration;
    WindowReason reason = WindowReason::kSlowdown;  // kTrigger
    int64_t iteration_end_ns = 0;                   // kIteration
    int64_t iteration_ns = 0;                       // kIteration: its duration
    int64_t window_id = 0;                          // kWindowDone
    uint64_t window_events = 0;                     // kWindowDone: events recorded in the window
    uint64_t window_dropped = 0;  // kWindowDone: events dropped (ProfilerCounts::dropped)
    int64_t gpu_stopped_ns = 0;   // kWindowDone: GPU tracing ended early then; 0: it did not
    char detail[200] = {};        // kTrigger, kEnded: what happened, NUL-terminated
  };
  struct Window {
    enum class State : uint8_t { kScheduled, kActive, kStopping };
    int64_t id = 0;
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    State state = State::kScheduled;
  };

  explicit Agent(AgentConfig config);
  void Push(const OutMessage& m);
  void PushTrigger(const Trigger& trigger);
  void Wake();
  void ControlLoop();
  void TryConnect(int64_t now);
  void SendHello();
  void SendJson(const std::string& line);
  void DrainOutbox();
  void HandleLine(const std::string& line);
  // Control thread: publishes the channel's count of over-long collector lines (dropped)
  // in stats(), with one line on stderr the first time.
  void NoteOversizedMessages();
  void StartWindow(const Window& w);
  void HandleWindowTimers(int64_t now);
  void DumpStacks(int64_t window);
  // `end_window`: the window ends now (its hooks go off at the next timer round).
  void EndWindowNow(int64_t window, int64_t now_ns);
  // `config`: new detector thresholds (docs/agent-protocol.md).
  void ApplyConfig(const nlohmann::json& message);
  void FinishWindowLocked(int64_t window, const ProfilerCounts& counts);
  // Sends the declared process groups the collector has not heard since the last hello.
  void SendProcessGroups();
  // Likewise the communication threads.
  void SendCommThreads();
  // GIL worker, GIL held, window_mu_ not held: CUPTI on / off around a window (the GIL is
  // released while CUPTI initializes or flushes).
  void BeginGpuTracing();
  void EndGpuTracing();

  AgentConfig config_;
  pid_t creator_pid_ = 0;
  std::unique_ptr<AgentShm> shm_;
  std::unique_ptr<PythonProfiler> profiler_;
  IterationDetector detector_;
  BoundedQueue<OutMessage> outbox_;
  GilWorker gil_;
  std::thread control_thread_;
  int wake_fd_ = -1;
  PyObject* stack_dumper_ = nullptr;
  PyObject* gpu_probe_ = nullptr;
  std::unique_ptr<GpuTracing> gpu_;

  std::atomic<int> rank_{-1};
  std::atomic<int> local_rank_{-1};
  std::atomic<int> world_size_{-1};
  std::atomic<bool> hello_dirty_{false};
  std::atomic<bool> recording_{false};
  std::atomic<bool> window_open_{false};  // scheduled or active: slowdown triggers muted
  std::atomic<bool> rearm_pending_{false};
  std::atomic_flag marker_busy_ = ATOMIC_FLAG_INIT;
  std::atomic<bool> stopping_{false};
  // The training ended (TrainingEnded) and no marker came since: no hang check.
  std::atomic<bool> training_ended_{false};
  std::atomic<bool> stop_requested_{false};
  // When YieldGpuTracing ended the open window's GPU tracing (0: it did not); taken by that
  // window's window_done.
  std::atomic<int64_t> gpu_yielded_ns_{0};
  bool stopped_ = false;
  bool abandoned_ = false;

  // Process groups: slots [0, groups_published_) are written once (GIL held) before the
  // count is published (release) and never change; the control thread reads them below an
  // acquire load, without a lock.
  struct ProcessGroupSlot {
    std::string name;
    std::string backend;
    std::vector<int32_t> ranks;
    uint32_t size = 0;
  };
  std::unique_ptr<ProcessGroupSlot[]> groups_;
  std::atomic<uint32_t> groups_published_{0};
  uint32_t groups_sent_ = 0;  // control thread: sent since the last hello
  std::atomic<uint64_t> process_groups_dropped_{0};

  // Communication threads: slots [0, comm_tids_published_) written once (GIL held) before the
  // count is published (release); the control thread reads them below an acquire load.
  std::atomic<int32_t> comm_tids_[kMaxCommThreads] = {};
  std::atomic<uint32_t> comm_tids_published_{0};
  uint32_t comm_tids_sent_ = 0;  // control thread: sent since the last hello
  std::atomic<uint64_t> comm_threads_dropped_{0};

  // Window state: guarded by window_mu_ (control thread, GIL tasks, RequestWindow).
  std::mutex window_mu_;
  std::optional<Window> window_;
  std::optional<Window> requested_;

  // Control-thread only.
  ControlChannel channel_;
  int64_t next_connect_ns_ = 0;
  int64_t backoff_ns_ = 0;
  int64_t next_hang_check_ns_ = 0;
  bool reported_unreachable_ = false;
  bool reported_lost_ = false;

  mutable std::atomic<uint64_t> markers_{0}, markers_skipped_{0}, iterations_{0}, triggers_{0},
      messages_sent_{0}, messages_dropped_{0}, connects_{0}, connect_failures_{0},
      messages_received_{0}, unknown_messages_{0}, malformed_messages_{0}, windows_{0},
      windows_ignored_{0}, stack_dumps_{0}, window_events_{0}, window_dropped_{0},
      configs_applied_{0}, oversized_messages_{0};
};

}  // namespace perftracker
