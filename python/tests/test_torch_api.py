"""Which torch entry point each of the agent's hooks uses, per torch version, and what it does
when torch lacks one (a version the agent does not know): one line
"perftracker agent: <hook>: torch <version> has no <what>; <effect> (training is not affected)"
and the job runs on.

Most tests need no torch: they give the agent's patch functions small stand-in modules shaped
like torch 2.x's (global optimizer step hooks, DDP's Python reducer), 1.13's, or missing a
name, and check the agent's choice and the iterations it marks. The stand-ins follow the torch
2.x source (docs/live-mode.md, "torch versions"); they are not torch. The last test runs the
real torch of this interpreter, when it has one. Run with PYTHONPATH=<build>/python (CTest
does, for every CPython it found).
"""

import contextlib
import functools
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import types
import unittest
from unittest import mock

import perftracker
from perftracker import agent

BUILD_PYTHON = os.path.dirname(os.path.dirname(os.path.abspath(perftracker.__file__)))
BOOT = os.path.join(BUILD_PYTHON, "perftracker", "_boot")


class FakeNative:
    """Stands for perftracker._agent: records the markers and collectives it is given."""

    def __init__(self):
        self.markers = []
        self.collectives = []
        self.collective_groups = []  # the group id each collective was recorded with
        self.groups = []  # (name, backend, ranks, size) declared, id = index + 1
        self.comm_threads = []  # thread ids named communication threads

    def marker(self, kind, name, t0):
        self.markers.append((kind, name))

    def recording(self):
        return True

    def collective(self, label, t0, nbytes, nest=True, group=0):
        self.collectives.append(label)
        self.collective_groups.append(group)

    def process_group(self, name, backend, ranks, size):
        self.groups.append((name, backend, list(ranks), size))
        return len(self.groups)

    def set_rank(self, rank, local_rank, world_size):
        pass

    def name_comm_thread(self, tid):
        self.comm_threads.append(tid)

    def hide_code(self, code):
        pass

    def active(self):
        return False


def optimizer_module_2x():
    """torch.optim.optimizer as torch 2.x shapes it: module-level step hooks, called by the
    wrapper Optimizer.__init__ puts once on each class's step()."""
    mod = types.ModuleType("torch.optim.optimizer")
    pre_hooks, post_hooks = {}, {}

    def register(table, hook):
        table[len(table)] = hook
        return len(table) - 1

    mod.register_optimizer_step_pre_hook = functools.partial(register, pre_hooks)
    mod.register_optimizer_step_post_hook = functools.partial(register, post_hooks)

    def profile_hook_step(func):
        @functools.wraps(func)
        def wrapper(self, *args, **kwargs):
            for hook in list(pre_hooks.values()):
                hook(self, args, kwargs)
            out = func(self, *args, **kwargs)
            for hook in list(post_hooks.values()):
                hook(self, args, kwargs)
            return out
        return wrapper

    class Optimizer:
        def __init__(self):
            cls = type(self)
            if not getattr(cls.step, "hooked", False):
                cls.step = profile_hook_step(cls.step)
                cls.step.hooked = True

        def step(self):
            pass

    mod.Optimizer = Optimizer
    return mod


def optimizer_module_113():
    """torch 1.13: Optimizer.__init__ calls _hook_for_profile(), no global step hooks."""
    mod = types.ModuleType("torch.optim.optimizer")

    class Optimizer:
        def __init__(self):
            self._hook_for_profile()

        def _hook_for_profile(self):
            pass

        def step(self):
            pass

    mod.Optimizer = Optimizer
    return mod


