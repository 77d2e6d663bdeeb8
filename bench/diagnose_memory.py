#!/usr/bin/python3
"""Peak RSS of `perftracker diagnose` per trace event (docs/performance.md, issue 11).

    bench/diagnose_memory.py PERFTRACKER [DIR_OR_FILE ...] [--runs N]

Runs `PERFTRACKER diagnose --rank 0 --format json FILE` once per trace file (each in a fresh
process, peak RSS = getrusage's ru_maxrss of that child) and prints, per file, its events (the
report's stats.events), peak RSS and bytes per event *above the constant*:

    B/event = (peak RSS(file) - peak RSS(tiny trace)) / events

The constant is the peak RSS of the same command on a tiny trace this script writes (a
ProfilerStep, a Python function, an op, a launch and its kernel: everything that allocates a
fixed-size structure, e.g. the summarizer's correlation array, is touched once), as plain
JSON for *.json files and gzip-compressed for *.json.gz (reading gzip adds a 1 MiB inflate
buffer). Files of fewer than MIN_EVENTS events are listed but not judged: their whole
increment above the tiny trace is about 1-2 MiB of bounded structures (128 KiB of time grid
rows per host thread, up to 32 threads; the report), which per event reads as hundreds of
bytes. With several runs per file the minimum is kept (RSS only grows with interference).
Before each run the binary's pages are dropped from the page cache (fsync, then
posix_fadvise DONTNEED on that one file), so that every run maps it as read back from disk:
the file-backed part of the RSS depends on how the binary sits in the page cache, and a
freshly linked or copied binary mapped 0.25-0.5 MiB more than the same bytes read back,
which is as large as the differences a before/after comparison of two builds looks for.
Files are listed by event count. Default input:
../shared/data/kineto (every *.json / *.json.gz below it); absent inputs are skipped, so the
script runs (and says so) on a machine without the data.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

BUDGET = 64  # bytes per event above the constant (issue 11)
MIN_EVENTS = 20000


def tiny_trace(path, compress):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0.0, "dur": 100.0},
        {"ph": "X", "cat": "python_function", "name": "train.py(1): step", "pid": 1, "tid": 1,
         "ts": 1.0, "dur": 90.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2.0,
         "dur": 50.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 3.0, "dur": 5.0, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10.0,
         "dur": 40.0, "args": {"correlation": 7, "device": 0, "stream": 7}},
    ]
    with (gzip.open(path, "wt") if compress else open(path, "w")) as f:
        json.dump({"schemaVersion": 1,
                   "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"},
                   "traceEvents": events}, f)


def evict_page_cache(path):
    """Drops one file's pages from the page cache (its dirty pages written first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measure_isolated(binary, path):
    """Peak RSS (kB) of one diagnose process: ru_maxrss of a wrapper's only child."""
    evict_page_cache(binary)
    code = ("import resource,subprocess,sys;"
            "subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL);"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, binary, "diagnose", "--rank", "0",
                          "--format", "json", path], stdout=subprocess.PIPE, check=True)
    return int(out.stdout)


def trace_files(inputs):
    for p in inputs:
        if os.path.isfile(p):
            yield p
        elif os.path.isdir(p):
            for root, _, names in os.walk(p):
                for n in sorted(names):
                    if n.endswith(".json") or n.endswith(".json.gz"):
                        yield os.path.join(root, n)
        else:
            print(f"skipped (absent): {p}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("perftracker")
    parser.add_argument("inputs", nargs="*")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    inputs = args.inputs or [os.path.join(here, "..", "..", "shared", "data", "kineto")]
    files = sorted(set(trace_files(inputs)))
    if not files:
        print("no trace files found: nothing measured")
        return 0

    constant = {}
    with tempfile.TemporaryDirectory() as tmp:
        for gz in (False, True):
            tiny = os.path.join(tmp, "tiny_rank0.json" + (".gz" if gz else ""))
            tiny_trace(tiny, gz)
            constant[gz] = min(measure_isolated(args.perftracker, tiny)
                               for _ in range(args.runs)) * 1024
    print(f"constant (peak RSS on a 5-event trace): {constant[False] / 2**20:.1f} MiB (.json), "
          f"{constant[True] / 2**20:.1f} MiB (.json.gz)")
    rows = []
    for f in files:
        peak = min(measure_isolated(args.perftracker, f) for _ in range(args.runs)) * 1024
        rows.append((count_events(args.perftracker, f), peak, f))
    print(f"{'events':>10} {'peak MiB':>9} {'B/event':>8}  file")
    over = judged = 0
    for events, peak, f in sorted(rows):
        if events == 0:
            print(f"{'-':>10} {peak / 2**20:9.1f} {'-':>8}  {f} (no events imported)")
            continue
        per_event = (peak - constant[f.endswith(".gz")]) / events
        note = ""
        if events < MIN_EVENTS:
            note = "  (small: not judged)"
        else:
            judged += 1
            over += per_event > BUDGET
            note = "" if per_event <= BUDGET else "  OVER"
        print(f"{events:>10,} {peak / 2**20:9.1f} {per_event:8.1f}  {f}{note}")
    print(f"{over} of {judged} files with >= {MIN_EVENTS} events over {BUDGET} B/event above "
          f"the constant ({len(files)} files in all)")
    return 0


def count_events(binary, path):
    """The events diagnose read (the JSON report's stats.events), 0 when it read none."""
    proc = subprocess.run([binary, "diagnose", "--rank", "0", "--format", "json", path],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False)
    try:
        report = json.loads(proc.stdout)
        return sum(w["stats"]["events"] for w in report["workers"])
    except (ValueError, KeyError, TypeError):
        return 0


if __name__ == "__main__":
    sys.exit(main())
