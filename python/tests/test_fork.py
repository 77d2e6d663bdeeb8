"""A job that forks (DataLoader workers, multiprocessing) while the agent runs Python on its
own thread: no forked child may hang. Run with /usr/bin/python3 and
PYTHONPATH=<build>/python (CTest does: agent_fork_test).

The agent's GIL thread used to make and delete a Python thread state for every task
(PyGILState_Ensure / Release). Making one takes the interpreter's thread-list lock without
the GIL, so a fork at that moment gave the child a lock that nobody would release, and the
child hung in PyOS_AfterFork_Child before running any Python (CPython 3.11). The test forks
as fast as it can while the collector keeps asking for stack dumps (one GIL task each).
Before the fix, 4 of 6 such 10 s runs left a hung child on a loaded 2-core machine.

The second test forks while the agent's control thread allocates (a flood of collector
messages): under gcc 12's AddressSanitizer, whose allocator has no fork handlers, a child
forked while that thread was inside malloc hung on the allocator's lock. The agent's threads
now stand still around a fork (ForkGate, docs/live-mode.md).

The third test forks while the agent starts (and stops) again and again: each start makes
the GIL worker's Python thread state. The agent made it under a mutex that fork()'s prepare
handler took, and CPython 3.13 holds its thread-list lock (HEAD_LOCK) from before fork()
runs that handler: the parent hung in os.fork (agent_python3.13, in CI).
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

import perftracker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_collector import FakeCollector  # noqa: E402

BUILD_PYTHON = os.path.dirname(os.path.dirname(os.path.abspath(perftracker.__file__)))
BOOT = os.path.join(BUILD_PYTHON, "perftracker", "_boot")

# Forks for FORK_S seconds; each child exits at once. A child still there after 30 s (a
# loaded machine runs a fork in well under a second) is hung: the job says so and fails.
FORK_JOB = """
    import os, sys, time

    def main():
        fork_s = float(sys.argv[1])
        deadline = time.time() + fork_s
        forks = 0
        while time.time() < deadline:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            give_up = time.time() + 30
            while os.waitpid(pid, os.WNOHANG)[0] == 0:
                if time.time() > give_up:
                    print("child %d hung after %d forks" % (pid, forks), flush=True)
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    sys.exit(3)
                time.sleep(0.0005)
            forks += 1
        print("forks %d" % forks, flush=True)

    main()
"""


# N_FORKS forks while a window records and the agent's control thread parses a flood of
# collector messages of every size (each one allocates and frees). Each child allocates a
# spread of sizes (most sizes the allocator has a class for), then exits. A child still there
# after CHILD_S seconds is hung: the job kills it, says so and exits 3.
ALLOC_FORK_JOB = """
    import json, os, sys, time
    from perftracker import _agent

    def work():
        s = 0
        for i in range(50):
            s += i
        return s

    def child():
        keep = []
        n = 600
        while n < 140000:  # malloc'ed sizes (pymalloc serves <= 512 bytes)
            keep.extend(bytearray(n) for _ in range(4))
            n = int(n * 1.2)
        keep.extend([i] * 8 for i in range(2000))
        os._exit(0)

    def main():
        n_forks, child_s, started = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
        while not os.path.exists(started):  # the collector's window and flood are on
            work()
            time.sleep(0.001)
        for forks in range(n_forks):
            for _ in range(20):
                work()
            pid = os.fork()
            if pid == 0:
                child()
            give_up = time.time() + child_s
            while os.waitpid(pid, os.WNOHANG)[0] == 0:
                if time.time() > give_up:
                    print("child %d hung after %d forks %s" % (pid, forks, _agent.stats()),
                          flush=True)
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    sys.exit(3)
                time.sleep(0.001)
        print(json.dumps({"forks": n_forks, "stats": _agent.stats()}), flush=True)

    main()