C10D_SOURCE = """
class ProcessGroup:
    def __init__(self, ranks, name):
        self._ranks, self._name = list(ranks), name
        if VERSION == "2.x":
            self.group_name = name  # newer torch 2.x: a property of ProcessGroup

    def size(self):
        return len(self._ranks)


class NonMember:
    pass


class GroupMember:
    WORLD = None
    NON_GROUP_MEMBER = NonMember()


_pg_names = {}  # torch 1.13's table (2.x keeps it in _world.pg_names)
_ranks_fail = False
_count = [0]


def _new_process_group_helper(ranks, name):  # torch builds each group's backend here
    return ProcessGroup(ranks, name)


def _make(ranks, name):
    pg = _new_process_group_helper(ranks, name)
    if VERSION == "1.13":
        _pg_names[pg] = name
    return pg


def init_process_group(backend="nccl"):
    GroupMember.WORLD = _make(range(WORLD), "0")


def destroy_process_group(group=None):
    if group is None:
        GroupMember.WORLD = None


def get_rank(group=None):
    return RANK


def get_world_size(group=None):
    return (group or GroupMember.WORLD).size()


def get_backend(group=None):
    return "nccl"


def get_process_group_ranks(group):
    if _ranks_fail:
        raise RuntimeError("unknown group")
    return list(group._ranks)


def new_group(ranks=None, backend=None):
    _count[0] += 1
    name = "hash-" + ",".join(map(str, ranks)) if VERSION == "2.x" else str(_count[0])
    return _make(ranks, name) if RANK in ranks else GroupMember.NON_GROUP_MEMBER


def new_subgroups(group_size):
    mine = None
    for start in range(0, WORLD, group_size):
        pg = new_group(ranks=list(range(start, start + group_size)))
        if RANK in range(start, start + group_size):
            mine = pg
    return mine


def all_reduce(tensor, op=None, group=None, async_op=False):
    return "done"
"""


def c10d_module(version, rank, world=4):
    """torch.distributed.distributed_c10d as torch 2.x (_get_process_group_name,
    ProcessGroup.group_name, hashed group names) or 1.13 (_pg_names, numbered names) shape
    it: functions that call each other through the module's globals, as torch's do."""
    mod = types.ModuleType("torch.distributed.distributed_c10d")
    mod.__dict__.update(VERSION=version, RANK=rank, WORLD=world)
    exec(C10D_SOURCE, mod.__dict__)
    if version == "2.x":
        mod._get_process_group_name = lambda pg: getattr(pg, "group_name", "None")
    return mod


