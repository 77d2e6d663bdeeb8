#!/usr/bin/python3
"""End-to-end tests of `perftracker diagnose` on traces written by a real torch job.

train_job.py runs a 4-rank gloo/DDP job three times (healthy, slow_compute on rank 2,
slow_data on rank 1 written as .json.gz), and jobs where one rank of 4 or two of 8 run code the
others never run, and a 6-rank job with two roles (two models); the traces are cached in the build tree, keyed by
a hash of train_job.py and its arguments, so they are generated once. The tests then run the
perftracker binary as a user would and check what a user relies on: the culprit rank,
function and category; the text and HTML reports; exit codes; and one clear stderr line for
every kind of bad input.

  /usr/bin/python3 tests/e2e/test_diagnose.py --perftracker build/src/perftracker/cli/perftracker \
      --cache-dir build/tests/e2e/traces [unittest options, e.g. -v or TestClass.test_name]

Trace generation needs torch (Debian's python3-torch, run by --torch-python, default
/usr/bin/python3); without it the tests that need traces are skipped with a message.
"""

import argparse
import gzip
import hashlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_check import torch_missing  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_JOB = os.path.join(HERE, "train_job.py")
CATEGORIES = {"compute", "data_loading", "communication", "synchronization", "host_overhead",
              "gc", "cpu_contention", "gpu_hardware", "memory", "hang", "data_quality"}
FINDING_KEYS = {"code", "category", "title", "workers", "victims", "function",
                "function_key", "resource", "lost_ms_per_iteration", "lost_share",
                "material", "evidence"}
DATALOADER_NEXT = "enumerate(DataLoader)"

# scenario name -> train_job.py arguments. Each takes a few seconds on 2 cores.
SCENARIOS = {
    "healthy": ["--fault", "none"],
    "slow_compute_rank2": ["--fault", "slow_compute", "--fault-rank", "2"],
    "slow_data_rank1": ["--fault", "slow_data", "--fault-rank", "1", "--gzip"],
    # Code only some ranks run (issue 11 §2): 1 of 4, and 2 of 8 (8 ranks on the machine's
    # cores: fewer profiled steps keep it short).
    "extra_annotation_rank3": ["--fault", "extra_annotation", "--fault-rank", "3"],
    "extra_function_rank3": ["--fault", "extra_function", "--fault-rank", "3"],
    "extra_annotation_2of8": ["--world-size", "8", "--active", "10", "--fault",
                              "extra_annotation", "--fault-rank", "2,5"],
    "extra_function_2of8": ["--world-size", "8", "--active", "10", "--fault", "extra_function",
                            "--fault-rank", "2,5"],
    # Two roles: ranks 0-2 train one model, ranks 3-5 another.
    "two_models": ["--world-size", "6", "--roles", "two_models"],
    # The job's own torch.profiler.tensorboard_trace_handler files: no rank in them (issue 11).
    # Ten extra runs of block2 (not the default four): what this scenario checks is the
    # ranks of files without one, and on a machine that other work loads, four were within
    # what preemption costs a rank elsewhere (a clean-clone CI run: rank 0's backward +17 ms).
    "tensorboard_slow_compute_rank2": ["--world-size", "3", "--fault", "slow_compute",
                                       "--fault-rank", "2", "--slow-repeats", "10",
                                       "--tensorboard"],
    # The same with torch ops only (no record_function, no DDP: nothing user-level around the
    # forward's ops), the extra block2 work on rank 1 (issue 11 §2).
    "tensorboard_ops_only_rank1": ["--world-size", "3", "--sync", "allreduce", "--fault",
                                   "slow_compute", "--fault-rank", "1", "--tensorboard",
                                   "--no-annotations"],
}

CONFIG = argparse.Namespace(perftracker=None, cache_dir=None, torch_python="/usr/bin/python3",
                            kineto_dir=None)
TIMINGS = []  # (what, seconds), printed at the end


def log(msg):
    print(f"[e2e] {msg}", file=sys.stderr, flush=True)



_TRACES = {}
_TRACE_ERROR = None


def traces(name):
    """Directory of the scenario's traces, generated on first use (cached across runs)."""
    global _TRACE_ERROR
    if name in _TRACES:
        return _TRACES[name]
    if _TRACE_ERROR:
        raise unittest.SkipTest(_TRACE_ERROR)
    args = SCENARIOS[name]
    with open(TRAIN_JOB, "rb") as f:
        key = hashlib.sha256(f.read() + repr(args).encode()).hexdigest()[:12]
    out = os.path.join(CONFIG.cache_dir, f"{name}-{key}")
    done = os.path.join(out, "DONE")
    if not os.path.exists(done):
        # No torch: a reason to skip; a loaded machine's slow interpreter: an error
        # (torch_check).
        missing = torch_missing(CONFIG.torch_python)
        if missing:
            _TRACE_ERROR = f"{missing}: skipping tests on real torch traces"
            raise unittest.SkipTest(_TRACE_ERROR)
        shutil.rmtree(out, ignore_errors=True)
        cmd = [CONFIG.torch_python, TRAIN_JOB, "--outdir", out] + args
        for attempt in (1, 2):  # a second try if e.g. the rendezvous port was taken
            start = time.monotonic()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            took = time.monotonic() - start
            if r.returncode == 0:
                break
            log(f"train_job.py {name} failed (attempt {attempt}, rc {r.returncode}):\n"
                f"{r.stderr[-3000:]}")
        if r.returncode != 0:
            raise AssertionError(f"could not generate traces: {' '.join(cmd)}")
        TIMINGS.append((f"generate {name}", took))
        log(f"generated {name} in {took:.1f} s: {' '.join(cmd)}")
        open(done, "w").close()
    _TRACES[name] = out
    return out


