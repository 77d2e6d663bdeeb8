"""perftracker agent: the Python half of what runs inside each training process.

Started by perftracker/_boot/sitecustomize.py (``perftracker run`` puts it on PYTHONPATH and
sets PERFTRACKER_SOCKET); nothing in the training script changes. The native half,
perftracker._agent, holds the iteration detector, the profile hook, the shared-memory rings
and the control-socket thread; this module

* decides whether this process is a rank (env RANK from torchrun; else the rank is learned
  when torch.distributed.init_process_group returns, or at the first optimizer step of a
  non-distributed job). Other processes -- the launcher, DataLoader workers, multiprocessing
  helpers -- stay passive: no shared memory, no connection;
* hooks torch as its modules are imported (no import of torch here): DataLoader iterator
  ``__next__`` and ``Optimizer.step`` feed the always-on detector; torch.distributed
  collectives are timed (bytes, group size, process group) only while a profiling window is
  open;
* declares each torch.distributed process group it sees (the default group, new_group's and
  new_subgroups', any other a collective runs in) to the collector: its global ranks, backend
  and name, so that a collective inside one host is told from one across hosts;
* says when the training ended -- torch.distributed.destroy_process_group(), or the
  interpreter beginning to exit (threading's atexit hooks run before threads and DataLoader
  workers are joined) -- so that the silence of a job that ends is never called a hang;
* stops cleanly at exit (atexit) and forgets everything in forked children.

Nothing here may raise into the training program: failures print one line
"perftracker agent: ..." on stderr and the job runs on without (that part of) the agent.
"""

import atexit
import functools
import os
import sys
import threading
import time
import types

from . import _agent

_state = {"started": False, "active": False, "disabled": False}
_options = ""
_hidden_codes = []
_tls = threading.local()
_now = time.time_ns  # CLOCK_REALTIME ns, the agent's time base

_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base",
    "all_gather_object", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "barrier", "monitored_barrier", "send", "recv", "isend", "irecv", "gather", "scatter",
    "gather_object", "scatter_object_list",
    # torch 2.x (those a version lacks are skipped)
    "batch_isend_irecv", "send_object_list", "recv_object_list",
)

# hook -> the torch entry point it uses in this process, or None where torch lacks what the
# agent knows (hook_entry_points(); docs/live-mode.md, "torch versions").
_entry_points = {}

# id(process group) -> (the id the agent declared it under, 0 if it could not; the group).
# ProcessGroup takes no weak reference: the entry holds the group, as torch.distributed's own
# tables do, until destroy_process_group() forgets it (_forget_groups).
_groups = {}
# Threads that process groups' backends started (gloo's socket loop and workers, NCCL's
# watchdog): named to the agent as communication threads once it is active.
_backend_threads = []
_MAX_BACKEND_THREADS = 16
_GROUP_RANKS_SENT = 4096  # kMaxProcessGroupRanks: a bigger group is sent as its first ranks


def _say(message):
    try:
        print("perftracker agent: " + message, file=sys.stderr, flush=True)
    except Exception:
        pass


