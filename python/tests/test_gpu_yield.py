"""A torch.profiler session that starts while a perftracker window traces the GPU gets CUPTI
(CUPTI has one subscriber: on an H200 with torch 2.11, Kineto's initialization failed with
CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED and the user's profile lost its GPU activities).

The real agent in a real torch process (CPU torch: --gpu-tracing always traces without CUDA)
with the test suite's fake libcupti (src/perftracker/sources/cupti/fake_cupti_for_test.cc:
CUPTI's C ABI, CUDA 13 records; it logs each entry point called), against a fake collector.
Run by CTest (agent_cupti_yield_test) with PERFTRACKER_TEST_FAKE_CUPTI set to the library.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import perftracker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_collector import FakeCollector  # noqa: E402

BUILD_PYTHON = os.path.dirname(os.path.dirname(os.path.abspath(perftracker.__file__)))
BOOT = os.path.join(BUILD_PYTHON, "perftracker", "_boot")
FAKE_CUPTI = os.environ.get("PERFTRACKER_TEST_FAKE_CUPTI", "")
YIELD_LINE = ("perftracker agent: torch.profiler started during a window: GPU tracing stopped "
              "for the rest of the window so that torch.profiler gets CUPTI")

# Waits until the window's GPU tracing is on, then opens the job's own torch.profiler twice
# (torch.profiler.profile, then torch.autograd.profiler.profile). Where Kineto would
# initialize CUPTI (torch.autograd.profiler._prepare_profiler) it notes the CUPTI calls made
# so far and the time.
PROFILER_JOB = """
    import json, os, sys, time
    import torch
    import torch.autograd.profiler as autograd_profiler
    from perftracker import _agent

    def cupti_calls():
        try:
            with open(os.environ["FAKE_CUPTI_LOG"]) as f:
                return f.read().split("\\n")
        except FileNotFoundError:
            return []

    deadline = time.time() + 120
    while _agent.gpu_tracing_stats().get("windows", 0) < 1:
        if time.time() > deadline:
            sys.exit("job: the window's GPU tracing did not begin in 120 s")
        time.sleep(0.01)

    at_prepare = []
    real_prepare = autograd_profiler._prepare_profiler

    def prepare_profiler(*args, **kwargs):
        at_prepare.append((time.time_ns(), cupti_calls()))
        return real_prepare(*args, **kwargs)

    autograd_profiler._prepare_profiler = prepare_profiler
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        (torch.randn(64, 64) @ torch.randn(64, 64)).sum()
    with torch.autograd.profiler.profile() as prof2:  # the same window: nothing left to yield
        torch.randn(8, 8).sum()
    stats = _agent.gpu_tracing_stats()
    shm = _agent.read_shm(stats["path"])  # the -cupti file, read as the collector would
    names = {f[0]: f[3] for f in shm["functions"]}
    kernels = [e[1] for e in shm["events"] if names.get(e[3]) == "fake_gemm_kernel"]
    print(json.dumps({"at_prepare": at_prepare, "stats": stats, "kernel_starts": kernels,
                      "profiled_ops": len(prof.key_averages()) + len(prof2.key_averages())}))
"""


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except Exception:
        return False


@unittest.skipUnless(FAKE_CUPTI and os.path.exists(FAKE_CUPTI),
                     "no fake libcupti (built only with the CUDA toolkit's CUPTI headers)")
@unittest.skipUnless(have_torch(), "no torch in this interpreter")
class TorchProfilerDuringWindowTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="perftracker-gpu-yield-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.run_id = "gpuyield%d" % os.getpid()

    def start_job(self, source, env):
        path = os.path.join(self.dir, "job.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(source))
        e = {k: v for k, v in os.environ.items()
             if k not in ("LOCAL_RANK", "WORLD_SIZE", "PERFTRACKER_AGENT_OPTIONS")}
        e.update(PYTHONPATH=os.pathsep.join([BOOT, BUILD_PYTHON]),
                 PERFTRACKER_SOCKET=os.path.join(self.dir, "collector.sock"),
                 PERFTRACKER_RUN_ID=self.run_id, RANK="0")
        e.update(env)
        p = subprocess.Popen([sys.executable, path], env=e, cwd=self.dir,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)

        def kill():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
        self.addCleanup(kill)
        return p

    def test_torch_profiler_started_in_a_window_gets_cupti_and_the_window_keeps_its_data(self):
        log = os.path.join(self.dir, "cupti-calls.txt")
        collector = FakeCollector(os.path.join(self.dir, "collector.sock"))
        p = self.start_job(PROFILER_JOB, {
            "PERFTRACKER_AGENT_OPTIONS": "gpu_tracing=2",  # traced although CPU torch
            "PERFTRACKER_CUPTI_LIBRARY": FAKE_CUPTI, "FAKE_CUPTI_LOG": log})
        collector.wait_for("hello", timeout=120)
        # A long window: without the yield its CUPTI subscription would outlive the job's
        # profiler sessions.
        window_start = time.time_ns()
        collector.send({"type": "window", "window": 1, "start_ns": window_start,
                        "duration_ns": 600 * 10**9, "reason": "slowdown"})
        out, err = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0, err)
        result = json.loads(out.strip().splitlines()[-1])

        # Kineto's initialization point found CUPTI released: perftracker had flushed and
        # unsubscribed before torch.profiler's _prepare_profiler ran.
        (first_at, first_calls), (_, second_calls) = result["at_prepare"]
        self.assertEqual(first_calls.count("cuptiSubscribe"), 1, first_calls)
        self.assertIn("cuptiUnsubscribe", first_calls)
        self.assertLess(first_calls.index("cuptiActivityFlushAll"),
                        first_calls.index("cuptiUnsubscribe"), first_calls)
        self.assertEqual(first_calls, second_calls)  # the second session found nothing to do
        self.assertGreater(result["profiled_ops"], 0)  # the user's profiles recorded

        # The GPU records of the window before the profiler started are in the -cupti file.
        stats = result["stats"]
        self.assertEqual((stats["windows"], stats["yields"]), (1, 1), stats)
        kernels = result["kernel_starts"]
        self.assertEqual(len(kernels), 200)  # the fake's FAKE_CUPTI_KERNELS default
        self.assertLess(max(kernels), first_at)

        # Said once, in the agent's voice; nothing else from the agent.
        agent_lines = [l for l in err.splitlines() if l.startswith("perftracker agent:")]
        self.assertEqual(agent_lines, [YIELD_LINE], err)

        # The window (cut short by the job's exit) says where its GPU data stops: the
        # collector counts the rest of the window as untraced (the report's notes).
        _, _, done = collector.wait_for("window_done", timeout=60)
        self.assertEqual(done["window"], 1)
        self.assertLessEqual(window_start, done["gpu_stopped_ns"])
        self.assertLessEqual(done["gpu_stopped_ns"], first_at)
        self.assertLess(max(kernels), done["gpu_stopped_ns"])

        # The window's end (here: the job's) subscribes nothing again and unsubscribes no more.
        with open(log) as f:
            calls = f.read().split("\n")
        self.assertEqual(calls.count("cuptiSubscribe"), 1, calls)
        self.assertEqual(calls.count("cuptiUnsubscribe"), 1, calls)


if __name__ == "__main__":
    unittest.main()
