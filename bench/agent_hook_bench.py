#!/usr/bin/env python3
"""Agent hook overhead: the perftracker CPython profile hook vs cProfile, and the always-on
detector hooks' cost per marker.

Run (after building perftracker_python):
    PYTHONPATH=<build>/python /usr/bin/python3 bench/agent_hook_bench.py [--reps 15] [--n 22]

Call-heavy benchmark: recursive fib(n) (fib(24): 150,049 Python calls, no C calls) and a loop
of small method calls (150,001 Python calls; each also calls the builtin abs()). Modes,
interleaved in shuffled order in every repetition, medians reported:
  none          no profiler
  noop_eval     (3.10, 3.11) a frame-evaluation function (PEP 523) that only calls the
                interpreter's own: the floor of the agent's default hook there
  noop_profile  a C profile function that does nothing: the floor any PyEval_SetProfile
                hook pays in CPython 3.11 (frame objects, de-specialized "tracing" dispatch)
  noop_monitor  (3.12+) do-nothing C callbacks registered with sys.monitoring for the six
                events the agent's sys.monitoring hook uses: the floor of that hook
  cprofile      cProfile.Profile() enabled around the run (builtins=True, its default: it
                also records every C function call, e.g. abs())
  cprofile_py   cProfile.Profile(builtins=False): Python calls only, like perftracker
  perftracker   inside a perftracker window with the default (fastest) hook: the
                frame-evaluation hook on 3.10 and 3.11, sys.monitoring on 3.12+: one
                40-byte event per Python call (start, end, id of the function + its whole
                call stack) written into the shared-memory ring; the ring holds a whole run
                and is drained after each run, outside the timed region, like a collector
  pt_profile    the same window with the agent's profile-function hook (eval_hook=0, and
                the fallback when another frame-evaluation function is installed)
  after_window  right after a window closed (must equal `none`: the hook is gone)
Overhead per call = (median(mode) - median(none)) / Python calls. What each side records
differs: cProfile aggregates per function (call count, total and inline time per
caller->callee pair) and by default also C calls; perftracker writes every call as its own
timed event, keyed by its full call path, and never records C calls.

Always-on: ns per detector marker (the DataLoader/step wrappers' call into the agent, the
detector learning/tracking an "N S" loop), and, when torch is importable, the wrapped vs
unwrapped Optimizer.step of a tiny SGD model.
"""

import argparse
import cProfile
import gc
import os
import random
import statistics
import sys
import time

os.environ.setdefault("RANK", "0")
os.environ.pop("PERFTRACKER_SOCKET", None)  # no collector: the agent runs standalone
os.environ.setdefault("PERFTRACKER_RUN_ID", "bench")
# One big ring per thread: a whole run fits, no drops, no concurrent drainer in the timing.
os.environ.setdefault("PERFTRACKER_AGENT_OPTIONS", "rings=4,ring_events=1048576")

from perftracker import agent, _agent  # noqa: E402


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def fib_calls(n):
    return 1 if n < 2 else 1 + fib_calls(n - 1) + fib_calls(n - 2)


class Point:
    def __init__(self, x):
        self.x = x

    def norm(self):
        return abs(self.x)


def small_calls(k):
    p = Point(3)
    s = 0
    for _ in range(k):
        s += p.norm()
    return s


def run_mode(mode, fn):
    if mode in ("cprofile", "cprofile_py"):
        prof = cProfile.Profile(builtins=(mode == "cprofile"))
        t0 = time.perf_counter()
        prof.enable()
        fn()
        prof.disable()
        return time.perf_counter() - t0
    if mode == "noop_eval":
        _agent.noop_eval(True)
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        _agent.noop_eval(False)
        return dt
    if mode == "noop_monitor":
        _agent.noop_monitor(True)
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        _agent.noop_monitor(False)
        return dt
    if mode == "noop_profile":
        _agent.noop_profile(True)
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        _agent.noop_profile(False)
        return dt
    if mode in ("perftracker", "pt_profile"):
        _agent.profile_start(600.0, _agent.hooks()[0] if mode == "perftracker" else "profile")
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        counts = _agent.profile_stop()
        run_mode.hooks.add(counts["hook"])
        run_mode.dropped += counts["dropped"]
        run_mode.events += counts["events"]
        run_mode.drained += _agent.drain_now(_agent.shm_path())
        return dt
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


run_mode.hooks = set()
run_mode.dropped = 0
run_mode.events = 0
run_mode.drained = 0


MODES = (["none"] + (["noop_eval"] if "eval" in _agent.hooks() else []) +
         (["noop_monitor"] if "monitor" in _agent.hooks() else []) +
         ["noop_profile", "cprofile", "cprofile_py", "perftracker", "pt_profile"])