class TorchApiTest(unittest.TestCase):
    def setUp(self):
        self.native = FakeNative()
        self.stderr = io.StringIO()
        for patcher in (mock.patch.object(agent, "_agent", self.native),
                        mock.patch.dict(agent._state, {"active": True}),
                        mock.patch.dict(agent._entry_points, clear=True),
                        mock.patch.dict(agent._groups, clear=True),
                        mock.patch.object(agent, "_backend_threads", []),
                        mock.patch.dict(sys.modules, {"torch.version": types.SimpleNamespace(
                            __version__="9.9.0")}),
                        contextlib.redirect_stderr(self.stderr)):
            patcher.__enter__()
            self.addCleanup(patcher.__exit__, None, None, None)
        agent._tls.__dict__.clear()

    def lines(self):
        return [l for l in self.stderr.getvalue().splitlines() if l]

    def steps(self):
        return [name for kind, name in self.native.markers if kind == 1]

    # ------------------------------------------------------------------ Optimizer.step

    def test_torch_2x_optimizers_are_timed_by_the_global_step_hooks(self):
        mod = optimizer_module_2x()
        agent._apply(agent._patch_optimizer, mod)
        self.assertEqual(agent.hook_entry_points()["Optimizer.step"],
                         "register_optimizer_step_pre_hook/register_optimizer_step_post_hook")

        class SGD(mod.Optimizer):
            def step(self):
                pass

        sgd = SGD()
        # No class is wrapped by the agent: step is torch's own wrapper of SGD.step.
        self.assertFalse(getattr(SGD.step, "_perftracker", False))
        for _ in range(3):
            sgd.step()
        self.assertEqual(self.steps(), ["SGD.step"] * 3)
        agent._apply(agent._patch_optimizer, mod)  # a second import registers nothing more
        sgd.step()
        self.assertEqual(self.steps(), ["SGD.step"] * 4)
        self.assertEqual(self.lines(), [])

    def test_an_optimizer_stepping_another_is_one_iteration(self):
        mod = optimizer_module_2x()
        agent._apply(agent._patch_optimizer, mod)

        class Adam(mod.Optimizer):
            def step(self):
                pass

        class MyAdam(Adam):  # both classes wrapped by torch: the hooks nest
            def step(self):
                super().step()

        class Zero(mod.Optimizer):  # ZeroRedundancyOptimizer steps its local optimizer
            def __init__(self):
                super().__init__()
                self.local = Adam()

            def step(self):
                self.local.step()

        Adam().step()
        MyAdam().step()
        Zero().step()
        self.assertEqual(self.steps(), ["Adam.step", "MyAdam.step", "Zero.step"])

    def test_a_step_that_raised_does_not_swallow_the_next_iterations(self):
        mod = optimizer_module_2x()
        agent._apply(agent._patch_optimizer, mod)

        class Flaky(mod.Optimizer):
            fail = True

            def step(self):
                if self.fail:
                    raise FloatingPointError("inf in the gradients")

        opt = Flaky()
        with self.assertRaises(FloatingPointError):
            opt.step()  # the pre hook ran, the post hook did not
        opt.fail = False
        opt.step()
        opt.step()
        self.assertEqual(self.steps(), ["Flaky.step"] * 2)

    def test_torch_113_optimizers_are_timed_through_hook_for_profile(self):
        mod = optimizer_module_113()
        agent._apply(agent._patch_optimizer, mod)
        self.assertEqual(agent.hook_entry_points()["Optimizer.step"],
                         "Optimizer._hook_for_profile")

        class SGD(mod.Optimizer):
            def step(self):
                pass

        SGD().step()
        self.assertEqual(self.steps(), ["SGD.step"])
        self.assertEqual(self.lines(), [])

    def test_an_unknown_optimizer_api_says_one_line_and_still_marks_steps(self):
        mod = optimizer_module_113()
        del mod.Optimizer._hook_for_profile
        mod.Optimizer.__init__ = lambda self: None
        agent._apply(agent._patch_optimizer, mod)

        class SGD(mod.Optimizer):
            def step(self):
                pass

        SGD().step()
        self.assertEqual(self.steps(), ["SGD.step"])
        self.assertEqual(agent.hook_entry_points()["Optimizer.step"], "Optimizer.__init__")
        lines = self.lines()
        self.assertEqual(len(lines), 1, lines)
        self.assertRegex(lines[0], r"^perftracker agent: Optimizer.step: torch 9\.9\.0 has no "
                         r"register_optimizer_step_post_hook \(2\.x\) nor "
                         r"Optimizer\._hook_for_profile \(1\.13\); .*\(training is not affected\)$")

    def test_no_optimizer_class_says_one_line(self):
        agent._apply(agent._patch_optimizer, types.ModuleType("torch.optim.optimizer"))
        self.assertIsNone(agent.hook_entry_points()["Optimizer.step"])
        lines = self.lines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("torch 9.9.0 has no torch.optim.optimizer.Optimizer; iterations are "
                      "learned from DataLoader batches alone", lines[0])

    # ------------------------------------------------------------------ DataLoader

    def test_the_dataloader_iterator_is_timed_and_its_absence_said_in_one_line(self):
        mod = types.ModuleType("torch.utils.data.dataloader")

        class _BaseDataLoaderIter:
            def __next__(self):
                return 1

        mod._BaseDataLoaderIter = _BaseDataLoaderIter
        agent._apply(agent._patch_dataloader, mod)
        self.assertEqual(next(_BaseDataLoaderIter()), 1)
        self.assertEqual(self.native.markers, [(0, "DataLoader.__next__")])
        self.assertEqual(agent.hook_entry_points()["DataLoader"], "_BaseDataLoaderIter.__next__")

        agent._apply(agent._patch_dataloader, types.ModuleType("torch.utils.data.dataloader"))
        self.assertIsNone(agent.hook_entry_points()["DataLoader"])
        lines = self.lines()
        self.assertEqual(len(lines), 1, lines)
        self.assertRegex(lines[0], r"^perftracker agent: DataLoader: torch 9\.9\.0 has no "
                         r"torch\.utils\.data\.dataloader\._BaseDataLoaderIter\.__next__; "
                         r"iterations are learned from optimizer steps alone")

    # ------------------------------------------------------------------ torch.distributed

    def test_collectives_of_either_version_are_timed_and_a_missing_init_said(self):
        mod = types.ModuleType("torch.distributed.distributed_c10d")
        mod.all_reduce = lambda tensor, group=None: "done"
        mod.batch_isend_irecv = lambda ops: ["work"]  # torch 2.x
        mod.get_world_size = lambda group=None: 4
        agent._apply(agent._patch_c10d, mod)
        self.assertEqual(mod.all_reduce(None), "done")
        self.assertEqual(mod.batch_isend_irecv([]), ["work"])
        self.assertEqual(self.native.collectives,
                         ["torch.distributed.all_reduce (group of 4)",
                          "torch.distributed.batch_isend_irecv (group of 4)"])
        points = agent.hook_entry_points()
        self.assertEqual(points["torch.distributed collectives"],
                         "distributed_c10d: all_reduce, batch_isend_irecv")
        self.assertIsNone(points["torch.distributed"])  # no init_process_group here
        self.assertEqual(points["process groups"], "the first collective of each group")
        self.assertIsNone(points["communication threads"])
        lines = self.lines()
        self.assertEqual(len(lines), 2, lines)
        self.assertIn("torch.distributed: torch 9.9.0 has no distributed_c10d."
                      "init_process_group / get_rank; the rank is learned at the first "
                      "optimizer step", lines[0])
        self.assertIn("communication threads: torch 9.9.0 has no distributed_c10d."
                      "_new_process_group_helper; only the threads that complete DDP's "
                      "all-reduces are known as communication threads", lines[1])

    def test_a_wrapped_collective_is_recorded_once_as_its_marker(self):
        # torch 2.x wraps each collective in decorators (functools.wraps); 1.13 does not.
        mod = types.ModuleType("torch.distributed.distributed_c10d")

        def all_reduce(tensor, group=None):
            return "done"

        @functools.wraps(all_reduce)
        def logged(*args, **kwargs):
            return all_reduce(*args, **kwargs)

        mod.all_reduce = logged
        mod.get_world_size = lambda group=None: 4
        hidden = []
        self.native.hide_code = hidden.append
        agent._apply(agent._patch_c10d, mod)
        self.assertEqual(mod.all_reduce(None), "done")
        self.assertEqual(self.native.collectives, ["torch.distributed.all_reduce (group of 4)"])
        # The profile records neither torch's frames of the call nor the agent's wrapper.
        self.assertIn(all_reduce.__code__, hidden)
        self.assertIn(logged.__code__, hidden)
        self.assertIn(mod.all_reduce.__code__, hidden)

    # ------------------------------------------------------------------ process groups

    def test_the_threads_a_backend_starts_are_named_communication_threads(self):
        # A backend with a thread of its own (as gloo's socket loop and workers): started
        # while torch builds each group, in _new_process_group_helper (issue 11 §3).
        mod = c10d_module("1.13", rank=0)
        stop = threading.Event()
        self.addCleanup(stop.set)
        started = []
        build = mod._new_process_group_helper

        def helper(ranks, name):
            t = threading.Thread(target=stop.wait, daemon=True)
            t.start()
            started.append(t)
            return build(ranks, name)

        mod._new_process_group_helper = helper
        agent._apply(agent._patch_c10d, mod)
        self.assertEqual(agent.hook_entry_points()["communication threads"],
                         "distributed_c10d._new_process_group_helper")
        mod.init_process_group()
        mod.new_group([0, 1])
        threading.Thread(target=stop.wait, daemon=True).start()  # no backend's: not named
        mod.all_reduce("t")
        self.assertEqual(len(started), 2)
        self.assertEqual(self.native.comm_threads, [t.native_id for t in started])
        self.assertNotIn(os.getpid(), self.native.comm_threads)
        self.assertEqual(self.lines(), [])

    def test_process_groups_of_torch_2x_and_113_are_declared_once_with_their_collectives(self):
        for version in ("2.x", "1.13"):
            with self.subTest(version=version):
                self.native.groups.clear()
                self.native.collective_groups.clear()
                agent._groups.clear()
                mod = c10d_module(version, rank=1)
                agent._apply(agent._patch_c10d, mod)
                self.assertEqual(agent.hook_entry_points()["process groups"],
                                 "distributed_c10d.new_group")
                mod.init_process_group()
                # new_subgroups() calls new_group() through the module, as torch's does: this
                # rank is in [0, 1] only.
                sub = mod.new_subgroups(2)
                mod.all_reduce("t")
                mod.all_reduce("t", group=sub)
                mod.all_reduce("t", group=sub)
                other = mod._make([1, 3], "7")  # made without new_group
                mod.all_reduce("t", other)
                name = {"2.x": "hash-0,1", "1.13": "1"}[version]
                self.assertEqual(self.native.groups,
                                 [("0", "nccl", [0, 1, 2, 3], 4), (name, "nccl", [0, 1], 2),
                                  ("7", "nccl", [1, 3], 2)])
                self.assertEqual(self.native.collective_groups, [1, 2, 2, 3])
                # A destroyed group is forgotten: a new group at the same address is new.
                mod.destroy_process_group(sub)
                self.assertNotIn(id(sub), agent._groups)
                mod.destroy_process_group()
                self.assertEqual(agent._groups, {})
        self.assertEqual(self.lines(), [])

    def test_a_group_torch_cannot_describe_is_not_declared_and_the_job_runs(self):
        mod = c10d_module("2.x", rank=0)
        agent._apply(agent._patch_c10d, mod)
        mod.init_process_group()
        broken = mod._make([0, 1], "x")
        mod._ranks_fail = True
        self.assertEqual(mod.all_reduce("t", group=broken), "done")
        self.assertEqual(self.native.collective_groups, [0])  # recorded, group not known
        self.assertEqual(len(self.native.groups), 1)  # the default group only
        self.assertEqual(self.lines(), [])

    # ------------------------------------------------------------------ DDP

    def ddp_module(self, **attrs):
        mod = types.ModuleType("torch.nn.parallel.distributed")
        registered = []

        class DistributedDataParallel:
            def __init__(self):
                self.reducer = object()
                self.process_group = types.SimpleNamespace(size=lambda: 2)
                self.__dict__.update(attrs)

            def forward(self, x):
                return x

            def register_comm_hook(self, state, hook):
                registered.append((state, hook))

            def _register_builtin_comm_hook(self, comm_hook_type):
                registered.append(comm_hook_type)

            def _check_comm_hook(self, hook):
                pass

        mod.DistributedDataParallel = DistributedDataParallel
        return mod, registered

    def test_ddp_gets_our_comm_hook_and_a_python_reducer_is_left_alone(self):
        mod, registered = self.ddp_module()
        agent._apply(agent._patch_ddp, mod)
        self.assertEqual(agent.hook_entry_points()["DDP all-reduce"],
                         "DistributedDataParallel.register_comm_hook")
        self.assertEqual(mod.DistributedDataParallel().forward(7), 7)
        self.assertEqual(len(registered), 1)
        self.assertIsInstance(registered[0][0], agent._DdpHook)

        # torch 2.x with compiled autograd: DDP's Python reducer calls comm hooks with
        # (grad, param), not a bucket. Ours stays off, theirs goes in untouched.
        mod, registered = self.ddp_module(_use_python_reducer=True)
        agent._apply(agent._patch_ddp, mod)
        ddp = mod.DistributedDataParallel()
        self.assertEqual(ddp.forward(7), 7)
        self.assertEqual(ddp.forward(8), 8)
        self.assertEqual(registered, [])
        user_hook = lambda state, bucket: None  # noqa: E731
        ddp.register_comm_hook("state", user_hook)
        self.assertEqual(registered, [("state", user_hook)])
        lines = self.lines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("DDP with compiled autograd", lines[0])

    def test_ddp_without_what_the_agent_needs_says_one_line(self):
        mod, registered = self.ddp_module()
        del mod.DistributedDataParallel._check_comm_hook
        forward = mod.DistributedDataParallel.forward
        agent._apply(agent._patch_ddp, mod)
        self.assertIs(mod.DistributedDataParallel.forward, forward)  # not patched
        self.assertEqual(mod.DistributedDataParallel().forward(3), 3)
        self.assertIsNone(agent.hook_entry_points()["DDP all-reduce"])
        lines = self.lines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("DDP all-reduce: torch 9.9.0 has no DistributedDataParallel."
                      "_check_comm_hook; DDP's gradient all-reduces are not timed", lines[0])

    # ------------------------------------------------------------------ CUPTI probe

    def test_the_cupti_probe_needs_to_know_whether_torch_profiler_records(self):
        def fake_torch(autograd_c, autograd):
            return types.SimpleNamespace(
                __version__="9.9.0", cuda=types.SimpleNamespace(is_initialized=lambda: True),
                _C=types.SimpleNamespace(_autograd=autograd_c), autograd=autograd)

        recording = types.SimpleNamespace(_profiler_enabled=lambda: True)
        with mock.patch.dict(sys.modules, {"torch": fake_torch(recording, None)}), \
                mock.patch.dict(agent._state):
            self.assertEqual(agent._gpu_probe()[0], 2)
            self.assertEqual(agent.hook_entry_points()["CUPTI probe"],
                             "torch._C._autograd._profiler_enabled")
        idle = types.SimpleNamespace(_profiler_enabled=lambda: False)
        with mock.patch.dict(sys.modules, {"torch": fake_torch(None, idle)}), \
                mock.patch.dict(agent._state, {"cupti": ""}):
            self.assertEqual(agent._gpu_probe(), (1, ""))
            self.assertEqual(agent.hook_entry_points()["CUPTI probe"],
                             "torch.autograd._profiler_enabled")
        with mock.patch.dict(sys.modules, {"torch": fake_torch(None, None)}), \
                mock.patch.dict(agent._state):
            for _ in range(3):  # said once, skipped every window
                code, reason = agent._gpu_probe()
                self.assertEqual(code, 2)
                self.assertIn("cannot say whether torch.profiler records", reason)
        self.assertIsNone(agent.hook_entry_points()["CUPTI probe"])
        lines = self.lines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("CUPTI probe: torch 9.9.0 has no _profiler_enabled", lines[0])

    def test_the_cupti_probe_sees_torch_profiler_recording_on_another_thread(self):
        # torch 2.x: _profiler_enabled() is the calling thread's state (False on the agent's
        # thread); torch.autograd.profiler._is_profiler_enabled is the process's.
        profiler = types.SimpleNamespace(_is_profiler_enabled=True)
        torch = types.SimpleNamespace(
            __version__="9.9.0", cuda=types.SimpleNamespace(is_initialized=lambda: True),
            _C=types.SimpleNamespace(_autograd=types.SimpleNamespace(
                _profiler_enabled=lambda: False)),
            autograd=types.SimpleNamespace(profiler=profiler))
        with mock.patch.dict(sys.modules, {"torch": torch}), \
                mock.patch.dict(agent._state, {"cupti": ""}):
            code, reason = agent._gpu_probe()
            self.assertEqual(code, 2)
            self.assertIn("torch.profiler is recording", reason)
            profiler._is_profiler_enabled = False  # stopped: traced again
            self.assertEqual(agent._gpu_probe(), (1, ""))


    # ------------------------------------------------------------------ torch.profiler

    def autograd_profiler_module(self):
        """torch.autograd.profiler as torch 1.13 and 2.x shape it: profile.__enter__ calls
        _prepare_trace(), where Kineto initializes CUPTI, then _start_trace()."""
        mod = types.ModuleType("torch.autograd.profiler")
        calls = []

        class profile:
            def __enter__(self):
                self._prepare_trace()
                return self

            def __exit__(self, *exc):
                return False

            def _prepare_trace(self):
                calls.append("prepare")

        mod.profile = profile
        return mod, calls

    def test_torch_profiler_preparation_first_takes_cupti_back_from_a_window(self):
        mod, calls = self.autograd_profiler_module()
        yields = []
        self.native.gpu_tracing_yield = lambda who: (yields.append((who, list(calls))), True)[1]
        agent._apply(agent._patch_autograd_profiler, mod)
        self.assertEqual(agent.hook_entry_points()["torch.profiler"],
                         "autograd.profiler.profile._prepare_trace")
        with mod.profile():
            pass
        self.assertEqual(yields, [("torch.profiler", [])])  # before torch's own preparation
        self.assertEqual(calls, ["prepare"])
        agent._apply(agent._patch_autograd_profiler, mod)  # patched once
        with mod.profile():
            pass
        self.assertEqual(len(yields), 2)
        self.assertEqual(self.lines(), [])

    def test_torch_profiler_starts_even_when_the_yield_fails_or_the_agent_is_passive(self):
        mod, calls = self.autograd_profiler_module()

        def broken(who):
            raise RuntimeError("agent gone")

        self.native.gpu_tracing_yield = broken
        agent._apply(agent._patch_autograd_profiler, mod)
        with mod.profile():
            pass
        passive = []
        self.native.gpu_tracing_yield = lambda who: passive.append(who)
        with mock.patch.dict(agent._state, {"active": False}), mod.profile():
            pass
        self.assertEqual(calls, ["prepare", "prepare"])
        self.assertEqual(passive, [])
        self.assertEqual(self.lines(), [])

    def test_a_torch_without_the_profiler_preparation_says_one_line(self):
        mod, _ = self.autograd_profiler_module()
        del mod.profile._prepare_trace
        agent._apply(agent._patch_autograd_profiler, mod)
        self.assertIsNone(agent.hook_entry_points()["torch.profiler"])
        lines = self.lines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("torch.profiler: torch 9.9.0 has no "
                      "torch.autograd.profiler.profile._prepare_trace", lines[0])


