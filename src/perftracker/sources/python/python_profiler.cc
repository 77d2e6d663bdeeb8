#include "perftracker/sources/python/python_profiler.h"

#include <frameobject.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstring>

#include "perftracker/core/realtime_clock.h"
#include "perftracker/sources/python/tsc_clock.h"

// The frame-evaluation hook (PEP 523) reads the frames the interpreter evaluates: on 3.11 its
// own frames, whose layout only CPython's internal headers describe (it changes between minor
// versions); on 3.10 frame objects (public). 3.12 and 3.13 use sys.monitoring instead.
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && !defined(Py_LIMITED_API)
#define PERFTRACKER_EVAL_HOOK 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#elif PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030B0000 && !defined(Py_LIMITED_API)
#define PERFTRACKER_EVAL_HOOK 1
#else
#define PERFTRACKER_EVAL_HOOK 0
#endif

// The sys.monitoring hook (PEP 669) identifies frames by the interpreter's frame, whose
// layout the internal header describes (3.12 and 3.13; 3.14 changed it again).
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_LIMITED_API)
#define PERFTRACKER_MONITOR_HOOK 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#else
#define PERFTRACKER_MONITOR_HOOK 0
#endif

#if PY_VERSION_HEX >= 0x030D0000
// Exported by CPython 3.13 but declared only in its internal headers: the per-thread
// profile function setter (PyEval_SetProfile sets the calling thread's only).
extern "C" int _PyEval_SetProfile(PyThreadState* tstate, Py_tracefunc func, PyObject* arg);
#endif

namespace perftracker {

struct PythonProfiler::ThreadState {
  ThreadState(PythonProfiler* p, CallPathInterner* interner, CallPathInterner::NameFn name_fn,
              int64_t start, int64_t end, const TscClock::Anchor& clock_anchor)
      : profiler(p),
        stack(interner, EventKind::kPythonCall, name_fn),
        start_ns(start),
        end_ns(end),
        clock(clock_anchor) {}
  PythonProfiler* profiler;
  ShadowStack stack;
  int64_t start_ns;
  int64_t end_ns;  // INT64_MIN once the window is over: the next event removes the hook
  TscClock::Anchor clock;
  int ring = RingWriter::kNoRing;
  uint32_t track = 0;
  bool primed = false;
  bool ignored = false;       // the agent's own thread (eval hook): never recorded
  uintptr_t stack_guard = 0;  // eval hook: C stack addresses below it are too deep
  uint64_t tstate_id = 0;     // eval hook: PyThreadState::id
  int64_t last_ns = 0;        // end of the thread's latest event
  uint32_t overflow = 0;      // eval hook: running calls beyond ShadowStack::kMaxDepth
  uint64_t events = 0;
  uint64_t dropped = 0;
  uint64_t deep_pauses = 0;
};

namespace {

constexpr size_t kMaxPrimeDepth = 512;  // frames walked up when a thread is first seen

// The per-thread profile-function argument: carries the thread's state to the hook.
struct HookObject {
  PyObject_HEAD PythonProfiler::ThreadState* state;
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

// Marks the agent's own threads (eval hook: every thread runs the hook).
thread_local bool t_ignored_thread = false;

#if PY_VERSION_HEX < 0x030B0000
// CPython 3.10's code objects have no qualified name: the hooks name a function on
// its first call from the frame running it (t_naming_frame): the function object found in
// the frame's globals, else on the class of its first argument (self / cls), else nested
// in its caller's code (a comprehension, a local function called where it is defined);
// else the bare name (a local function called from elsewhere, docs/live-mode.md).
thread_local PyFrameObject* t_naming_frame = nullptr;

std::string Utf8(PyObject* s) {
  const char* c = s != nullptr && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : nullptr;
  if (c == nullptr) {
    PyErr_Clear();
    return "?";
  }
  return c;
}

// `f`'s qualified name when it is a function (or a classmethod / staticmethod) of `code`.
bool FunctionQualName(PyObject* f, PyCodeObject* code, std::string* out) {
  if (f == nullptr) return false;
  if (!PyFunction_Check(f)) {
    if (Py_TYPE(f) != &PyClassMethod_Type && Py_TYPE(f) != &PyStaticMethod_Type) return false;
    PyObject* inner = PyObject_GetAttrString(f, "__func__");
    if (inner == nullptr) {
      PyErr_Clear();
      return false;
    }
    const bool ok = PyFunction_Check(inner) && FunctionQualName(inner, code, out);
    Py_DECREF(inner);
    return ok;
  }
  if (PyFunction_GET_CODE(f) != reinterpret_cast<PyObject*>(code)) return false;
  *out = Utf8(reinterpret_cast<PyFunctionObject*>(f)->func_qualname);
  return true;
}

std::string QualName310(PyCodeObject* code) {
  PyFrameObject* frame = t_naming_frame;
  std::string out;
  if (frame == nullptr || frame->f_code != code) return Utf8(code->co_name);
  if (PyDict_Check(frame->f_globals) &&
      FunctionQualName(PyDict_GetItem(frame->f_globals, code->co_name), code, &out)) {
    return out;
  }
  if (code->co_argcount > 0 && frame->f_localsplus[0] != nullptr) {
    PyObject* self = frame->f_localsplus[0];
    PyObject* type = PyType_Check(self) ? self : reinterpret_cast<PyObject*>(Py_TYPE(self));
    PyObject* mro = reinterpret_cast<PyTypeObject*>(type)->tp_mro;
    for (Py_ssize_t i = 0; mro != nullptr && PyTuple_Check(mro) && i < PyTuple_GET_SIZE(mro); ++i) {
      PyObject* dict = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i))->tp_dict;
      if (dict != nullptr && FunctionQualName(PyDict_GetItem(dict, code->co_name), code, &out)) {
        return out;
      }
    }
  }
  PyFrameObject* back = frame->f_back;
  if (back != nullptr && PyTuple_Check(back->f_code->co_consts)) {
    PyObject* consts = back->f_code->co_consts;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(consts); ++i) {
      if (PyTuple_GET_ITEM(consts, i) != reinterpret_cast<PyObject*>(code)) continue;
      t_naming_frame = back;
      std::string parent = QualName310(back->f_code);
      t_naming_frame = frame;
      if (parent == "<module>") break;
      return parent + ".<locals>." + Utf8(code->co_name);
    }
  }
  return Utf8(code->co_name);
}
#endif

