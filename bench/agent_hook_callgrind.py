#!/usr/bin/env python3
"""Agent hook cost in instructions per Python call, counted by callgrind (deterministic: no
timing noise, unlike agent_hook_bench.py, whose wall-clock numbers move with the machine's
load). Each mode runs in its own `valgrind --tool=callgrind` process; a mode's cost per call
= (instructions of the process - instructions of the `none` process) / Python calls of the
workload, so the interpreter's start-up and the agent's set-up cancel out (they are the same
in every mode; a window's start and stop add a few thousand instructions, < 0.1 per call).

    PYTHONPATH=<build>/python /usr/bin/python3 bench/agent_hook_callgrind.py [--n 20]

Modes: none, noop_eval (3.10, 3.11) / noop_monitor (3.12+), noop_profile, cprofile (builtins=True),
cprofile_py (builtins=False), perftracker (the default hook: frame evaluation on 3.10 and
3.11, sys.monitoring on 3.12+), pt_profile (profile-function hook),
after_window (the workload run right after a window on the default hook closed: its cost
must be 0; also run at a second, larger size so that what a window leaves behind is split
into a one-time part and a per-call part: the latter is the cost after a window). See agent_hook_bench.py for what each records. Needs valgrind (Debian: valgrind).
Any CPython the agent was built for: run it with that interpreter and its build's python/.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

WORKLOAD = r"""
import cProfile, os, sys
os.environ["RANK"] = "0"
os.environ.pop("PERFTRACKER_SOCKET", None)
os.environ["PERFTRACKER_RUN_ID"] = "callgrind%d" % os.getpid()
os.environ["PERFTRACKER_AGENT_OPTIONS"] = "rings=2,ring_events=1048576"
from perftracker import agent, _agent
agent.start()
mode, n = sys.argv[1], int(sys.argv[2])

def fib(k):
    return k if k < 2 else fib(k - 1) + fib(k - 2)

class Point:
    def __init__(self, x):
        self.x = x
    def norm(self):
        return abs(self.x)

def small(k):
    p = Point(3)
    s = 0
    for _ in range(k):
        s += p.norm()
    return s

work = (lambda: fib(n)) if sys.argv[3] == "fib" else (lambda: small(n))
prof = None
# Every mode first runs fib(10) (177 calls, the same in every mode, so it cancels out): the
# workload's code is then warm (specialised), and after a window any one-time work the
# interpreter does on code the window touched (3.12+ removes sys.monitoring's
# instrumentation from a code object at its next call) is paid before the counted run.
if mode != "after_window":
    fib(10)
if mode == "after_window":
    _agent.profile_start(600, _agent.hooks()[0])
    fib(3)
    _agent.profile_stop()
    fib(10)
if mode == "noop_eval":
    _agent.noop_eval(True)
elif mode == "noop_monitor":
    _agent.noop_monitor(True)
elif mode == "noop_profile":
    _agent.noop_profile(True)
elif mode in ("cprofile", "cprofile_py"):
    prof = cProfile.Profile(builtins=(mode == "cprofile"))
    prof.enable()
elif mode in ("perftracker", "pt_profile"):
    _agent.profile_start(600, _agent.hooks()[0] if mode == "perftracker" else "profile")
work()
if mode == "noop_eval":
    _agent.noop_eval(False)
elif mode == "noop_monitor":
    _agent.noop_monitor(False)
elif mode == "noop_profile":
    _agent.noop_profile(False)
elif prof is not None:
    prof.disable()
elif mode in ("perftracker", "pt_profile"):
    c = _agent.profile_stop()
    assert c["dropped"] == 0, c
agent.stop()
"""

MODES = ["none", "noop", "noop_profile", "cprofile", "cprofile_py", "perftracker",
         "pt_profile", "after_window"]


def fib_calls(n):
    a, b = 1, 1  # calls of fib(0), fib(1)
    for _ in range(n - 1):
        a, b = b, a + b + 1
    return b if n > 0 else 1


def instructions(workdir, script, mode, n, work):
    out = os.path.join(workdir, "cg.%s.out" % mode)
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                        sys.executable, script, mode, str(n), work],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("agent_hook_callgrind: %s failed:\n%s" % (mode, r.stderr[-2000:]))
    m = re.search(r"Collected : (\d+)", r.stderr)
    if m is None:
        sys.exit("agent_hook_callgrind: no instruction count in valgrind's output:\n"
                 + r.stderr[-2000:])
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20, help="fib(n); the small-call loop runs "
                    "fib_calls(n) iterations")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("agent_hook_callgrind: valgrind not found (Debian: apt-get install valgrind)")
    version = subprocess.run([sys.executable, "-c", "import sys; print(sys.version_info >= (3, "
                              "12), sys.version_info >= (3, 10))"], capture_output=True,
                             text=True).stdout.split()
    noop = "noop_monitor" if version[0] == "True" else "noop_eval" if version[1] == "True" \
        else None
    modes = [noop if m == "noop" else m for m in MODES if m != "noop" or noop]
    calls = fib_calls(args.n)
    with tempfile.TemporaryDirectory(prefix="perftracker-callgrind-") as d:
        script = os.path.join(d, "workload.py")
        with open(script, "w") as f:
            f.write(WORKLOAD)
        for work, n, python_calls in (("fib", args.n, calls), ("small", calls, calls + 1)):
            ir = {m: instructions(d, script, m, n, work) for m in modes}
            print("%s: %d Python calls; instructions per call above `none`:"
                  % ("fib(%d)" % n if work == "fib" else "small method calls", python_calls))
            per = {m: (ir[m] - ir["none"]) / python_calls for m in modes}
            for m in modes[1:]:
                print("  %-13s %8.1f" % (m, per[m]))
            print("  perftracker / cProfile = %.2f (builtins=False: %.2f); pt_profile / "
                  "cProfile = %.2f" % (per["perftracker"] / per["cprofile"],
                                       per["perftracker"] / per["cprofile_py"],
                                       per["pt_profile"] / per["cprofile"]))
            # after_window at n and at a larger n2: extra(n) = once + per_call * calls(n).
            n2 = n + 4 if work == "fib" else fib_calls(args.n + 4)
            calls2 = fib_calls(n2) if work == "fib" else n2 + 1
            extra2 = (instructions(d, script, "after_window", n2, work) -
                      instructions(d, script, "none", n2, work))
            extra1 = ir["after_window"] - ir["none"]
            slope = (extra2 - extra1) / (calls2 - python_calls)
            print("  after a window: %.1f instructions per call (+ %.0f once: the window's own "
                  "start / stop, code the interpreter re-prepares)"
                  % (slope, extra1 - slope * python_calls))
    print("(%s)" % sys.version.split()[0])


if __name__ == "__main__":
    main()
