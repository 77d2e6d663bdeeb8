#!/usr/bin/python3
"""End-to-end tests of `perftracker compare` on traces written by a real torch job.

The same 4-rank gloo/DDP job (train_job.py) runs three times: healthy, healthy again, and with
block2 slower on every rank (slow_compute on ranks 0-3: no rank differs from its peers, so
diagnose cannot see it); the second healthy run has two busy loops beside it. Comparing the
slow run with the healthy one must name block2 on every rank; comparing the two healthy runs
must find no material change: the load the traces recorded explains what every function
shares (compare_test has a function slower beyond such a load, named).
Traces are generated with test_diagnose.py's cache (keyed by train_job.py and its arguments).

  /usr/bin/python3 tests/e2e/test_compare.py --perftracker build/src/perftracker/cli/perftracker \
      --cache-dir build/tests/e2e/traces [unittest options]
"""

import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_diagnose as td  # noqa: E402  (shares its trace cache and helpers)

# The healthy job again, on a busier machine: two busy loops beside it (on 2 cores every
# function takes ~1.5x as long). The traces say how long the ranks waited for a CPU
# (perftracker.host_load), so compare can tell the machine from the job.
td.SCENARIOS["healthy_loaded"] = ["--fault", "none", "--background-load", "2"]
# The healthy job once more, generated right before healthy_loaded (setUpModule): the two
# runs that must compare as unchanged are recorded a minute apart, not twenty. This VM's CPU
# second itself varies with its neighbours, which neither the run-queue wait nor the steal
# the traces record shows: in a CI run beside two busy loops, "healthy" (recorded by
# e2e_diagnose 20 minutes earlier) took 0.45-0.53 s of CPU for the work that took 0.31-0.33 s
# in healthy_loaded, so every function was x0.83 while the load said x1.45.
td.SCENARIOS["healthy_pair"] = ["--fault", "none"]
# block2's forward 9 times (8 extra runs) on every rank. With 4 (block2 ~5x) the fault read
# only +5 to +20 ms per rank when the healthy baseline was recorded at a different load (ranks
# 1-3 waited ~1.3x longer for a CPU then: block2 13.6 -> 19.9 ms on rank 1, under the 11 ms
# bar after its load correction), so "slower on all 4" was a coin toss at load ~10; the test
# is about naming a change that is there, not about the smallest one that can be seen.
td.SCENARIOS["slow_compute_all"] = ["--fault", "slow_compute", "--fault-rank", "0,1,2,3",
                                    "--slow-repeats", "8"]


def setUpModule():
    try:
        done = [os.path.join(td.traces(n), "DONE") for n in ("healthy_pair", "healthy_loaded")]
        # Cached by an earlier run at another time (the cache outlives a run): recorded again,
        # one right after the other.
        if abs(os.path.getmtime(done[0]) - os.path.getmtime(done[1])) > 300:
            for n in ("healthy_pair", "healthy_loaded"):
                shutil.rmtree(td._TRACES.pop(n))
            td.traces("healthy_pair")
            td.traces("healthy_loaded")
    except unittest.SkipTest:
        pass  # no torch: the tests that need traces skip, the others run


def compare_json(*args):
    r = td.perftracker("compare", "--format", "json", *args)
    return r, (r.json() if r.rc == 0 else None)