// The frame a profile hook is about to push (3.10 names functions from it).
inline void SetNamingFrame([[maybe_unused]] PyFrameObject* frame) {
#if PY_VERSION_HEX < 0x030B0000
  t_naming_frame = frame;
#endif
}

// "qualname (file.py:line)". Keeps a reference to the code object: a published path's code
// is never freed, so its address can never be reused by another function (bounded by the
// function table's capacity).
std::string CodeName(const void* key) {
  auto* code = static_cast<PyCodeObject*>(const_cast<void*>(key));
  Py_INCREF(code);
  std::string name;
#if PY_VERSION_HEX >= 0x030B0000
  const char* qual = PyUnicode_AsUTF8(code->co_qualname);
  if (qual == nullptr) {
    PyErr_Clear();
    qual = "?";
  }
  name = qual;
#else
  name = QualName310(code);
#endif
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

// One closed Python call into the thread's ring. Inline: the hooks' per-call path.
inline void EmitCall(PythonProfiler::ThreadState* ts, const ShadowStack::Frame& f, int64_t end) {
  if (f.id >= CallPathInterner::kHidden) [[unlikely]] {
    ts->profiler->Emit(ts, f.id, EventKind::kPythonCall, f.start_ns, end, 0);  // counts it
    return;
  }
  Event ev;
  ev.start_ns = f.start_ns;
  ev.end_ns = end;
  ev.function_id = f.id;
  ev.track_id = ts->track;
  ev.kind = EventKind::kPythonCall;
  if (ts->profiler->rings()->Push(ts->ring, ev)) [[likely]] {
    ++ts->events;
  } else {
    ++ts->dropped;
  }
  ts->last_ns = end;
}

// ---------------------------------------------------------------- the profile hook

void RemoveHook(PyThreadState* tstate) {
  if (_PyEval_SetProfile(tstate, nullptr, nullptr) < 0) PyErr_Clear();
}

// First event of a thread in this window: push the frames that were already running, root
// first, so that every path is the thread's whole stack. `first` is the innermost of them.
void Prime(PythonProfiler::ThreadState* ts, PyFrameObject* first) {
  ts->primed = true;
  ts->ring = ts->profiler->rings()->RingForCurrentThread();
  ts->track = ts->ring >= 0 ? static_cast<uint32_t>(ts->ring) : 0;
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
    SetNamingFrame(chain[i]);
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
    SetNamingFrame(frame);
    ts->stack.Push(frame, code, now);
  } else {
    if (!ts->primed) [[unlikely]]
      Prime(ts, frame);
    ts->stack.Pop(frame, [ts, now](const ShadowStack::Frame& f) { EmitCall(ts, f, now); });
  }
  return 0;
}

// ---------------------------------------------------------------- the frame-evaluation hook

#if PERFTRACKER_EVAL_HOOK

#if PY_VERSION_HEX >= 0x030B0000
// 3.11: the interpreter's own frames. A Python function calling another runs the callee
// inline, without the eval function, once the call is specialized (Reconcile finds them).
using EvalFrame = _PyInterpreterFrame;
inline EvalFrame* EvalCaller(EvalFrame* f) { return f->previous; }
inline EvalFrame* EvalCurrentFrame(PyThreadState* t) { return t->cframe->current_frame; }
inline bool EvalNotStarted(EvalFrame* f) { return _PyFrame_IsIncomplete(f); }
constexpr int kGeneratorFlags = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR;
// Calling a generator or coroutine function only creates the object: its body runs (and is
// recorded) when it is resumed, as the profile hook sees it.
inline bool EvalOnlyCreates(PyCodeObject* code, EvalFrame* f) {
  return (code->co_flags & kGeneratorFlags) != 0 && f->owner != FRAME_OWNED_BY_GENERATOR;
}
inline void NameFrom(EvalFrame* /*f*/) {}  // 3.11 code objects carry their qualified name
#else
// 3.10: frame objects. Every Python call, generator resume and throw goes through the eval
// function (3.10 runs no call inline), and calling a generator function evaluates nothing.
using EvalFrame = PyFrameObject;
inline EvalFrame* EvalCaller(EvalFrame* f) { return f->f_back; }
inline EvalFrame* EvalCurrentFrame(PyThreadState* t) { return t->frame; }
inline bool EvalNotStarted(EvalFrame* /*f*/) { return false; }
inline bool EvalOnlyCreates(PyCodeObject* /*code*/, EvalFrame* /*f*/) { return false; }
inline void NameFrom(EvalFrame* f) { SetNamingFrame(f); }
#endif
inline PyCodeObject* EvalCode(EvalFrame* f) { return f->f_code; }

// Everything the eval hook reads per call, in one place (GIL-protected, like all of this).
struct EvalGlobals {
  PythonProfiler* profiler = nullptr;  // recording with the eval hook; nullptr: pass through
  uint64_t window = 0;                 // bumped at every eval window start
  int64_t end_ns = INT64_MIN;          // calls at or past it are not recorded
  uint64_t cached_tstate_id = 0;       // the thread that ran the hook last (ids start at 1)
  PythonProfiler::ThreadState* cached = nullptr;  // ... and its state
  TscClock::Anchor clock;
  PyInterpreterState* interp = nullptr;
  bool installed = false;  // our function should be the interpreter's eval function
  int pauses = 0;          // deep calls running with the hook handed back
};
EvalGlobals g_eval;

PyObject* EvalHook(PyThreadState* tstate, EvalFrame* frame, int throwflag);

void SetEvalFunction(bool ours) {
  if (g_eval.interp == nullptr) return;
  _PyInterpreterState_SetEvalFrameFunc(g_eval.interp, ours ? &EvalHook : &_PyEval_EvalFrameDefault);
}