def trace_files(directory):
    return sorted(os.path.join(directory, f) for f in os.listdir(directory)
                  if f.startswith("rank"))


class Result:
    def __init__(self, args, proc, seconds):
        self.args = args
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.seconds = seconds

    def stderr_lines(self):
        return [l for l in self.stderr.splitlines() if l.strip()]

    def json(self):
        try:
            return json.loads(self.stdout)
        except ValueError as e:
            raise AssertionError(f"stdout of {self.describe()} is not JSON ({e}):\n"
                                 f"{self.stdout[:2000]}") from None

    def describe(self):
        return (f"`perftracker {' '.join(self.args)}` (rc {self.rc})\n--- stderr:\n"
                f"{self.stderr[-2000:]}\n--- stdout:\n{self.stdout[:2000]}")


def perftracker(*args, timeout=120):
    start = time.monotonic()
    proc = subprocess.run([CONFIG.perftracker, *args], capture_output=True, text=True,
                          errors="replace", timeout=timeout)
    took = time.monotonic() - start
    TIMINGS.append(("perftracker " + " ".join(os.path.basename(a) for a in args), took))
    return Result(list(args), proc, took)


def handler_worker_of_rank(directory, rank):
    """tensorboard_trace_handler's worker name ("<host>_<pid>") of `rank` in a traces
    directory whose job wrote pids.txt ("rank pid" lines)."""
    with open(os.path.join(directory, "pids.txt")) as f:
        pid_of_rank = {int(a): int(b) for a, b in (line.split() for line in f)}
    return f"{socket.gethostname()}_{pid_of_rank[rank]}"


def diagnose_json(*paths):
    r = perftracker("diagnose", "--format", "json", *paths)
    return r, r.json()


class ReportChecks(unittest.TestCase):
    def check_schema(self, report):
        for key in ("num_workers", "median_iteration_ms", "has_material_finding", "notes",
                    "findings", "skipped_inputs"):
            self.assertIn(key, report)
        self.assertIsInstance(report["findings"], list)
        for f in report["findings"]:
            self.assertTrue(FINDING_KEYS <= set(f), f"finding lacks {FINDING_KEYS - set(f)}")
            self.assertIn(f["category"], CATEGORIES)
            self.assertGreaterEqual(f["lost_ms_per_iteration"], 0)
            self.assertGreaterEqual(f["lost_share"], 0)
        self.assertEqual(report["has_material_finding"],
                         any(f["material"] for f in report["findings"]))

    def top_finding(self, report, r):
        material = [f for f in report["findings"] if f["material"]]
        self.assertTrue(material, f"no material finding:\n{r.describe()}")
        return report["findings"][0]


