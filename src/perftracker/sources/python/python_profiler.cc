#include "perftracker/sources/python/python_profiler.h"

#include <frameobject.h>
#include <pthread.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "perftracker/core/realtime_clock.h"
#include "perftracker/sources/python/tsc_clock.h"

namespace perftracker {

struct PythonProfiler::ThreadState {
  ThreadState(PythonProfiler* p, CallPathInterner* interner, CallPathInterner::NameFn name_fn,
              int64_t start, int64_t end, const TscClock::Anchor& clock_anchor)
      : profiler(p), stack(interner, EventKind::kPythonCall, name_fn), start_ns(start),
        end_ns(end), clock(clock_anchor) {}
  PythonProfiler* profiler;
  ShadowStack stack;
  int64_t start_ns;
  int64_t end_ns;  // INT64_MIN once the window is over: the next event removes the hook
  TscClock::Anchor clock;
  int ring = RingWriter::kNoRing;
  bool primed = false;
  uint64_t events = 0;
  uint64_t dropped = 0;
};

namespace {

constexpr size_t kMaxPrimeDepth = 512;  // frames walked up when a thread is first seen

// The per-thread profile-function argument: carries the thread's state to the hook.
struct HookObject {
  PyObject_HEAD
  PythonProfiler::ThreadState* state;
};

PyType_Slot kHookSlots[] = {{0, nullptr}};
PyType_Spec kHookSpec = {"perftracker._agent.ProfilerThread", sizeof(HookObject), 0,
                         Py_TPFLAGS_DEFAULT, kHookSlots};

// The profiler that is recording, if any (read and written with the GIL held only).
PythonProfiler* g_recording = nullptr;

// Set in a forked child before any Python code runs there (pthread_atfork): the hook the
// forking thread inherited must not write into the parent's rings (MAP_SHARED). Python's own
// after-fork callbacks run Python code before the agent's Python handler can react.
bool g_in_forked_child = false;
void OnForkChild() { g_in_forked_child = true; }

// "qualname (file.py:line)". Keeps a reference to the code object: a published path's code
// is never freed, so its address can never be reused by another function (bounded by the
// function table's capacity).
std::string CodeName(const void* key) {
  auto* code = static_cast<PyCodeObject*>(const_cast<void*>(key));
  Py_INCREF(code);
  std::string name;
  const char* qual = PyUnicode_AsUTF8(code->co_qualname);
  if (qual == nullptr) {
    PyErr_Clear();
    qual = "?";
  }
  name = qual;
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (file == nullptr) {
    PyErr_Clear();
    file = "?";
  }
  const char* slash = std::strrchr(file, '/');
  name.append(" (").append(slash != nullptr ? slash + 1 : file).append(":");
  name.append(std::to_string(code->co_firstlineno)).append(")");
  return name;
}

void RemoveHook(PyThreadState* tstate) {
  if (_PyEval_SetProfile(tstate, nullptr, nullptr) < 0) PyErr_Clear();
}

int Hook(PyObject* obj, PyFrameObject* frame, int what, PyObject* /*arg*/);

// First event of a thread in this window: push the frames that were already running, root
// first, so that every path is the thread's whole stack. `first` is the innermost of them.
void Prime(PythonProfiler::ThreadState* ts, PyFrameObject* first) {
  ts->primed = true;
  ts->ring = ts->profiler->rings()->RingForCurrentThread();
  PyFrameObject* chain[kMaxPrimeDepth];
  size_t n = 0;
  PyFrameObject* f = first;
  Py_XINCREF(f);
  while (f != nullptr) {
    if (n == kMaxPrimeDepth) {  // keep the innermost frames
      Py_DECREF(chain[0]);
      std::memmove(chain, chain + 1, sizeof(chain[0]) * (n - 1));
      --n;
    }
    chain[n++] = f;
    f = PyFrame_GetBack(f);
  }
  for (size_t i = n; i-- > 0;) {
    PyCodeObject* code = PyFrame_GetCode(chain[i]);
    // A running frame keeps its frame object (and code) alive: the pointers stay valid.
    ts->stack.Push(chain[i], code, ts->start_ns);
    Py_DECREF(code);
    Py_DECREF(chain[i]);
  }
}

int Hook(PyObject* obj, PyFrameObject* frame, int what, PyObject* /*arg*/) {
  if (what != PyTrace_CALL && what != PyTrace_RETURN) return 0;
  PythonProfiler::ThreadState* ts = reinterpret_cast<HookObject*>(obj)->state;
  const int64_t now = TscClock::Now(ts->clock);
  if (now >= ts->end_ns || g_in_forked_child) [[unlikely]] {
    RemoveHook(PyThreadState_Get());  // may free `obj`: not touched below
    return 0;
  }
  if (what == PyTrace_CALL) {
    if (!ts->primed) [[unlikely]] {
      PyFrameObject* back = PyFrame_GetBack(frame);
      Prime(ts, back);
      Py_XDECREF(back);
    }
    PyCodeObject* code = PyFrame_GetCode(frame);
    Py_DECREF(code);  // the running frame keeps it alive
    ts->stack.Push(frame, code, now);
  } else {
    if (!ts->primed) [[unlikely]] Prime(ts, frame);
    ts->stack.Pop(frame, [ts, now](const ShadowStack::Frame& f) {
      ts->profiler->Emit(ts, f.id, EventKind::kPythonCall, f.start_ns, now, 0);
    });
  }
  return 0;
}

// threading._profile_hook during a window: a new thread calls it (through sys.setprofile's
// trampoline) on its first event; it swaps in the C hook for that thread.
PyObject* ThreadBootstrap(PyObject* /*self*/, PyObject* /*args*/) {
  PyThreadState* tstate = PyThreadState_Get();
  RemoveHook(tstate);
  if (g_recording != nullptr) g_recording->InstallOn(tstate);
  Py_RETURN_NONE;
}

PyObject* GcCallback(PyObject* /*self*/, PyObject* args) {
  PyObject* phase = nullptr;
  PyObject* info = nullptr;
  if (!PyArg_UnpackTuple(args, "gc_callback", 2, 2, &phase, &info)) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  if (g_recording != nullptr) g_recording->OnGc(phase, info);
  Py_RETURN_NONE;
}

PyMethodDef kBootstrapDef = {"_perftracker_thread_profile", ThreadBootstrap, METH_VARARGS,
                             nullptr};
PyMethodDef kGcCallbackDef = {"_perftracker_gc_callback", GcCallback, METH_VARARGS, nullptr};

template <typename F>
void ForEachThread(F&& f) {
  PyInterpreterState* interp = PyThreadState_Get()->interp;
  for (PyThreadState* t = PyInterpreterState_ThreadHead(interp); t != nullptr;
       t = PyThreadState_Next(t)) {
    f(t);
  }
}

}  // namespace

PythonProfiler::PythonProfiler(AgentShm* shm) : shm_(shm), interner_(shm), rings_(shm) {}

StatusOr<std::unique_ptr<PythonProfiler>> PythonProfiler::Create(AgentShm* shm) {
  static const bool fork_handler_registered =
      pthread_atfork(nullptr, nullptr, &OnForkChild) == 0;
  (void)fork_handler_registered;
  g_in_forked_child = false;  // a (forked) process that becomes a rank itself records again
  std::unique_ptr<PythonProfiler> p(new PythonProfiler(shm));
  p->hook_type_ = PyType_FromSpec(&kHookSpec);
  p->thread_bootstrap_ = PyCFunction_New(&kBootstrapDef, nullptr);
  p->gc_callback_ = PyCFunction_New(&kGcCallbackDef, nullptr);
  if (p->hook_type_ == nullptr || p->thread_bootstrap_ == nullptr || p->gc_callback_ == nullptr) {
    PyErr_Clear();
    return Status::Internal("python profiler: cannot create its Python objects");
  }
  return p;
}

PythonProfiler::~PythonProfiler() {
  if (recording_) Stop();
  if (g_recording == this) g_recording = nullptr;
  Py_XDECREF(gc_callback_);
  Py_XDECREF(saved_thread_hook_);
  // hook_type_ and thread_bootstrap_ are kept alive on purpose: a thread may still hold the
  // bootstrap in its sys.setprofile trampoline; both are tiny.
}

void PythonProfiler::Start(int64_t end_ns) {
  if (recording_) return;
  // Modules first (an import runs Python code: it must not be recorded).
  PyObject* threading = PyImport_ImportModule("threading");
  if (threading == nullptr) PyErr_Clear();
  PyObject* gc = PyImport_ImportModule("gc");
  if (gc == nullptr) PyErr_Clear();
  recording_ = true;
  clock_ = TscClock::MakeAnchor();
  start_ns_ = RealtimeNs();
  end_ns_ = end_ns;
  counts_ = {};
  g_recording = this;
  // Threads started during the window.
  if (threading != nullptr) {
    Py_XDECREF(saved_thread_hook_);
    saved_thread_hook_ = PyObject_GetAttrString(threading, "_profile_hook");
    if (saved_thread_hook_ == nullptr) PyErr_Clear();
    if (PyObject_SetAttrString(threading, "_profile_hook", thread_bootstrap_) < 0) PyErr_Clear();
    Py_DECREF(threading);
  }
  // GC pauses.
  if (gc != nullptr) {
    PyObject* callbacks = PyObject_GetAttrString(gc, "callbacks");
    if (callbacks == nullptr || !PyList_Check(callbacks) ||
        PyList_Append(callbacks, gc_callback_) < 0) {
      PyErr_Clear();
    }
    Py_XDECREF(callbacks);
    Py_DECREF(gc);
  }
  // Every thread that runs Python now.
  ForEachThread([this](PyThreadState* t) {
    PyFrameObject* frame = PyThreadState_GetFrame(t);
    if (frame == nullptr) return;  // no Python running there (e.g. the agent's own threads)
    Py_DECREF(frame);
    InstallOn(t);
  });
}

void PythonProfiler::InstallOn(PyThreadState* tstate) {
  if (tstate->c_profilefunc == &Hook) return;
  if (tstate->c_profilefunc != nullptr) {
    ++counts_.skipped_threads;  // someone else profiles this thread: leave it alone
    return;
  }
  auto ts =
      std::make_unique<ThreadState>(this, &interner_, &CodeName, start_ns_, end_ns_, clock_);
  HookObject* obj = PyObject_New(HookObject, reinterpret_cast<PyTypeObject*>(hook_type_));
  if (obj == nullptr) {
    PyErr_Clear();
    return;
  }
  obj->state = ts.get();
  if (_PyEval_SetProfile(tstate, &Hook, reinterpret_cast<PyObject*>(obj)) < 0) {
    PyErr_Clear();
  } else {
    threads_.push_back(std::move(ts));
    ++counts_.threads;
  }
  Py_DECREF(obj);
}

void PythonProfiler::Emit(ThreadState* ts, uint32_t id, EventKind kind, int64_t start,
                          int64_t end, uint64_t payload) {
  if (id >= CallPathInterner::kHidden) {
    shm_->header()->dropped_function_table.fetch_add(1, std::memory_order_relaxed);
    ++ts->dropped;
    return;
  }
  Event ev;
  ev.start_ns = start;
  ev.end_ns = end;
  ev.payload = payload;
  ev.function_id = id;
  ev.track_id = ts->ring >= 0 ? static_cast<uint32_t>(ts->ring) : 0;
  ev.kind = kind;
  if (rings_.Push(ts->ring, ev)) {
    ++ts->events;
  } else {
    ++ts->dropped;
  }
}

ProfilerCounts PythonProfiler::Stop() {
  if (!recording_) return {};
  const int64_t end = std::min(RealtimeNs(), end_ns_);
  ForEachThread([](PyThreadState* t) {
    if (t->c_profilefunc == &Hook) RemoveHook(t);
  });
  std::vector<std::unique_ptr<ThreadState>> still_hooked;
  for (auto& ts : threads_) {
    if (ts->primed) {
      ts->stack.PopAll([this, &ts, end](const ShadowStack::Frame& f) {
        Emit(ts.get(), f.id, EventKind::kPythonCall, std::min(f.start_ns, end), end, 0);
      });
    }
    counts_.events += ts->events;
    counts_.dropped += ts->dropped;
    ts->end_ns = INT64_MIN;
  }
  // A thread whose hook could not be removed (an audit hook refused) keeps its state alive;
  // its hook removes itself on its next event (end_ns is in the past).
  ForEachThread([&](PyThreadState* t) {
    if (t->c_profilefunc != &Hook) return;
    ThreadState* s = reinterpret_cast<HookObject*>(t->c_profileobj)->state;
    for (auto& ts : threads_) {
      if (ts.get() == s) still_hooked.push_back(std::move(ts));
    }
  });
  for (auto& ts : still_hooked) ts.release();  // deliberately leaked (rare, bounded per window)
  threads_.clear();
  rings_.FlushAll();

  if (PyObject* threading = PyImport_ImportModule("threading")) {
    PyObject* restore = saved_thread_hook_ != nullptr ? saved_thread_hook_ : Py_None;
    if (PyObject_SetAttrString(threading, "_profile_hook", restore) < 0) PyErr_Clear();
    Py_DECREF(threading);
  } else {
    PyErr_Clear();
  }
  Py_CLEAR(saved_thread_hook_);
  if (PyObject* gc = PyImport_ImportModule("gc")) {
    PyObject* callbacks = PyObject_GetAttrString(gc, "callbacks");
    if (callbacks != nullptr && PyList_Check(callbacks)) {
      for (Py_ssize_t i = PyList_GET_SIZE(callbacks); i-- > 0;) {
        if (PyList_GET_ITEM(callbacks, i) == gc_callback_ &&
            PySequence_DelItem(callbacks, i) < 0) {
          PyErr_Clear();
        }
      }
    } else {
      PyErr_Clear();
    }
    Py_XDECREF(callbacks);
    Py_DECREF(gc);
  } else {
    PyErr_Clear();
  }
  recording_ = false;
  if (g_recording == this) g_recording = nullptr;
  return counts_;
}

void PythonProfiler::Hide(PyObject* code) {
  if (code == nullptr || !PyCode_Check(code)) return;
  Py_INCREF(code);  // hidden keys must never be freed and reused
  interner_.Hide(code);
}

void PythonProfiler::Record(EventKind kind, std::string_view name, bool nest, int64_t start_ns,
                            int64_t end_ns, uint64_t payload) {
  if (!recording_ || g_in_forked_child || end_ns <= start_ns_ || start_ns >= end_ns_) return;
  PyThreadState* tstate = PyThreadState_Get();
  ThreadState* ts = nullptr;
  if (tstate->c_profilefunc == &Hook) {
    ts = reinterpret_cast<HookObject*>(tstate->c_profileobj)->state;
    if (!ts->primed) ts = nullptr;
  }
  const uint32_t parent =
      (nest && ts != nullptr) ? ts->stack.top_id() : CallPathInterner::kNoParent;
  const uint32_t id = interner_.InternName(parent, kind, name);
  start_ns = std::max(start_ns, start_ns_);
  end_ns = std::min(end_ns, end_ns_);
  if (ts != nullptr) {
    Emit(ts, id, kind, start_ns, end_ns, payload);
    return;
  }
  ThreadState tmp(this, &interner_, &CodeName, start_ns_, end_ns_, clock_);
  tmp.ring = rings_.RingForCurrentThread();
  Emit(&tmp, id, kind, start_ns, end_ns, payload);
  counts_.events += tmp.events;
  counts_.dropped += tmp.dropped;
}

void PythonProfiler::OnGc(PyObject* phase, PyObject* info) {
  if (!recording_ || !PyUnicode_Check(phase)) return;
  if (PyUnicode_CompareWithASCIIString(phase, "start") == 0) {
    gc_start_ns_ = RealtimeNs();
    return;
  }
  if (gc_start_ns_ == 0) return;
  long generation = -1;
  if (PyDict_Check(info)) {
    PyObject* g = PyDict_GetItemString(info, "generation");  // borrowed
    if (g != nullptr && PyLong_Check(g)) generation = PyLong_AsLong(g);
    if (PyErr_Occurred()) PyErr_Clear();
  }
  const int64_t start = gc_start_ns_;
  gc_start_ns_ = 0;
  Record(EventKind::kGc, "gc collect generation " + std::to_string(generation), false, start,
         RealtimeNs(), 0);
}

int PythonProfiler::HookedThreadCount() const {
  int n = 0;
  ForEachThread([&n](PyThreadState* t) { n += t->c_profilefunc == &Hook ? 1 : 0; });
  return n;
}

void PythonProfiler::AbandonAfterFork() {
  PyThreadState* tstate = PyThreadState_Get();
  if (tstate->c_profilefunc == &Hook) RemoveHook(tstate);
  for (auto& ts : threads_) ts.release();  // other threads are gone; their states stay leaked
  threads_.clear();
  recording_ = false;
  if (g_recording == this) g_recording = nullptr;
}

}  // namespace perftracker