def _env_int(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _is_multiprocessing_child():
    return "--multiprocessing-fork" in getattr(sys, "argv", ())


def _torch_version():
    for name in ("torch.version", "torch"):
        version = getattr(sys.modules.get(name), "__version__", None)
        if version:
            return str(version)
    return "?"


def _uses(hook, entry_point):
    _entry_points[hook] = entry_point


def _lacks(hook, what, effect):
    """A torch that lacks what the agent knows (a version it does not know): one line, and
    that hook stays off; the job runs on."""
    _entry_points[hook] = None
    _say("%s: torch %s has no %s; %s (training is not affected)"
         % (hook, _torch_version(), what, effect))


def hook_entry_points():
    """Which torch entry point each hook uses in this process (None: torch lacks it)."""
    return dict(_entry_points)


def _hide_code(code):
    """Frames of `code` are transparent in recorded call paths: now if the agent is active,
    else when it becomes active (start() hides every code in _hidden_codes)."""
    _hidden_codes.append(code)
    if _state["active"]:
        _agent.hide_code(code)


def _hide(fn):
    """perftracker's wrappers never appear in recorded call paths."""
    _hide_code(fn.__code__)
    return fn


# ------------------------------------------------------------------ lifecycle

def start():
    """Starts the agent in this process (idempotent). Raises ValueError on bad options."""
    global _options
    if _state["started"]:
        return
    _options = os.environ.get("PERFTRACKER_AGENT_OPTIONS", "")
    _agent.parse_options(_options)  # a bad option disables the agent with its message
    _state["started"] = True
    _hide_step_api()
    _hide_import_machinery()
    _install_import_hooks()
    os.register_at_fork(after_in_child=_after_fork_child)
    atexit.register(stop)
    _register_exit_hook()
    rank = _env_int("RANK")
    if rank is not None and not _is_multiprocessing_child():
        _activate(rank, _env_int("LOCAL_RANK"), _env_int("WORLD_SIZE"))


def stop():
    """Stops the agent: hooks off, bye to the collector, threads joined, shm removed."""
    try:
        if _agent.active():
            _agent.stop()
    except Exception as e:  # pragma: no cover - must never fail the exit
        _say("stop failed: %s" % e)
    _state["active"] = False


def _training_ended(detail):
    try:
        if _agent.active():
            _agent.training_ended(detail)
    except Exception:
        pass


def _register_exit_hook():
    # threading._shutdown() runs these first, before it joins non-daemon threads (and, in a
    # multiprocessing child, before the process ends): the earliest sign that the
    # interpreter is exiting. atexit handlers run only after those joins.
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        return
    try:
        register(_training_ended, "interpreter exit")
    except Exception:  # already shutting down
        pass


def _activate(rank, local_rank, world_size):
    if _state["active"] or _state["disabled"]:
        return
    try:
        import socket

        run_id = os.environ.get("PERFTRACKER_RUN_ID") or "local"
        shm_path = "/dev/shm/perftracker-%s-%d" % (run_id, os.getpid())
        _agent.activate(
            socket=os.environ.get("PERFTRACKER_SOCKET", ""),
            shm_path=shm_path,
            rank=-1 if rank is None else rank,
            local_rank=-1 if local_rank is None else local_rank,
            world_size=-1 if world_size is None else world_size,
            host=socket.gethostname(),
            options=_options,
        )
        _agent.set_stack_dumper(_dump_stacks)
        _agent.set_gpu_probe(_gpu_probe)
        for code in _hidden_codes:
            _agent.hide_code(code)
        _state["active"] = True
        _name_backend_threads()
    except Exception as e:
        _state["disabled"] = True
        _say("disabled: %s" % (str(e).splitlines()[0] if str(e) else type(e).__name__))


def _after_fork_child():
    # A forked child (e.g. a DataLoader worker) is not the rank its parent was: forget the
    # parent's agent and wait, passive, until this process proves to be a rank itself.
    try:
        _agent.after_fork_child()
    except Exception:
        pass
    _state["active"] = False
    _groups.clear()
    del _backend_threads[:]  # the parent's threads: none of them exists here


def _on_process_group(c10d):
    rank = c10d.get_rank()
    world_size = c10d.get_world_size()
    local_rank = _env_int("LOCAL_RANK")
    if _state["active"]:
        _agent.set_rank(rank, -1 if local_rank is None else local_rank, world_size)
    else:
        _activate(rank, local_rank, world_size)
    try:
        _group_id(c10d, None)  # the default group
    except Exception:
        pass  # declared at its first collective instead


# ------------------------------------------------------------------ process groups

def _default_group(c10d):
    # torch 1.13: a class attribute set by init_process_group; 2.x: a property of
    # GroupMember (the world's default_pg). None before init_process_group.
    return getattr(getattr(c10d, "GroupMember", None), "WORLD", None)


def _group_name(c10d, pg):
    """torch's name for the group ("0" for the default group, "1", ... or, in torch 2.x, a
    hash of its ranks): the same on every member, for reading."""
    get = getattr(c10d, "_get_process_group_name", None)  # torch 2.x
    if callable(get):
        try:
            name = get(pg)
            if name and name != "None":
                return str(name)
        except Exception:
            pass
    try:
        name = getattr(pg, "group_name", None)  # newer torch 2.x: a property of ProcessGroup
        if isinstance(name, str) and name:
            return name
    except Exception:
        pass
    for table in (getattr(c10d, "_pg_names", None),  # torch 1.13
                  getattr(getattr(c10d, "_world", None), "pg_names", None)):  # torch 2.x
        try:
            name = table.get(pg) if table is not None else None
        except Exception:
            name = None
        if name:
            return str(name)
    return ""


def _group_backend(c10d, pg):
    try:
        return str(c10d.get_backend(pg))
    except Exception:
        return ""


def _declare_group(c10d, pg):
    """Declares `pg` to the collector (once); returns the id its collectives carry, 0 when
    it is not a process group this rank belongs to, or the agent is off."""
    pg_type = getattr(c10d, "ProcessGroup", None)
    if not _state["active"] or pg_type is None or not isinstance(pg, pg_type):
        return 0
    try:
        ranks = [int(r) for r in c10d.get_process_group_ranks(pg)]  # 1.13 and 2.x
    except Exception:
        ranks = []
    try:
        size = int(pg.size())
    except Exception:
        size = len(ranks)
    gid = 0
    if ranks:
        gid = _agent.process_group(_group_name(c10d, pg), _group_backend(c10d, pg),
                                   ranks[:_GROUP_RANKS_SENT], max(size, len(ranks)))
    _groups[id(pg)] = (gid, pg)
    return gid


def _group_id(c10d, group):
    """The declared id of the group a collective runs in (None: the default group)."""
    if group is None:
        group = _default_group(c10d)
        if group is None:
            return 0
    entry = _groups.get(id(group))
    if entry is not None and entry[1] is group:
        return entry[0]
    return _declare_group(c10d, group)


def _forget_groups(group):
    if group is None:
        _groups.clear()
    else:
        _groups.pop(id(group), None)


def mark_step(name="step"):
    """perftracker.step(): one iteration of a loop the torch hooks do not see ended now."""
    try:
        if not _state["active"]:
            _activate_from_step()
        # The detector learns loops that start with a data-loader next() and end with an
        # optimizer step: one call is both, so consecutive calls bound one iteration.
        t = _now()
        _agent.marker(0, name, t)
        _agent.marker(1, name, t)
    except Exception as e:  # never into the training loop
        if not _state.get("step_failed"):
            _state["step_failed"] = True
            _say("perftracker.step() failed: %s" % e)


def _hide_step_api():
    import perftracker

    _hide(perftracker.step)
    _hide(mark_step)


def _activate_from_step():
    # A job without torch.distributed: the process that steps an optimizer is the trainer,
    # unless it is a DataLoader worker.
    if _state["active"] or _state["disabled"]:
        return
    torch_data = sys.modules.get("torch.utils.data")
    if torch_data is not None and torch_data.get_worker_info() is not None:
        return
    rank = _env_int("RANK")
    _activate(0 if rank is None else rank, _env_int("LOCAL_RANK"), _env_int("WORLD_SIZE") or 1)


def _find_libcupti():
    """The libcupti torch's wheel ships (nvidia-cuda-cupti, outside the loader's path), or "":
    a hint for the agent, which prefers a copy the process has already loaded and falls back
    to the usual names (the CUDA toolkit on LD_LIBRARY_PATH)."""
    import glob

    found = []
    nvidia = sys.modules.get("nvidia")
    for base in list(getattr(nvidia, "__path__", []) or []):
        found += glob.glob(os.path.join(base, "*", "lib", "libcupti.so*"))
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        found += glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libcupti.so*"))
    return sorted(found)[0] if found else ""


def _find_profiler_enabled(torch):
    """torch's "is the profiler (Kineto) recording" (2.x and 1.13: torch._C._autograd; the
    Python re-export in torch.autograd as a fallback), or None."""
    for owner, path in ((getattr(getattr(torch, "_C", None), "_autograd", None),
                         "torch._C._autograd._profiler_enabled"),
                        (getattr(torch, "autograd", None), "torch.autograd._profiler_enabled")):
        fn = getattr(owner, "_profiler_enabled", None)
        if callable(fn):
            _uses("CUPTI probe", path)
            return fn
    _lacks("CUPTI probe", "_profiler_enabled (torch._C._autograd, torch.autograd)",
           "GPU work is not traced, as it could not be told from torch.profiler's own")
    return None


def _gpu_probe():
    """Whether this window's GPU work can be traced with CUPTI (called by the agent at each
    window start, on its own thread with the GIL): (0, "") CUDA is not in use in this process,
    (1, a libcupti hint or "") trace it, (2, reason) skip it this time."""
    torch = sys.modules.get("torch")
    if torch is None:
        return (0, "")
    try:
        if not torch.cuda.is_initialized():
            return (0, "")
    except Exception:
        return (0, "")
    # torch 2.x keeps a process-wide flag, set by torch.profiler's start_trace and cleared by
    # stop_trace. _profiler_enabled() below reads the *calling thread's* profiler state, and
    # this probe runs on the agent's thread, where it says False while the training thread
    # records (seen on an H200 with torch 2.11: a window opened during the job's own
    # torch.profiler session and CUPTI's subscribe was refused instead of skipped).
    autograd_profiler = getattr(getattr(torch, "autograd", None), "profiler", None)
    if getattr(autograd_profiler, "_is_profiler_enabled", False) is True:
        return (2, "torch.profiler is recording in this process (CUPTI has one client)")
    if "profiler_enabled" not in _state:
        _state["profiler_enabled"] = _find_profiler_enabled(torch)
    profiler_enabled = _state["profiler_enabled"]
    if profiler_enabled is None:
        return (2, "torch %s cannot say whether torch.profiler records" % _torch_version())
    try:
        if profiler_enabled():
            return (2, "torch.profiler is recording in this process (CUPTI has one client)")
    except Exception as e:
        return (2, "torch.profiler's state is unknown (%s)" % e)
    if "cupti" not in _state:
        _state["cupti"] = _find_libcupti()
    return (1, _state["cupti"])


def _patch_autograd_profiler(mod):
    """A torch.profiler session that starts while a window traces the GPU gets CUPTI: the
    window's tracing ends first (CUPTI has one subscriber; Kineto would otherwise lose every
    GPU activity of the user's profile, as seen on an H200 with torch 2.11). torch 1.13 to 2.x:
    profile._prepare_trace() is where Kineto initializes CUPTI (_prepare_profiler); the
    context manager's __enter__ and torch.profiler.profile's prepare_trace() (start(), a
    schedule's warmup) both go through it."""
    cls = getattr(mod, "profile", None)
    orig = getattr(cls, "_prepare_trace", None)
    if not callable(orig):
        _lacks("torch.profiler", "torch.autograd.profiler.profile._prepare_trace",
               "a torch.profiler started during a window may find CUPTI held by perftracker")
        return
    _uses("torch.profiler", "autograd.profiler.profile._prepare_trace")
    if getattr(orig, "_perftracker", False):
        return
    gpu_tracing_yield = _agent.gpu_tracing_yield
    state = _state

    @functools.wraps(orig)
    def _prepare_trace(self, *args, **kwargs):
        if state["active"]:  # a passive process (no rank, a forked child) never traces
            try:
                gpu_tracing_yield("torch.profiler")
            except Exception:
                pass  # never into the job: torch.profiler goes on regardless
        return orig(self, *args, **kwargs)

    _prepare_trace._perftracker = True
    cls._prepare_trace = _hide(_prepare_trace)


def _dump_stacks():
    """All threads' Python stacks, main thread (MainThread) first: the `stacks` text."""
    import traceback

    me = threading.get_ident()
    main = threading.main_thread().ident
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    order = sorted(frames, key=lambda ident: (ident != main, ident))
    out = []
    for ident in order:
        if ident == me:
            continue
        # The canonical header of docs/agent-protocol.md ("The stacks text").
        out.append("Thread %d (%s) (most recent call last):\n" % (ident, names.get(ident, "?")))
        out.append("".join(traceback.format_stack(frames[ident])))
    return "".join(out)


# ------------------------------------------------------------------ torch hooks

def _patch_dataloader(mod):
    # torch 1.13 to 2.x: every DataLoader iterator (single- and multi-process) derives from
    # _BaseDataLoaderIter, whose __next__ returns one batch.
    cls = getattr(mod, "_BaseDataLoaderIter", None)
    orig = getattr(cls, "__next__", None)
    if not callable(orig):
        _lacks("DataLoader", "torch.utils.data.dataloader._BaseDataLoaderIter.__next__",
               "iterations are learned from optimizer steps alone")
        return
    _uses("DataLoader", "_BaseDataLoaderIter.__next__")
    if getattr(orig, "_perftracker", False):
        return
    marker = _agent.marker
    now = _now

    @functools.wraps(orig)
    def __next__(self):
        t0 = now()
        data = orig(self)
        marker(0, "DataLoader.__next__", t0)
        return data

    __next__._perftracker = True
    cls.__next__ = _hide(__next__)


def _wrap_step(cls):
    step = cls.step
    if getattr(step, "_perftracker", False):
        return
    name = cls.__name__ + ".step"
    marker = _agent.marker
    now = _now
    tls = _tls

    def step_wrapper(self, *args, **kwargs):
        if getattr(tls, "in_step", False):  # a subclass's step calling super().step()
            return step(self, *args, **kwargs)
        tls.in_step = True
        t0 = now()
        try:
            out = step(self, *args, **kwargs)
        finally:
            tls.in_step = False
        marker(1, name, t0)
        if not _state["active"]:
            _activate_from_step()
        return out

    functools.update_wrapper(step_wrapper, step)  # keeps torch's `hooked` flag
    step_wrapper._perftracker = True
    cls.step = _hide(step_wrapper)


def _patch_optimizer(mod):
    pre = getattr(mod, "register_optimizer_step_pre_hook", None)
    post = getattr(mod, "register_optimizer_step_post_hook", None)
    if callable(pre) and callable(post):
        _hook_optimizer_steps(mod, pre, post)
        return
    opt = getattr(mod, "Optimizer", None)
    if opt is None:
        _lacks("Optimizer.step", "torch.optim.optimizer.Optimizer",
               "iterations are learned from DataLoader batches alone")
        return
    orig = getattr(opt, "_hook_for_profile", None)
    if orig is None:  # neither 2.x nor 1.13: wrap each optimizer class's step() at construction
        _lacks("Optimizer.step", "register_optimizer_step_post_hook (2.x) nor "
               "Optimizer._hook_for_profile (1.13)",
               "each optimizer class's step() is wrapped when an optimizer is made")
        _entry_points["Optimizer.step"] = "Optimizer.__init__"
        orig_init = opt.__init__
        if getattr(orig_init, "_perftracker", False):
            return

        @functools.wraps(orig_init)
        def __init__(self, *args, **kwargs):
            orig_init(self, *args, **kwargs)
            try:
                _wrap_step(type(self))
            except Exception:
                pass

        __init__._perftracker = True
        opt.__init__ = _hide(__init__)
        return
    _uses("Optimizer.step", "Optimizer._hook_for_profile")
    if getattr(orig, "_perftracker", False):
        return

    # torch 1.13: Optimizer.__init__ calls _hook_for_profile(), which wraps the class's
    # step() once for the profiler; our wrapper goes around it, for every subclass.
    @functools.wraps(orig)
    def _hook_for_profile(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        try:
            _wrap_step(type(self))
        except Exception:
            pass
        return out

    _hook_for_profile._perftracker = True
    opt._hook_for_profile = _hide(_hook_for_profile)


def _hook_optimizer_steps(mod, register_pre, register_post):
    """torch 2.x: global step hooks, which torch calls around every optimizer's step() (its
    profile_hook_step wrapper, put on each class by Optimizer.__init__). No class is touched.

    An optimizer whose step() steps another (ZeroRedundancyOptimizer, a subclass calling
    super().step() when both classes are wrapped) nests the hooks: one iteration ends when the
    outermost step returns. A step that raises calls no post hook; the next outermost pre hook
    notices that the step it remembers is no longer on the stack and starts afresh."""
    _uses("Optimizer.step", "register_optimizer_step_pre_hook/register_optimizer_step_post_hook")
    if getattr(mod, "_perftracker_step_hooks", None) is not None:
        return
    marker = _agent.marker
    now = _now
    tls = _tls
    getframe = sys._getframe

    def step_pre_hook(optimizer, args, kwargs):
        depth = getattr(tls, "step_depth", 0)
        if depth and not _frame_on_stack(tls.step_frame, getframe(1)):
            depth = 0  # the step it remembers raised
        if depth == 0:
            tls.step_frame = getframe(1)  # torch's wrapper of this step() call
            tls.step_t0 = now()
        tls.step_depth = depth + 1

    def step_post_hook(optimizer, args, kwargs):
        depth = getattr(tls, "step_depth", 0) - 1
        if depth > 0:
            tls.step_depth = depth
            return
        tls.step_depth = 0
        tls.step_frame = None
        marker(1, type(optimizer).__name__ + ".step", getattr(tls, "step_t0", now()))
        if not _state["active"]:
            _activate_from_step()

    mod._perftracker_step_hooks = (register_pre(_hide(step_pre_hook)),
                                   register_post(_hide(step_post_hook)))


def _frame_on_stack(frame, current, limit=256):
    for _ in range(limit):
        if current is None:
            return False
        if current is frame:
            return True
        current = current.f_back
    return False


def _tensor_bytes(obj, torch):
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(o, torch) for o in obj if isinstance(o, (torch.Tensor, list, tuple)))
    return 0


def _collective_bytes(args, kwargs):
    """Bytes of the largest tensor argument (a list of tensors counts as its sum)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    best = 0
    for a in list(args) + list(kwargs.values()):
        best = max(best, _tensor_bytes(a, torch))
    return best


def _find_group(c10d, args, kwargs):
    """The process group a collective call names (None: the default group)."""
    group = kwargs.get("group")
    if group is None:
        pg = getattr(c10d, "ProcessGroup", None)
        for a in args:
            if pg is not None and isinstance(a, pg):
                return a
        # batch_isend_irecv([P2POp, ...]): the ops' group
        if args and isinstance(args[0], (list, tuple)) and args[0]:
            return getattr(args[0][0], "group", None)
    return group


def _group_size(c10d, group):
    try:
        return c10d.get_world_size(group) if group is not None else c10d.get_world_size()
    except Exception:
        return -1


for _helper in (_tensor_bytes, _collective_bytes, _group_size):
    _hide(_helper)


def _wrap_collective(c10d, name, fn):
    recording = _agent.recording
    collective = _agent.collective
    now = _now
    label = "torch.distributed." + name

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not recording():
            return fn(*args, **kwargs)
        t0 = now()
        out = fn(*args, **kwargs)
        try:
            group = _find_group(c10d, args, kwargs)
            collective("%s (group of %d)" % (label, _group_size(c10d, group)), t0,
                       _collective_bytes(args, kwargs), True, _group_id(c10d, group))
        except Exception:
            pass
        return out

    wrapper._perftracker = True
    # The marker is the call: the wrapped function's own frames (and the frames of torch's
    # decorators around it, torch 2.x's _exception_logger) would record the same call again,
    # a Python call beside the marker under the same caller, read as work instead of waiting.
    inner = fn
    for _ in range(8):
        code = getattr(inner, "__code__", None)
        if code is not None:
            _hide_code(code)
        inner = getattr(inner, "__wrapped__", None)
        if inner is None:
            break
    return _hide(wrapper)


def _patch_c10d(mod):
    for name in _COLLECTIVES:
        fn = getattr(mod, name, None)
        if callable(fn) and not getattr(fn, "_perftracker", False):
            setattr(mod, name, _wrap_collective(mod, name, fn))
    _uses("torch.distributed collectives", "distributed_c10d: %s" % ", ".join(
        name for name in _COLLECTIVES if callable(getattr(mod, name, None))))
    orig_init = getattr(mod, "init_process_group", None)
    if not callable(orig_init) or not callable(getattr(mod, "get_rank", None)):
        _lacks("torch.distributed", "distributed_c10d.init_process_group / get_rank",
               "the rank is learned at the first optimizer step")
    else:
        _uses("torch.distributed", "distributed_c10d.init_process_group")
        if not getattr(orig_init, "_perftracker", False):
            _hook_process_group(mod, orig_init)
    _hook_new_group(mod)
    _hook_backend_threads(mod)
    # torch.distributed re-exports these names; refresh it when it is already imported.
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        for name in ("init_process_group", "destroy_process_group", "new_group") + _COLLECTIVES:
            if hasattr(dist, name) and hasattr(mod, name):
                setattr(dist, name, getattr(mod, name))


def _hook_process_group(mod, orig_init):
    """The rank when the default group exists; the end of training when it is destroyed."""

    @functools.wraps(orig_init)
    def init_process_group(*args, **kwargs):
        out = orig_init(*args, **kwargs)
        try:
            _on_process_group(mod)
        except Exception as e:
            _say("could not learn the rank: %s" % e)
        return out

    init_process_group._perftracker = True
    mod.init_process_group = _hide(init_process_group)

    orig_destroy = getattr(mod, "destroy_process_group", None)
    if callable(orig_destroy) and not getattr(orig_destroy, "_perftracker", False):
        @functools.wraps(orig_destroy)
        def destroy_process_group(*args, **kwargs):
            # The default group's end is the end of training; a subgroup's is not.
            group = kwargs.get("group", args[0] if args else None)
            if group is None:
                _training_ended("destroy_process_group")
            _forget_groups(group)
            return orig_destroy(*args, **kwargs)

        destroy_process_group._perftracker = True
        mod.destroy_process_group = _hide(destroy_process_group)


def _task_ids():
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except (OSError, ValueError):
        return set()


def _name_backend_threads(tids=None):
    if not _state["active"]:
        return
    for tid in _backend_threads if tids is None else tids:
        try:
            _agent.name_comm_thread(tid)
        except Exception:
            pass


def _hook_backend_threads(mod):
    """The threads a process group's backend starts are the process's communication threads
    (docs/agent-protocol.md, `comm_thread`): gloo's socket loop, which reads and writes every
    peer's bytes, and its worker threads, which run the collectives; NCCL's watchdog. They
    are the threads that appear while torch builds the backend in _new_process_group_helper
    (torch 1.13 and 2.x: init_process_group and new_group call it with their store already
    made, so the store's threads are not among them)."""
    helper = getattr(mod, "_new_process_group_helper", None)
    if not callable(helper):
        _lacks("communication threads", "distributed_c10d._new_process_group_helper",
               "only the threads that complete DDP's all-reduces are known as communication "
               "threads")
        return
    _uses("communication threads", "distributed_c10d._new_process_group_helper")
    if getattr(helper, "_perftracker", False):
        return

    @functools.wraps(helper)
    def new_process_group_helper(*args, **kwargs):
        before = _task_ids()
        pg = helper(*args, **kwargs)
        try:
            if before:
                new = [t for t in sorted(_task_ids() - before) if t not in _backend_threads]
                new = new[:max(0, _MAX_BACKEND_THREADS - len(_backend_threads))]
                _backend_threads.extend(new)
                _name_backend_threads(new)
        except Exception:
            pass
        return pg

    new_process_group_helper._perftracker = True
    mod._new_process_group_helper = _hide(new_process_group_helper)


def _hook_new_group(mod):
    """Declares each group new_group() makes (new_subgroups and
    new_subgroups_by_enumeration call it through the module, so theirs too)."""
    orig = getattr(mod, "new_group", None)
    if not callable(orig):
        # Nothing lost: every group is also declared at its first collective in a window.
        _uses("process groups", "the first collective of each group")
        return
    _uses("process groups", "distributed_c10d.new_group")
    if getattr(orig, "_perftracker", False):
        return

    @functools.wraps(orig)
    def new_group(*args, **kwargs):
        pg = orig(*args, **kwargs)
        try:
            _group_id(mod, pg)
        except Exception:
            pass
        return pg

    new_group._perftracker = True
    mod.new_group = _hide(new_group)


class _DdpHook:
    """The comm hook the agent gives DistributedDataParallel (docs/live-mode.md, "DDP").

    DDP's C++ reducer all-reduces gradient buckets without calling torch.distributed's
    Python functions, so they would be invisible to the agent. This hook does exactly what the
    reducer does without a hook -- the bucket scaled by 1 / group size (a multiplication by
    the same float, as the reducer's copy into the bucket does: bit-identical gradients) and
    an all-reduce (SUM) on DDP's process group -- or calls the hook the user registered (its
    `target`). While a window records, it times each bucket from the hook call to the
    future's completion and records a collective (bytes = bucket buffer), and names the
    thread that completed it when that is not the thread that called the hook (gloo's worker
    thread: a communication thread, whose CPU waits the collector samples). Otherwise it adds
    a Python call per bucket and nothing else.
    """

    def __init__(self, ddp):
        self.process_group = ddp.process_group
        self.target = None  # (state, hook) the user registered after ours
        try:
            size = self.process_group.size()
        except Exception:
            size = -1
        self.scale = 1.0 / size if size > 0 else 1.0
        self.label = "DistributedDataParallel all_reduce (group of %d)" % size
        try:
            c10d = sys.modules.get("torch.distributed.distributed_c10d")
            self.group = _group_id(c10d, self.process_group) if c10d is not None else 0
        except Exception:
            self.group = 0

    def __call__(self, state, bucket):
        recording = _agent.recording()
        t0 = _now() if recording else 0
        if self.target is None:
            buffer = bucket.buffer()
            buffer.mul_(self.scale)
            fut = self.process_group.allreduce([buffer]).get_future().then(_first_value)
        else:
            fut = self.target[1](self.target[0], bucket)
        if not recording:
            return fut
        try:
            buffer = bucket.buffer()
            nbytes = buffer.numel() * buffer.element_size()
        except Exception:
            nbytes = 0
        collective = _agent.collective
        comm_thread = _agent.comm_thread
        label = self.label
        group = self.group
        issuer = threading.get_native_id()

        def done(f):
            try:
                collective(label, t0, nbytes, False, group)
                # gloo completes the future on its worker thread: the agent names it a
                # communication thread (the issuer's own thread, when the future was already
                # complete or NCCL's, names nothing).
                comm_thread(issuer)
            except Exception:
                pass
            return f.value()

        return fut.then(done)


def _first_value(fut):
    return fut.value()[0]


def _ddp_hookable(ddp):
    """Whether our comm hook can go on this DDP: the agent is on, DDP has a C++ reducer (none
    when every parameter's all-reduce is delayed, torch 2.x: then torch.distributed.all_reduce
    does it, timed as a collective), and not the Python reducer of compiled autograd (2.x),
    which calls comm hooks per parameter with (grad, param) instead of a bucket."""
    if not _state["active"] or getattr(ddp, "reducer", None) is None:
        return False
    if getattr(ddp, "_use_python_reducer", False):
        if not _state.get("ddp_python_reducer_said"):
            _state["ddp_python_reducer_said"] = True
            _say("DDP with compiled autograd (its Python reducer): gradient all-reduces are "
                 "not timed (training is not affected)")
        return False
    return True


def _set_comm_hook_name(ddp, name):
    set_name = getattr(getattr(ddp, "logger", None), "_set_comm_hook_name", None)
    if callable(set_name):
        set_name(name)


def _patch_ddp(mod):
    cls = getattr(mod, "DistributedDataParallel", None)
    for name in ("forward", "register_comm_hook", "_register_builtin_comm_hook",
                 "_check_comm_hook"):
        if not callable(getattr(cls, name, None)):
            _lacks("DDP all-reduce", "DistributedDataParallel.%s" % name,
                   "DDP's gradient all-reduces are not timed")
            return
    _uses("DDP all-reduce", "DistributedDataParallel.register_comm_hook")
    forward = cls.forward
    if getattr(forward, "_perftracker", False):
        return
    register = cls.register_comm_hook
    register_builtin = cls._register_builtin_comm_hook

    def ddp_hook(state, bucket):  # DDP calls the registered hook as hook(state, bucket)
        return state(None, bucket)

    @functools.wraps(forward)
    def forward_wrapper(self, *args, **kwargs):
        # Before the first forward (after the user's own setup): our hook, unless the user
        # registered one, or the agent is off in this process.
        if "_perftracker_ddp" not in self.__dict__:
            self.__dict__["_perftracker_ddp"] = None
            if _ddp_hookable(self):
                try:
                    hook = _DdpHook(self)
                    register(self, hook, ddp_hook)
                    self.__dict__["_perftracker_ddp"] = hook
                except Exception as e:
                    _say("DDP's all-reduce is not timed: %s (training is not affected)" % e)
        return forward(self, *args, **kwargs)

    @functools.wraps(register)
    def register_comm_hook(self, state, hook):
        ours = self.__dict__.get("_perftracker_ddp")
        if ours is None:
            # Before our hook: theirs goes in wrapped by ours (timed the same way).
            if "_perftracker_ddp" not in self.__dict__ and _ddp_hookable(self):
                try:
                    ours = _DdpHook(self)
                except Exception:
                    ours = None
            if ours is None:
                self.__dict__["_perftracker_ddp"] = None
                return register(self, state, hook)
            self._check_comm_hook(hook)
            ours.target = (state, hook)
            register(self, ours, ddp_hook)
            _set_comm_hook_name(self, hook.__qualname__)
            self.__dict__["_perftracker_ddp"] = ours
            return None
        if ours.target is not None:  # what DDP itself says to a second registration
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be "
                               "called once.")
        self._check_comm_hook(hook)
        ours.target = (state, hook)  # ours is registered already: it calls theirs now
        _set_comm_hook_name(self, hook.__qualname__)
        return None

    @functools.wraps(register_builtin)
    def _register_builtin_comm_hook(self, comm_hook_type):
        ours = self.__dict__.get("_perftracker_ddp")
        if ours is None:
            self.__dict__["_perftracker_ddp"] = None  # theirs, natively, untimed
            return register_builtin(self, comm_hook_type)
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hooks = {"ALLREDUCE": default_hooks.allreduce_hook,
                 "FP16_COMPRESS": default_hooks.fp16_compress_hook}
        name = getattr(comm_hook_type, "name", str(comm_hook_type))
        if ours.target is not None or name not in hooks:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be "
                               "called once.")
        ours.target = (self.process_group, hooks[name])  # their Python equivalent
        _set_comm_hook_name(self, str(comm_hook_type))
        return None

    for fn in (forward_wrapper, register_comm_hook, _register_builtin_comm_hook):
        fn._perftracker = True
    cls.forward = _hide(forward_wrapper)
    cls.register_comm_hook = _hide(register_comm_hook)
    cls._register_builtin_comm_hook = _hide(_register_builtin_comm_hook)
    _hide(ddp_hook)
    _hide(_DdpHook.__call__)
    _hide(_first_value)
    for const in _DdpHook.__call__.__code__.co_consts:  # done(): runs on gloo's thread
        if hasattr(const, "co_code"):
            _hide_code(const)


