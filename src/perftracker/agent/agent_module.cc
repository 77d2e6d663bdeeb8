// perftracker._agent: the native half of the agent (the Python half is
// python/perftracker/agent.py). One Agent per process, created by activate(), stopped at
// interpreter exit (atexit, registered by agent.py), abandoned in forked children.
// Also exposes test and benchmark helpers (read_shm, drain_*, profile_*).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "perftracker/agent/agent.h"
#include "perftracker/agent/fork_gate.h"
#include "perftracker/core/realtime_clock.h"
#include "perftracker/sources/python/tsc_clock.h"

namespace py = pybind11;

namespace perftracker {
namespace {

// Raw pointer on purpose: destroyed by stop() (from atexit), leaked in a forked child,
// nothing at static destruction.
Agent* g_agent = nullptr;

py::dict CountsDict(const ProfilerCounts& c) {
  py::dict d;
  d["events"] = c.events;
  d["dropped"] = c.dropped;
  d["threads"] = c.threads;
  d["skipped_threads"] = c.skipped_threads;
  d["too_deep"] = c.too_deep;
  d["deep_pauses"] = c.deep_pauses;
  d["hook"] = PythonHookName(c.hook);
  return d;
}

// Benchmark floor: a profile function that does nothing. What any C-level profile hook
// costs in CPython 3.11 before doing any work (frame objects, de-specialized dispatch).
int NoopProfile(PyObject*, PyFrameObject*, int, PyObject*) { return 0; }

#if PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030C0000
// Benchmark floor of the frame-evaluation hook (3.10, 3.11): evaluates every frame through
// one more C call, as the agent's hook does, and does nothing else.
#if PY_VERSION_HEX >= 0x030B0000
using NoopEvalFrame = struct _PyInterpreterFrame;
#else
using NoopEvalFrame = PyFrameObject;
#endif
PyObject* NoopEval(PyThreadState* tstate, NoopEvalFrame* frame, int throwflag) {
  return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}
#endif

// Benchmark floor of the sys.monitoring hook: a C callback that does nothing.
PyObject* NoopMonitor(PyObject*, PyObject* const*, Py_ssize_t) { Py_RETURN_NONE; }
PyMethodDef kNoopMonitorDef = {
    "noop_monitor", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&NoopMonitor)),
    METH_FASTCALL, nullptr};

size_t DrainAll(AgentShm& s) {
  std::vector<Event> buf(4096);
  size_t total = 0;
  const uint32_t rings = std::min(s.header()->rings_claimed.load(), s.header()->num_rings);
  for (uint32_t r = 0; r < rings; ++r) {
    for (size_t n; (n = s.Pop(static_cast<int>(r), buf.data(), buf.size())) > 0;) total += n;
  }
  return total;
}

// Collector stand-in for benchmarks: drains every ring of a file on its own thread.
struct Drainer {
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> events{0};
};
Drainer* g_drainer = nullptr;

void DrainLoop(Drainer* d, std::string path) {
  auto shm = AgentShm::Open(path);
  if (!shm.ok()) return;
  std::vector<Event> buf(4096);
  for (;;) {
    const bool last = d->stop.load();
    size_t got = 0;
    const uint32_t rings =
        std::min((*shm)->header()->rings_claimed.load(), (*shm)->header()->num_rings);
    for (uint32_t r = 0; r < rings; ++r)
      got += (*shm)->Pop(static_cast<int>(r), buf.data(), buf.size());
    d->events += got;
    if (last) return;
    if (got == 0) usleep(200);
  }
}

}  // namespace
}  // namespace perftracker