"""


# A thread forks in a loop (each child exits at once) while the main thread starts and stops
# the agent n_starts times: each start makes the GIL worker's thread state while the forks go
# on. Glibc runs fork()'s prepare handlers last-registered first, so `spin` handlers registered
# after the agent's (sched_yield each: no state, only time) run after CPython took its locks
# for the fork and before the agent's handlers: they widen the moment a lock-order inversion
# needs from microseconds to a millisecond. A start that does not end within stall_s seconds
# means the job deadlocked: faulthandler's watchdog (a C thread: it needs no GIL) prints every
# thread's stack and exits 1. A child still there after 30 s is hung: the job exits 3.
START_FORK_JOB = """
    import ctypes, faulthandler, os, sys, threading, time, warnings
    from perftracker import _agent

    warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads

    def forker(stop, forks):
        while not stop.is_set():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            give_up = time.time() + 30
            while os.waitpid(pid, os.WNOHANG)[0] == 0:
                if time.time() > give_up:
                    print("child %d hung after %d forks" % (pid, forks[0]), flush=True)
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    os._exit(3)
                time.sleep(0.0002)
            forks[0] += 1

    def main():
        n_starts, stall_s, spin = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
        shm = sys.argv[4]
        stop, forks = threading.Event(), [0]
        thread = threading.Thread(target=forker, args=(stop, forks))
        thread.start()
        for i in range(n_starts):
            faulthandler.dump_traceback_later(stall_s, exit=True)
            _agent.activate(socket="", shm_path=shm, rank=0, local_rank=0, world_size=1,
                            host="forktest", options="")
            _agent.stop()
            if i == 0 and spin > 0:  # the agent registered its fork handlers: now ours
                libc = ctypes.CDLL(None)
                if hasattr(libc, "__register_atfork"):  # glibc (pthread_atfork is not exported)
                    yield_fn = ctypes.cast(libc.sched_yield, ctypes.c_void_p)
                    for _ in range(spin):
                        libc.__register_atfork(yield_fn, None, None, None)
        faulthandler.cancel_dump_traceback_later()
        stop.set()
        thread.join()
        print("starts %d forks %d" % (n_starts, forks[0]), flush=True)

    main()