class CompareRealJobTest(unittest.TestCase):
    def assert_block2_slower_everywhere(self, r, c):
        self.assertEqual(r.rc, 0, r.describe())
        self.assertEqual(c["kind"], "comparison")
        self.assertTrue(c["has_material_change"], json.dumps(c, indent=1)[:3000])
        top = c["changes"][0]
        self.assertEqual((top["function"], top["direction"], top["workers"]),
                         ("block2", "slower", [0, 1, 2, 3]), json.dumps(top, indent=1)[:3000])
        self.assertGreater(top["delta_ms_per_iteration"], 0)
        self.assertGreaterEqual(top["delta_ms_per_iteration"], c["bar_ms_per_iteration"])
        self.assertTrue(c["verdict"].startswith("block2 is slower on all 4 workers"), c["verdict"])

    def test_slower_function_on_every_rank_is_named(self):
        r, c = compare_json(td.traces("healthy"), td.traces("slow_compute_all"))
        self.assert_block2_slower_everywhere(r, c)
        # ... and back: faster.
        r, c = compare_json(td.traces("slow_compute_all"), td.traces("healthy"))
        self.assertEqual(r.rc, 0, r.describe())
        top = c["changes"][0]
        self.assertEqual((top["function"], top["direction"]), ("block2", "faster"),
                         json.dumps(top, indent=1)[:3000])

    def test_two_healthy_runs_have_no_material_change(self):
        """The second healthy run is on a busier machine: whatever factor every function
        shares, the load the traces recorded explains it."""
        for a, b in (("healthy_pair", "healthy_loaded"), ("healthy_loaded", "healthy_pair")):
            r, c = compare_json(td.traces(a), td.traces(b))
            self.assertEqual(r.rc, 0, r.describe())
            self.assertFalse(c["has_material_change"], json.dumps(c, indent=1)[:4000])
            self.assertEqual(c["changes"], [])
            self.assertTrue(c["verdict"].startswith("no material change"), c["verdict"])
            self.assertIsNotNone(c["machine_scale"], "the traces carry no host load")

    def test_reports_compare_like_their_traces(self):
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for name in ("healthy", "slow_compute_all"):
                r = td.perftracker("diagnose", "--format", "json", td.traces(name))
                self.assertEqual(r.rc, 0, r.describe())
                path = os.path.join(tmp, name + ".json")
                with open(path, "w") as f:
                    f.write(r.stdout)
                paths.append(path)
            r, c = compare_json(*paths)
            self.assert_block2_slower_everywhere(r, c)
            # A report against a trace set works too.
            r, c = compare_json(paths[0], td.traces("slow_compute_all"))
            self.assert_block2_slower_everywhere(r, c)

    def test_text_and_html(self):
        with tempfile.TemporaryDirectory() as tmp:
            html = os.path.join(tmp, "compare.html")
            r = td.perftracker("compare", "--html", html, td.traces("healthy"),
                               td.traces("slow_compute_all"))
            self.assertEqual(r.rc, 0, r.describe())
            self.assertTrue(r.stdout.startswith("block2 is slower on all 4 workers"), r.stdout)
            with open(html, encoding="utf-8") as f:
                page = f.read()
            self.assertIn("block2 is slower on all 4 workers", page)
            self.assertNotIn("http", page.replace("http-equiv", ""))


class CompareBadInputTest(unittest.TestCase):
    def assert_one_line(self, r, *needles):
        self.assertEqual(r.rc, 2, r.describe())
        lines = r.stderr_lines()
        self.assertEqual(len(lines), 1, r.describe())
        for n in needles:
            self.assertIn(n, lines[0], r.describe())

    def test_missing_file(self):
        r = td.perftracker("compare", "/nonexistent/a", td.traces("healthy"))
        self.assert_one_line(r, "/nonexistent/a", "no such file")

    def test_not_a_report_nor_a_trace(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "notes.json")
            with open(path, "w") as f:
                f.write('{"schema_version": 3, "generator": "someone else"}')
            r = td.perftracker("compare", path, td.traces("healthy"))
            self.assert_one_line(r, path, "not a perftracker report")

    def test_a_comparison_is_not_a_report(self):
        with tempfile.TemporaryDirectory() as tmp:
            r, _ = compare_json(td.traces("healthy"), td.traces("healthy_loaded"))
            path = os.path.join(tmp, "c.json")
            with open(path, "w") as f:
                f.write(r.stdout)
            r = td.perftracker("compare", path, td.traces("healthy"))
            self.assert_one_line(r, path, "is a comparison, not a report")

    def test_different_jobs(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rank0.json")
            with open(path, "w") as f:
                json.dump({"traceEvents": [
                    {"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, "pid": 1,
                     "tid": 1, "cat": "user_annotation"},
                    {"ph": "X", "name": "evaluate", "ts": 10, "dur": 900, "pid": 1, "tid": 1,
                     "cat": "user_annotation"}]}, f)
            r = td.perftracker("compare", td.traces("healthy"), path)
            self.assert_one_line(r, "are not runs of one job")

    def test_help(self):
        r = td.perftracker("compare", "--help")
        self.assertEqual(r.rc, 0, r.describe())
        for word in ("baseline", "current", "--format", "--html", "--material-share",
                     "--noise-sigmas"):
            self.assertIn(word, r.stdout)
        r = td.perftracker("compare", td.traces("healthy"))
        self.assertEqual(r.rc, 2, r.describe())


if __name__ == "__main__":
    td.main()