PythonProfiler::ThreadState* EvalLookup(PyThreadState* tstate) {
  if (g_eval.profiler == nullptr) return nullptr;
  PythonProfiler::ThreadState* ts = g_eval.profiler->EvalThreadState(tstate);
  g_eval.cached_tstate_id = tstate->id;
  g_eval.cached = ts;
  return ts;
}

// Makes the shadow stack mirror the interpreter's frame chain that ends at `caller` (the
// frame that is calling, or nullptr at a thread's root): shadow frames that are not on the
// chain any more returned unseen and are closed at `now`; chain frames the shadow stack
// lacks are pushed (on the thread's first event: everything that was running, started at
// the window's start; later: frames the interpreter entered inline, started at `now`).
void Reconcile(PythonProfiler::ThreadState* ts, EvalFrame* caller, int64_t now) {
  EvalFrame* chain[kMaxPrimeDepth];
  size_t n = 0;
  ptrdiff_t match = -1;
  for (EvalFrame* f = caller; f != nullptr && n < kMaxPrimeDepth; f = EvalCaller(f)) {
    if (EvalNotStarted(f)) continue;  // not started yet (no call made from it)
    match = ts->stack.Find(f, EvalCode(f));
    if (match >= 0) break;
    chain[n++] = f;
  }
  ts->stack.PopTo(static_cast<size_t>(match + 1), [ts, now](const ShadowStack::Frame& f) {
    EmitCall(ts, f, std::max(now, f.start_ns));
  });
  const int64_t start = ts->primed ? now : ts->start_ns;
  ts->primed = true;
  for (size_t i = n; i-- > 0;) {
    NameFrom(chain[i]);
    ts->stack.Push(chain[i], EvalCode(chain[i]), start);
  }
}

// A thread that is the agent's own, or that has used half of its C stack (deep recursion:
// with our hook every Python call nests a C call). The latter hands frame evaluation back
// to the interpreter (inline calls, no C recursion) until this call returns.
PyObject* EvalUnrecorded(PythonProfiler::ThreadState* ts, PyThreadState* tstate, EvalFrame* frame,
                         int throwflag) {
  if (ts->ignored) return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  ++ts->deep_pauses;
  if (g_eval.pauses++ == 0 && g_eval.installed) SetEvalFunction(false);
  PyObject* result = _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  if (--g_eval.pauses == 0 && g_eval.installed) SetEvalFunction(true);
  return result;
}

// A frame that began in an earlier window returned while a new window records: it may have
// been pushed there as a running frame.
void EvalLateReturn(PyThreadState* tstate, EvalFrame* frame, int64_t end) {
  if (g_eval.profiler == nullptr || end >= g_eval.end_ns) return;
  PythonProfiler::ThreadState* ts =
      tstate->id == g_eval.cached_tstate_id ? g_eval.cached : EvalLookup(tstate);
  if (ts == nullptr || ts->ignored) return;
  ts->stack.Pop(frame, [ts, end](const ShadowStack::Frame& f) { EmitCall(ts, f, end); });
}

// A call deeper than ShadowStack::kMaxDepth: not recorded, and neither are its callees
// (their caller is not on the shadow stack, which must not be reconciled against it).
PyObject* EvalTooDeep(PythonProfiler::ThreadState* ts, PyThreadState* tstate, EvalFrame* frame,
                      int throwflag) {
  ts->stack.CountTooDeep();
  ++ts->overflow;
  const uint64_t window = g_eval.window;
  PyObject* result = _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  if (window == g_eval.window && g_eval.profiler != nullptr) --ts->overflow;  // else: freed
  return result;
}

// The interpreter runs every Python frame through this function while a window records.
PyObject* EvalHook(PyThreadState* tstate, EvalFrame* frame, int throwflag) {
  PythonProfiler::ThreadState* ts =
      tstate->id == g_eval.cached_tstate_id ? g_eval.cached : EvalLookup(tstate);
  if (ts == nullptr) [[unlikely]]
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  if (reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) < ts->stack_guard) [[unlikely]] {
    return EvalUnrecorded(ts, tstate, frame, throwflag);
  }
  PyCodeObject* code = EvalCode(frame);
  if (EvalOnlyCreates(code, frame)) [[unlikely]] {
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  }
  const int64_t start = TscClock::Now(g_eval.clock);
  if (start >= g_eval.end_ns) [[unlikely]] {
    if (g_eval.installed) {
      g_eval.installed = false;
      if (g_eval.pauses == 0) SetEvalFunction(false);
    }
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  }
  if (ts->overflow != 0) [[unlikely]] {
    return EvalTooDeep(ts, tstate, frame, throwflag);
  }
  EvalFrame* caller = EvalCurrentFrame(tstate);
  if (!ts->stack.TopIs(caller, caller != nullptr ? EvalCode(caller) : nullptr)) [[unlikely]] {
    Reconcile(ts, caller, start);
  }
  NameFrom(frame);
  if (ts->stack.Push(frame, code, start) == ShadowStack::PushResult::kTooDeep) [[unlikely]] {
    ++ts->overflow;  // Push counted it
    const uint64_t window = g_eval.window;
    PyObject* result = _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    if (window == g_eval.window && g_eval.profiler != nullptr) --ts->overflow;
    return result;
  }
  const uint64_t window = g_eval.window;
  PyObject* result = _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  const int64_t end = TscClock::Now(g_eval.clock);
  // `ts` is valid while its window records (states are freed by Stop, which ends it).
  if (window == g_eval.window && end < g_eval.end_ns) [[likely]] {
    ts->stack.Pop(frame, [ts, end](const ShadowStack::Frame& f) { EmitCall(ts, f, end); });
  } else if (window != g_eval.window) {
    EvalLateReturn(tstate, frame, end);
  }
  return result;
}

