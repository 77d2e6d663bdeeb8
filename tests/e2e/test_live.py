#!/usr/bin/python3
"""End-to-end tests of live mode: `perftracker run` on a real 4-rank torch job.

Each test starts `perftracker run --report-dir DIR [options] -- /usr/bin/python3
live_job.py [fault]` as a user would (live_job.py knows nothing about perftracker: the
agent is loaded through the sitecustomize that `perftracker run` puts on PYTHONPATH), lets
the always-on detector notice the injected fault (or forces a window with
--trigger-at-seconds), and checks what a user relies on: the finding in the report JSON
that perftracker writes into DIR (the schema of `diagnose --format json`), the text printed
at the end, exit codes, and that perftracker's own failures leave the job alone.

  /usr/bin/python3 tests/e2e/test_live.py --perftracker build/src/perftracker/cli/perftracker \
      [-v] [LiveFaultTest.test_hang_names_rank_and_stack] [--keep DIR] [--keep-failed DIR]

Every job runs in its own process group; every process it starts (the job's process group, the
busy processes of the contention test, anything orphaned: this process is a child
subreaper) is killed and reaped after each test, even on failure, and the shared-memory
files of killed agents are removed. Without torch (Debian's python3-torch, run by
--torch-python) the tests that run jobs are skipped with a message.

Options common to the fault tests, and why:
  --window-iterations 20   the detector's moving mean over 20 iterations (default 50), so
                           that a fault that starts after 40 steps is seen within seconds;
  --slowdown-ratio 0.15    4 ranks on 2 shared cores make healthy iteration times wander by
                           5-8 % (the default 5 % bar fired on a healthy job here); the
                           injected faults slow the job by 25-100 %;
  --window-seconds 4       a short window (default 20 s) keeps each test well under a minute;
  --max-windows 3 --cooldown-seconds 0
                           should a busy machine still fire a trigger before the fault, the
                           fault gets a window of its own; the tests read the report of the
                           final diagnosis `perftracker run` prints (the most important
                           window's: what the user sees; the last window may be cut short by
                           the job's end, and a rank that has exited shows no events in it)
  --min-hang-seconds 5     no hang before 5 s of silence (the default is 30 s; the hang tests
                           set their own, shorter, to exercise the hang path quickly)
"""

import argparse
import ctypes
import datetime
import glob
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LIVE_JOB = os.path.join(HERE, "live_job.py")
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import report_files  # noqa: E402  (the report directory's file names)
from torch_check import torch_missing  # noqa: E402
DEMO_JOB = os.path.join(REPO, "examples", "live", "train.py")
CATEGORIES = {"compute", "data_loading", "communication", "synchronization", "host_overhead",
              "gc", "cpu_contention", "gpu_hardware", "memory", "hang", "data_quality"}
FINDING_KEYS = {"code", "category", "title", "workers", "victims", "function",
                "function_key", "resource", "lost_ms_per_iteration", "lost_share",
                "material", "evidence"}

CONFIG = argparse.Namespace(perftracker=None, torch_python="/usr/bin/python3", keep=None,
                            keep_failed=None, fake_cupti=None)
TIMINGS = []  # (what, seconds), printed at the end

# Detector and window options of the fault tests (see the module docstring).
FAULT_RUN_OPTIONS = ["--window-iterations", "20", "--slowdown-ratio", "0.15",
                     "--window-seconds", "4", "--max-windows", "3", "--cooldown-seconds", "0",
                     "--min-hang-seconds", "5"]
FAULT_AFTER_STEPS = 40
# The hang case: ~300 ms iterations (a sleep of this long in every step), the hang after
# this many steps.
HANG_STEP_SLEEP_MS = 250
HANG_AFTER_STEPS = 30
# The hang tests' minimum silence (the default, 30 s, would make each of them half a minute
# longer; what they check does not depend on it).
HANG_MIN_SECONDS = 3
# How much later than max(5 x the mean iteration, the minimum silence) a hang report may
# come: the second stack sample that confirms it (1 s after the first), the stacks, the
# summaries of the short window and the report, on a loaded 2-core machine.
HANG_REPORT_SLACK_S = 5
# A job that made no step for this long (and is past its timeout) is stuck; one that makes
# steps is waited for (LiveRun.wait).
STALL_SECONDS = 120
# What a wait that includes the job's start-up allows: importing torch and forming the
# process group took over 120 s at load 35 on 2 cores (ASan), before any step.
STARTUP_SECONDS = 600


def log(msg):
    print(f"[e2e-live] {msg}", file=sys.stderr, flush=True)


_TORCH = {}


def require_torch():
    """Skips without torch; a loaded machine's slow interpreter is an error (torch_check)."""
    if "missing" not in _TORCH:
        _TORCH["missing"] = torch_missing(CONFIG.torch_python, timeout=STARTUP_SECONDS)
    if _TORCH["missing"]:
        raise unittest.SkipTest(f"{_TORCH['missing']}: skipping live-mode jobs")


# ------------------------------------------------------------------ processes

def _proc_table():
    """pid -> (ppid, pgid) of every process we can read."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 3:
            table[int(entry)] = (int(fields[1]), int(fields[2]))
    return table


def descendants(root):
    """pids of every live descendant of `root`, with their process groups."""
    table = _proc_table()
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out[child] = table[child][1]
                todo.append(child)
    return out


def become_subreaper():
    """Orphans of our jobs (e.g. the training processes once `perftracker run` is killed)
    are re-parented to this process, so that they can be found, killed and reaped."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER = 36
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def kill_everything_we_started():
    """SIGKILLs every descendant of this process (and their process groups), then reaps."""
    me, my_pgid = os.getpid(), os.getpgrp()
    for _ in range(5):
        procs = descendants(me)
        if not procs:
            break
        for pgid in set(procs.values()):
            if pgid not in (my_pgid, 0, 1):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except OSError:
                    pass
        for pid in procs:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.2)
        reap()


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def wait_pid(pid, timeout):
    """Exit status (os.waitstatus_to_exitcode) of our child `pid`, or None on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    return None


def window_share_after(report, since):
    """The share of a live window report's window that lies after `since` (seconds since the
    epoch), from its "live window N (reason) from YYYY-MM-DD HH:MM:SS.mmm UTC for X s" note; 1
    when the note is missing."""
    for note in report.get("notes", []):
        m = re.match(r"live window \d+ \(\w+\) from (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC "
                     r"for ([\d.]+) (ms|s)\b", note)
        if not m:
            continue
        start = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        length = float(m.group(2)) / (1000.0 if m.group(3) == "ms" else 1.0)
        if length <= 0:
            return 1.0
        return max(0.0, min(1.0, (start + length - max(start, since)) / length))
    return 1.0


def start_busy_loops(cpu, count):
    """`count` CPU-bound processes pinned to `cpu`, in a process group of their own but in
    this session (the jobs' scheduler autogroup)."""
    code = ("import os, sys\n"
            "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
            "while True:\n    pass\n")
    return [subprocess.Popen([sys.executable, "-c", code, str(cpu)], process_group=0)
            for _ in range(count)]


def rank_pids(root):
    """rank -> pid of the job's ranks below `root` (ranks started with RANK in their
    environment: live_job.py --launcher env)."""
    out = {}
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                worker = b"--worker" in f.read().split(b"\0")
        except OSError:
            continue
        if worker and b"RANK" in env:
            out[int(env[b"RANK"])] = pid
    return out


def schedstat(pid, main_thread=False):
    """(cpu ns, run-queue wait ns, timeslices) summed over the process's threads, or of its
    main thread alone (tid == pid)."""
    cpu = wait = slices = 0
    for tid in [str(pid)] if main_thread else os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                fields = f.read().split()
        except OSError:
            continue
        cpu += int(fields[0])
        wait += int(fields[1])
        slices += int(fields[2])
    return cpu, wait, slices


# ------------------------------------------------------------------ one live run

class LiveRun:
    """One `perftracker run [run_args] -- python live_job.py [job_args]`, in a temporary
    directory: report dir, progress file (rank 0: "step wall_time"), stdout and stderr."""

    def __init__(self, name, run_args, job_args, steps, job=LIVE_JOB, env=None):
        self.name = name
        self.env = None if env is None else dict(os.environ, **env)
        self.dir = tempfile.mkdtemp(prefix=f"perftracker-live-{name}-")
        self.report_dir = os.path.join(self.dir, "reports")
        self.progress_path = os.path.join(self.dir, "progress.txt")
        self.stdout_path = os.path.join(self.dir, "stdout.txt")
        self.stderr_path = os.path.join(self.dir, "stderr.txt")
        self.cmd = [CONFIG.perftracker, "run", "--report-dir", self.report_dir, *run_args,
                    "--", CONFIG.torch_python, job, "--steps", str(steps),
                    "--progress-file", self.progress_path, *job_args]
        self.proc = None
        self.job_pid = None
        self.rc = None
        self.started = None
        self.seconds = None
        self.seen_pids = set()

    def start(self):
        self.started = time.time()
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            # A process group of its own (cleanup), but this session: the job's ranks and
            # the contention test's busy processes must share one scheduler autogroup
            # (kernel.sched_autogroup_enabled groups CPU shares by session).
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, cwd=self.dir, process_group=0,
                                         env=self.env)
        return self

    def track(self):
        """Remembers the job's processes (for shared-memory cleanup) and its main pid."""
        if self.proc is None:
            return
        procs = descendants(self.proc.pid)
        self.seen_pids.update(procs)
        if self.job_pid is None:
            for pid, pgid in procs.items():
                if pgid == pid:  # perftracker starts the job in its own process group
                    self.job_pid = pid

    def wait(self, timeout, stall=None):
        """Waits for `perftracker run` to end: within `timeout` s, or, with `stall`, for as
        long as the job keeps making progress, until no new step came for `stall` s. A loaded
        machine stretches every step (455 ms instead of 100 here at load 20, 2 s in a
        window's tracing): a job of a fixed number of steps has no fixed duration."""
        deadline = time.monotonic() + timeout
        seen = -1
        while self.proc.poll() is None:
            if stall is not None:
                step = self.last_step()
                if step != seen:
                    seen = step
                    deadline = max(deadline, time.monotonic() + stall)
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: perftracker run did not end within "
                                     f"{timeout} s" + (f" nor {stall} s after its last step"
                                                       if stall is not None else "") +
                                     f"\n{self.describe()}")
            self.track()
            time.sleep(0.1)
        self.rc = self.proc.returncode
        self.seconds = time.time() - self.started
        TIMINGS.append((self.name, self.seconds))
        return self.rc

    def poll_until(self, what, predicate, timeout, interval=0.05):
        """Polls predicate() (tracking processes meanwhile) until it is truthy."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name}: perftracker run ended before {what}\n"
                                     f"{self.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no {what} within {timeout} s\n"
                                     f"{self.describe()}")
            self.track()
            time.sleep(interval)

    def steps(self):
        """[(step, wall time)] that rank 0 finished."""
        try:
            with open(self.progress_path) as f:
                lines = f.read().splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            parts = line.split()
            if len(parts) == 2:
                out.append((int(parts[0]), float(parts[1])))
        return out

    def step_times(self):
        """Rank 0's median step before and after the fault's step (what the detector saw)."""
        s = self.steps()
        gaps = [(b[0], b[1] - a[1]) for a, b in zip(s, s[1:])]
        before = sorted(g for n, g in gaps if 10 <= n < FAULT_AFTER_STEPS)
        after = sorted(g for n, g in gaps if n > FAULT_AFTER_STEPS + 1)
        if not before or not after:
            return "too few steps for step times"
        b, a = before[len(before) // 2], after[len(after) // 2]
        return (f"median step {b * 1e3:.1f} ms before step {FAULT_AFTER_STEPS}, "
                f"{a * 1e3:.1f} ms after it (ratio {a / b:.2f})")

    def last_step(self):
        s = self.steps()
        return s[-1][0] if s else -1

    def stdout(self):
        with open(self.stdout_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stderr(self):
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def report_paths(self, reason=None):
        """The windows' JSON reports (of that reason, when given), in window order."""
        return report_files.window_report_paths(self.report_dir, reason)

    def report(self, reason=None, exclude=(), first=False):
        """The last (or first) window's JSON report (of that reason, when given), leaving
        out the report files in `exclude`."""
        paths = [p for p in self.report_paths(reason) if p not in exclude]
        if not paths:
            raise AssertionError(f"{self.name}: no {reason or ''} report in "
                                 f"{self.report_dir}\n{self.describe()}")
        path = paths[0] if first else paths[-1]
        with open(path, encoding="utf-8") as f:
            try:
                return json.load(f)
            except ValueError as e:
                raise AssertionError(f"{path} is not JSON: {e}") from None

    def final_report(self):
        """The report of the diagnosis `perftracker run` printed at the end (the most
        important window's): what the user sees."""
        m = re.search(r"^perftracker: final diagnosis: (\S+)", self.stdout(), re.M)
        if not m:
            raise AssertionError(f"{self.name}: no final diagnosis printed\n{self.describe()}")
        with open(m.group(1), encoding="utf-8") as f:
            return json.load(f)

    def fault_start_time(self):
        """Wall time at which live_job.py says the fault started (None before)."""
        m = re.search(r"live_job: rank \d+ fault \w+ starts at step \d+ \(([\d.]+)\)",
                      self.stderr())
        return float(m.group(1)) if m else None

    def describe(self):
        try:
            out, err = self.stdout(), self.stderr()
        except OSError:
            out, err = "", ""
        return (f"command: {' '.join(self.cmd)}\nrc {self.rc}, reports "
                f"{[os.path.basename(p) for p in self.report_paths()]}, last step "
                f"{self.last_step()}; {self.step_times()}\n--- stderr (tail):\n{err[-4000:]}\n"
                f"--- stdout (tail):\n{out[-4000:]}")

    def cleanup(self, failed=False):
        kill_everything_we_started()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        reap()
        # Agents that were killed cannot remove their shared memory; `perftracker run`
        # removes the files of dead agents when the job ends, but not when it was killed
        # itself or when the job's ranks outlive its main process.
        if self.proc is not None:
            for path in glob.glob(f"/dev/shm/perftracker-*-{self.proc.pid}-*"):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        keep = CONFIG.keep or (CONFIG.keep_failed if failed else None)
        if keep:
            dest = os.path.join(keep, os.path.basename(self.dir))
            shutil.copytree(self.dir, dest, dirs_exist_ok=True)
            log(f"kept {'the failed run ' if failed else ''}{self.name} in {dest}")
        shutil.rmtree(self.dir, ignore_errors=True)


