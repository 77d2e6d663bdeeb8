// PythonProfiler: the agent's fine-grained Python recorder, on only inside a profiling
// window. Three ways to see every Python call, chosen at each window start: the fastest
// correct one this CPython has (the "fast hook": the frame-evaluation hook on 3.10 and 3.11,
// sys.monitoring on 3.12 and 3.13), else the profile function (any version with the agent
// option eval_hook=0 or when the fast hook is taken by another tool):
//
//  - The frame-evaluation hook (default on CPython 3.10 and 3.11; PEP 523,
//    _PyInterpreterState_SetEvalFrameFunc): the interpreter calls our function to run every
//    Python frame (a call, or a generator / coroutine resume), on every thread, and we call
//    the interpreter's own _PyEval_EvalFrameDefault from it. Entry and exit are the C call
//    and its return, so they nest exactly, exceptions included. Unlike a profile function it
//    does not switch the interpreter to its de-specialized tracing dispatch and needs no
//    frame object per call: measured 6 ns per call for a do-nothing hook against 55-75 ns
//    for a do-nothing profile function (docs/performance.md). Used only when no other
//    frame-evaluation function is installed (a debugger's, torch.compile's): then, or with
//    the agent option eval_hook=0, the window uses the profile hook below.
//  - PEP 669 callbacks (CPython 3.12, 3.13; sys.monitoring): C functions registered from C
//    through sys.monitoring.register_callback for PY_START / PY_RESUME / PY_THROW (push) and
//    PY_RETURN / PY_YIELD / PY_UNWIND (pop), global events, every thread. The interpreter
//    fires them for every Python frame, inlined or specialised calls included, and stays on
//    its specialised dispatch. The window claims the tool id sys.monitoring.PROFILER_ID;
//    when another tool holds it (cProfile on 3.12+, a profiler of the user's), the window
//    says so in one line on stderr and records with the profile function instead. Stop()
//    disables the events, unregisters the callbacks and frees the id: after a window the
//    interpreter runs with no tool of ours (measured cost 0, docs/performance.md). Frame
//    identity is the interpreter frame (_PyInterpreterFrame, internal header): a thread's
//    first event pushes the frames already running, root first.
//  - A C-level CPython profile function (Py_tracefunc) on every thread (Python 3.11 has no
//    PyEval_SetProfileAllThreads: _PyEval_SetProfile over the interpreter's thread states,
//    with the GIL held), and on threads started during the window through threading's
//    profile hook. The per-thread state travels in the profile function's `arg` object.
//
// Per call (both ways): read the TSC clock, push the frame on the thread's ShadowStack
// (which interns (parent path id, code object) -> path id, usually through a one-entry memo
// on the parent frame); per return: pop it and write one 40-byte Event (kind kPythonCall,
// start, end, path id) into the thread's ring (RingWriter, inline). No Python API call, no
// reference count change, no allocation on that path.
//
// Identity = the function plus its whole Python stack: on a thread's first event in a
// window the frames that were already running are pushed first, root first, with the
// window's start as their start, so every path is the full stack from the thread's
// outermost frame. Frames entered or left without passing through the hook are reconciled
// (eval hook): before pushing a frame, the hook checks that the top of the shadow stack is
// the interpreter's current frame (the caller); if not, it walks the interpreter's frame
// chain up to the first frame the shadow stack holds, closes the shadow frames above it (they
// returned unseen: frames that were running when the window began) and pushes the missing
// ones (frames the interpreter entered inline, see docs/performance.md). So the recorded
// stack of every call is always the interpreter's real stack. Hidden functions
// (perftracker's own wrappers) are transparent: never recorded, never part of a path.
//
// Deep recursion: with a frame-evaluation function set, CPython 3.11 runs each Python call
// in its own C-level call (as 3.10 did) instead of inline; a program that raised the
// recursion limit could then exhaust a thread's C stack where it would not without us. When
// a thread has used half of its C stack, the hook hands frame evaluation back to the
// interpreter (all threads) until that deep call returns; counted in deep_pauses. Frames
// beyond ShadowStack::kMaxDepth are not recorded (counted in too_deep).
//
// Window end: the hook removes itself at its first event past end_ns, and Stop() removes it
// (from every thread for the profile hook), restores threading's and gc's hooks, and closes
// the still-open frames at the window end. After Stop() no thread runs any hook of ours (the
// interpreter runs at full speed again: STYLE's Kineto lesson).
//
// Also recorded inside a window: GC pauses (a gc.callbacks entry), and events that the
// agent's Python wrappers report through Record() (data loading, optimizer steps,
// collectives, iterations), nested under the calling thread's current path.
//
// Threading: every method must be called with the GIL held; hooks run with the GIL, so all
// writers of a ring are serialized by the GIL (a ring is only ever written for its thread).
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "perftracker/core/agent_shm.h"
#include "perftracker/core/status.h"
#include "perftracker/sources/python/call_path_interner.h"
#include "perftracker/sources/python/ring_writer.h"
#include "perftracker/sources/python/shadow_stack.h"
#include "perftracker/sources/python/tsc_clock.h"