REAL_TORCH_JOB = """
    import json, sys
    import torch, torch.utils.data, torch.optim, torch.distributed
    import torch.nn.parallel
    from perftracker import agent
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)),
                                       batch_size=2)
    for (x,) in data:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    optimizer_module = sys.modules["torch.optim.optimizer"]
    print(json.dumps({"torch": torch.__version__,
                      "global_step_hooks": hasattr(optimizer_module,
                                                   "register_optimizer_step_post_hook"),
                      "points": agent.hook_entry_points()}))
"""


@unittest.skipUnless(importlib.util.find_spec("torch"), "no torch in this interpreter")
class RealTorchTest(unittest.TestCase):
    def test_the_entry_points_chosen_for_this_torch(self):
        with tempfile.TemporaryDirectory(prefix="perftracker-torch-api-") as d:
            path = os.path.join(d, "job.py")
            with open(path, "w") as f:
                f.write(textwrap.dedent(REAL_TORCH_JOB))
            env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
            env.update(PYTHONPATH=os.pathsep.join([BOOT, BUILD_PYTHON]),
                       PERFTRACKER_SOCKET=os.path.join(d, "none.sock"),  # passive: no rank
                       PERFTRACKER_RUN_ID="torchapi%d" % os.getpid())
            r = subprocess.run([sys.executable, path], env=env, capture_output=True,
                               text=True, timeout=300, cwd=d)
        self.assertEqual(r.returncode, 0, r.stderr)
        result = json.loads(r.stdout.strip().splitlines()[-1])
        points = result["points"]
        self.assertEqual(points["DataLoader"], "_BaseDataLoaderIter.__next__")
        self.assertEqual(points["Optimizer.step"],
                         "register_optimizer_step_pre_hook/register_optimizer_step_post_hook"
                         if result["global_step_hooks"] else "Optimizer._hook_for_profile")
        self.assertEqual(points["torch.distributed"], "distributed_c10d.init_process_group")
        self.assertIn("all_reduce", points["torch.distributed collectives"])
        self.assertEqual(points["DDP all-reduce"], "DistributedDataParallel.register_comm_hook")
        self.assertEqual(points["process groups"], "distributed_c10d.new_group")
        self.assertEqual(points["communication threads"],
                         "distributed_c10d._new_process_group_helper")
        self.assertEqual(points["torch.profiler"], "autograd.profiler.profile._prepare_trace")
        self.assertNotIn("has no", r.stderr)  # this torch lacks nothing the agent knows


if __name__ == "__main__":
    unittest.main()