// The C stack address below which a call on the calling thread counts as deep: half of the
// thread's stack used.
uintptr_t StackGuard() {
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  constexpr uintptr_t kFallback = 512 * 1024;  // unknown stack: allow this much more
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return here - kFallback;
  void* addr = nullptr;
  size_t size = 0;
  const int rc = pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  const auto low = reinterpret_cast<uintptr_t>(addr);
  if (rc != 0 || size == 0 || here < low || here > low + size) return here - kFallback;
  return low + size / 2;
}

#endif  // PERFTRACKER_EVAL_HOOK

// ---------------------------------------------------------------- the sys.monitoring hook

#if PERFTRACKER_MONITOR_HOOK

struct MonitorGlobals {
  PythonProfiler* profiler = nullptr;  // recording with sys.monitoring; nullptr: no-op
  uint64_t window = 1;                 // bumped at every start and stop (thread caches)
  int64_t end_ns = INT64_MIN;
  TscClock::Anchor clock;
  bool enabled = false;  // our events are enabled and callbacks registered (tool id held)
};
MonitorGlobals g_mon;

// The calling thread's state in the current window (a cache in front of EvalThreadState).
thread_local uint64_t t_mon_window [[gnu::tls_model("initial-exec")]] = 0;
thread_local PythonProfiler::ThreadState* t_mon_state [[gnu::tls_model("initial-exec")]] = nullptr;

inline _PyInterpreterFrame* CurrentFrame(PyThreadState* tstate) {
#if PY_VERSION_HEX >= 0x030D0000
  return tstate->current_frame;
#else
  return tstate->cframe->current_frame;
#endif
}

inline PyCodeObject* FrameCode(_PyInterpreterFrame* f) {
#if PY_VERSION_HEX >= 0x030D0000
  return _PyFrame_GetCode(f);
#else
  return f->f_code;
#endif
}

PythonProfiler::ThreadState* MonitorThread(PyThreadState* tstate) {
  if (t_mon_window == g_mon.window) [[likely]]
    return t_mon_state;
  PythonProfiler::ThreadState* ts = nullptr;
  if (g_mon.profiler != nullptr && !g_in_forked_child) {
    ts = g_mon.profiler->EvalThreadState(tstate);
    if (ts->ignored) ts = nullptr;
  }
  t_mon_window = g_mon.window;
  t_mon_state = ts;
  return ts;
}

// First event of a thread in this window: push the frames that were running, root first,
// started at the window's start. `first` is the innermost of them.
void MonitorPrime(PythonProfiler::ThreadState* ts, _PyInterpreterFrame* first) {
  ts->primed = true;
  _PyInterpreterFrame* chain[kMaxPrimeDepth];
  size_t n = 0;
  for (_PyInterpreterFrame* f = first; f != nullptr && n < kMaxPrimeDepth; f = f->previous) {
    if (f->owner == FRAME_OWNED_BY_CSTACK || _PyFrame_IsIncomplete(f)) continue;
    chain[n++] = f;
  }
  for (size_t i = n; i-- > 0;) ts->stack.Push(chain[i], FrameCode(chain[i]), ts->start_ns);
}

// What both callbacks begin with: the calling thread's state in this window, the time and the
// running frame; false when the event is not recorded (no window, past its end, no frame). A
// thread's first event in the window primes its stack with the frames running below the event:
// the callers of a frame that starts, the leaving frame and its callers otherwise.
struct MonitorEvent {
  PythonProfiler::ThreadState* ts;
  _PyInterpreterFrame* frame;
  int64_t now;
};

inline bool BeginMonitorEvent(bool frame_starts, MonitorEvent* e) {
  PyThreadState* tstate = PyThreadState_Get();
  e->ts = MonitorThread(tstate);
  if (e->ts == nullptr) [[unlikely]]
    return false;
  e->now = TscClock::Now(g_mon.clock);
  if (e->now >= g_mon.end_ns) [[unlikely]]
    return false;
  e->frame = CurrentFrame(tstate);
  if (e->frame == nullptr) [[unlikely]]
    return false;
  if (!e->ts->primed) [[unlikely]]
    MonitorPrime(e->ts, frame_starts ? e->frame->previous : e->frame);
  return true;
}

// PY_START, PY_RESUME, PY_THROW (code, instruction offset[, exception]): a frame starts or
// resumes running.
PyObject* MonitorEnter(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  MonitorEvent e;
  if (nargs < 1 || !BeginMonitorEvent(true, &e)) [[unlikely]]
    Py_RETURN_NONE;
  e.ts->stack.Push(e.frame, args[0], e.now);
  Py_RETURN_NONE;
}

// PY_RETURN, PY_YIELD, PY_UNWIND: a frame returns, yields or exits with an exception.
PyObject* MonitorLeave(PyObject* /*self*/, PyObject* const* /*args*/, Py_ssize_t /*nargs*/) {
  MonitorEvent e;
  if (!BeginMonitorEvent(false, &e)) [[unlikely]]
    Py_RETURN_NONE;
  e.ts->stack.Pop(e.frame, [&e](const ShadowStack::Frame& f) { EmitCall(e.ts, f, e.now); });
  Py_RETURN_NONE;
}

PyMethodDef kMonitorEnterDef = {
    "_perftracker_monitor_enter",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&MonitorEnter)), METH_FASTCALL,
    nullptr};
PyMethodDef kMonitorLeaveDef = {
    "_perftracker_monitor_leave",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&MonitorLeave)), METH_FASTCALL,
    nullptr};

using EventNames = std::array<const char*, 3>;
constexpr EventNames kEnterEvents = {"PY_START", "PY_RESUME", "PY_THROW"};
constexpr EventNames kLeaveEvents = {"PY_RETURN", "PY_YIELD", "PY_UNWIND"};

// sys.monitoring.<fn>(args...): the result (new reference), or nullptr with the error cleared.
template <typename... A>
PyObject* CallMonitoring(const char* fn, const char* format, A... args) {
  PyObject* mon = PySys_GetObject("monitoring");  // borrowed
  PyObject* r = mon != nullptr ? PyObject_CallMethod(mon, fn, format, args...) : nullptr;
  if (r == nullptr) PyErr_Clear();
  return r;
}