namespace perftracker {

enum class PythonHook : uint8_t {
  kNone,     // not recording
  kEval,     // frame-evaluation hook (PEP 523)
  kProfile,  // C profile function
  kMonitor,  // sys.monitoring (PEP 669) callbacks
};

// "eval", "profile", "monitor" ("" for kNone).
const char* PythonHookName(PythonHook hook);

struct ProfilerCounts {
  uint64_t events = 0;           // events written into rings
  uint64_t dropped = 0;          // events dropped (full ring, no ring, function table full)
  uint64_t threads = 0;          // threads that recorded (eval hook) / the hook was installed on
  uint64_t skipped_threads = 0;  // threads that already had another profiler (left alone)
  uint64_t too_deep = 0;         // calls deeper than ShadowStack::kMaxDepth (not recorded)
  uint64_t deep_pauses = 0;      // deep recursion paused the eval hook (see above)
  PythonHook hook = PythonHook::kNone;  // how this window recorded
};

class PythonProfiler {
 public:
  struct ThreadState;

  // GIL held. `shm` is not owned and must outlive the profiler.
  static StatusOr<std::unique_ptr<PythonProfiler>> Create(AgentShm* shm);
  ~PythonProfiler();  // GIL held; stops a running window
  PythonProfiler(const PythonProfiler&) = delete;
  PythonProfiler& operator=(const PythonProfiler&) = delete;

  // Whether windows may use the fast hook (default: yes, where available); false: the
  // profile function.
  void set_prefer_eval_hook(bool prefer) { prefer_eval_hook_ = prefer; }
  // The fast hook this interpreter supports: kEval (CPython 3.10, 3.11), kMonitor (3.12,
  // 3.13), kProfile (none).
  static PythonHook FastHook();
  // The sys.monitoring tool id a window claims (sys.monitoring.PROFILER_ID).
  static constexpr int kMonitorToolId = 2;
  // Marks the calling OS thread as the agent's own: never recorded (eval hook).
  static void IgnoreCurrentThread();

  // Starts recording now until `end_ns` (CLOCK_REALTIME). No-op when already recording.
  void Start(int64_t end_ns);
  PythonHook hook() const { return hook_; }
  // Stops recording; returns this window's counts. No-op (zero counts) when not recording.
  ProfilerCounts Stop();
  bool recording() const { return recording_; }
  int64_t window_start_ns() const { return start_ns_; }
  int64_t window_end_ns() const { return end_ns_; }

  // Never record calls of `code` (perftracker's own wrappers).
  void Hide(PyObject* code);
  // Records an event on the calling thread (when recording), under the thread's current
  // Python call path when `nest` (else as a root); `group`: a collective's Event::group.
  void Record(EventKind kind, std::string_view name, bool nest, int64_t start_ns, int64_t end_ns,
              uint64_t payload, uint16_t group = 0);
  // Number of the interpreter's threads that run a hook of ours (all of them while the
  // eval hook is installed).
  int HookedThreadCount() const;
  // Forgets every thread without touching other threads' states: for a forked child, whose
  // other threads no longer exist. Removes the hook from the calling thread.
  void AbandonAfterFork();

  CallPathInterner* interner() { return &interner_; }
  RingWriter* rings() { return &rings_; }

  // Internal (the hooks and the threading bootstrap function).
  void InstallOn(PyThreadState* tstate);
  void Emit(ThreadState* ts, uint32_t id, EventKind kind, int64_t start, int64_t end,
            uint64_t payload, uint16_t group = 0);
  void OnGc(PyObject* phase, PyObject* info);
  // Eval and monitoring hooks: the calling OS thread's state, created on first use in a window.
  ThreadState* EvalThreadState(PyThreadState* tstate);

 private:
  explicit PythonProfiler(AgentShm* shm);
  void CloseThreads(int64_t end);
  bool StartMonitoring();  // claims the tool id, registers and enables; false: not possible

  AgentShm* shm_;
  CallPathInterner interner_;
  RingWriter rings_;
  PyObject* hook_type_ = nullptr;         // type of the per-thread hook argument objects
  PyObject* thread_bootstrap_ = nullptr;  // set as threading._profile_hook in a window
  PyObject* gc_callback_ = nullptr;       // appended to gc.callbacks in a window
  PyObject* saved_thread_hook_ = nullptr;
  std::vector<std::unique_ptr<ThreadState>> threads_;
  std::unordered_map<uint64_t, ThreadState*> eval_threads_;  // by OS thread id
  bool recording_ = false;
  bool prefer_eval_hook_ = true;
  PythonHook hook_ = PythonHook::kNone;
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  int64_t gc_start_ns_ = 0;
  TscClock::Anchor clock_;  // the window's time base (see TscClock)
  ProfilerCounts counts_;
};

}  // namespace perftracker