class TracedJobTest(ReportChecks):
    """Diagnoses the traces of the real 4-rank torch job."""

    def test_healthy_job_has_no_material_finding(self):
        # This machine runs 4 ranks on 2 cores: CPU time-slicing alone makes one rank up to
        # ~8 % slower than its peers in some runs (measured: 2 of 6 healthy runs crossed the
        # default 5 % bar with a consistent, real imbalance). That is CPU contention of the
        # test machine, not a fault of the job, so the healthy check uses a 10 % bar; the
        # injected faults cost 25-50 % and are checked at the default bar.
        r, report = diagnose_json("--material-share", "0.10", traces("healthy"))
        self.assertEqual(r.rc, 0, r.describe())
        self.check_schema(report)
        self.assertEqual(report["num_workers"], 4)
        self.assertGreater(report["median_iteration_ms"], 0)
        self.assertEqual(report["skipped_inputs"], [])
        self.assertFalse(report["has_material_finding"],
                         "healthy job reported a material finding:\n" +
                         json.dumps(report["findings"][:3], indent=1))

    def test_slow_compute_names_rank2_block2(self):
        r, report = diagnose_json(traces("slow_compute_rank2"))
        self.assertEqual(r.rc, 0, r.describe())
        self.check_schema(report)
        self.assertEqual(report["num_workers"], 4)
        top = self.top_finding(report, r)
        self.assertEqual(top["workers"], [2], json.dumps(top, indent=1))
        self.assertEqual(top["function"], "block2", json.dumps(top, indent=1))
        self.assertEqual(top["category"], "compute", json.dumps(top, indent=1))
        self.assertTrue(top["material"])
        self.assertNotIn(2, top["victims"])

    def test_slow_data_gzip_names_rank1_dataloader(self):
        d = traces("slow_data_rank1")
        self.assertTrue(all(p.endswith(".json.gz") for p in trace_files(d)))
        r, report = diagnose_json(d)
        self.assertEqual(r.rc, 0, r.describe())
        self.check_schema(report)
        self.assertEqual(report["num_workers"], 4)
        top = self.top_finding(report, r)
        self.assertEqual(top["workers"], [1], json.dumps(top, indent=1))
        self.assertEqual(top["category"], "data_loading", json.dumps(top, indent=1))
        self.assertIn(DATALOADER_NEXT, top["function"], json.dumps(top, indent=1))

    def check_extra_code(self, scenario, ranks, function):
        """The ranks that run code their peers never run are the finding (not a peer group of
        their own), named with the code and what it costs per iteration."""
        r, report = diagnose_json(traces(scenario))
        self.assertEqual(r.rc, 0, r.describe())
        self.check_schema(report)
        top = self.top_finding(report, r)
        dump = json.dumps(top, indent=1) + "\n" + "\n".join(report["notes"])
        self.assertEqual(top["code"], "PT-FUNCTION-ONLY-ON-SOME", dump)
        self.assertEqual(top["workers"], ranks, dump)
        self.assertEqual(top["function"], function, dump)
        self.assertTrue(top["material"], dump)
        # It costs a large share of the iteration (compute_metrics: tens of ms per step). The
        # job loses what the others wait for it (a work finding is capped at that wait when
        # it is under half the function's time, docs/findings.md), and on a machine with
        # fewer cores than ranks the extra work also slows the others' own work, so they wait
        # less than it takes: beside two busy loops rank 3's aten::matmul took 40.1 ms/iter
        # and the others waited 19.4 ms longer (18.5 % of the iteration; quiet, a third or
        # more). Victims are not asserted for the same reason.
        self.assertGreater(top["lost_share"], 0.1, dump)
        who = ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
        self.assertIn(f"only {who} run", top["title"], dump)
        self.assertFalse(set(top["victims"]) & set(ranks), dump)
        for note in report["notes"]:
            self.assertNotIn("peer groups", note, dump)

    def test_extra_annotation_on_one_of_four_ranks(self):
        self.check_extra_code("extra_annotation_rank3", [3], "extra_eval")

    def test_extra_annotation_on_two_of_eight_ranks(self):
        self.check_extra_code("extra_annotation_2of8", [2, 5], "extra_eval")

    # A plain Python function is not in a profiler trace (no with_stack): its operators are,
    # at the top of the step, where the other ranks run no matrix product.
    def test_extra_function_on_one_of_four_ranks(self):
        self.check_extra_code("extra_function_rank3", [3], "aten::matmul")

    def test_extra_function_on_two_of_eight_ranks(self):
        self.check_extra_code("extra_function_2of8", [2, 5], "aten::matmul")

    def test_ranks_with_different_roles_are_not_compared(self):
        # Two models in one job: two peer groups, and no material finding. The 10 % bar, as
        # for the healthy job: 6 ranks share this machine's 2 cores.
        r, report = diagnose_json("--material-share", "0.10", traces("two_models"))
        self.assertEqual(r.rc, 0, r.describe())
        self.check_schema(report)
        self.assertEqual(report["num_workers"], 6)
        self.assertTrue(any("2 peer groups" in n and "sizes 3, 3" in n for n in report["notes"]),
                        report["notes"])
        # Ranks 0-2 run one model, 3-5 the other. A finding compares a rank only with its own
        # role: its culprits and victims sit in one role, and no role is blamed as a whole (what
        # comparing the two models' code would give). Whether a rank of a role stands out is
        # left to the trace: 6 ranks on 2 cores make one rank's backward 1.4x its peers' in
        # some runs (seen in a clean-clone CI run at edb8e7f, +7.1 ms, 10.4 % of the
        # iteration), a real difference in that trace which the diagnosis rightly names.
        for f in report["findings"]:
            if len(f["workers"]) in (0, report["num_workers"]):
                continue  # a job-wide finding compares no rank with another
            ranks = f["workers"] + f.get("victims", [])
            self.assertEqual(len({w // 3 for w in ranks}), 1,
                             "a finding spans the two roles:\n" + json.dumps(f, indent=1))
            if f["material"]:
                self.assertNotIn(sorted(f["workers"]), ([0, 1, 2], [3, 4, 5]),
                                 "a whole role is blamed:\n" + json.dumps(f, indent=1))

    def test_files_given_one_by_one_equal_the_directory(self):
        d = traces("slow_compute_rank2")
        r, report = diagnose_json(*trace_files(d))
        self.assertEqual(r.rc, 0, r.describe())
        self.assertEqual(report["num_workers"], 4)
        self.assertEqual(self.top_finding(report, r)["workers"], [2])

    def test_text_report_names_rank_first(self):
        r = perftracker("diagnose", traces("slow_compute_rank2"))
        self.assertEqual(r.rc, 0, r.describe())
        head = "\n".join(r.stdout.splitlines()[:8]).lower()
        self.assertRegex(head, r"rank[ s]*2\b", r.describe())
        self.assertIn("block2", head, r.describe())

    def test_html_report_contains_finding(self):
        with tempfile.TemporaryDirectory() as tmp:
            html = os.path.join(tmp, "report.html")
            r = perftracker("diagnose", "--html", html, traces("slow_compute_rank2"))
            self.assertEqual(r.rc, 0, r.describe())
            self.assertTrue(os.path.exists(html), r.describe())
            with open(html, encoding="utf-8") as f:
                page = f.read()
            self.assertIn("<html", page.lower())
            self.assertIn("block2", page)
            self.assertRegex(page.lower(), r"rank[ s]*2\b")
            self.assertTrue(r.stdout.strip(), "the text report should still go to stdout")

    def test_directory_with_one_truncated_file_still_diagnoses_the_others(self):
        with tempfile.TemporaryDirectory() as tmp:
            for path in trace_files(traces("slow_compute_rank2"))[:3]:  # ranks 0..2
                shutil.copy(path, tmp)
            good = os.path.join(traces("slow_compute_rank2"), "rank3.json")
            bad = os.path.join(tmp, "rank3.json")
            with open(good, "rb") as src, open(bad, "wb") as dst:
                dst.write(src.read()[: os.path.getsize(good) // 2])
            r, report = diagnose_json(tmp)
            self.assertEqual(r.rc, 1, r.describe())
            self.assertEqual(report["num_workers"], 3, r.describe())
            self.assertEqual([os.path.basename(s["path"]) for s in report["skipped_inputs"]],
                             ["rank3.json"])
            self.assertTrue(report["skipped_inputs"][0]["error"])
            skipped = [l for l in r.stderr_lines() if "skipped" in l]
            self.assertEqual(len(skipped), 1, r.describe())
            self.assertIn("rank3.json", skipped[0])
            self.assertTrue(skipped[0].startswith("perftracker: skipped "), skipped[0])
            self.assertEqual(self.top_finding(report, r)["workers"], [2])

    def test_a_single_file_without_rank_is_rank_0_and_the_report_says_so(self):
        # A single-GPU job's or an inference server's trace, or a renamed file: one file is
        # one worker (17 of the ~50 public traces under ../shared/data name no rank).
        with tempfile.TemporaryDirectory() as tmp:
            plain = os.path.join(tmp, "trace.json")
            shutil.copy(os.path.join(traces("healthy"), "rank0.json"), plain)
            r = perftracker("diagnose", "--format", "json", plain)
            self.assertEqual(r.rc, 0, r.describe())
            report = r.json()
            self.assertEqual(report["num_workers"], 1)
            self.assertEqual([w["rank"] for w in report["workers"]], [0])
            said = [n for n in report["notes"] if "names no rank" in n]
            self.assertEqual(len(said), 1, report["notes"])
            self.assertIn("trace.json", said[0])
            self.assertIn("rank 0", said[0])
            r = perftracker("diagnose", "--format", "json", "--rank", "3", plain)
            self.assertEqual(r.rc, 0, r.describe())
            self.assertEqual([w["rank"] for w in r.json()["workers"]], [3])
            self.assertFalse([n for n in r.json()["notes"] if "names no rank" in n])

    def test_several_files_without_rank_are_numbered_by_name_and_the_report_says_so(self):
        # Files that name no rank, with no other file that does: one job's workers, numbered
        # in the natural order of their names (b2 before b10), each mapped back to its file.
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("b10.json", "b2.json"):
                shutil.copy(os.path.join(traces("healthy"), "rank0.json"),
                            os.path.join(tmp, name))
            r = perftracker("diagnose", "--format", "json", tmp)
            self.assertEqual(r.rc, 0, r.describe())
            report = r.json()
            self.assertEqual(report["num_workers"], 2)
            sources = {w["rank"]: os.path.basename(w["source"]) for w in report["workers"]}
            self.assertEqual(sources, {0: "b2.json", 1: "b10.json"})
            said = [n for n in report["notes"] if n.startswith("ranks numbered by file")]
            self.assertEqual(len(said), 1, report["notes"])
            self.assertIn("rank 0 = b2.json, rank 1 = b10.json", said[0])
            self.assertEqual(report["notes"][0], said[0], "the mapping comes first")

    def test_two_cycles_of_one_tensorboard_worker_keep_the_first(self):
        # tensorboard_trace_handler writes one file per profiling cycle: two files of one
        # process are not two workers.
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(traces("healthy"), "rank0.json")
            for name in ("node1_41.1700000000100.pt.trace.json",
                         "node1_41.1700000000200.pt.trace.json",
                         "node1_42.1700000000150.pt.trace.json"):
                shutil.copy(src, os.path.join(tmp, name))
            r = perftracker("diagnose", "--format", "json", tmp)
            self.assertEqual(r.rc, 1, r.describe())
            report = r.json()
            self.assertEqual(report["num_workers"], 2)
            lines = [l for l in r.stderr_lines() if "skipped" in l]
            self.assertEqual(len(lines), 1, r.describe())
            self.assertIn("node1_41.1700000000200.pt.trace.json: another trace of worker "
                          "node1_41, already read from", lines[0])
            said = [n for n in report["notes"] if n.startswith("ranks numbered by file")]
            self.assertIn("rank 0 = node1_41, rank 1 = node1_42", said[0])


class TensorboardTraceTest(ReportChecks):
    """A job's own torch.profiler.tensorboard_trace_handler traces: files named
    <host>_<pid>.<ms>.pt.trace.json, with no rank in them (torch 1.13 CPU: bare lists)."""

    def test_slow_rank_is_named_by_its_file(self):
        directory = traces("tensorboard_slow_compute_rank2")
        files = sorted(f for f in os.listdir(directory) if f.endswith(".pt.trace.json"))
        self.assertEqual(len(files), 3, files)
        slow_worker = handler_worker_of_rank(directory, 2)
        r, report = diagnose_json(directory)
        self.assertEqual(r.rc, 0, r.describe())
        self.check_schema(report)
        self.assertEqual(report["num_workers"], 3)
        self.assertEqual(report["skipped_inputs"], [])
        top = self.top_finding(report, r)
        self.assertEqual(top["category"], "compute", json.dumps(top, indent=1))
        self.assertEqual(top["function"], "block2", json.dumps(top, indent=1))
        self.assertEqual(len(top["workers"]), 1, json.dumps(top, indent=1))
        culprit = top["workers"][0]
        source = {w["rank"]: os.path.basename(w["source"]) for w in report["workers"]}
        self.assertTrue(source[culprit].startswith(slow_worker + "."),
                        f"culprit rank {culprit} is {source[culprit]}, not {slow_worker}")
        said = [n for n in report["notes"] if n.startswith("ranks numbered by file")]
        self.assertEqual(len(said), 1, report["notes"])
        self.assertIn(f"rank {culprit} = {slow_worker}", said[0])
        # The text report shows the mapping too.
        r = perftracker("diagnose", directory)
        self.assertEqual(r.rc, 0, r.describe())
        self.assertIn(f"rank {culprit} = {slow_worker}", " ".join(r.stdout.split()))


class OpsOnlyTraceTest(ReportChecks):
    """A trace of torch ops alone (torch.profiler without with_stack, nothing annotated): every
    op is a root by its key; one slow call chain must still be one finding (issue 11 §2)."""

    def test_a_slow_op_chain_is_one_finding_named_by_its_outermost_op(self):
        directory = traces("tensorboard_ops_only_rank1")
        slow_worker = handler_worker_of_rank(directory, 1)
        r, report = diagnose_json(directory)
        self.assertEqual(r.rc, 0, r.describe())
        self.check_schema(report)
        source = {w["rank"]: os.path.basename(w["source"]) for w in report["workers"]}
        culprit = [rank for rank, s in source.items() if s.startswith(slow_worker + ".")]
        self.assertEqual(len(culprit), 1, source)
        on_culprit = [f for f in report["findings"] if f["workers"] == culprit]
        names = [f["function"] for f in on_culprit]
        top = self.top_finding(report, r)
        self.assertEqual(top["workers"], culprit, json.dumps(top, indent=1))
        # block2 repeated: aten::linear (> aten::addmm) and aten::relu (> aten::clamp_min).
        self.assertIn(top["function"], ("aten::linear", "aten::relu"), names)
        linear = [f for f in on_culprit if f["function"] == "aten::linear"]
        self.assertEqual(len(linear), 1, names)
        self.assertIn("aten::addmm", json.dumps(linear[0]["evidence"]),
                      "the ops the excess went into are the finding's evidence")
        self.assertNotIn("aten::addmm", names, "a nested op came out as a sibling finding")
        # relu's excess (4 more calls of ~0.1 ms) is near the 0.5 %-of-the-iteration floor of
        # an anomaly: only where relu is one must clamp_min be inside its finding.
        if "aten::relu" in names:
            self.assertNotIn("aten::clamp_min", names, "a nested op came out as a sibling")


class BadInputTest(unittest.TestCase):
    """Every kind of unusable input: exit 2 and one stderr line that names the input."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="perftracker-e2e-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def valid_trace_bytes(self):
        """A small valid trace: a real one when torch is there, else a hand-written one."""
        try:
            with open(os.path.join(traces("healthy"), "rank0.json"), "rb") as f:
                return f.read()
        except unittest.SkipTest:
            events = []
            for step in range(5):
                t = step * 1000
                events.append({"name": f"ProfilerStep#{step}", "ph": "X", "ts": t, "dur": 900,
                               "pid": 1, "tid": 1, "args": {}})
                events.append({"name": "block1", "ph": "X", "ts": t + 10, "dur": 500,
                               "pid": 1, "tid": 1, "args": {}})
            return json.dumps(events).encode()

    def expect_one_error(self, name_in_message, *args):
        r = perftracker("diagnose", *args)
        self.assertEqual(r.rc, 2, r.describe())
        lines = r.stderr_lines()
        self.assertEqual(len(lines), 1, "expected exactly one stderr line:\n" + r.describe())
        self.assertIn(name_in_message, lines[0], r.describe())
        self.assertFalse(r.stdout.strip(), "no report on stdout when nothing was diagnosed")
        self.assertLess(len(lines[0]), 400)
        return lines[0]

    def test_truncated(self):
        data = self.valid_trace_bytes()
        path = self.write("rank0.json", data[: len(data) // 2])
        self.expect_one_error(path, path)

    def test_truncated_gzip(self):
        data = gzip.compress(self.valid_trace_bytes())
        path = self.write("rank0.json.gz", data[: len(data) // 2])
        self.expect_one_error(path, path)

    def test_not_json(self):
        path = self.write("rank0.json", b"this is not a trace\nat all\n")
        self.expect_one_error(path, path)

    def test_wrong_schema(self):
        path = self.write("rank0.json", json.dumps({"hello": [1, 2, 3]}).encode())
        self.expect_one_error(path, path)

    def test_wrong_schema_list_of_numbers(self):
        path = self.write("rank0.json", b"[1, 2, 3]")
        self.expect_one_error(path, path)

    def test_empty(self):
        path = self.write("rank0.json", b"")
        self.expect_one_error(path, path)

    def test_binary(self):
        path = self.write("rank0.json", random.Random(7).randbytes(4096))
        self.expect_one_error(path, path)

    def test_binary_named_gz(self):
        path = self.write("rank0.json.gz", random.Random(8).randbytes(4096))
        self.expect_one_error(path, path)

    def test_no_rank_in_name_or_content(self):
        # Alone, such a file is rank 0 (DiagnoseTest); beside another, it needs its rank.
        data = self.valid_trace_bytes()
        self.assertNotIn(b"distributedInfo", data[:4096])
        path = self.write("trace.json", data)
        other = self.write("rank1.json", data)
        r = perftracker("diagnose", path, other)
        self.assertEqual(r.rc, 1, r.describe())
        lines = [l for l in r.stderr_lines() if path in l]
        self.assertEqual(len(lines), 1, r.describe())
        self.assertIn("cannot tell which rank", lines[0])
        self.assertIn("rename it", lines[0], "the message should say how to give the rank")

    def test_missing_path(self):
        path = os.path.join(self.tmp, "no-such-dir", "rank0.json")
        self.expect_one_error(path, path)

    def test_fifo_without_writer_is_refused_not_waited_on(self):
        # Opening a FIFO nobody writes to blocks forever: refuse it before reading.
        path = os.path.join(self.tmp, "rank0.json")
        os.mkfifo(path)
        line = self.expect_one_error(path, path)
        self.assertIn("FIFO", line)

    def test_socket_is_refused(self):
        import socket
        path = os.path.join(self.tmp, "rank0.json")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(path)
            line = self.expect_one_error(path, path)
            self.assertIn("socket", line)
        finally:
            s.close()

    def test_device_is_refused(self):
        line = self.expect_one_error("/dev/zero", "/dev/zero")
        self.assertIn("device", line)

    def test_symlink_loop_says_so(self):
        a = os.path.join(self.tmp, "a.json")
        b = os.path.join(self.tmp, "b.json")
        os.symlink(b, a)
        os.symlink(a, b)
        line = self.expect_one_error(a, a)
        self.assertIn("symlink loop", line)
        self.assertNotIn("no such file", line)

    def test_special_files_in_a_directory_are_skipped_with_their_reason(self):
        # A directory walk meets a FIFO and a symlink loop under trace names (issue 13 item 5):
        # neither is read nor passed over in silence: each is a skipped input with its reason
        # (exit 1, as for a truncated file in a directory), the good file is diagnosed.
        self.write("rank0.json", self.valid_trace_bytes())
        os.mkfifo(os.path.join(self.tmp, "rank1.json"))
        os.symlink(os.path.join(self.tmp, "rank2.json"), os.path.join(self.tmp, "rank2.json"))
        r = perftracker("diagnose", "--format", "json", self.tmp)
        self.assertEqual(r.rc, 1, r.describe())
        report = json.loads(r.stdout)
        self.assertEqual(report["num_workers"], 1, r.describe())
        skipped = {os.path.basename(s["path"]): s["error"] for s in report["skipped_inputs"]}
        self.assertEqual(sorted(skipped), ["rank1.json", "rank2.json"], r.describe())
        self.assertIn("is a FIFO", skipped["rank1.json"])
        self.assertIn("symlink loop", skipped["rank2.json"])

    def test_directory_without_traces(self):
        self.write("notes.txt", b"nothing here")
        self.expect_one_error(self.tmp, self.tmp)

    def test_bad_format_option(self):
        path = self.write("rank0.json", self.valid_trace_bytes())
        line = self.expect_one_error("xml", "--format", "xml", path)
        self.assertIn("--format", line)

    def test_bad_ranks_per_host_option(self):
        path = self.write("rank0.json", self.valid_trace_bytes())
        for value in ("0", "-1", "two"):
            line = self.expect_one_error("--ranks-per-host", "--ranks-per-host", value, path)
            self.assertIn(value, line)

    def test_no_paths(self):
        r = perftracker("diagnose")
        self.assertEqual(r.rc, 2, r.describe())
        self.assertTrue(r.stderr_lines(), r.describe())


class CommandLineTest(unittest.TestCase):
    def test_version(self):
        r = perftracker("--version")
        self.assertEqual(r.rc, 0, r.describe())
        self.assertRegex(r.stdout, r"\d+\.\d+\.\d+")

    def test_help(self):
        for args in (["--help"], ["diagnose", "--help"]):
            r = perftracker(*args)
            self.assertEqual(r.rc, 0, r.describe())
            self.assertIn("diagnose", r.stdout)
        self.assertIn("--format", perftracker("diagnose", "--help").stdout)
        self.assertIn("--ranks-per-host", perftracker("diagnose", "--help").stdout)

    def test_unknown_subcommand(self):
        r = perftracker("diagnoze")
        self.assertEqual(r.rc, 2, r.describe())
        self.assertTrue(r.stderr_lines())


class BundledExampleTest(ReportChecks):
    """examples/straggler, what scripts/setup.sh diagnoses (needs no torch)."""

    def test_example_names_rank2_block2(self):
        example = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "straggler")
        r, report = diagnose_json(example)
        self.assertEqual(r.rc, 0, r.describe())
        self.check_schema(report)
        self.assertEqual(report["num_workers"], 4)
        top = self.top_finding(report, r)
        self.assertEqual((top["workers"], top["function"], top["category"]),
                         ([2], "block2", "compute"), json.dumps(top, indent=1))


class RealGpuTraceTest(ReportChecks):
    """Traces of a real 128-GPU NCCL job (shared test data; skipped when absent)."""

    def setUp(self):
        d = CONFIG.kineto_dir
        self.files = [os.path.join(d, f"gpu128_rank-{r}.json.gz") for r in (0, 1)] if d else []
        if not self.files or not all(os.path.exists(f) for f in self.files):
            self.skipTest(f"real GPU traces not found in {d!r} "
                          "(shared/data/kineto next to the repository): skipping")

    def test_two_ranks_of_a_128_gpu_job(self):
        r, report = diagnose_json(*self.files)
        self.assertEqual(r.rc, 0, r.describe())
        self.check_schema(report)
        self.assertEqual(report["num_workers"], 2)
        self.assertGreater(report["median_iteration_ms"], 0)
        r = perftracker("diagnose", *self.files)
        self.assertEqual(r.rc, 0, r.describe())


class RealGpuTraceGoldenTest(ReportChecks):
    """Golden diagnoses of real GPU traces written by other projects (shared test data, see
    ../shared/data/kineto/README.md; each test skips when its files are absent).

    Every expectation below was checked by reading the trace itself with python (json +
    gzip: ProfilerStep spans, the union of kernel / copy intervals per step, which host
    ranges cover the GPU's idle gaps), not copied from perftracker's output; the numbers
    quoted are those readings."""

    def files(self, *names):
        d = CONFIG.kineto_dir
        paths = [os.path.join(d, n) for n in names] if d else []
        if not paths or not all(os.path.exists(p) for p in paths):
            self.skipTest(f"{names} not found in {d!r}: skipping")
        return paths

    def diagnose(self, *names):
        paths = self.files(*names)
        args = ["--rank", "0"] if len(paths) == 1 else []
        r = perftracker("diagnose", "--format", "json", *args, *paths, timeout=300)
        self.assertEqual(r.rc, 0, r.describe())
        report = r.json()
        self.check_schema(report)
        for w in report.get("workers", []):
            st = w["stats"]
            self.assertEqual((st["out_of_order_events"], st["dropped_events"],
                              st["malformed_events"]), (0, 0, 0), st)
        return r, report

    def assert_no_device_copy_as_pcie(self, report):
        for f in report["findings"]:
            fn = f.get("function") or ""
            if "DtoD" in fn or "PtoP" in fn:
                self.fail(f"a device-to-device copy reported as {f['resource']}: {f['title']}")
            self.assertNotIn("DtoD", f["title"], f["title"])

    def test_128_gpu_job_is_host_bound(self):
        """gpu128 ranks 0 and 1 (HTA): steps of 607-631 ms in which the GPU is busy (kernels
        and copies, union) 269-308 ms, so it idles 51-57 % of each step. The idle gaps of
        more than 1 ms (557 ms over rank 0's two steps) lie under Optimizer.step#Shampoo.step
        (~200 ms per step of host-side foreach ops: 59, 57, 32 ms gaps) and "## backward ##",
        while cudaLaunchKernel totals only ~10 ms: the host's own work starves the GPU. So a
        job-wide host-overhead finding costing about half of each iteration."""
        r, report = self.diagnose("gpu128_rank-0.json.gz", "gpu128_rank-1.json.gz")
        top = self.top_finding(report, r)
        self.assertEqual(top["category"], "host_overhead", json.dumps(top, indent=1))
        self.assertTrue(top["material"])
        self.assertEqual(top["workers"], [], "job-wide: both ranks")
        self.assertGreaterEqual(top["lost_share"], 0.45)
        self.assertLessEqual(top["lost_share"], 0.65)
        self.assert_no_device_copy_as_pcie(report)

    def test_nccl_ddp_rank_is_host_bound(self):
        """nccl2 rank 0 (HTA): three steps of 220-225 ms with the GPU busy 49-58 ms (74-78 %
        idle). The biggest gaps (15.5 and 7.6 ms, every step) are under
        DistributedDataParallel.forward in aten::unflatten_dense_tensors, host work. The DtoD
        copies (0.76 ms per step) are GPU work, never PCIe."""
        r, report = self.diagnose("nccl2_rank-0.json.gz")
        top = self.top_finding(report, r)
        self.assertEqual(top["category"], "host_overhead", json.dumps(top, indent=1))
        self.assertGreaterEqual(top["lost_share"], 0.65)
        self.assertLessEqual(top["lost_share"], 0.85)
        self.assert_no_device_copy_as_pcie(report)

    def test_b200_eager_decode_without_step_markers_is_host_bound(self):
        """TraceLens b200/eager_trace (vLLM eager decode): no ProfilerStep, one 87.4 ms
        execute_context range; the GPU is busy 11.6 ms of it (87 % idle) while the host runs
        Python (15,230 python_function events); kernels are tiny (median 6.3 us). The file is
        one iteration, and it is host-bound. Its DtoD copies (0.78 ms) are not PCIe."""
        r, report = self.diagnose("external/tracelens/tests/traces/b200/eager_trace.json.gz")
        top = self.top_finding(report, r)
        self.assertEqual(top["category"], "host_overhead", json.dumps(top, indent=1))
        self.assertGreaterEqual(top["lost_share"], 0.75)
        self.assert_no_device_copy_as_pcie(report)

    def test_a_trace_of_cuda_graph_capture_is_not_host_bound(self):
        """TraceLens inference/sglang_decode/capture_traces/bs_32_rank0 and
        vllm_decode_full/capture_traces/graph_capture_rank_0 (ROCm): traces taken while the
        server captured its HIP graphs. sglang: 546 launch calls (hipLaunchKernel 401,
        hipExtModuleLaunchKernel 145) beside 508 hipStreamGetCaptureInfo calls, and 2 kernels
        ran; vLLM: 428 launches, 7 kernels (19.6 us of GPU work in 59.2 ms). Launches into a
        graph being captured run nothing, so the idle GPU says nothing about host overhead
        (they were "host / launch-bound, the GPU idle 100 %"): no material finding, and a
        note that names the rank, its launches and kernels, and the reason."""
        base = "external/tracelens/tests/traces/inference/"
        for name, launches, kernels in (
                ("sglang_decode/capture_traces/bs_32_rank0.json.gz", "546", "2"),
                ("vllm_decode_full/capture_traces/"
                 "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz", "428", "7")):
            with self.subTest(name):
                r, report = self.diagnose(base + name)
                self.assertFalse(report["has_material_finding"],
                                 json.dumps(report["findings"], indent=1))
                notes = [n for n in report["notes"] if "kernel launches" in n]
                self.assertEqual(len(notes), 1, report["notes"])
                self.assertIn(f"rank 0: {launches} kernel launches, {kernels} kernels ran",
                              notes[0])
                self.assertIn("graph being captured", notes[0])

    def test_a_trace_of_cuda_initialization_says_so(self):
        """HTA critical_path/alexnet (A100): one 43.4 s window with no ProfilerStep, in which
        the GPU computes 10.7 ms. 29.9 s of it is one cudaDeviceGetStreamPriorityRange call
        (the first CUDA call of the process: it creates the context), 6.5 s cudaFree and
        1.9 s cudaMalloc (first allocations), 10.8 s the first cudnn convolution: the trace
        holds the job's start, not a step of its training. "Host / launch-bound" said nothing
        about that; the finding names the one-off calls and says to profile after warm-up."""
        r, report = self.diagnose(
            "external/hta/tests/data/critical_path/alexnet/"
            "benchmark_result_2869224_1695835535_trace.json.gz")
        top = self.top_finding(report, r)
        dump = json.dumps(top, indent=1)
        self.assertEqual(top["code"], "PT-HOST-BOUND", dump)
        self.assertIn("CUDA initialization", top["title"], dump)
        self.assertIn("cudaDeviceGetStreamPriorityRange", top["title"], dump)
        self.assertIn("warm-up", json.dumps(top["evidence"]), dump)

    def test_gpu_bound_inference_has_no_material_finding(self):
        """TraceLens h100/Qwen1.5-0.5B-Chat: one 47.2 ms ProfilerStep in which the GPU is busy
        43.3 ms (92 %): the GPU sets the pace, nothing else costs a material share. (Its two
        cudaDeviceSynchronize calls end the step; at most a minor finding.)"""
        r, report = self.diagnose(
            "external/tracelens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
        self.assertFalse(report["has_material_finding"], json.dumps(report["findings"], indent=1))

    def test_rocm_compiled_inference_is_host_bound(self):
        """TraceLens inference/xdit_sd_3.5 (ROCm, torch.compile regions): one 1195 ms
        ProfilerStep with the GPU busy 712.5 ms (kernels and copies, union): idle 40 %. Only
        79 ms of that idle time is in gaps over 1 ms; the rest is thousands of short gaps
        between 8,000 kernels launched by the host (hipLaunchKernel / hipExtModuleLaunchKernel,
        median kernel 21.6 us): host / launch overhead, about 40 % of the iteration."""
        r, report = self.diagnose(
            "external/tracelens/tests/traces/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz")
        top = self.top_finding(report, r)
        self.assertEqual(top["category"], "host_overhead", json.dumps(top, indent=1))
        self.assertGreaterEqual(top["lost_share"], 0.33)
        self.assertLessEqual(top["lost_share"], 0.47)
        self.assert_no_device_copy_as_pcie(report)

    def test_single_process_data_loading_starves_the_gpu(self):
        """TraceLens h100/google_owlv2: one 1211 ms ProfilerStep holding five
        enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ calls of 122-128 ms
        (619 ms, 51 %); the GPU is busy 567 ms, so its ~644 ms of idle time is almost all the
        data loading. The finding is data loading (PT-DATA-CRITICAL, about half the
        iteration), and the same idle time is not reported again as host / launch-bound
        (it was, at 53 %, ranked first)."""
        r, report = self.diagnose(
            "external/tracelens/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz")
        top = self.top_finding(report, r)
        self.assertEqual(top["category"], "data_loading", json.dumps(top, indent=1))
        self.assertGreaterEqual(top["lost_share"], 0.45)
        self.assertLessEqual(top["lost_share"], 0.56)
        for f in report["findings"]:
            if f["category"] == "host_overhead":
                self.assertFalse(f["material"], json.dumps(f, indent=1))


def main():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--perftracker", default=os.environ.get("PERFTRACKER_BIN"))
    p.add_argument("--cache-dir", default=os.environ.get("PERFTRACKER_E2E_CACHE"))
    p.add_argument("--torch-python", default="/usr/bin/python3")
    p.add_argument("--kineto-dir", default=None)
    args, rest = p.parse_known_args()
    if not args.perftracker or not os.path.exists(args.perftracker):
        sys.exit(f"test_diagnose.py: pass --perftracker PATH to the built binary "
                 f"(got {args.perftracker!r})")
    CONFIG.perftracker = os.path.abspath(args.perftracker)
    CONFIG.cache_dir = os.path.abspath(
        args.cache_dir or os.path.join(tempfile.gettempdir(), "perftracker-e2e-traces"))
    CONFIG.torch_python = args.torch_python
    CONFIG.kineto_dir = args.kineto_dir or os.path.join(
        os.environ.get("PERFTRACKER_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE))),
        "..", "shared", "data", "kineto")
    os.makedirs(CONFIG.cache_dir, exist_ok=True)
    start = time.monotonic()
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    total = time.monotonic() - start
    gen = sum(s for w, s in TIMINGS if w.startswith("generate"))
    runs = [s for w, s in TIMINGS if w.startswith("perftracker")]
    log(f"timing: total {total:.1f} s; trace generation {gen:.1f} s; "
        f"{len(runs)} perftracker runs, {sum(runs):.1f} s, slowest {max(runs, default=0):.2f} s")
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
