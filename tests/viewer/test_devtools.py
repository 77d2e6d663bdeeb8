#!/usr/bin/python3
"""perftracker's Perfetto export as a real viewer's parser reads it (stdlib only).

`perftracker diagnose --perfetto` writes the export of examples/straggler (4 ranks, rank 2 a
compute straggler: its finding's slices and arrows to the three victims' waits) and of a
real two-rank GPU trace set (../shared/data/kineto/gpu128_rank-*, skipped when absent);
perfetto_in_devtools.mjs reads each with Chrome DevTools' trace engine and must find every
process under its "rank N (host)" name, every track with as many slices as written and
every flow arrow bound at both ends.
"""
import argparse
import os
import re
import subprocess
import sys
import unittest

ARGS = None


class DevToolsTest(unittest.TestCase):
    def export_and_read(self, name, inputs):
        os.makedirs(ARGS.work_dir, exist_ok=True)
        out = os.path.join(ARGS.work_dir, name + ".perfetto.json")
        if os.path.exists(out):
            os.remove(out)
        diag = subprocess.run([ARGS.perftracker, "diagnose", *inputs, "--perfetto", out],
                              capture_output=True, text=True, timeout=240)
        self.assertEqual(diag.returncode, 0, diag.stderr[-2000:])
        read = subprocess.run([ARGS.node, ARGS.check, out], capture_output=True, text=True,
                              timeout=240)
        self.assertEqual(read.returncode, 0, read.stdout + read.stderr[-4000:])
        m = re.search(r"DevTools read (\d+) processes, (\d+) tracks, (\d+) slices and (\d+) of "
                      r"(\d+) flow arrows, as written", read.stdout)
        self.assertIsNotNone(m, read.stdout)
        print(read.stdout.strip())
        return [int(g) for g in m.groups()]

    def test_straggler_example(self):
        ex = os.path.join(ARGS.source_dir, "examples", "straggler")
        files = [os.path.join(ex, f"rank{r}.json.gz") for r in range(4)]
        processes, tracks, slices, bound, arrows = self.export_and_read("straggler", files)
        self.assertEqual(processes, 4)
        self.assertGreater(slices, 30000)
        # The straggler's calls point at the waits they caused: every arrow is drawn.
        self.assertGreater(arrows, 0)
        self.assertEqual(bound, arrows)

    def test_gpu_trace_set(self):
        data = os.path.join(ARGS.source_dir, "..", "shared", "data", "kineto")
        files = [os.path.join(data, f"gpu128_rank-{r}.json.gz") for r in range(2)]
        for f in files:
            if not os.path.exists(f):
                self.skipTest(f"{f} is absent")
        processes, tracks, slices, _, _ = self.export_and_read("gpu128", files)
        self.assertEqual(processes, 2)
        # Host threads and GPU streams of both ranks.
        self.assertGreaterEqual(tracks, 4)
        self.assertGreater(slices, 1000)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perftracker", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--check", required=True, help="perfetto_in_devtools.mjs")
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest])