def _varint(data, i):
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _protobuf_fields(data):
    """(field number, wire type, value) of a protobuf message, with no protobuf package:
    varints as ints, length-delimited fields as bytes."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            n, i = _varint(data, i)
            value, i = data[i:i + n], i + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            value, i = data[i:i + n], i + n
        else:
            raise ValueError("protobuf wire type %d" % wire)
        yield number, wire, value


def summary_process_groups(blob):
    """A stored WorkerSummary's process groups that its collectives ran in
    (perftracker.proto: process_groups = 20 {name 1, sint32 ranks 2, size 3, backend 4}), as
    [(name, ranks, size, backend)], and how many collective_group_calls (21) it has."""
    groups, calls = [], 0
    for number, _, value in _protobuf_fields(bytes(blob)):
        if number == 21:
            calls += 1
        if number != 20:
            continue
        name, zigzag, size, backend = "", [], 0, ""
        for n, wire, v in _protobuf_fields(value):
            if n == 1:
                name = v.decode()
            elif n == 2 and wire == 2:  # packed
                j = 0
                while j < len(v):
                    x, j = _varint(v, j)
                    zigzag.append(x)
            elif n == 2:
                zigzag.append(v)
            elif n == 3:
                size = v
            elif n == 4:
                backend = v.decode()
        groups.append((name, [(x >> 1) ^ -(x & 1) for x in zigzag], size, backend))
    return groups, calls


def stored_process_groups(run):
    """rank -> (its window summary's process groups, collective_group_calls), from the
    embedded store of a run of one window."""
    import sqlite3
    with sqlite3.connect(os.path.join(run.report_dir, "perftracker.db")) as c:
        return {rank: summary_process_groups(blob)
                for rank, blob in c.execute("select rank, summary from summaries")}


def median_interval(steps):
    times = [t for _, t in steps]
    gaps = [b - a for a, b in zip(times, times[1:])]
    return statistics.median(gaps) if gaps else float("nan")


# ------------------------------------------------------------------ checks

class LiveChecks(unittest.TestCase):
    maxDiff = None

    def new_run(self, name, run_args, job_args, steps, **kw):
        require_torch()
        run = LiveRun(name, run_args, job_args, steps, **kw)
        self.addCleanup(lambda: run.cleanup(failed=self.failed()))
        return run

    def failed(self):
        # While its cleanups run, a test that failed or raised is already in its result's
        # failures or errors (CPython 3.11 and later; 3.10 records them afterwards).
        result = getattr(getattr(self, "_outcome", None), "result", None)
        return result is not None and any(
            test is self for test, _ in (*getattr(result, "failures", ()),
                                         *getattr(result, "errors", ())))

    def check_schema(self, report, run, recorded=True):
        for key in ("num_workers", "median_iteration_ms", "has_material_finding", "notes",
                    "findings", "skipped_inputs", "workers"):
            self.assertIn(key, report, run.describe())
        for f in report["findings"]:
            self.assertTrue(FINDING_KEYS <= set(f), f"finding lacks {FINDING_KEYS - set(f)}")
            self.assertIn(f["category"], CATEGORIES)
        self.assertEqual(report["has_material_finding"],
                         any(f["material"] for f in report["findings"]))
        self.assertEqual(report["num_workers"], 4, run.describe())
        self.assertEqual(sorted(w["rank"] for w in report["workers"]), [0, 1, 2, 3])
        for w in report["workers"] if recorded else []:  # the agent recorded in every rank
            self.assertGreater(w["stats"]["events"], 0, json.dumps(w))

    def top_finding(self, report, run):
        self.assertTrue(report["has_material_finding"],
                        f"no material finding:\n{json.dumps(report['findings'][:3], indent=1)}"
                        f"\n{run.describe()}")
        return report["findings"][0]

    def check_no_hang_diagnosed(self, run):
        """No hang is what the user sees: the final diagnosis names none, and a hang report
        that was written is retracted (the hang is a note in it, not a finding)."""
        self.assertNotIn("PT-HANG", run.stdout(), run.describe())
        for path in run.report_paths("hang"):
            with open(path, encoding="utf-8") as f:
                report = json.load(f)
            codes = [f["code"] for f in report["findings"]]
            self.assertNotIn("PT-HANG", codes, f"{path}\n{run.describe()}")
            self.assertTrue(any("retracted" in n for n in report["notes"]), report["notes"])

    def check_final_text(self, run, *words):
        """The diagnosis printed at the end names the culprit; the report paths follow."""
        out = run.stdout()
        self.assertRegex(out, r"\d+ windows? diagnosed; reports in", run.describe())
        self.assertIn(run.report_dir, out)
        verdict = out.lower()[:out.lower().find("#1 ")] if "#1 " in out else out.lower()
        for word in words:
            self.assertIn(word.lower(), verdict, run.describe())

    def run_fault(self, name, job_args, steps=200, run_args=(), timeout=240):
        run = self.new_run(name, FAULT_RUN_OPTIONS + list(run_args),
                           ["--fault-after-steps", str(FAULT_AFTER_STEPS)] + job_args, steps)
        run.start()
        rc = run.wait(timeout, stall=STALL_SECONDS)
        self.assertEqual(rc, 0, run.describe())
        return run


class HealthyJobTest(LiveChecks):
    """One healthy 4-rank job with a forced window serves three checks (one job instead of
    three: each job costs 20-40 s of start-up and steps on 2 cores): no material finding,
    the window's Perfetto timeline, and that a CPU job never loads CUPTI."""

    job = None  # the LiveRun (TestCase.run is unittest's)
    rc = None
    cupti_dir = None
    any_failed = False  # a check failed: the shared run is kept (--keep-failed)

    @classmethod
    def setUpClass(cls):
        require_torch()
        # --gpu-tracing auto (the default) with the suite's fake libcupti offered: torch
        # never initializes CUDA in these ranks, so the library must never be loaded.
        env = None
        if CONFIG.fake_cupti and os.path.exists(CONFIG.fake_cupti):
            cls.cupti_dir = tempfile.mkdtemp(prefix="perftracker-fake-cupti-")
            cls.addClassCleanup(shutil.rmtree, cls.cupti_dir, True)
            env = {"PERFTRACKER_CUPTI_LIBRARY": CONFIG.fake_cupti,
                   "FAKE_CUPTI_LOG": os.path.join(cls.cupti_dir, "cupti-calls.txt")}
        # A window is forced 3 s after the first rank's hello. As in the offline healthy
        # test (test_diagnose.py), 4 ranks on 2 cores make real ~8 % imbalances between
        # ranks (CPU time-slicing), so the healthy check uses a 10 % materiality bar; the
        # faults below cost 20-60 % of an iteration and are checked at the default 5 %.
        # A 10 s window: a few iterations even when a busy machine stretches them to ~1 s (a
        # 4 s window held none on rank 0 with two busy loops and other builds, load 25); the
        # job's 250 steps (~25 s idle) outlast it.
        # Width 512: the model's compute dwarfs its in-process data loading on any host. At
        # width 256 a fast host made the loading a true finding (an H200 machine's 16 cores,
        # torch 2.11: 577 us of a 3.97 ms iteration, PT-DATA-CRITICAL at 15 %); DataLoader
        # workers instead starve for CPU on 2 busy cores (12 % waiting for them here).
        cls.job = LiveRun("healthy", ["--trigger-at-seconds", "3", "--window-seconds", "10",
                                      "--max-windows", "1", "--material-share", "0.10",
                                      "--window-iterations", "20", "--slowdown-ratio",
                                      "0.15"], ["--width", "512"], steps=250, env=env)
        # Class cleanups run after every test's own: the run is kept when any check failed
        # (a CI run's false finding in this healthy job left nothing to read).
        cls.addClassCleanup(lambda: cls.job.cleanup(failed=cls.any_failed))
        cls.job.start()
        try:
            cls.rc = cls.job.wait(900, stall=STALL_SECONDS)
        except AssertionError as e:  # each test reports it
            cls.rc = str(e)

    def setUp(self):
        self.addCleanup(self.note_failure)
        self.assertEqual(self.rc, 0, self.job.describe())

    def note_failure(self):
        if self.failed():
            type(self).any_failed = True

    def test_healthy_job_has_no_material_finding(self):
        run = self.job
        paths = run.report_paths()
        self.assertEqual(len(paths), 1, run.describe())
        report = run.report()
        self.check_schema(report, run)
        # On failure the workers' iterations and CPU stretch (run-queue wait per CPU second)
        # say whether the machine's load made the imbalance (the run is kept too).
        workers = [(w["rank"], w.get("median_iteration_ms"), w.get("cpu_stretch"),
                    w.get("breakdown")) for w in report["workers"]]
        self.assertFalse(report["has_material_finding"],
                         "healthy job reported a material finding:\n" +
                         json.dumps(report["findings"][:3], indent=1) +
                         "\nworkers (rank, median iteration ms, cpu stretch, breakdown): " +
                         json.dumps(workers))
        for w in report["workers"]:
            self.assertEqual(w["stats"]["dropped_events"], 0, json.dumps(w))
            # 10 s of ~100 ms iterations; on a loaded machine they stretch to 1 s.
            self.assertGreater(w["iterations"], 3, json.dumps(w))
        self.assertIn("1 window diagnosed; reports in", run.stdout(), run.describe())
        self.assertEqual(len(run.steps()), 250, run.describe())
        # A job that ended normally leaves no shared memory behind.
        left = glob.glob(f"/dev/shm/perftracker-*-{run.proc.pid}-*")
        self.assertEqual(left, [], "agents' shared memory left after a clean exit")
        # The embedded store holds the run as a server would (perftracker server --store).
        db = os.path.join(run.report_dir, "perftracker.db")
        self.assertIn(f"is in the store {db}", run.stdout(), run.describe())
        import sqlite3
        with sqlite3.connect(db) as c:
            counts = {t: c.execute(f"select count(*) from {t}").fetchone()[0]
                      for t in ("jobs", "workers", "windows", "summaries", "diagnoses")}
            self.assertEqual(counts, {"jobs": 1, "workers": 4, "windows": 1, "summaries": 4,
                                      "diagnoses": 1}, counts)
            self.assertGreater(c.execute("select count(*) from iterations").fetchone()[0], 100)
        # Each rank's window summary names the process group its collectives (DDP's gradient
        # all-reduces) ran in, as the agent declared it: the default group of all four ranks
        # (issue 11: the localizer counts only groups across hosts on the NIC), its backend a
        # field of its own (and in the name, for servers older than it).
        for rank, (groups, calls) in stored_process_groups(run).items():
            self.assertIn(("0 (gloo)", [0, 1, 2, 3], 4, "gloo"), groups, (rank, groups))
            self.assertGreater(calls, 0, rank)

    def test_window_timeline_opens_and_reimports_with_the_windows_event_counts(self):
        # The window's timeline (window-<id>.perfetto.json, docs/perfetto-export.md): every
        # rank's recorded events merged by the embedded server, linked from the HTML report.
        run = self.job
        report = run.report()
        self.check_schema(report, run)
        path = os.path.join(run.report_dir, "window-1.perfetto.json")
        self.assertTrue(os.path.exists(path), run.describe())
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)  # Trace Event Format: an object with traceEvents
        events = doc["traceEvents"]
        self.assertIsInstance(events, list)
        names = {e["pid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(sorted(names), [0, 1, 2, 3], names)
        for rank, name in names.items():
            self.assertRegex(name, rf"^rank {rank} \(.+\)$")
        # Every rank's clock offset is in the metadata (one host: the same clock, offset 0).
        ranks = {r["rank"]: r for r in doc["otherData"]["ranks"]}
        self.assertEqual(sorted(ranks), [0, 1, 2, 3])
        for r in ranks.values():
            self.assertIn("clock_offset_ns", r)
        self.assertEqual(doc["otherData"]["events_aggregated"], 0, doc["otherData"])
        # The recordings were merged and removed.
        self.assertEqual(glob.glob(os.path.join(run.report_dir, "recordings", "*")), [])
        # Linked from the HTML report next to it.
        html_path = glob.glob(os.path.join(run.report_dir, "window-1-*.html"))[0]
        with open(html_path, encoding="utf-8") as f:
            self.assertIn('href="window-1.perfetto.json"', f.read())

        # Each rank's events, re-imported by perftracker's own importer (`diagnose`), are the
        # events the window summarized: the same count per rank.
        window_events = {w["rank"]: w["stats"]["events"] for w in report["workers"]}
        per_rank = {}
        for e in events:
            if e["ph"] != "M" and e.get("cat") != "perftracker":
                per_rank.setdefault(e["pid"], []).append(e)
        files = []
        for rank, evs in sorted(per_rank.items()):
            self.assertEqual(len(evs), window_events[rank], f"rank {rank}")
            f = os.path.join(run.dir, f"exported_rank{rank}.json")
            with open(f, "w", encoding="utf-8") as out:
                json.dump({"distributedInfo": {"rank": rank, "world_size": 4},
                           "traceEvents": evs}, out)
            files.append(f)
        r = subprocess.run([CONFIG.perftracker, "diagnose", "--format", "json", *files],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        back = json.loads(r.stdout)
        reimported = {w["rank"]: w["stats"]["events"] for w in back["workers"]}
        log(f"perfetto: window events per rank {window_events}, re-imported {reimported}")
        self.assertEqual(reimported, window_events)

    def test_cpu_job_never_loads_cupti(self):
        if self.cupti_dir is None:
            self.skipTest("no fake libcupti (built only with the CUDA toolkit's CUPTI headers)")
        self.assertEqual(len(self.job.report_paths()), 1, self.job.describe())
        self.assertFalse(os.path.exists(os.path.join(self.cupti_dir, "cupti-calls.txt")))


class ProcessGroupsTest(LiveChecks):
    """Process groups made with new_group reach the stored window summaries (issue 11)."""

    def test_new_groups_reach_the_window_summaries_with_ranks_and_backend(self):
        # --roles two_models: new_group([0, 1]) and new_group([2, 3]), each half's DDP
        # all-reducing its gradients in its own group, and the loss all-reduced over the
        # default group every step. One window, forced 3 s after the first hello: 3 s long,
        # and on until every rank has made 5 iterations in it (a busy machine stretches steps
        # to ~1 s); the job's 200 steps outlast it.
        run = self.new_run("groups", ["--trigger-at-seconds", "3", "--window-seconds", "3",
                                      "--window-min-iterations", "5", "--max-windows", "1",
                                      "--material-share", "0.10"],
                           ["--roles", "two_models"], steps=200)
        run.start()
        self.assertEqual(run.wait(900, stall=STALL_SECONDS), 0, run.describe())
        stored = stored_process_groups(run)
        self.assertEqual(sorted(stored), [0, 1, 2, 3], run.describe())
        for rank, (groups, calls) in stored.items():
            half = [0, 1] if rank < 2 else [2, 3]
            # Each rank's summary holds the groups its collectives ran in: its half's (DDP)
            # and the default one (the loss), each with its members and gloo as its backend.
            self.assertEqual(sorted((ranks, size, backend) for _, ranks, size, backend in groups),
                             sorted([([0, 1, 2, 3], 4, "gloo"), (half, 2, "gloo")]),
                             (rank, groups))
            self.assertGreaterEqual(calls, 2, (rank, groups))
        # Both new groups, as ranks 0 and 2 see them: two groups, not one of two names.
        names = {rank: {name for name, ranks, _, _ in stored[rank][0] if len(ranks) == 2}
                 for rank in (0, 2)}
        self.assertNotEqual(names[0], names[2], names)


class LiveFaultTest(LiveChecks):
    """One injected fault per test; the detector opens the window."""

    def test_slow_compute_names_rank_and_block2_forward(self):
        # Ranks started as torchrun starts them (RANK / WORLD_SIZE ... in the environment).
        run = self.run_fault("slow_compute", ["--fault", "slow_compute", "--fault-rank", "2",
                                              "--slow-repeats", "6", "--launcher", "env"])
        report = run.final_report()
        self.check_schema(report, run)
        top = self.top_finding(report, run)
        self.assertEqual(top["workers"], [2], json.dumps(top, indent=1))
        self.assertEqual(top["category"], "compute", json.dumps(top, indent=1))
        self.assertIn("Block2.forward", top["function"], json.dumps(top, indent=1))
        self.assertIn("live_job.py", top["function"])
        # DDP's gradient all-reduce is visible (the agent's comm hook): the other ranks wait
        # for rank 2 in it, and rank 2 waits least.
        self.assertTrue(set(top["victims"]) <= {0, 1, 3}, json.dumps(top, indent=1))
        comm = {w["rank"]: w["breakdown"]["communication"] for w in report["workers"]}
        self.assertTrue(all(c > 0 for c in comm.values()), comm)
        if "of its host's shared CPU time" in top["title"]:
            # A saturated host (beside two busy loops: every rank waits for a CPU longer than
            # it runs): rank 2's extra work takes CPU time from the others and no one waits
            # for it in the all-reduce (localize/saturated_host_rule.h), so rank 2 need not
            # wait least (seen: 0.43 of the iteration against 0.30-0.40).
            log(f"slow_compute: saturated host, communication share per rank {comm}")
        else:
            self.assertEqual(min(comm, key=comm.get), 2, comm)
        log(f"slow_compute: victims {top['victims']}, communication share per rank "
            + ", ".join(f"{r} {c:.2f}" for r, c in sorted(comm.items())))
        if not top["victims"]:
            # Known gap (localize/): a victim must wait at least half the culprit's excess
            # longer than the culprit; with 4 ranks on 2 cores the culprit's extra work also
            # slows its peers, and their extra wait was 14-20 ms against bars of 18-22 ms
            # in 2 of 5 runs here (docs/live-mode.md).
            log("KNOWN GAP slow_compute: no victims listed (their extra all-reduce wait is "
                "below half the culprit's excess)")
        self.check_final_text(run, "rank 2", "Block2.forward")
        # Block2 repeats its work: rank 2's process uses more CPU, the time is computing.
        self.assertEqual(top["resource"], "CPU", json.dumps(top, indent=1))

    def test_a_function_that_sleeps_is_named_blocked_not_computing(self):
        # Rank 1 calls save_checkpoint(), a 50 ms sleep (a blocking write to slow storage),
        # in every step from step 40 on; the others wait for it in the all-reduce. Its
        # process uses no more CPU and its thread waits no longer for a CPU: the finding
        # names the function, and says the thread is blocked there, not computing
        # (localize/off_cpu_rule.h).
        run = self.run_fault("sleeping_function",
                             ["--fault", "pause", "--fault-rank", "1", "--pause-every", "1",
                              "--pause-seconds", "0.05"], steps=160)
        report = run.final_report()
        self.check_schema(report, run)
        top = self.top_finding(report, run)
        self.assertEqual(top["workers"], [1], json.dumps(top, indent=1))
        self.assertIn("save_checkpoint", top["function"], json.dumps(top, indent=1))
        self.assertTrue(top["material"], json.dumps(top, indent=1))
        # The rule speaks only when the others wait for it, at least half its excess (a rank
        # doing in one function what its peers do in others makes no one wait). On a
        # saturated host they wait less: while rank 1 sleeps, the others get its CPU share
        # (a clean-clone CI run beside a compile, 202 ms steps: 26.4 ms lost of 53.3). Then
        # the finding stays "CPU", as the rule says, and the report shows why.
        excess = float(re.search(r"\(\+([\d.]+) ms", top["title"]).group(1))
        if top["lost_ms_per_iteration"] < 0.5 * excess:
            log(f"sleeping_function: saturated host, the others waited "
                f"{top['lost_ms_per_iteration']:.1f} of {excess:.1f} ms/iter: no off-CPU verdict")
            return
        self.assertEqual(top["resource"], "off-CPU (blocked)", json.dumps(top, indent=1))
        self.assertIn("not computing", top["title"])

    def test_slow_data_names_rank_and_data_loading(self):
        run = self.run_fault("slow_data", ["--fault", "slow_data", "--fault-rank", "1",
                                           "--data-delay-ms", "1.0"])
        report = run.final_report()
        self.check_schema(report, run)
        top = self.top_finding(report, run)
        self.assertEqual(top["workers"], [1], json.dumps(top, indent=1))
        # The sleep is in the Dataset's __getitem__, called by the DataLoader iterator's
        # __next__: data loading (the collector files everything under a DataLoader
        # iterator's __next__ as data loading), whichever of the two ranks first.
        self.assertEqual(top["category"], "data_loading", json.dumps(top, indent=1))
        self.assertEqual(top["code"], "PT-STRAGGLER-DATA", json.dumps(top, indent=1))
        data = [f for f in report["findings"]
                if f["material"] and f["category"] == "data_loading"]
        self.assertTrue(all(f["workers"] == [1] for f in data),
                        json.dumps(report["findings"][:4], indent=1))
        # Named in the DataLoader iterator's __next__ or below it (torch's fetch list
        # comprehension that calls __getitem__ once per sample, or __getitem__ itself).
        self.assertTrue(any("__getitem__" in f["function"] or "DataLoader" in f["function"] or
                            "DataLoaderIter.__next__" in f["function_key"] for f in data),
                        json.dumps([(f["function"], f["function_key"][-200:]) for f in data]))
        self.assertFalse([f for f in report["findings"] if f["material"] and
                          "__getitem__" in f["function_key"] and
                          f["category"] != "data_loading"], "__getitem__ ranked as compute")
        log(f"slow_data: {run.step_times()}")
        self.check_final_text(run, "rank 1")

    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("ip") and shutil.which("tc"),
                         "needs root and iproute2 (a network namespace per rank, tc tbf)")
    def test_net_rate_limit_names_rank_behind_the_slow_link(self):
        # Every rank in a network namespace of its own (veth on a bridge); from step 40 rank
        # 1's interface sends at most 100 Mbit/s (tc tbf). Gloo's all-reduce then waits for
        # it on every rank, so collective times alone look alike. 25 Mbit/s: the all-reduce
        # then costs rank 1's peers ~0.35 s a step, more than a busy machine's noise (at
        # 100 Mbit/s, ~90 ms a step, a rank that the scheduler slowed by 130 ms a step came
        # first with two busy loops and other builds on 2 cores, load 27); 120 steps keep
        # the test short.
        run = self.run_fault("net_rate_limit", ["--launcher", "netns", "--fault",
                                                "net_rate_limit", "--fault-rank", "1",
                                                "--link-mbit", "25"], steps=120)
        report = run.final_report()
        self.check_schema(report, run)
        top = self.top_finding(report, run)
        self.assertEqual(top["code"], "PT-NET-SLOW-LINK", json.dumps(top, indent=1))
        self.assertEqual(top["workers"], [1], json.dumps(top, indent=1))
        self.assertEqual(top["category"], "communication")
        rates = next(e["value"] for e in top["evidence"] if "delivery rate" in e["label"])
        self.assertRegex(rates, r"rank 1 [\d.]+ Mbit/s", rates)
        log(f"net_rate_limit: {rates}; {run.step_times()}")
        self.check_final_text(run, "rank 1", "slow network link")
        # The job's namespaces, veths and bridge are gone with it.
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        self.assertNotIn(f"ptlink-{run.job_pid}-", left)
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        self.assertNotIn(f"ptl{run.job_pid}", links)

    def test_gc_pauses_name_rank_and_gc(self):
        run = self.run_fault("gc", ["--fault", "gc", "--fault-rank", "1",
                                    "--gc-objects", "100000"])
        report = run.final_report()
        self.check_schema(report, run)
        top = self.top_finding(report, run)
        self.assertEqual(top["workers"], [1], json.dumps(top, indent=1))
        self.assertEqual(top["category"], "gc", json.dumps(top, indent=1))
        self.assertEqual(top["code"], "PT-STRAGGLER-GC", json.dumps(top, indent=1))
        evidence = json.dumps(top["evidence"]).lower()
        self.assertIn("gc collect", evidence, json.dumps(top, indent=1))
        self.check_final_text(run, "rank 1")

    def test_cpu_contention_names_rank_and_run_queue(self):
        # Layout (live_job.py --pin isolate): the fault rank R alone on the last allowed
        # CPU, the other three ranks on the first one. Healthy, R is the fastest rank (a
        # whole core against a third of one). Then the test starts BUSY processes pinned
        # to R's CPU, in the job's session (one scheduler autogroup): R gets about
        # 1/(BUSY+1) of its core while its peers keep a third of theirs, so R alone is
        # starved and holds everyone up. The busy processes are not ranks; nothing in the
        # job changes. The test measures each rank's run-queue delay itself
        # (/proc/PID/task/*/schedstat) to show that the scenario does what it says.
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            self.skipTest(f"needs 2 CPUs to isolate a rank, this process may use {cpus}")
        busy_count, rank = 5, 2
        run = self.new_run("cpu_contention", FAULT_RUN_OPTIONS,
                           ["--fault", "cpu_contention", "--fault-rank", str(rank), "--pin",
                            "isolate", "--launcher", "env",
                            "--fault-after-steps", str(FAULT_AFTER_STEPS)], steps=200)
        run.start()
        run.poll_until(f"step {FAULT_AFTER_STEPS}",
                       lambda: run.last_step() >= FAULT_AFTER_STEPS, timeout=STARTUP_SECONDS)
        ranks = rank_pids(run.proc.pid)
        # The window to check is the first one that opens once the CPU is contended: the
        # one the run-queue measurement below covers (windows before are start-up noise,
        # windows after may catch the job finishing).
        opened = run.stderr().count(" opens in ")
        earlier_reports = set(run.report_paths())
        busy_since = time.time()
        busy = start_busy_loops(cpus[-1], busy_count)

        def sample():
            return {r: schedstat(p, main_thread=True) for r, p in ranks.items()}

        try:
            before, t0 = sample(), time.monotonic()
            # Measured over what the localizer sees. A window open when the busy processes
            # start (a start-up one) is the one checked, from their start on. Otherwise the
            # next one, from its "opens" line on: measured from the busy processes' start, the
            # seconds the detector needed to trigger counted too, and the scheduler's balance
            # then can differ from the window's (seen in CI: 8.4 against 5.3 ms per turn
            # measured, nothing in the window's report). Windows do not overlap: when one
            # opens, the reports before it are written.
            run.poll_until("a window opens or reports", lambda: (
                run.stderr().count(" opens in ") > opened or
                set(run.report_paths()) - earlier_reports), timeout=120)
            if not set(run.report_paths()) - earlier_reports:
                earlier_reports = set(run.report_paths())
                before, t0 = sample(), time.monotonic()
            run.poll_until("report", lambda: set(run.report_paths()) - earlier_reports,
                           timeout=120)
            dt = time.monotonic() - t0
            after = sample()
        finally:
            for p in busy:  # the job runs on at its normal pace
                p.kill()
                p.wait()
        rc = run.wait(240, stall=STALL_SECONDS)
        self.assertEqual(rc, 0, run.describe())
        # The training threads' (tid == pid) run-queue wait per wall second, turns on a CPU
        # per second and wait per turn: what the localizer's rule compares.
        delay = {r: (after[r][1] - before[r][1]) / 1e9 / dt for r in ranks}
        cpu = {r: (after[r][0] - before[r][0]) / 1e9 / dt for r in ranks}
        turns = {r: (after[r][2] - before[r][2]) / dt for r in ranks}
        per_turn = {r: delay[r] / turns[r] if turns[r] > 0 else 0.0 for r in ranks}
        log("cpu_contention: training thread's run-queue delay / wall time per rank " +
            ", ".join(f"rank {r} {delay[r]:.2f} (cpu {cpu[r]:.2f}, "
                      f"{per_turn[r] * 1e3:.1f} ms per turn)" for r in sorted(ranks)))
        self.assertEqual(sorted(ranks), [0, 1, 2, 3], f"rank pids {ranks}")
        # Not asserted: on a machine that other work keeps busy every rank waits in the
        # run queue most of the time (measured here: 0.87-0.96 on all four ranks), and the
        # starved rank does not stand out.
        report = run.report("slowdown", exclude=earlier_reports, first=True)
        self.check_schema(report, run)
        # No false culprit: whatever is material names the starved rank.
        for f in report["findings"]:
            if f["material"] and f["workers"]:
                self.assertEqual(f["workers"], [rank], json.dumps(f, indent=1))
        found = [f for f in report["findings"] if f["code"] == "PT-CPU-CONTENTION"]
        for f in found:  # when it is reported, it must be right
            # A minor one may name another rank: on a machine that other work loads, a rank
            # of the three sharing the other CPU can wait longer per turn than its two
            # neighbours too, and a small slowness of it then is contention, truly (a
            # clean-clone CI run at f66ab7f, beside more load than two busy loops: rank 0 5.24
            # against 3.93 ms per turn, minor). Whether rank 2 is named is asserted below.
            if f["material"]:
                self.assertEqual(f["workers"], [rank], json.dumps(f, indent=1))
            self.assertEqual(f["category"], "cpu_contention")
            self.assertIn("run-queue", json.dumps(f["evidence"]).lower(),
                          json.dumps(f, indent=1))
        # Did the scenario starve rank 2 more than its peers? Other work on the machine can
        # undo it: the busy processes pinned to rank 2's CPU push unpinned processes of other
        # sessions onto the peers' CPU (the scheduler balances load), and the peers, three
        # to a CPU, then wait as long for each turn on a CPU as rank 2 does. The test asserts
        # contention when its own measurement (the whole time until the report; the
        # collector samples a 4 s window) passes the localizer's bar for run-queue evidence
        # with no straggler function to corroborate it (DDP keeps every rank in step, so the
        # starved one need not look slower): a wait per turn >= 1.5 x the peers' median and
        # an extra wait (beyond the peers' wait per turn times its own turns) >= 0.1 of the
        # wall time, each training thread put on a CPU >= 100 times in the window (over
        # fewer turns a wait per turn is noise): asserted with a margin, >= 150 turns at the
        # rates measured here over a 4 s window.
        peers = statistics.median(per_turn[r] for r in ranks if r != rank)
        extra = delay[rank] - peers * turns[rank]
        # A window that was open when the busy processes started holds unstarved time too,
        # which the test's measurement (from their start on) does not: in a CI run the
        # window's own data showed rank 2's training thread waiting for a CPU as long as its
        # peers' (91 against 85-93 ms/iter) while the test measured 8.3 ms per turn against
        # 3.2. Asserted only when the busy processes ran for most of the window.
        covered = window_share_after(report, busy_since)
        # The test's measurement spans other seconds than the window's samples: it asserts
        # with a margin over the rule's 1.5x (a clean-clone CI run at 0b51f54, otherwise idle:
        # 7.0 against 4.4 ms per turn measured, 1.59x, and no contention in the window's
        # report).
        starved = (per_turn[rank] >= 2.0 * peers and extra >= 0.1 and
                   min(turns.values()) * 4.0 >= 150 and covered >= 0.75)
        found = [f for f in found if f["workers"] == [rank]]
        if starved:
            self.assertTrue(found, "rank 2 was starved (run-queue wait per turn "
                            f"{per_turn[rank] * 1e3:.1f} ms vs peers' {peers * 1e3:.1f} ms) "
                            "and not named:\n" + json.dumps(report["findings"][:3], indent=1))
        elif not found:
            log("cpu_contention: NOT ASSERTED: the scenario did not starve rank 2 more than "
                f"its peers measurably (run-queue wait per turn {per_turn[rank] * 1e3:.1f} ms "
                f"vs {peers * 1e3:.1f} ms, at least {min(turns.values()):.1f} turns per s, "
                f"{covered:.0%} of the window after the busy processes started); "
                "top findings " +
                json.dumps([(f["code"], f["workers"], f["function"], f["material"])
                            for f in report["findings"][:3]]))

    def test_hang_names_rank_and_stack(self):
        # Slowdown triggers off (--slowdown-ratio 1: only a 2x slowdown would fire): on a
        # busy machine a noise trigger could otherwise take the window the hang needs.
        # Iterations of ~300 ms (--step-sleep-ms: every rank sleeps at the end of a step),
        # so that 5 x the mean iteration leaves room for the stacks on a loaded 2-core
        # machine (see docs/live-mode.md, "Hangs").
        # The detector's default hang factor (4), a 3 s minimum silence (default 30 s).
        options = ([o if o != "0.15" else "1" for o in FAULT_RUN_OPTIONS[:-2]] +
                   ["--min-hang-seconds", str(HANG_MIN_SECONDS)])
        run = self.new_run("hang", options,
                           ["--fault", "hang", "--fault-rank", "3", "--step-sleep-ms",
                            str(HANG_STEP_SLEEP_MS), "--fault-after-steps",
                            str(HANG_AFTER_STEPS)], steps=400)
        run.start()
        hang_start = run.poll_until("hang", run.fault_start_time, timeout=STARTUP_SECONDS)
        opened = run.poll_until("hang window", lambda: "(hang) opens" in run.stderr() and
                                time.time(), timeout=60, interval=0.01)
        report_path = run.poll_until("hang report", lambda: run.report_paths("hang"), timeout=60,
                                     interval=0.01)[0]
        written = os.stat(report_path).st_mtime
        before = [s for s in run.steps() if s[0] < HANG_AFTER_STEPS]
        mean_iteration = statistics.mean(
            b - a for (_, a), (_, b) in zip(before[10:], before[11:]))
        detect_s, report_s = opened - hang_start, written - hang_start
        log(f"hang: mean iteration {mean_iteration * 1000:.0f} ms; trigger {detect_s:.2f} s "
            f"and report file {report_s:.2f} s after the hang started "
            f"({detect_s / mean_iteration:.1f}x / {report_s / mean_iteration:.1f}x the mean "
            "iteration)")
        TIMINGS.append(("hang: detection", detect_s))
        TIMINGS.append(("hang: report", report_s))
        # The detector calls a hang after max(4 x the mean iteration, the minimum silence);
        # the report follows once a second stack sample confirmed it: within
        # max(5 x the mean iteration, the minimum silence) and a few seconds.
        bound = max(5 * mean_iteration, HANG_MIN_SECONDS) + HANG_REPORT_SLACK_S
        self.assertLess(report_s, bound, run.describe())
        # The silence starts at the hung step's data-loader next(), a few ms before the job's
        # own log line of the hang.
        self.assertGreater(detect_s, HANG_MIN_SECONDS - 0.25,
                           "a hang called before the minimum silence")
        self.assertIn("hang confirmed", run.stderr(), run.describe())

        # The job never ends by itself: stop it as a user would (Ctrl-C / SIGTERM to
        # perftracker run, which forwards it to the job) and get the final diagnosis.
        os.kill(run.proc.pid, signal.SIGTERM)
        rc = run.wait(60)
        self.assertNotEqual(rc, 0, run.describe())
        # The ranks died of the SIGTERM (no atexit): perftracker run removes their shared
        # memory, also of the ranks still dying when the job's main process was gone.
        left = glob.glob(f"/dev/shm/perftracker-*-{run.proc.pid}-*")
        self.assertEqual(left, [], "agents' shared memory left after SIGTERM of a hung job")
        report = run.report("hang")
        self.check_schema(report, run, recorded=False)  # a hung job calls nothing
        top = self.top_finding(report, run)
        self.assertEqual(top["code"], "PT-HANG", json.dumps(top, indent=1))
        self.assertEqual(top["category"], "hang")
        self.assertEqual(top["workers"], [3], json.dumps(top, indent=1))
        self.assertEqual(sorted(top["victims"]), [0, 1, 2], json.dumps(top, indent=1))
        # The stack names where rank 3 is stuck: Block2.forward's sleep in live_job.py.
        with open(LIVE_JOB) as f:
            sleep_line = 1 + [i for i, l in enumerate(f) if "time.sleep(3600)" in l][0]
        self.assertEqual(top["function"], "forward", json.dumps(top, indent=1))
        self.assertIn(f"live_job.py:{sleep_line}", top["function_key"],
                      json.dumps(top, indent=1))
        self.assertIn("time.sleep(3600)", json.dumps(top["evidence"]))
        stacks = glob.glob(os.path.join(run.report_dir, "window-*-stacks.txt"))
        self.assertEqual(len(stacks), 1, run.describe())
        with open(stacks[0]) as f:
            text = f.read()
        for rank in range(4):
            self.assertIn(f"rank {rank}", text)
        self.assertIn(f'live_job.py", line {sleep_line}, in forward', text)
        self.check_final_text(run, "rank 3", "hang")

    def test_an_endless_busy_loop_is_a_hang_once_busy_no_longer_stands_in_for_progress(self):
        # Rank 1 of 2 (DDP/gloo) runs spin_forever() after step 30: Python work in a loop
        # that never ends; rank 0 waits in the next all-reduce. The detector fires once per
        # silence (at the 3 s minimum), and the window finds rank 1 busy: retracted, as a
        # finite busy stretch is (test_a_busy_main_thread_is_not_a_hang). The coordinator
        # looks again when the silence reaches 10 x the trigger's (~30 s here) and reports
        # PT-HANG "busy: no iteration progress" naming rank 1 and the frames it loops in.
        # Slowdown triggers off, as in the hang test.
        options = ([o if o != "0.15" else "1" for o in FAULT_RUN_OPTIONS[:-2]] +
                   ["--min-hang-seconds", str(HANG_MIN_SECONDS)])
        run = self.new_run("spin", options,
                           ["--world-size", "2", "--fault", "spin", "--fault-rank", "1",
                            "--fault-after-steps", str(HANG_AFTER_STEPS),
                            "--step-sleep-ms", "100"], steps=400)
        run.start()
        spin_start = run.poll_until(
            "spin", lambda: (re.search(r"rank 1 spins forever in spin_forever\(\) at step \d+ "
                                       r"\(([\d.]+)\)", run.stderr()) or [None, None])[1],
            timeout=STARTUP_SECONDS)
        hang_report = run.poll_until(
            "busy hang report", lambda: [p for p in run.report_paths("hang")
                                         if self._leads_with_hang(p)], timeout=150,
            interval=0.2)[0]
        written = os.stat(hang_report).st_mtime
        err = run.stderr()
        log(f"spin: PT-HANG report {written - float(spin_start):.1f} s after the loop began")
        # The first look found rank 1 running (busy, or its stacks moved): not a hang then.
        self.assertIn("retracted", err, run.describe())
        self.assertIn("looking again in", err, run.describe())
        self.assertIn("busy recheck: no iteration progress", err, run.describe())
        # Not before busy may stand in for progress: 10 x the trigger's silence (>= 3 s).
        self.assertGreater(written - float(spin_start), 10 * HANG_MIN_SECONDS, run.describe())
        os.kill(run.proc.pid, signal.SIGTERM)
        self.assertNotEqual(run.wait(60), 0, run.describe())
        with open(hang_report, encoding="utf-8") as f:
            report = json.load(f)
        top = report["findings"][0]
        self.assertEqual(top["code"], "PT-HANG", json.dumps(top, indent=1))
        self.assertEqual(top["workers"], [1], json.dumps(top, indent=1))
        self.assertEqual(top["victims"], [0], json.dumps(top, indent=1))
        self.assertEqual(top["resource"], "the rank's own code (busy: no iteration progress)")
        self.assertIn("rank 1 hangs busy: no iteration progress", top["title"])
        self.assertIn("spin_forever", top["title"])
        loops = [e["value"] for e in top["evidence"] if e["label"] == "where rank 1 loops"]
        self.assertEqual(len(loops), 1, json.dumps(top["evidence"], indent=1))
        self.assertIn("live_job.py", loops[0])
        self.assertIn("spin_forever", loops[0])
        self.check_final_text(run, "rank 1", "hang")

    @staticmethod
    def _leads_with_hang(path):
        try:
            with open(path, encoding="utf-8") as f:
                findings = json.load(f)["findings"]
        except (OSError, ValueError):
            return False  # being written
        return bool(findings) and findings[0]["code"] == "PT-HANG"


class NoFalseHangTest(LiveChecks):
    """Jobs that pause or end are never called hung (docs/live-mode.md, "Hangs")."""

    def test_normal_end_with_loader_workers_is_not_a_hang(self):
        # DataLoader worker processes (joined at the end of the epoch), then barrier,
        # destroy_process_group() and 6 s of work before exiting: a silence three times the
        # (shortened) minimum. The agent says the training ended; no hang is diagnosed.
        run = self.new_run("normal_end", FAULT_RUN_OPTIONS[:-2] + [
            "--min-hang-seconds", "2"], ["--loader-workers", "2", "--teardown-seconds", "6"],
            steps=120)
        run.start()
        self.assertEqual(run.wait(300, stall=STALL_SECONDS), 0, run.describe())
        self.assertEqual(len(run.steps()), 120, run.describe())
        # On a loaded machine the end itself (8 DataLoader workers joining on 2 busy cores)
        # can outlast the minimum silence and the confirmation: that report is then retracted
        # once every rank has finished and the job exited 0 (checked here: not a finding).
        self.check_no_hang_diagnosed(run)

    def test_intermittent_pause_shorter_than_the_minimum_silence_is_not_a_hang(self):
        # Rank 1 calls save_checkpoint() (3 s) every 40 steps; the others wait for it in the
        # all-reduce. With the default minimum silence (30 s) no hang trigger fires; the
        # slowdown it causes may be diagnosed, a hang must not be.
        run = self.new_run("pause", FAULT_RUN_OPTIONS[:-2],
                           ["--fault", "pause", "--fault-rank", "1", "--pause-seconds", "3",
                            "--pause-every", "40", "--fault-after-steps", str(FAULT_AFTER_STEPS)],
                           steps=200)
        run.start()
        self.assertEqual(run.wait(300, stall=STALL_SECONDS), 0, run.describe())
        self.assertGreaterEqual(run.stderr().count("live_job: rank 1 pauses 3 s"), 3,
                                run.describe())
        self.check_no_hang_diagnosed(run)
        self.assertNotIn("(hang) opens", run.stderr(), run.describe())

    def test_a_pause_longer_than_the_minimum_silence_is_retracted(self):
        # The same pause (4 s) against a 1.5 s minimum silence: the detector fires during
        # it; the second stack sample, or the progress after it, retracts the hang, and the
        # final diagnosis is not a hang.
        run = self.new_run("long_pause", FAULT_RUN_OPTIONS[:-2] + ["--min-hang-seconds", "1.5"],
                           ["--fault", "pause", "--fault-rank", "1", "--pause-seconds", "4",
                            "--pause-every", "60", "--fault-after-steps", str(FAULT_AFTER_STEPS)],
                           steps=160)
        run.start()
        self.assertEqual(run.wait(300, stall=STALL_SECONDS), 0, run.describe())
        # The hang trigger opens a window of its own, or comes inside a slowdown window that
        # was open already (on a loaded machine noise opens one at any time: seen beside two
        # busy loops, "window 1 (slowdown) opens" 0.3 s before the pause, then "window 1:
        # hang confirmed").
        self.assertTrue("(hang) opens" in run.stderr() or "hang confirmed" in run.stderr(),
                        "the pause never triggered the detector:\n" + run.describe())
        self.assertIn("not a hang", run.stderr() + run.stdout(), run.describe())
        self.check_no_hang_diagnosed(run)


    def test_a_busy_main_thread_is_not_a_hang(self):
        # Regression (the first H200 run): after its torch.profiler session the job called
        # prof.events(), and torch's Python post-processing ran for 30+ s creating
        # FunctionEvent / Interval objects; perftracker reported PT-HANG, "every rank waits
        # in a collective" in "backward (DDP gradient all-reduce)". Here rank 1 of 2 (DDP)
        # runs post_process(), Python work outside the training loop, for 12 s after step
        # 30 (room for the trigger at 3 s, the confirmation and the report on a loaded
        # machine); rank 0 waits for it in the next all-reduce. The hang trigger fires (3 s
        # minimum silence) and the two stack samples show the same frames, but the window's
        # summary shows rank 1's main thread making tens of thousands of calls: the job is
        # busy, not hung, and no hang report is written. Slowdown triggers off, as in the
        # hang test.
        options = ([o if o != "0.15" else "1" for o in FAULT_RUN_OPTIONS[:-2]] +
                   ["--min-hang-seconds", str(HANG_MIN_SECONDS)])
        run = self.new_run("busy", options,
                           ["--world-size", "2", "--fault", "busy", "--fault-rank", "1",
                            "--pause-seconds", "12", "--fault-after-steps",
                            str(HANG_AFTER_STEPS), "--step-sleep-ms", "100"], steps=60)
        run.start()
        self.assertEqual(run.wait(300, stall=STALL_SECONDS), 0, run.describe())
        err = run.stderr()
        self.assertIn("live_job: rank 1 post_process() made", err, run.describe())
        # The 12 s of work outlast the 3 s minimum silence: the detector fires, and the
        # stacks of both samples show post_process > Span.__init__.
        self.assertIn("(hang) opens", err, run.describe())
        # What the user is told: rank 1 was busy in post_process, not waiting in a collective;
        # no PT-HANG report (written and retracted later, as before the fix), none at the end.
        self.assertNotIn("hang report retracted", err, run.describe())
        self.check_no_hang_diagnosed(run)
        # (A second trigger in the same silence, should the machine be slow enough, gets
        # the same verdict.)
        busy = [line for line in err.splitlines() if "made no iteration progress" in line]
        self.assertGreaterEqual(len(busy), 1, run.describe())
        for line in busy:
            self.assertIn("rank 1 made no iteration progress", line)
            self.assertIn("busy running Python code, not waiting in a collective", line)
            self.assertIn("post_process > live_job.py", line)
            self.assertIn("__init__", line)
            self.assertIn("rank 0 waits in", line)
            self.assertIn("not a hang", line)
        reports = run.report_paths("hang")
        self.assertGreaterEqual(len(reports), 1, run.describe())
        with open(reports[0], encoding="utf-8") as f:
            notes = json.load(f)["notes"]
        self.assertTrue(any("rank 1 made no iteration progress" in n for n in notes), notes)


class PerftrackerFaultTest(LiveChecks):
    """perftracker's own failures must not hurt the job."""

    def test_killing_perftracker_run_leaves_the_job_running(self):
        # A window is open (hooks on in every rank) when `perftracker run` -- collector and
        # server -- is SIGKILLed; the ranks must go on at the same pace and exit 0.
        # Enough steps that the job runs on well past the window on an idle machine too
        # (42 ms steps there: 260 steps had ended before an 8 s window did).
        steps, window_s = 500, 4.0
        run = self.new_run("kill_collector", ["--trigger-at-seconds", "3", "--window-seconds",
                                              str(window_s), "--max-windows", "1"], [],
                           steps=steps)
        run.start()
        opened = run.poll_until("window", lambda: "opens in" in run.stderr() and time.time(),
                                timeout=STARTUP_SECONDS, interval=0.02)
        # Killed 1.5 s into the window, once the job has a pace to compare with (on a
        # loaded machine the first steps can come after the window has opened).
        time.sleep(1.5)
        run.poll_until("20 steps", lambda: run.last_step() >= 20 or
                       time.time() > opened + window_s - 1, timeout=60)
        run.track()
        job_pid = run.job_pid
        self.assertIsNotNone(job_pid, run.describe())
        killed_at = time.time()
        killed_step = run.last_step()
        os.kill(run.proc.pid, signal.SIGKILL)
        run.wait(30)
        # The job's main process is now our child (subreaper): its exit code is the job's.
        # Waited for while it makes steps (500 steps of 0.8 s at load 30 outlast any fixed
        # deadline that is short on an idle machine).
        code, seen = None, -1
        while code is None and run.last_step() != seen:
            seen = run.last_step()
            code = wait_pid(job_pid, STALL_SECONDS)
        self.assertEqual(code, 0, f"job exit {code}\n{run.describe()}")
        done = run.steps()
        self.assertEqual(len(done), steps, run.describe())
        window_end = opened + 0.3 + window_s  # the hooks turn themselves off by then
        # From step 3 (the first steps are the start-up's): the window opens once the job
        # iterates (issue 11 §5), so at 0.8 s/step it is killed ~13 steps in.
        before = [s for s in done if s[0] >= 3 and s[1] < killed_at]
        during = [s for s in done if killed_at < s[1] < window_end]
        after = [s for s in done if s[1] > window_end + 0.5]
        b, a = median_interval(before), median_interval(after)
        gaps = [y - x for (_, x), (_, y) in zip(during, during[1:])] or [0.0]
        log(f"kill_collector: killed at step {killed_step}; median step {b * 1000:.1f} ms "
            f"before the window, {a * 1000:.1f} ms after it (ratio {a / b:.3f}); longest "
            f"step between the kill and the window's end {max(gaps) * 1000:.0f} ms")
        self.assertGreater(len(before), 8, run.describe())
        self.assertLess(killed_at, window_end, "killed after the window")
        self.assertGreater(len(after), 20, run.describe())
        # Same pace, and no stall while the dead collector's window was still open. The
        # tolerance is wide: on 2 cores shared with other work the step time of one run
        # moves by tens of percent (measured ratios here: 0.75-1.03).
        self.assertLess(a / b, 1.5, f"steps slowed after perftracker was killed\n"
                                    f"{run.describe()}")
        self.assertLess(max(gaps), max(1.0, 10 * b), run.describe())

    def test_bad_options_give_one_error_and_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            marker = os.path.join(tmp, "job-ran")
            job = [sys.executable, "-c", f"open({marker!r}, 'w').close()"]
            blocker = os.path.join(tmp, "file")
            open(blocker, "w").close()
            garbage = os.path.join(tmp, "garbage.db")
            with open(garbage, "w") as f:
                f.write("not a database, " * 100)
            cases = [
                (["--window-seconds", "abc"], "--window-seconds"),
                (["--ring-events", "1000"], "--ring-events"),
                (["--slowdown-ratio", "-1"], "--slowdown-ratio"),
                (["--report-dir", os.path.join(blocker, "reports")], blocker),
                (["--store", os.path.join(blocker, "x.db")], "--store"),
                (["--store", garbage], "--store"),  # not a SQLite file
                (["--gpu-tracing", "sometimes"], "--gpu-tracing"),
            ]
            for args, named in cases:
                with self.subTest(args=args):
                    r = subprocess.run([CONFIG.perftracker, "run", *args, "--", *job],
                                       capture_output=True, text=True, timeout=60, cwd=tmp)
                    lines = [l for l in r.stderr.splitlines() if l.strip()]
                    self.assertEqual(r.returncode, 2, r.stderr)
                    self.assertEqual(len(lines), 1, f"expected one error line:\n{r.stderr}")
                    self.assertIn(named, lines[0])
                    self.assertTrue(lines[0].startswith("perftracker"), lines[0])
                    self.assertFalse(os.path.exists(marker), "the job ran despite the error")
            r = subprocess.run([CONFIG.perftracker, "run"], capture_output=True, text=True,
                               timeout=60, cwd=tmp)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--", r.stderr, "the message should show how to pass the command")

    def test_exit_code_passes_through(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([CONFIG.perftracker, "run", "--report-dir",
                                os.path.join(tmp, "r"), "--", sys.executable, "-c",
                                "import sys; sys.exit(7)"],
                               capture_output=True, text=True, timeout=60, cwd=tmp)
            self.assertEqual(r.returncode, 7, r.stderr)


class GpuSourcesTest(LiveChecks):
    """The GPU half of the agent on this GPU-less machine: the real agent, collector and
    report with the test suite's fake libcupti (real CUPTI C ABI and CUDA 13 record structs,
    src/perftracker/sources/cupti/fake_cupti_for_test.cc) in place of CUPTI, and the NCCL
    plugin wiring of `perftracker run`. What these do not show (a real GPU, driver, NCCL)
    is listed in docs/gpu-sources.md."""

    def fake_cupti_env(self, tmp, **extra):
        if not CONFIG.fake_cupti or not os.path.exists(CONFIG.fake_cupti):
            self.skipTest("no fake libcupti (built only with the CUDA toolkit's CUPTI headers)")
        env = {"PERFTRACKER_CUPTI_LIBRARY": CONFIG.fake_cupti,
               "FAKE_CUPTI_LOG": os.path.join(tmp, "cupti-calls.txt")}
        env.update(extra)
        return env

    def gpu_run(self, name, env):
        run = self.new_run(name, ["--gpu-tracing", "always", "--trigger-at-seconds", "3",
                                  "--window-seconds", "3", "--max-windows", "1",
                                  "--window-iterations", "20"], [], steps=100, env=env)
        run.start()
        self.assertEqual(run.wait(180, stall=STALL_SECONDS), 0, run.describe())
        return run

    def test_gpu_kernels_traced_in_the_window_reach_the_report(self):
        tmp = tempfile.mkdtemp(prefix="perftracker-fake-cupti-")
        self.addCleanup(shutil.rmtree, tmp, True)
        run = self.gpu_run("gpu_tracing", self.fake_cupti_env(tmp))
        report = run.report()
        self.check_schema(report, run)
        for w in report["workers"]:  # the -cupti file of every rank joined its summary
            self.assertTrue(w["has_device"], json.dumps(w))
            self.assertGreater(w["breakdown"]["compute"], 0, json.dumps(w))
        # The localizer sees the device: the fake's kernels keep the GPU busy half of the
        # window (each 0.5 x their spacing), so every rank's device compute is ~50 % of its
        # iteration. (Whether that makes the job host-bound is not asserted here: the fake
        # spreads its kernels evenly, unrelated to what the host does, and since host-bound
        # needs host evidence (issue 11 §3: only the idle time that the host's own work, not
        # its all-reduce waits, covers) this job sits at the rule's 30 % bar. Host-bound is
        # tested on real GPU traces in test_diagnose.py and on simulated jobs.)
        for w in report["workers"]:
            self.assertAlmostEqual(w["breakdown"]["compute"], 0.5, delta=0.1, msg=json.dumps(w))
        with open(run.report_paths()[0][:-len(".json")] + ".html") as f:
            html = f.read()
        self.assertIn("fake_gemm_kernel", html)  # the kernel's name, from its CUPTI record
        with open(os.path.join(tmp, "cupti-calls.txt")) as f:
            calls = f.read().split("\n")
        # Each rank: subscribed for the window only, flushed before the window's end.
        self.assertEqual(calls.count("cuptiSubscribe"), 4, calls)
        self.assertEqual(calls.count("cuptiActivityFlushAll"), 4, calls)
        self.assertEqual(calls.count("cuptiUnsubscribe"), 4, calls)
        self.assertNotIn("GPU tracing", run.stderr(), run.describe())
        left = glob.glob(f"/dev/shm/perftracker-*-{run.proc.pid}-*")
        self.assertEqual(left, [], "the -cupti files were left behind")

    def test_another_cupti_client_makes_each_rank_back_off_once(self):
        tmp = tempfile.mkdtemp(prefix="perftracker-fake-cupti-")
        self.addCleanup(shutil.rmtree, tmp, True)
        run = self.gpu_run("gpu_busy", self.fake_cupti_env(
            tmp, FAKE_CUPTI_SUBSCRIBE_RESULT="39"))  # MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
        report = run.report()
        self.check_schema(report, run)  # the window goes on with the Python-level events
        for w in report["workers"]:
            self.assertFalse(w["has_device"], json.dumps(w))
        said = [line for line in run.stderr().splitlines()
                if "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" in line]
        self.assertEqual(len(said), 4, run.describe())  # once per rank
        self.assertIn("another CUPTI client", said[0])

    def test_torch_profiler_started_in_a_window_gets_cupti_and_the_report_says_so(self):
        # The job opens its own torch.profiler once the window traces its GPU (driven by the
        # agent's state, not by a clock), then steps until the window is over. The agent
        # gives CUPTI up before Kineto initializes it (seen on an H200: Kineto lost every
        # GPU activity of the user's profile); the window keeps what CUPTI recorded before,
        # and its report says the rest of the window has no GPU data.
        tmp = tempfile.mkdtemp(prefix="perftracker-fake-cupti-")
        self.addCleanup(shutil.rmtree, tmp, True)
        job = os.path.join(tmp, "job.py")
        with open(job, "w") as f:
            f.write(
                "import sys, time, torch\n"
                "from perftracker import _agent  # loaded by perftracker run\n"
                "model = torch.nn.Linear(64, 64)\n"
                "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
                "data = torch.utils.data.DataLoader(\n"
                "    torch.utils.data.TensorDataset(torch.randn(256, 64)), batch_size=32)\n"
                "batches = iter(())\n"
                "deadline = time.time() + 300\n"
                "def step():  # an iteration: a batch, then an optimizer step\n"
                "    global batches\n"
                "    x = next(batches, None)\n"
                "    if x is None:\n"
                "        batches = iter(data)\n"
                "        x = next(batches)\n"
                "    opt.zero_grad(); model(x[0]).sum().backward(); opt.step(); time.sleep(0.005)\n"
                "    if time.time() > deadline: sys.exit('job: no window in 300 s')\n"
                "while _agent.gpu_tracing_stats().get('windows', 0) < 1:\n"
                "    step()\n"
                "with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):\n"
                "    for _ in range(5): step()\n"
                "while _agent.recording():\n"
                "    step()\n"
                "for _ in range(20): step()\n")
        env = dict(os.environ, **self.fake_cupti_env(tmp))
        report_dir = os.path.join(tmp, "reports")
        r = subprocess.run([CONFIG.perftracker, "run", "--report-dir", report_dir,
                            "--gpu-tracing", "always", "--trigger-at-seconds", "2",
                            # Room for the job to see the window's tracing begin (it looks
                            # once per iteration) on a loaded machine.
                            "--window-seconds", "5", "--max-windows", "1", "--",
                            sys.executable, job],
                           capture_output=True, text=True, timeout=600, cwd=tmp, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        said = [l for l in r.stderr.splitlines() if "torch.profiler started during a window" in l]
        self.assertEqual(said, ["perftracker agent: torch.profiler started during a window: "
                                "GPU tracing stopped for the rest of the window so that "
                                "torch.profiler gets CUPTI"], r.stderr)
        paths = report_files.window_report_paths(report_dir)
        self.assertEqual(len(paths), 1, r.stderr)
        with open(paths[0], encoding="utf-8") as f:
            report = json.load(f)
        (w,) = report["workers"]
        self.assertTrue(w["has_device"], json.dumps(w))  # the kernels before the profiler
        self.assertGreater(w["stats"]["gpu_untraced_ms"], 0, json.dumps(w))
        self.assertTrue(any("ms of the window without GPU tracing (perftracker gave CUPTI to "
                            "the job's torch.profiler)" in n for n in report["notes"]),
                        report["notes"])
        with open(os.path.join(tmp, "cupti-calls.txt")) as f:
            calls = f.read().split("\n")
        self.assertEqual((calls.count("cuptiSubscribe"), calls.count("cuptiUnsubscribe")),
                         (1, 1), calls)

    def plugin_seen_by_job(self, run_args, env=None):
        """What NCCL_PROFILER_PLUGIN the job sees; the caller's environment has none unless
        `env` sets it."""
        job_env = {k: v for k, v in os.environ.items() if k != "NCCL_PROFILER_PLUGIN"}
        job_env.update(env or {})
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run(
                [CONFIG.perftracker, "run", "--report-dir", os.path.join(tmp, "r"), *run_args,
                 "--", sys.executable, "-c",
                 "import os; print('plugin=' + os.environ.get('NCCL_PROFILER_PLUGIN', '-'))"],
                capture_output=True, text=True, timeout=60, cwd=tmp, env=job_env)
        self.assertEqual(r.returncode, 0, r.stderr)
        return re.search(r"plugin=(\S+)", r.stdout).group(1), r.stderr

    def test_run_gives_nccl_perftrackers_profiler_plugin(self):
        plugin, _ = self.plugin_seen_by_job([])
        self.assertTrue(plugin.endswith("libperftracker_nccl_profiler.so"), plugin)
        self.assertTrue(os.path.exists(plugin), plugin)
        # The user's own plugin is kept, and perftracker says what that costs.
        plugin, err = self.plugin_seen_by_job([], {"NCCL_PROFILER_PLUGIN": "/opt/their.so"})
        self.assertEqual(plugin, "/opt/their.so")
        self.assertIn("NCCL_PROFILER_PLUGIN is set (/opt/their.so): keeping it", err)
        plugin, _ = self.plugin_seen_by_job(["--nccl-plugin", "off"])
        self.assertEqual(plugin, "-")
        plugin, err = self.plugin_seen_by_job(["--nccl-plugin", "/nonexistent/p.so"])
        self.assertEqual(plugin, "-")
        self.assertIn("the NCCL profiler plugin /nonexistent/p.so does not exist", err)

    def test_plugin_and_cupti_files_of_dead_ranks_are_removed(self):
        # A rank killed mid-run cannot remove its -nccl / -cupti files: perftracker run does.
        dead = subprocess.Popen(["true"])
        dead.wait()
        script = ("import os\n"
                  f"for s in ('', '-nccl', '-cupti'):\n"
                  f"    p = '/dev/shm/perftracker-%s-{dead.pid}%s' % "
                  "(os.environ['PERFTRACKER_RUN_ID'], s)\n"
                  "    open(p, 'w').close(); print(p)\n")
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([CONFIG.perftracker, "run", "--report-dir",
                                os.path.join(tmp, "r"), "--", sys.executable, "-c", script],
                               capture_output=True, text=True, timeout=60, cwd=tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        made = [line for line in r.stdout.splitlines() if line.startswith("/dev/shm/")]
        self.assertEqual(len(made), 3, r.stdout)
        self.assertEqual([p for p in made if os.path.exists(p)], [])


class DemoTest(unittest.TestCase):
    def test_demo_job_is_the_tested_job(self):
        # examples/live/train.py (what scripts/setup.sh runs) is a symlink to this test's job.
        self.assertEqual(os.path.realpath(DEMO_JOB), os.path.realpath(LIVE_JOB),
                         "examples/live/train.py must be a symlink to tests/e2e/live_job.py")


def main():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--perftracker", default=os.environ.get("PERFTRACKER_BIN"))
    p.add_argument("--torch-python", default="/usr/bin/python3")
    p.add_argument("--keep", default=None, help="copy each run's directory here")
    p.add_argument("--keep-failed", default=None,
                   help="copy the directory of each run whose test failed here (reports, "
                        "store, job output: what the failure is read from)")
    p.add_argument("--fake-cupti", default=None,
                   help="the test suite's fake libcupti (GPU tracing tests; skipped without)")
    args, rest = p.parse_known_args()
    if not args.perftracker or not os.path.exists(args.perftracker):
        sys.exit(f"test_live.py: pass --perftracker PATH to the built binary "
                 f"(got {args.perftracker!r})")
    CONFIG.perftracker = os.path.abspath(args.perftracker)
    CONFIG.torch_python = args.torch_python
    CONFIG.keep = os.path.abspath(args.keep) if args.keep else None
    CONFIG.keep_failed = os.path.abspath(args.keep_failed) if args.keep_failed else None
    CONFIG.fake_cupti = os.path.abspath(args.fake_cupti) if args.fake_cupti else None
    become_subreaper()
    start = time.monotonic()
    try:
        prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    finally:
        kill_everything_we_started()
    total = time.monotonic() - start
    runs = ", ".join(f"{w} {s:.1f} s" for w, s in TIMINGS)
    log(f"timing: total {total:.1f} s; {runs}")
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
