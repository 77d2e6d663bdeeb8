#!/usr/bin/env python3
"""Predicts the wall time of `ctest -jN` from measured per-test times, with a build's test
properties (RUN_SERIAL, RESOURCE_LOCK, COST): a model of CTest 3.25's scheduler
(cmCTestMultiProcessHandler) that assumes each test takes the time it took in the log,
whatever runs beside it (true of tests that leave cores idle, too short for tests that
compete for them). Used to choose the test properties (docs/performance.md, "Test suite
time").

  scripts/ctest_schedule.py --log ctest-output.log --build build-asan [-j 2]

--log: a ctest run's output (the "Test #N: name ... Passed 1.23 sec" lines);
--build: a configured and built tree whose tests (ctest --show-only=json-v1) are scheduled.
A test missing from the log counts 0.5 s.

The scheduler: tests start in descending COST (declaration order among equals; no
CTestCostData.txt, as in a fresh clone); a RUN_SERIAL test starts only when nothing runs and
nothing starts beside it; a test whose RESOURCE_LOCK is held waits and later tests overtake
it; at most N tests run at once.
"""
import argparse
import json
import re
import subprocess
import sys

LINE = re.compile(r"Test +#\d+: (\S+) .*?(?:Passed|Failed|\*\*\*\w+).*?([\d.]+) sec\s*$")


def measured_times(path):
    times = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.search(line)
            if m:
                times[m.group(1)] = float(m.group(2))
    return times


def build_tests(build):
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                         capture_output=True, text=True, check=True).stdout
    tests = []
    for t in json.loads(out)["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        tests.append({"name": t["name"], "cost": float(props.get("COST", 0)),
                      "serial": bool(props.get("RUN_SERIAL", False)),
                      "locks": set(props.get("RESOURCE_LOCK", []))})
    return tests


def schedule(tests, times, jobs):
    """(wall seconds, seconds with fewer than `jobs` tests running)."""
    pending = sorted(tests, key=lambda t: -t["cost"])  # sorted() is stable
    running = []  # (end, test)
    held, serial, now, short = set(), False, 0.0, 0.0
    while pending or running:
        while not serial and len(running) < jobs:
            pick = next((t for t in pending
                         if not (t["serial"] and running) and not (t["locks"] & held)), None)
            if pick is None:
                break
            pending.remove(pick)
            running.append((now + times.get(pick["name"], 0.5), pick))
            held |= pick["locks"]
            serial = pick["serial"]
        running.sort(key=lambda r: r[0])
        end, done = running.pop(0)
        if len(running) + 1 < jobs:
            short += end - now
        now = end
        held -= done["locks"]
        serial = serial and not done["serial"]
    return now, short


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log", required=True)
    p.add_argument("--build", required=True)
    p.add_argument("-j", type=int, default=2)
    args = p.parse_args()
    times = measured_times(args.log)
    if not times:
        sys.exit(f"ctest_schedule.py: no test times in {args.log}")
    tests = build_tests(args.build)
    wall, short = schedule(tests, times, args.j)
    total = sum(times.get(t["name"], 0.5) for t in tests)
    print(f"{len(tests)} tests, {total:.0f} s of test time; predicted ctest -j{args.j}: "
          f"{wall:.0f} s, of which {short:.0f} s with a slot idle")


if __name__ == "__main__":
    main()
