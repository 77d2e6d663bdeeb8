"""A job that forks (DataLoader workers, multiprocessing) while the agent runs Python on its
own thread: no forked child may hang. Run with /usr/bin/python3 and
PYTHONPATH=<build>/python (CTest does: agent_fork_test).

The agent's GIL thread used to make and delete a Python thread state for every task
(PyGILState_Ensure / Release). Making one takes the interpreter's thread-list lock without
the GIL, so a fork at that moment gave the child a lock that nobody would release, and the
child hung in PyOS_AfterFork_Child before running any Python (CPython 3.11). The test forks
as fast as it can while the collector keeps asking for stack dumps (one GIL task each).
Before the fix, 4 of 6 such 10 s runs left a hung child on a loaded 2-core machine.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
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


class ForkTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="perftracker-fork-test-")
        self.sock = os.path.join(self.dir, "collector.sock")
        self.run_id = "forktest%d" % os.getpid()
        self.proc = None

    def tearDown(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
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
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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


if __name__ == "__main__":
    unittest.main()