"""


class ForkTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="perftracker-fork-test-")
        self.sock = os.path.join(self.dir, "collector.sock")
        self.run_id = "forktest%d" % os.getpid()
        self.proc = None

    def tearDown(self):
        if self.proc is not None:
            # The job's own session: a hung grandchild (which holds the job's pipes) goes too.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.communicate()
        shutil.rmtree(self.dir, ignore_errors=True)
        prefix = "perftracker-%s-" % self.run_id
        for name in os.listdir("/dev/shm"):
            if name.startswith(prefix):
                os.unlink(os.path.join("/dev/shm", name))

    def test_forked_children_never_hang_while_the_agent_dumps_stacks(self):
        collector = FakeCollector(self.sock)
        path = os.path.join(self.dir, "job.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(FORK_JOB))
        env = {k: v for k, v in os.environ.items()
               if k not in ("LOCAL_RANK", "WORLD_SIZE", "PERFTRACKER_AGENT_OPTIONS")}
        env.update(PYTHONPATH=os.pathsep.join([BOOT, BUILD_PYTHON]), PERFTRACKER_SOCKET=self.sock,
                   PERFTRACKER_RUN_ID=self.run_id, RANK="0")
        self.proc = subprocess.Popen([sys.executable, path, "10"], env=env, cwd=self.dir,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        collector.wait_for("hello", timeout=60)
        # One stack dump at a time (each runs Python on the agent's thread) until the job ends.
        dumps = 0
        while self.proc.poll() is None:
            try:
                collector.send({"type": "dump_stacks", "window": dumps})
                collector.wait_for("stacks", timeout=30)
            except (OSError, AssertionError):  # the job ended meanwhile
                break
            dumps += 1
        out, err = self.proc.communicate(timeout=120)
        self.assertNotIn("hung", out, "a forked child hung (its parent's stacks were dumped "
                         "%d times meanwhile)\n%s" % (dumps, err))
        self.assertEqual(self.proc.returncode, 0, out + err)
        self.assertRegex(out, r"^forks \d+")
        self.assertGreaterEqual(int(out.split()[1]), 10, out)
        self.assertGreaterEqual(dumps, 10, "too few stack dumps to exercise the agent's thread")
        collector.kill()

    def test_forked_children_never_hang_while_the_agent_allocates(self):
        # gcc 12's AddressSanitizer takes no allocator lock around fork(): a child forked while
        # one of the agent's threads was inside malloc waits forever on that allocator lock
        # (seen in agent_python_test). The agent's threads stand still around each fork
        # (ForkGate). Fails as "hung" (or rc 3) when they do not.
        collector = FakeCollector(self.sock)
        path = os.path.join(self.dir, "job.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(ALLOC_FORK_JOB))
        started = os.path.join(self.dir, "started")
        env = {k: v for k, v in os.environ.items()
               if k not in ("LOCAL_RANK", "WORLD_SIZE", "PERFTRACKER_AGENT_OPTIONS")}
        env.update(PYTHONPATH=os.pathsep.join([BOOT, BUILD_PYTHON]), PERFTRACKER_SOCKET=self.sock,
                   PERFTRACKER_RUN_ID=self.run_id, RANK="0")
        self.proc = subprocess.Popen([sys.executable, path, "200", "10", started], env=env,
                                     cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        try:
            collector.wait_for("hello", timeout=60)
        except AssertionError:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            raise AssertionError("the job never said hello (exit %s)\n%s%s"
                                 % (self.proc.returncode, out, err))
        collector.send({"type": "window", "window": 1, "start_ns": time.time_ns(),
                        "duration_ns": 600_000_000_000, "reason": "manual"})
        # Messages of every size the agent accepts (ControlChannel::kMaxLineIn, 4 KiB), as
        # fast as it reads them: the control thread parses (allocates) each and counts it as
        # unknown. (Pads up to 60,000 bytes made 93 % of them over-long lines the agent skips
        # unparsed: on a loaded machine only 107 were parsed during the forks.)
        done = threading.Event()
        sent = [0]

        def flood():
            rng = random.Random(7)
            while not done.is_set():
                try:
                    collector.send({"type": "filler", "pad": "x" * rng.randint(1, 4000)})
                except OSError:
                    return
                sent[0] += 1

        flooder = threading.Thread(target=flood, daemon=True)
        flooder.start()
        open(started, "w").close()
        try:
            out, err = self.proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            self.fail("the fork job did not end within 240 s\n%s%s" % (out, err))
        finally:
            done.set()
        self.assertNotIn("hung", out, "a forked child hung (%d collector messages sent)\n%s"
                         % (sent[0], err))
        self.assertEqual(self.proc.returncode, 0, out + err)
        report = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(report["forks"], 200)
        self.assertGreaterEqual(report["stats"]["forks"], 200, report)  # the gate saw them
        # The control thread was busy allocating while the job forked.
        self.assertGreater(report["stats"]["unknown_messages"], 200, report)
        flooder.join(timeout=10)
        collector.kill()

    def test_forking_while_the_agent_starts_never_hangs_the_job(self):
        # Before the fix, on CPython 3.13, most runs hung within a few starts (counts in
        # docs/live-mode.md, "perftracker's own faults"); 3.10-3.12 never had the inversion.
        path = os.path.join(self.dir, "job.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(START_FORK_JOB))
        env = {k: v for k, v in os.environ.items()
               if k not in ("LOCAL_RANK", "WORLD_SIZE", "PERFTRACKER_AGENT_OPTIONS", "RANK")}
        env.update(PYTHONPATH=BUILD_PYTHON)
        shm = "/dev/shm/perftracker-%s-job" % self.run_id
        self.proc = subprocess.Popen([sys.executable, path, "150", "60", "1000", shm], env=env,
                                     cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        try:
            out, err = self.proc.communicate(timeout=240)  # the job's own watchdog: 60 s
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            self.fail("the job did not end within 240 s\n%s%s" % (out, err))
        self.assertNotIn("Timeout", err, "the job hung (a start of the agent did not end within "
                         "60 s while a thread forked):\n%s%s" % (out, err))
        self.assertNotIn("hung", out, "a forked child hung\n%s" % err)
        self.assertEqual(self.proc.returncode, 0, out + err)
        self.assertRegex(out, r"^starts 150 forks \d+")
        self.assertGreaterEqual(int(out.split()[3]), 150, out)  # forks went on during the starts


if __name__ == "__main__":
    unittest.main()