PYBIND11_MODULE(_agent, m) {
  using namespace perftracker;
  m.doc() = "perftracker agent (native part); see perftracker.agent";

  m.def(
      "parse_options",
      [](const std::string& text) {
        auto o = ParseAgentOptions(text);
        if (!o.ok()) throw py::value_error(o.status().message());
        py::dict d;
        d["rings"] = o->shm.num_rings;
        d["ring_events"] = o->shm.ring_capacity;
        d["functions"] = o->shm.function_capacity;
        d["learn_repeats"] = o->detector.learn_repeats;
        d["window_iterations"] = o->detector.window_iterations;
        d["slowdown_ratio"] = o->detector.slowdown_ratio;
        d["hang_factor"] = o->detector.hang_factor;
        d["hang_longest_factor"] = o->detector.hang_longest_factor;
        d["min_hang_ms"] = o->detector.min_hang_ns / 1e6;
        return d;
      },
      "Validates PERFTRACKER_AGENT_OPTIONS text; raises ValueError with the reason.");

  m.def(
      "activate",
      [](const std::string& socket, const std::string& shm_path, int rank, int local_rank,
         int world_size, const std::string& host, const std::string& options) {
        if (g_agent != nullptr) return false;
        auto o = ParseAgentOptions(options);
        if (!o.ok()) throw py::value_error(o.status().message());
        AgentConfig c;
        c.socket_path = socket;
        c.shm_path = shm_path;
        c.rank = rank;
        c.local_rank = local_rank;
        c.world_size = world_size;
        c.host = host;
        c.options = *o;
        auto agent = Agent::Create(std::move(c));
        if (!agent.ok()) throw std::runtime_error(agent.status().message());
        g_agent = agent.value().release();
        return true;
      },
      py::arg("socket"), py::arg("shm_path"), py::arg("rank"), py::arg("local_rank"),
      py::arg("world_size"), py::arg("host"), py::arg("options"));

  m.def("active", [] { return g_agent != nullptr; });
  m.def("stop", [] {
    Agent* a = g_agent;
    g_agent = nullptr;
    if (a == nullptr) return;
    a->Stop();
    delete a;
  });
  m.def("after_fork_child", [] {
    if (g_agent != nullptr) g_agent->AbandonAfterFork();  // leaked: its threads are the parent's
    g_agent = nullptr;
    if (g_drainer != nullptr) g_drainer = nullptr;  // leaked likewise
  });

  m.def("recording", [] { return g_agent != nullptr && g_agent->recording(); });
  m.def(
      "marker",
      [](int kind, std::string_view name, int64_t start_ns) {
        if (g_agent == nullptr) return;
        g_agent->OnMarker(kind == 0 ? Marker::kDataLoaderNext : Marker::kOptimizerStep, name,
                          start_ns, RealtimeNs());
      },
      "marker(kind, name, start_ns): 0 = data-loader next() returned, 1 = optimizer step "
      "returned; start_ns = time.time_ns() at the call.");
  m.def(
      "collective",
      [](std::string_view name, int64_t start_ns, uint64_t bytes, bool nest, int group) {
        if (g_agent != nullptr) {
          g_agent->RecordCollective(
              name, start_ns, RealtimeNs(), bytes, nest,
              group > 0 && group <= UINT16_MAX ? static_cast<uint16_t>(group) : uint16_t{0});
        }
      },
      py::arg("name"), py::arg("start_ns"), py::arg("bytes"), py::arg("nest") = true,
      py::arg("group") = 0,
      "collective(name, start_ns, bytes, nest=True, group=0): a collective that ends now; "
      "nest=False records it at the root of its thread's call paths (e.g. completed on another "
      "thread); group: the process_group() id of the group it ran in (0: not known).");
  m.def(
      "comm_thread",
      [](int64_t issuer_tid) {
        if (g_agent != nullptr) g_agent->NoteCommThread(issuer_tid);
      },
      py::arg("issuer_tid"),
      "comm_thread(issuer_tid): called where a collective started on thread issuer_tid "
      "(threading.get_native_id()) completes: when this thread is another one, it is a "
      "communication thread of the process (sent to the collector as comm_thread).");
  m.def(
      "name_comm_thread",
      [](int64_t tid) {
        if (g_agent != nullptr && tid > 0 && tid <= INT32_MAX) {
          g_agent->NameCommThread(static_cast<int32_t>(tid));
        }
      },
      py::arg("tid"),
      "name_comm_thread(tid): thread tid of this process is a communication thread (one a "
      "process group's backend started); sent to the collector as comm_thread.");
  m.def(
      "process_group",
      [](std::string_view name, std::string_view backend, const std::vector<int64_t>& ranks,
         int64_t size) -> int {
        if (g_agent == nullptr) return 0;
        std::vector<int32_t> global;
        global.reserve(std::min(ranks.size(), kMaxProcessGroupRanks));
        for (int64_t r : ranks) {
          if (global.size() == kMaxProcessGroupRanks) break;
          if (r < 0 || r > INT32_MAX) return 0;  // not a rank: the group stays unknown
          global.push_back(static_cast<int32_t>(r));
        }
        const auto members =
            static_cast<uint32_t>(std::clamp<int64_t>(size, 0, int64_t{UINT32_MAX}));
        return g_agent->DeclareProcessGroup(name, backend, global, members);
      },
      py::arg("name"), py::arg("backend"), py::arg("ranks"), py::arg("size"),
      "process_group(name, backend, ranks, size) -> id: declares a torch.distributed process "
      "group (global ranks in group-rank order, `size` members) to the collector; the id "
      "goes with its collectives (collective(..., group=id)); 0 when it could not be declared.");
  m.def(
      "training_ended",
      [](const std::string& detail) {
        if (g_agent != nullptr) g_agent->TrainingEnded(detail);
      },
      "The job's training ended (destroy_process_group, interpreter exit): the hang check "
      "stops until the next marker, and the collector is told.");
  m.def("set_rank", [](int rank, int local_rank, int world_size) {
    if (g_agent != nullptr) g_agent->SetRank(rank, local_rank, world_size);
  });
  m.def("hide_code", [](py::object code) {
    if (g_agent != nullptr) g_agent->profiler()->Hide(code.ptr());
  });
  m.def("set_stack_dumper", [](py::object fn) {
    if (g_agent != nullptr) g_agent->SetStackDumper(fn.ptr());
  });
  m.def("set_gpu_probe", [](py::object fn) {
    if (g_agent != nullptr) g_agent->SetGpuProbe(fn.ptr());
  });
  m.def(
      "gpu_tracing_stats",
      []() {
        py::dict d;
        if (g_agent == nullptr) return d;
        const GpuTracingStats s = g_agent->gpu_tracing()->stats();
        d["built"] = GpuTracing::Built();
        d["available"] = s.available;
        d["windows"] = s.windows;
        d["events"] = s.events;
        d["yields"] = s.yields;
        d["path"] = g_agent->gpu_tracing()->path();
        return d;
      },
      "CUPTI tracing in this process: built, available, windows traced, events written, "
      "windows whose tracing ended early for torch.profiler (yields).");
  m.def(
      "gpu_tracing_yield",
      [](const std::string& who) { return g_agent != nullptr && g_agent->YieldGpuTracing(who); },
      py::arg("who"),
      "gpu_tracing_yield(who) -> bool: `who` (torch.profiler) is about to initialize CUPTI: a "
      "window's GPU tracing ends now (flushed, unsubscribed; said once). True when it did.");
  m.def(
      "request_window",
      [](int64_t window, int64_t start_ns, int64_t duration_ns) {
        if (g_agent != nullptr) g_agent->RequestWindow(window, start_ns, duration_ns);
      },
      "Schedules a window as the collector's `window` message would.");
  m.def(
      "profile_start",
      [](double duration_s, std::string_view hook) {
        if (g_agent == nullptr) return;
        const std::string_view fast = PythonHookName(PythonProfiler::FastHook());
        if (hook == "profile" || (hook == fast && !hook.empty())) {
          g_agent->profiler()->set_prefer_eval_hook(hook == fast);
        } else if (!hook.empty()) {
          throw py::value_error("profile_start: hook must be 'profile' or '" + std::string(fast) +
                                "' on this Python, not '" + std::string(hook) + "'");
        }
        g_agent->ProfileNow(static_cast<int64_t>(duration_s * 1e9));
      },
      py::arg("duration_s"), py::arg("hook") = "",
      "Starts a local window now (tests, benchmarks). hook: the fast hook ('eval': "
      "frame-evaluation hook on 3.10 and 3.11, 'monitor': sys.monitoring on 3.12+) or 'profile' (C "
      "profile function); sticks for later windows.");
  m.def(
      "hooks",
      [] {
        py::list l;
        if (PythonProfiler::FastHook() != PythonHook::kProfile)
          l.append(PythonHookName(PythonProfiler::FastHook()));
        l.append("profile");
        return l;
      },
      "The hooks this build can record Python calls with, the default (fastest) first.");
  m.def("profile_stop",
        [] { return CountsDict(g_agent != nullptr ? g_agent->ProfileStop() : ProfilerCounts{}); });
  m.def("hooked_threads",
        [] { return g_agent != nullptr ? g_agent->profiler()->HookedThreadCount() : 0; });
  m.def("shm_path", [] { return g_agent != nullptr ? g_agent->shm_path() : std::string(); });
  m.def("now_ns", [] { return RealtimeNs(); });
  m.def(
      "clock_ns_per_tick", [] { return TscClock::ns_per_tick(); },
      "The calibrated TSC rate used by the profile hook (0: clock_gettime is used).");
  m.def("stats", [] {
    py::dict d;
    if (g_agent == nullptr) return d;
    const AgentStats s = g_agent->stats();
    d["markers"] = s.markers;
    d["markers_skipped"] = s.markers_skipped;
    d["iterations"] = s.iterations;
    d["triggers"] = s.triggers;
    d["messages_sent"] = s.messages_sent;
    d["messages_dropped"] = s.messages_dropped;
    d["connects"] = s.connects;
    d["connect_failures"] = s.connect_failures;
    d["messages_received"] = s.messages_received;
    d["unknown_messages"] = s.unknown_messages;
    d["malformed_messages"] = s.malformed_messages;
    d["oversized_messages"] = s.oversized_messages;
    d["configs_applied"] = s.configs_applied;
    d["windows"] = s.windows;
    d["windows_ignored"] = s.windows_ignored;
    d["stack_dumps"] = s.stack_dumps;
    d["window_events"] = s.window_events;
    d["window_dropped"] = s.window_dropped;
    d["process_groups"] = s.process_groups;
    d["process_groups_dropped"] = s.process_groups_dropped;
    d["comm_threads"] = s.comm_threads;
    d["comm_threads_dropped"] = s.comm_threads_dropped;
    // Forks of this process since it started, and those that went on before the agent's
    // threads stood still (ForkGate::kMaxWaitNs).
    d["forks"] = ForkGate::forks();
    d["fork_waits_timed_out"] = ForkGate::timed_out();
    return d;
  });

  m.def(
      "read_shm",
      [](const std::string& path) {
        auto shm = AgentShm::Open(path);
        if (!shm.ok()) throw std::runtime_error(shm.status().message());
        AgentShm& s = **shm;
        py::dict out;
        out["pid"] = s.header()->pid;
        out["rank"] = s.header()->rank;
        out["dropped"] = s.TotalDropped();
        py::list functions;
        for (uint32_t i = 0; i < s.functions_published(); ++i) {
          const FunctionSlot& f = s.function(i);
          functions.append(py::make_tuple(
              f.id, f.parent == FunctionTable::kNoParent ? -1 : static_cast<int64_t>(f.parent),
              std::string(EventKindName(static_cast<EventKind>(f.kind))),
              py::str(std::string(f.name, f.name_len))));
        }
        out["functions"] = functions;
        py::list events;
        Event buf[1024];
        const uint32_t rings = std::min(s.header()->rings_claimed.load(), s.header()->num_rings);
        py::list ring_threads;
        for (uint32_t r = 0; r < rings; ++r) {
          ring_threads.append(s.ring_header(static_cast<int>(r))->thread_id);
          for (;;) {
            const size_t n = s.Pop(static_cast<int>(r), buf, 1024);
            for (size_t i = 0; i < n; ++i) {
              const Event& e = buf[i];
              events.append(py::make_tuple(r, e.start_ns, e.end_ns, e.function_id,
                                           std::string(EventKindName(e.kind)), e.payload, e.group));
            }
            if (n < 1024) break;
          }
        }
        out["events"] = events;
        out["ring_threads"] = ring_threads;
        return out;
      },
      "Test helper: consumes every event of an agent file like the collector; returns "
      "{pid, rank, dropped, functions: [(id, parent, kind, name)], events: [(ring, start, end, "
      "function_id, kind, payload, group)], ring_threads}.");

  m.def(
      "noop_profile", [](bool on) { PyEval_SetProfile(on ? &NoopProfile : nullptr, nullptr); },
      "Benchmark helper: installs (True) or removes (False) a do-nothing C profile function "
      "on the calling thread.");
  m.def(
      "noop_eval",
      [](bool on) {
#if PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030C0000
        _PyInterpreterState_SetEvalFrameFunc(PyThreadState_Get()->interp,
                                             on ? &NoopEval : &_PyEval_EvalFrameDefault);
        return true;
#else
        (void)on;
        return false;
#endif
      },
      "Benchmark helper: installs (True) or removes (False) a do-nothing frame-evaluation "
      "function (all threads). False where unsupported.");
  m.def(
      "noop_monitor",
      [](bool on) {
        if (PY_VERSION_HEX < 0x030C0000) return false;
        py::object mon = py::module_::import("sys").attr("monitoring");
        py::object events = mon.attr("events");
        constexpr int kTool = 3;  // not PROFILER_ID: a window may hold that one
        py::object cb = py::none();
        if (on) {
          mon.attr("use_tool_id")(kTool, "perftracker-noop");
          cb = py::reinterpret_steal<py::object>(PyCFunction_New(&kNoopMonitorDef, nullptr));
        } else {
          mon.attr("set_events")(kTool, 0);
        }
        int mask = 0;
        for (const char* e :
             {"PY_START", "PY_RESUME", "PY_THROW", "PY_RETURN", "PY_YIELD", "PY_UNWIND"}) {
          mon.attr("register_callback")(kTool, events.attr(e), cb);
          mask |= events.attr(e).cast<int>();
        }
        if (on) {
          mon.attr("set_events")(kTool, mask);
        } else {
          mon.attr("free_tool_id")(kTool);
        }
        return true;
      },
      "Benchmark helper: registers (True) or removes (False) do-nothing C callbacks for the "
      "events the sys.monitoring hook uses (tool id 3). False before CPython 3.12.");
  m.def(
      "drain_now",
      [](const std::string& path) {
        auto shm = AgentShm::Open(path);
        if (!shm.ok()) throw std::runtime_error(shm.status().message());
        return DrainAll(**shm);
      },
      "Benchmark helper: consumes every event of an agent file now; returns how many.");
  m.def("drain_start", [](const std::string& path) {
    if (g_drainer != nullptr) return;
    g_drainer = new Drainer();
    g_drainer->thread = std::thread(DrainLoop, g_drainer, path);
  });
  m.def("drain_stop", [] {
    if (g_drainer == nullptr) return uint64_t{0};
    Drainer* d = g_drainer;
    g_drainer = nullptr;
    d->stop = true;
    {
      py::gil_scoped_release release;
      d->thread.join();
    }
    const uint64_t n = d->events;
    delete d;
    return n;
  });
}