long EventBit(const char* name) {
  PyObject* mon = PySys_GetObject("monitoring");
  PyObject* events = mon != nullptr ? PyObject_GetAttrString(mon, "events") : nullptr;
  PyObject* bit = events != nullptr ? PyObject_GetAttrString(events, name) : nullptr;
  const long v = bit != nullptr ? PyLong_AsLong(bit) : -1;
  Py_XDECREF(bit);
  Py_XDECREF(events);
  if (PyErr_Occurred()) PyErr_Clear();
  return v;
}

// Claims sys.monitoring's profiler tool id; when another tool holds it, says so once (one
// line) and returns false: the window records with the profile function.
bool MonitorClaim() {
  const int tool = PythonProfiler::kMonitorToolId;
  if (PyObject* r = CallMonitoring("use_tool_id", "is", tool, "perftracker")) {
    Py_DECREF(r);
    return true;
  }
  static bool said = false;
  if (!said) {
    said = true;
    PyObject* holder = CallMonitoring("get_tool", "i", tool);
    const char* name =
        holder != nullptr && PyUnicode_Check(holder) ? PyUnicode_AsUTF8(holder) : nullptr;
    if (name == nullptr) PyErr_Clear();
    std::fprintf(stderr,
                 "perftracker agent: sys.monitoring tool id %d (PROFILER_ID) is held by '%s': "
                 "recording Python calls with the slower profile function instead\n",
                 tool, name != nullptr ? name : "?");
    Py_XDECREF(holder);
  }
  return false;
}

void MonitorRelease();

// Registers our callbacks and enables their events (the tool id is claimed).
bool MonitorEnable() {
  const int tool = PythonProfiler::kMonitorToolId;
  g_mon.enabled = true;  // from here MonitorRelease undoes everything
  static PyObject* enter = PyCFunction_New(&kMonitorEnterDef, nullptr);
  static PyObject* leave = PyCFunction_New(&kMonitorLeaveDef, nullptr);
  if (enter == nullptr || leave == nullptr) {
    PyErr_Clear();
    MonitorRelease();
    return false;
  }
  long mask = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (const char* name : pass == 0 ? kEnterEvents : kLeaveEvents) {
      const long bit = EventBit(name);
      PyObject* r =
          bit > 0 ? CallMonitoring("register_callback", "ilO", tool, bit, pass == 0 ? enter : leave)
                  : nullptr;
      if (r == nullptr) {
        MonitorRelease();
        return false;
      }
      Py_DECREF(r);
      mask |= bit;
    }
  }
  PyObject* r = CallMonitoring("set_events", "il", tool, mask);
  if (r == nullptr) {
    MonitorRelease();
    return false;
  }
  Py_DECREF(r);
  return true;
}

// Disables our events, unregisters our callbacks and frees the tool id.
void MonitorRelease() {
  if (!g_mon.enabled) return;
  g_mon.enabled = false;
  const int tool = PythonProfiler::kMonitorToolId;
  Py_XDECREF(CallMonitoring("set_events", "ii", tool, 0));
  for (const char* name : kEnterEvents) {
    Py_XDECREF(CallMonitoring("register_callback", "ilO", tool, EventBit(name), Py_None));
  }
  for (const char* name : kLeaveEvents) {
    Py_XDECREF(CallMonitoring("register_callback", "ilO", tool, EventBit(name), Py_None));
  }
  Py_XDECREF(CallMonitoring("free_tool_id", "i", tool));
}

#endif  // PERFTRACKER_MONITOR_HOOK

