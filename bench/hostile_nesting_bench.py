#!/usr/bin/env python3
"""Hostile nesting (issue 13 item 1): `perftracker diagnose` on one thread of strictly nested
events, its peak RSS and wall time per size, so that "memory and time linear in the input"
is measured, not assumed.

Each trace is written to a temporary directory: a ProfilerStep#1 around n nested events,
event i spanning [1 + i, 1 + 4n - i] µs, as complete events ("X") or as B/E pairs (--be).

  /usr/bin/python3 bench/hostile_nesting_bench.py --perftracker build/src/perftracker/cli/perftracker \
      --sizes 10000 100000 1000000
"""
import argparse
import os
import re
import resource
import subprocess
import tempfile
import time


def write_trace(path, n, be):
    with open(path, "w") as f:
        f.write('{"traceEvents": [\n{"ph":"X","name":"ProfilerStep#1","cat":"user_annotation",'
                f'"pid":1,"tid":1,"ts":0,"dur":{4 * n + 10}}}')
        if be:
            for i in range(n):
                f.write(f',\n{{"ph":"B","name":"level{i}","cat":"cpu_op","pid":1,"tid":1,"ts":{1 + i}}}')
            for i in reversed(range(n)):
                f.write(f',\n{{"ph":"E","pid":1,"tid":1,"ts":{1 + 4 * n - i}}}')
        else:
            for i in range(n):
                f.write(f',\n{{"ph":"X","name":"level{i}","cat":"cpu_op","pid":1,"tid":1,'
                        f'"ts":{1 + i},"dur":{4 * n - 2 * i}}}')
        f.write("\n]}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--perftracker", required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000, 1000000])
    ap.add_argument("--be", action="store_true", help="B/E pairs instead of complete events")
    args = ap.parse_args()
    print("| nested events | file | peak RSS | wall | CPU | note |")
    print("| ---: | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = os.path.join(tmp, "nest_rank0.json")
            write_trace(path, n, args.be)
            size = os.path.getsize(path)
            # Each size in a fresh child, so that ru_maxrss of the children is this one's only
            # when sizes grow (RUSAGE_CHILDREN keeps the maximum over all of them).
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.monotonic()
            p = subprocess.run([args.perftracker, "diagnose", "--rank", "0", path],
                               capture_output=True, text=True)
            wall = time.monotonic() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            rss_mb = after.ru_maxrss / 1024
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            if p.returncode != 0:
                raise SystemExit(f"diagnose failed ({p.returncode}): {p.stderr.strip()}")
            note = re.search(r"rank 0: (.*?)\(first", " ".join(p.stdout.split()))
            print(f"| {n:,} | {size / 1e6:.1f} MB | {rss_mb:.1f} MB | {wall:.2f} s | {cpu:.2f} s | "
                  f"{note.group(1).strip() if note else ''} |")
            os.remove(path)


if __name__ == "__main__":
    main()
