#!/usr/bin/python3
"""Checks that two perftracker builds give byte-identical diagnoses (docs/performance.md).

    bench/diagnose_identical.py BEFORE AFTER [DIR_OR_FILE ...]

Runs `diagnose --rank 0 --format json FILE` with both binaries on every trace file (*.json,
*.json.gz) under the inputs (default ../shared/data/kineto) and, once per directory that holds
several ranks, `diagnose --format json DIR` (a multi-rank job), and compares stdout and the
exit status byte for byte. The JSON report's "title" holds the path, the same for both.
Prints one line per difference and a count; exit status 1 when anything differs. Absent
inputs are skipped.
"""
import os
import subprocess
import sys


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


def diagnose(binary, args):
    proc = subprocess.run([binary, "diagnose", "--format", "json", *args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    before, after = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    inputs = sys.argv[3:] or [os.path.join(here, "..", "..", "shared", "data", "kineto")]
    files = sorted(set(trace_files(inputs)))
    runs = [["--rank", "0", f] for f in files]
    dirs = {}
    for f in files:
        dirs.setdefault(os.path.dirname(f), []).append(f)
    runs += [[d] for d, fs in sorted(dirs.items()) if len(fs) > 1]
    differ = 0
    for args in runs:
        a = diagnose(before, args)
        b = diagnose(after, args)
        if a != b:
            differ += 1
            what = "exit status" if a[0] != b[0] else "stdout" if a[1] != b[1] else "stderr"
            print(f"DIFFERS ({what}): diagnose {' '.join(args)}")
    print(f"{len(runs)} diagnoses compared ({len(files)} files, {len(runs) - len(files)} "
          f"directories), {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