_PATCHES = {
    "torch.autograd.profiler": _patch_autograd_profiler,
    "torch.utils.data.dataloader": _patch_dataloader,
    "torch.optim.optimizer": _patch_optimizer,
    "torch.distributed.distributed_c10d": _patch_c10d,
    "torch.nn.parallel.distributed": _patch_ddp,
}


def _apply(patch, module):
    try:
        patch(module)
    except Exception as e:
        _say("could not hook %s: %s (training is not affected)" % (module.__name__, e))


class _PatchingLoader:
    """Delegates to the real loader, then patches the freshly executed module."""

    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._loader.exec_module(module)
        _apply(self._patch, module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PostImportFinder:
    """A sys.meta_path entry that patches a few torch modules right after they execute."""

    def find_spec(self, fullname, path=None, target=None):
        patch = _PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def _hide_import_machinery():
    """importlib's own frames (and perftracker's import hook) are transparent: an import in a
    window records the imported modules' code under the importing frame, not ~10 frames of
    import machinery per nested import. Seen on torch 2.11: the first optimizer in a window
    imports torch._dynamo and sympy, and those frames filled the agent's function table."""
    import importlib._bootstrap
    import importlib._bootstrap_external
    import zipimport

    codes, seen = [], set()

    def add(code):
        if id(code) in seen:
            return
        seen.add(id(code))
        codes.append(code)
        for const in code.co_consts:  # nested functions, lambdas, comprehensions
            if isinstance(const, types.CodeType):
                add(const)

    def walk(namespace, filename, classes):
        for obj in list(namespace.values()):
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
            funcs = ([f for f in (obj.fget, obj.fset, obj.fdel) if f is not None]
                     if isinstance(obj, property) else [obj])
            for f in funcs:
                code = getattr(f, "__code__", None)
                if isinstance(code, types.CodeType) and code.co_filename == filename:
                    add(code)
            if isinstance(obj, type) and obj not in classes:
                classes.add(obj)
                walk(vars(obj), filename, classes)

    for mod, probe in ((importlib._bootstrap, importlib._bootstrap._find_and_load),
                       (importlib._bootstrap_external, importlib._bootstrap_external.cache_from_source),
                       (zipimport, zipimport.zipimporter.find_spec)):
        walk(vars(mod), probe.__code__.co_filename, set())
    for cls in (_PostImportFinder, _PatchingLoader):
        walk(vars(cls), _hide_import_machinery.__code__.co_filename, set())
    # Other tools' finders, called for every import (setuptools' distutils hack,
    # virtualenv's, numba's redirector): their lookup methods only.
    for finder in list(sys.meta_path):
        for name in ("find_spec", "find_module"):
            method = getattr(finder, name, None)
            code = getattr(getattr(method, "__func__", method), "__code__", None)
            if isinstance(code, types.CodeType):
                add(code)
    for code in codes:
        _hide_code(code)


def _install_import_hooks():
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())
    for name, patch in _PATCHES.items():  # modules imported before the agent started
        module = sys.modules.get(name)
        if module is not None:
            _apply(patch, module)