def bench_calls(name, fn, calls, reps):
    modes = MODES + ["after_window"]
    times = {m: [] for m in modes}
    rng = random.Random(1)
    for _ in range(reps):
        order = MODES[:]
        rng.shuffle(order)
        order.append("after_window")  # right after a window
        for m in order:
            if m == "after_window":
                run_mode("perftracker", fn)
            times[m].append(run_mode("none" if m == "after_window" else m, fn))
    med = {m: statistics.median(v) for m, v in times.items()}
    base = med["none"]
    over = {m: med[m] - base for m in modes}
    print("\n%s: %d Python calls per run, %d reps (median seconds; overhead ns per call)"
          % (name, calls, reps))
    for m in modes:
        print("  %-13s %8.4f s  %+7.1f ns/call  x%.2f" % (m, med[m], over[m] / calls * 1e9,
                                                        med[m] / base))
    # Spread: the same ratio per repetition (each repetition ran every mode once).
    per_rep = sorted((p - b) / (c - b) for p, c, b in zip(times["perftracker"],
                     times["cprofile"], times["none"]) if c > b)
    ratio = over["perftracker"] / over["cprofile"]
    ratio_py = over["perftracker"] / over["cprofile_py"]
    verdict = "MET" if ratio <= 0.5 and ratio_py <= 0.5 else "NOT MET"
    print("  perftracker overhead / cProfile overhead = %.2f (builtins=False: %.2f); per "
          "repetition %.2f..%.2f (quartiles %.2f..%.2f); target <= 0.5: %s"
          % (ratio, ratio_py, per_rep[0], per_rep[-1], per_rep[len(per_rep) // 4],
             per_rep[(3 * len(per_rep)) // 4], verdict))
    floor = "noop_eval" if "noop_eval" in over else "noop_monitor" if "noop_monitor" in over \
        else None
    print("  profile-function hook: %.2f of cProfile's overhead (its do-nothing floor alone: "
          "%.2f)%s" % (over["pt_profile"] / over["cprofile"], over["noop_profile"] /
                       over["cprofile"], "; %s floor alone: %.2f" % (
                           floor, over[floor] / over["cprofile"]) if floor else ""))
    return med


def bench_markers(iterations):
    marker = _agent.marker
    now = time.time_ns
    # warm up: the detector learns the loop
    for _ in range(100):
        marker(0, "DataLoader.__next__", now())
        marker(1, "SGD.step", now())
    t0 = time.perf_counter()
    for _ in range(iterations):
        marker(0, "DataLoader.__next__", now())
        marker(1, "SGD.step", now())
    dt = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(iterations):
        now()
        now()
    empty = time.perf_counter() - t0
    per = (dt - empty) / (2 * iterations) * 1e9
    print("\nAlways-on detector: %.0f ns per marker (%d iterations of next()+step(); "
          "learned: %s)" % (per, iterations, _agent.stats()["iterations"] > 0))


def bench_torch_step(reps):
    try:
        import torch
    except Exception as e:  # pragma: no cover
        print("\n(torch not importable: %s; step wrapper not measured)" % e)
        return
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    wrapped = type(opt).step
    unwrapped = getattr(wrapped, "__wrapped__", None)
    if unwrapped is None or not getattr(wrapped, "_perftracker", False):
        print("\n(Optimizer.step is not wrapped by the agent; skipped)")
        return
    k = 2000
    res = {"wrapped": [], "unwrapped": []}
    for _ in range(reps):
        for name, fn in (("wrapped", wrapped), ("unwrapped", unwrapped)):
            t0 = time.perf_counter()
            for _ in range(k):
                fn(opt)
            res[name].append((time.perf_counter() - t0) / k)
    w = statistics.median(res["wrapped"])
    u = statistics.median(res["unwrapped"])
    print("\nSGD.step (torch %s, Linear(16,1)): unwrapped %.1f us, wrapped %.1f us: "
          "+%.2f us per step" % (torch.__version__, u * 1e6, w * 1e6, (w - u) * 1e6))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--small", type=int, default=150000)
    ap.add_argument("--markers", type=int, default=200000)
    args = ap.parse_args()
    agent.start()
    if not _agent.active():
        sys.exit("perftracker agent did not start")
    for _ in range(100):  # the agent calibrates its TSC clock in the background (~50 ms)
        if _agent.clock_ns_per_tick() > 0:
            break
        time.sleep(0.02)
    gc.disable()
    print("python %s, %s, hook clock: %s" % (
        sys.version.split()[0], os.uname().machine,
        "TSC" if _agent.clock_ns_per_tick() > 0 else "clock_gettime"))
    bench_calls("fib(%d)" % args.n, lambda: fib(args.n), fib_calls(args.n), args.reps)
    bench_calls("small method calls", lambda: small_calls(args.small), args.small + 1, args.reps)
    print("\nperftracker windows (hooks used: %s): events written %d, drained %d, dropped %d"
          % (",".join(sorted(run_mode.hooks)), run_mode.events, run_mode.drained,
             run_mode.dropped))
    gc.enable()
    bench_markers(args.markers)
    bench_torch_step(args.reps)
    agent.stop()


if __name__ == "__main__":
    main()