void OnForkChild() {
  g_in_forked_child = true;
#if PERFTRACKER_MONITOR_HOOK
  // No Python here (pthread_atfork): the callbacks see g_in_forked_child and do nothing;
  // AbandonAfterFork (the agent's Python after-fork handler) releases the tool id.
  g_mon.profiler = nullptr;
  ++g_mon.window;
#endif
#if PERFTRACKER_EVAL_HOOK
  // The child's only thread holds the GIL here: nothing runs Python concurrently.
  if (g_eval.installed && g_eval.pauses == 0) SetEvalFunction(false);
  g_eval.installed = false;
  g_eval.profiler = nullptr;
  g_eval.end_ns = INT64_MIN;
  g_eval.cached_tstate_id = 0;
  g_eval.cached = nullptr;
#endif
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

PyMethodDef kBootstrapDef = {"_perftracker_thread_profile", ThreadBootstrap, METH_VARARGS, nullptr};
PyMethodDef kGcCallbackDef = {"_perftracker_gc_callback", GcCallback, METH_VARARGS, nullptr};

// The OS thread a thread state runs on (the calling thread's own state).
inline uint64_t OsThread([[maybe_unused]] PyThreadState* tstate) {
#if PY_VERSION_HEX >= 0x030B0000
  return tstate->native_thread_id;
#else
  // 3.10 keeps only the pthread id, which the next thread reuses at once: the kernel's id,
  // as native_thread_id is on 3.11.
  return static_cast<uint64_t>(gettid());
#endif
}

// ---------------------------------------------------------------- the interpreter's threads
//
// The interpreter's thread list is read with the GIL only: CPython's own readers also take
// its thread-list lock (HEAD_LOCK), which only its internal headers reach. Two things change
// the list under a reader that holds the GIL:
//  - A thread that makes its thread state without the GIL inserts it at the head: a C++
//    thread calling into Python (PyGILState_Ensure: torch's autograd and gloo threads, ctypes
//    callbacks) and the agent's own GIL worker when it starts. CPython 3.11 makes the new
//    state the head *before* it initializes it (new_threadstate: head = tstate, then
//    init_threadstate), so for a moment its cframe and next are NULL: PyThreadState_GetFrame
//    on it dereferenced NULL (a SIGSEGV of a window's start, first seen in CI when the GIL
//    worker started as the first window opened), and a walk that ends at its NULL next
//    misses every older thread (Stop would free the state of a thread it did not unhook).
//    3.10, 3.12 and 3.13 initialize a state before they list it.
//  - A call that can run Python code lets other threads run, end and free their states:
//    allocating a frame object can start a GC pass (callbacks, finalizers), and
//    _PyEval_SetProfile runs the audit hooks.
// So a walk reads the list and calls nothing (ThreadSnapshot); it waits for a state that
// is still being initialized (its creator holds the thread-list lock and needs neither the
// GIL nor anything else we hold: nanoseconds, a reschedule at worst) and walks again; and
// ForEachThread checks, before each call, that the state it is about to pass is still
// listed (the same address and id: ids are never reused).
struct ThreadRef {
  PyThreadState* tstate;
  uint64_t id;
};

// Whether `t` is initialized: false only for a state CPython 3.11 is still initializing.
// Its `_initialized` flag alone does not say so: init_threadstate sets it last in the
// source, but the compiler may order the plain stores as it likes, and Debian's 3.11.2
// stores `_initialized = 1` before cframe, exc_info and the recursion limits (its
// disassembly). A window then read a NULL cframe (SIGSEGV in PyThreadState_GetFrame, 2 of
// 6 jobs of 300,000 windows beside ctypes threads, profile hook). So every field a walk or
// a call reads is checked itself: the id, the cframe, and the next state (a listed state
// other than the caller's own has one when it is the head: the caller's is older).
inline bool ThreadStateReady([[maybe_unused]] PyThreadState* t, [[maybe_unused]] bool head) {
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
  if (__atomic_load_n(&t->_initialized, __ATOMIC_ACQUIRE) == 0) return false;
  if (__atomic_load_n(&t->id, __ATOMIC_ACQUIRE) == 0) return false;
  if (__atomic_load_n(&t->cframe, __ATOMIC_ACQUIRE) == nullptr) return false;
  return !head || t == PyThreadState_Get() ||
         __atomic_load_n(&t->next, __ATOMIC_ACQUIRE) != nullptr;
#else
  return true;
#endif
}

// Every thread state of `interp`, newest first. GIL held; calls no Python.
std::vector<ThreadRef> ThreadSnapshot(PyInterpreterState* interp) {
  std::vector<ThreadRef> out;
  for (;;) {
    out.clear();
    bool ready = true;
    // PyInterpreterState_ThreadHead and PyThreadState_Next are calls into the interpreter:
    // each pass reads the list afresh.
    for (PyThreadState* t = PyInterpreterState_ThreadHead(interp); t != nullptr;
         t = PyThreadState_Next(t)) {
      if (!ThreadStateReady(t, out.empty())) {
        ready = false;
        break;
      }
      out.push_back(ThreadRef{t, t->id});
    }
    if (ready) return out;
    sched_yield();
  }
}

bool StillListed(PyInterpreterState* interp, const ThreadRef& ref) {
  for (const ThreadRef& r : ThreadSnapshot(interp)) {
    if (r.tstate == ref.tstate && r.id == ref.id) return true;
  }
  return false;
}

// Calls f(tstate) for every thread state of the calling thread's interpreter; f may run
// Python code (see above). GIL held.
template <typename F>
void ForEachThread(F&& f) {
  PyInterpreterState* interp = PyThreadState_Get()->interp;
  const std::vector<ThreadRef> threads = ThreadSnapshot(interp);
  for (size_t i = 0; i < threads.size(); ++i) {
    // The first is listed: nothing ran since the snapshot.
    if (i != 0 && !StillListed(interp, threads[i])) continue;  // it ended meanwhile
    f(threads[i].tstate);
  }
}

}  // namespace

PythonProfiler::PythonProfiler(AgentShm* shm) : shm_(shm), interner_(shm), rings_(shm) {}

