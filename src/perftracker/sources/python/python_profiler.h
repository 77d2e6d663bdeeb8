// PythonProfiler: the agent's fine-grained Python recorder, on only inside a profiling
// window. A C-level CPython profile function (Py_tracefunc, not a Python callback) is
// installed on every thread of the interpreter (Python 3.11 has no
// PyEval_SetProfileAllThreads: _PyEval_SetProfile over the interpreter's thread states, with
// the GIL held), and on threads started during the window through threading's profile hook.
//
// Per call: the hook reads the clock, resolves the call path id through the thread's
// ShadowStack (one flat-hash lookup keyed by (parent id, PyCodeObject*)) and pushes the
// frame; per return it pops the frame and writes one Event (kind kPythonCall, start, end,
// path id) into the thread's ring. The per-thread state travels in the profile function's
// `arg` object, so the hot path needs no thread-local lookup and no lock.
//
// Identity = the function plus its whole Python stack: on a thread's first event in a
// window the frames that were already running (entered before the hook was installed) are
// pushed first, root first, with the window's start as their start, so every path is the
// full stack from the thread's outermost frame. Returns of frames not on the shadow stack
// are ignored; hidden functions (perftracker's own wrappers) are skipped.
//
// Window end: the hook removes itself from a thread at its first event past end_ns, and
// Stop() removes it from every thread, restores threading's and gc's hooks, and closes the
// still-open frames at the window end. After Stop() no thread has a profile function of
// ours (the interpreter runs at full speed again: STYLE's Kineto lesson).
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
#include <vector>

#include "perftracker/core/agent_shm.h"
#include "perftracker/core/status.h"
#include "perftracker/sources/python/call_path_interner.h"
#include "perftracker/sources/python/ring_writer.h"
#include "perftracker/sources/python/tsc_clock.h"

namespace perftracker {

struct ProfilerCounts {
  uint64_t events = 0;           // events written into rings
  uint64_t dropped = 0;          // events dropped (full ring, no ring, function table full)
  uint64_t threads = 0;          // threads the hook was installed on
  uint64_t skipped_threads = 0;  // threads that already had another profiler (left alone)
};

class PythonProfiler {
 public:
  struct ThreadState;

  // GIL held. `shm` is not owned and must outlive the profiler.
  static StatusOr<std::unique_ptr<PythonProfiler>> Create(AgentShm* shm);
  ~PythonProfiler();  // GIL held; stops a running window
  PythonProfiler(const PythonProfiler&) = delete;
  PythonProfiler& operator=(const PythonProfiler&) = delete;

  // Starts recording now until `end_ns` (CLOCK_REALTIME). No-op when already recording.
  void Start(int64_t end_ns);
  // Stops recording; returns this window's counts. No-op (zero counts) when not recording.
  ProfilerCounts Stop();
  bool recording() const { return recording_; }
  int64_t window_start_ns() const { return start_ns_; }
  int64_t window_end_ns() const { return end_ns_; }

  // Never record calls of `code` (perftracker's own wrappers).
  void Hide(PyObject* code);
  // Records an event on the calling thread (when recording), under the thread's current
  // Python call path when `nest` (else as a root).
  void Record(EventKind kind, std::string_view name, bool nest, int64_t start_ns, int64_t end_ns,
              uint64_t payload);
  // Number of the interpreter's threads whose profile function is this hook.
  int HookedThreadCount() const;
  // Forgets every thread without touching other threads' states: for a forked child, whose
  // other threads no longer exist. Removes the hook from the calling thread.
  void AbandonAfterFork();

  CallPathInterner* interner() { return &interner_; }
  RingWriter* rings() { return &rings_; }

  // Internal (the hook and the threading bootstrap function).
  void InstallOn(PyThreadState* tstate);
  void Emit(ThreadState* ts, uint32_t id, EventKind kind, int64_t start, int64_t end,
            uint64_t payload);
  void OnGc(PyObject* phase, PyObject* info);

 private:
  explicit PythonProfiler(AgentShm* shm);

  AgentShm* shm_;
  CallPathInterner interner_;
  RingWriter rings_;
  PyObject* hook_type_ = nullptr;         // type of the per-thread hook argument objects
  PyObject* thread_bootstrap_ = nullptr;  // set as threading._profile_hook in a window
  PyObject* gc_callback_ = nullptr;       // appended to gc.callbacks in a window
  PyObject* saved_thread_hook_ = nullptr;
  std::vector<std::unique_ptr<ThreadState>> threads_;
  bool recording_ = false;
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  int64_t gc_start_ns_ = 0;
  TscClock::Anchor clock_;  // the window's time base (see TscClock)
  ProfilerCounts counts_;
};

}  // namespace perftracker