StatusOr<std::unique_ptr<PythonProfiler>> PythonProfiler::Create(AgentShm* shm) {
  static const bool fork_handler_registered = pthread_atfork(nullptr, nullptr, &OnForkChild) == 0;
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

PythonHook PythonProfiler::FastHook() {
  if (PERFTRACKER_EVAL_HOOK != 0) return PythonHook::kEval;
  if (PERFTRACKER_MONITOR_HOOK != 0) return PythonHook::kMonitor;
  return PythonHook::kProfile;
}

const char* PythonHookName(PythonHook hook) {
  switch (hook) {
    case PythonHook::kEval:
      return "eval";
    case PythonHook::kProfile:
      return "profile";
    case PythonHook::kMonitor:
      return "monitor";
    case PythonHook::kNone:
      break;
  }
  return "";
}

void PythonProfiler::IgnoreCurrentThread() { t_ignored_thread = true; }

void PythonProfiler::Start(int64_t end_ns) {
  if (recording_) return;
  PythonHook hook = PythonHook::kProfile;
#if PERFTRACKER_EVAL_HOOK
  PyThreadState* self = PyThreadState_Get();
  // Only where nobody else evaluates frames (a debugger, torch.compile): we would have to
  // call their function and could not know what it does with ours.
  if (prefer_eval_hook_ && !g_in_forked_child && !g_eval.installed &&
      _PyInterpreterState_GetEvalFrameFunc(self->interp) == &_PyEval_EvalFrameDefault) {
    hook = PythonHook::kEval;
  }
#endif
#if PERFTRACKER_MONITOR_HOOK
  if (prefer_eval_hook_ && !g_in_forked_child && !g_mon.enabled && MonitorClaim()) {
    hook = PythonHook::kMonitor;
  }
#endif
  // Modules first (an import runs Python code: it must not be recorded).
  PyObject* threading = hook != PythonHook::kProfile ? nullptr : PyImport_ImportModule("threading");
  if (hook == PythonHook::kProfile && threading == nullptr) PyErr_Clear();
  PyObject* gc = PyImport_ImportModule("gc");
  if (gc == nullptr) PyErr_Clear();
  recording_ = true;
  hook_ = hook;
  clock_ = TscClock::MakeAnchor();
  start_ns_ = RealtimeNs();
  end_ns_ = end_ns;
  counts_ = {};
  counts_.hook = hook_;
  g_recording = this;
  // Threads started during the window (the eval hook sees them without help).
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
#if PERFTRACKER_EVAL_HOOK
  if (hook == PythonHook::kEval) {
    g_eval.profiler = this;
    ++g_eval.window;
    g_eval.end_ns = end_ns_;
    g_eval.clock = clock_;
    g_eval.cached_tstate_id = 0;
    g_eval.cached = nullptr;
    g_eval.interp = self->interp;
    g_eval.installed = true;
    if (g_eval.pauses == 0) SetEvalFunction(true);  // else: the paused deep call does it
    return;
  }
#endif
#if PERFTRACKER_MONITOR_HOOK
  if (hook == PythonHook::kMonitor) {
    g_mon.profiler = this;
    ++g_mon.window;
    g_mon.end_ns = end_ns_;
    g_mon.clock = clock_;
    if (!MonitorEnable()) {  // the window records nothing (said nowhere: never seen)
      g_mon.profiler = nullptr;
      ++g_mon.window;
    }
    return;
  }
#endif
  // Every thread that runs Python now.
  ForEachThread([this](PyThreadState* t) {
    PyFrameObject* frame = PyThreadState_GetFrame(t);
    if (frame == nullptr) return;  // no Python running there (e.g. the agent's own threads)
    Py_DECREF(frame);
    InstallOn(t);
  });
}

PythonProfiler::ThreadState* PythonProfiler::EvalThreadState(PyThreadState* tstate) {
#if PERFTRACKER_EVAL_HOOK || PERFTRACKER_MONITOR_HOOK
  // By OS thread: a C++ thread that calls into Python (a torch autograd or gloo callback)
  // may get a new PyThreadState for every call (PyGILState_Ensure / Release).
  auto it = eval_threads_.find(OsThread(tstate));
  if (it != eval_threads_.end()) {
    it->second->tstate_id = tstate->id;
    return it->second;
  }
  auto ts = std::make_unique<ThreadState>(this, &interner_, &CodeName, start_ns_, end_ns_, clock_);
  ts->tstate_id = tstate->id;
  ts->ignored = t_ignored_thread;
#if PERFTRACKER_EVAL_HOOK
  // An ignored thread takes EvalUnrecorded's path at once (no address is above this guard).
  ts->stack_guard = ts->ignored ? UINTPTR_MAX : StackGuard();
#endif
  if (!ts->ignored) {
    ts->ring = rings_.RingForCurrentThread();
    ts->track = ts->ring >= 0 ? static_cast<uint32_t>(ts->ring) : 0;
    ++counts_.threads;
  }
  ThreadState* raw = ts.get();
  threads_.push_back(std::move(ts));
  eval_threads_.emplace(OsThread(tstate), raw);
  return raw;
#else
  (void)tstate;
  return nullptr;
#endif
}

void PythonProfiler::InstallOn(PyThreadState* tstate) {
  if (tstate->c_profilefunc == &Hook) return;
  if (tstate->c_profilefunc != nullptr) {
    ++counts_.skipped_threads;  // someone else profiles this thread: leave it alone
    return;
  }
  auto ts = std::make_unique<ThreadState>(this, &interner_, &CodeName, start_ns_, end_ns_, clock_);
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

void PythonProfiler::Emit(ThreadState* ts, uint32_t id, EventKind kind, int64_t start, int64_t end,
                          uint64_t payload, uint16_t group) {
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
  ev.track_id = ts->track;
  ev.kind = kind;
  ev.group = group;
  if (rings_.Push(ts->ring, ev)) {
    ++ts->events;
  } else {
    ++ts->dropped;
  }
}

// Closes every thread's open frames. Eval hook: frames that are no longer on their thread's
// interpreter stack returned unseen (they were running when the window began, or entered
// inline): closed at that thread's last event; the frames still running at the window end.
void PythonProfiler::CloseThreads(int64_t end) {
  std::unordered_map<uint64_t, PyThreadState*> alive;
  if (hook_ == PythonHook::kEval) {
    ForEachThread([&alive](PyThreadState* t) { alive.emplace(t->id, t); });
  }
  for (auto& ts : threads_) {
    ThreadState* t = ts.get();
    auto emit_at = [t](int64_t at) {
      return [t, at](const ShadowStack::Frame& f) { EmitCall(t, f, std::max(f.start_ns, at)); };
    };
    if (hook_ == PythonHook::kEval && t->primed) {
#if PERFTRACKER_EVAL_HOOK
      const int64_t gone = std::min(std::max(t->last_ns, start_ns_), end);
      auto it = alive.find(t->tstate_id);
      ptrdiff_t live = -1;
      if (it != alive.end()) {
        for (EvalFrame* f = EvalCurrentFrame(it->second); f != nullptr; f = EvalCaller(f)) {
          if ((live = t->stack.Find(f, EvalCode(f))) >= 0) break;
        }
      }
      t->stack.PopTo(static_cast<size_t>(live + 1), emit_at(gone));
#endif
    }
    if (t->primed || hook_ == PythonHook::kEval) t->stack.PopAll(emit_at(end));
    counts_.events += t->events;
    counts_.dropped += t->dropped;
    counts_.too_deep += t->stack.too_deep();
    counts_.deep_pauses += t->deep_pauses;
    t->end_ns = INT64_MIN;
  }
}

ProfilerCounts PythonProfiler::Stop() {
  if (!recording_) return {};
  const int64_t end = std::min(RealtimeNs(), end_ns_);
#if PERFTRACKER_EVAL_HOOK
  if (hook_ == PythonHook::kEval) {
    // In-flight calls return through EvalHook later: they see the window over and touch no
    // state (states are freed below).
    if (g_eval.installed && g_eval.pauses == 0 &&
        _PyInterpreterState_GetEvalFrameFunc(g_eval.interp) == &EvalHook) {
      SetEvalFunction(false);
    }
    g_eval.installed = false;
    g_eval.profiler = nullptr;
    g_eval.end_ns = INT64_MIN;
    g_eval.cached_tstate_id = 0;
    g_eval.cached = nullptr;
  }
#endif
#if PERFTRACKER_MONITOR_HOOK
  if (hook_ == PythonHook::kMonitor) {
    MonitorRelease();
    g_mon.profiler = nullptr;
    ++g_mon.window;
    g_mon.end_ns = INT64_MIN;
  }
#endif
  ForEachThread([](PyThreadState* t) {
    if (t->c_profilefunc == &Hook) RemoveHook(t);
  });
  CloseThreads(end);
  std::vector<std::unique_ptr<ThreadState>> still_hooked;
  // A thread whose profile hook could not be removed (an audit hook refused) keeps its state
  // alive; its hook removes itself on its next event (end_ns is in the past).
  ForEachThread([&](PyThreadState* t) {
    if (t->c_profilefunc != &Hook) return;
    ThreadState* s = reinterpret_cast<HookObject*>(t->c_profileobj)->state;
    for (auto& ts : threads_) {
      if (ts.get() == s) still_hooked.push_back(std::move(ts));
    }
  });
  for (auto& ts : still_hooked) ts.release();  // deliberately leaked (rare, bounded per window)
  threads_.clear();
  eval_threads_.clear();
  rings_.FlushAll();

  if (saved_thread_hook_ != nullptr || hook_ == PythonHook::kProfile) {
    if (PyObject* threading = PyImport_ImportModule("threading")) {
      PyObject* restore = saved_thread_hook_ != nullptr ? saved_thread_hook_ : Py_None;
      if (PyObject_SetAttrString(threading, "_profile_hook", restore) < 0) PyErr_Clear();
      Py_DECREF(threading);
    } else {
      PyErr_Clear();
    }
  }
  Py_CLEAR(saved_thread_hook_);
  if (PyObject* gc = PyImport_ImportModule("gc")) {
    PyObject* callbacks = PyObject_GetAttrString(gc, "callbacks");
    if (callbacks != nullptr && PyList_Check(callbacks)) {
      for (Py_ssize_t i = PyList_GET_SIZE(callbacks); i-- > 0;) {
        if (PyList_GET_ITEM(callbacks, i) == gc_callback_ && PySequence_DelItem(callbacks, i) < 0) {
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
  hook_ = PythonHook::kNone;
  if (g_recording == this) g_recording = nullptr;
  return counts_;
}

void PythonProfiler::Hide(PyObject* code) {
  if (code == nullptr || !PyCode_Check(code)) return;
  Py_INCREF(code);  // hidden keys must never be freed and reused
  interner_.Hide(code);
}

void PythonProfiler::Record(EventKind kind, std::string_view name, bool nest, int64_t start_ns,
                            int64_t end_ns, uint64_t payload, uint16_t group) {
  if (!recording_ || g_in_forked_child || end_ns <= start_ns_ || start_ns >= end_ns_) return;
  PyThreadState* tstate = PyThreadState_Get();
  ThreadState* ts = nullptr;
  if (hook_ == PythonHook::kEval) {
#if PERFTRACKER_EVAL_HOOK
    ts = EvalThreadState(tstate);
    if (ts->ignored) {
      ts = nullptr;
    } else if (nest) {
      // The caller is a (hidden) wrapper frame: bring the shadow stack up to date with it.
      EvalFrame* caller = EvalCurrentFrame(tstate);
      if (!ts->stack.TopIs(caller, caller != nullptr ? EvalCode(caller) : nullptr)) {
        Reconcile(ts, caller, TscClock::Now(clock_));
      }
    }
#endif
  } else if (hook_ == PythonHook::kMonitor) {
#if PERFTRACKER_MONITOR_HOOK
    ts = MonitorThread(tstate);
    if (ts != nullptr && !ts->primed) MonitorPrime(ts, CurrentFrame(tstate));
#endif
  } else if (tstate->c_profilefunc == &Hook) {
    ts = reinterpret_cast<HookObject*>(tstate->c_profileobj)->state;
    if (!ts->primed) ts = nullptr;
  }
  const uint32_t parent =
      (nest && ts != nullptr) ? ts->stack.top_id() : CallPathInterner::kNoParent;
  const uint32_t id = interner_.InternName(parent, kind, name);
  start_ns = std::max(start_ns, start_ns_);
  end_ns = std::min(end_ns, end_ns_);
  if (ts != nullptr) {
    Emit(ts, id, kind, start_ns, end_ns, payload, group);
    return;
  }
  ThreadState tmp(this, &interner_, &CodeName, start_ns_, end_ns_, clock_);
  tmp.ring = rings_.RingForCurrentThread();
  tmp.track = tmp.ring >= 0 ? static_cast<uint32_t>(tmp.ring) : 0;
  Emit(&tmp, id, kind, start_ns, end_ns, payload, group);
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
#if PERFTRACKER_MONITOR_HOOK
  if (g_mon.enabled) ForEachThread([&n](PyThreadState*) { ++n; });
#endif
#if PERFTRACKER_EVAL_HOOK
  if (g_eval.interp != nullptr &&
      _PyInterpreterState_GetEvalFrameFunc(g_eval.interp) == &EvalHook) {
    ForEachThread([&n](PyThreadState*) { ++n; });
  }
#endif
  return n;
}

void PythonProfiler::AbandonAfterFork() {
  PyThreadState* tstate = PyThreadState_Get();
  if (tstate->c_profilefunc == &Hook) RemoveHook(tstate);
#if PERFTRACKER_EVAL_HOOK
  if (hook_ == PythonHook::kEval) OnForkChild();  // idempotent: the hook is off
#endif
#if PERFTRACKER_MONITOR_HOOK
  MonitorRelease();  // the child inherited our events: it must not pay for them
  g_mon.profiler = nullptr;
  ++g_mon.window;
#endif
  for (auto& ts : threads_) ts.release();  // other threads are gone; their states stay leaked
  threads_.clear();
  eval_threads_.clear();
  recording_ = false;
  hook_ = PythonHook::kNone;
  if (g_recording == this) g_recording = nullptr;
}

}  // namespace perftracker
