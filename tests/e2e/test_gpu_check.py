#!/usr/bin/env python3
"""What of scripts/gpu_check.sh runs without a GPU: the script parses (`bash -n`), its
--dry-run lists every step and runs none, and its pass / fail checks
(scripts/gpu_check_verify.py) hold on real inputs made here:

- window-report on the report directory of a real `perftracker run` whose 1-rank torch job
  traced "GPU" work with the test suite's fake libcupti (CUPTI's C ABI and CUDA 13 records:
  kernels, a host-to-device copy, cudaLaunchKernel): PASS; nccl-plugin on the same: FAIL
  (no NCCL there);
- kineto on `perftracker diagnose --format json` of a real GPU Kineto trace of the shared
  data (A100, alexnet): PASS; with an event counted as dropped: FAIL;
- nvml on a probe line of each kind.

    test_gpu_check.py --perftracker BIN --torch-python PY [--fake-cupti LIB] [--kineto-dir D]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(SOURCE, "scripts", "gpu_check.sh")
VERIFY = os.path.join(SOURCE, "scripts", "gpu_check_verify.py")
LIVE_JOB = os.path.join(SOURCE, "tests", "e2e", "live_job.py")
CONFIG = argparse.Namespace()


def verify(*args):
    r = subprocess.run([sys.executable, VERIFY, *args], capture_output=True, text=True,
                       timeout=300)
    lines = r.stdout.strip().splitlines()
    return r.returncode, lines[-1] if lines else r.stderr, r.stdout + r.stderr


class GpuCheckScriptTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="perftracker-gpu-check-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_the_script_parses_and_its_dry_run_lists_every_step(self):
        self.assertEqual(subprocess.run(["bash", "-n", SCRIPT]).returncode, 0)
        out = os.path.join(self.dir, "out")
        r = subprocess.run(["bash", SCRIPT, "--dry-run", "build", out], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "plan.txt")) as f:
            plan = f.read()
        steps = re.findall(r"^([\w-]+) \(\d+s\):$", plan, re.M)
        # The GPU checks first, the agent's own tests (no GPU needed) last.
        self.assertEqual(steps, ["machine", "build", "build-perftracker", "probe", "gpu-job",
                                 "profiler", "profiler-during", "kineto", "torch-api", "agent"],
                         plan)
        for check in ("verify nvml", "verify window-report", "verify nccl-plugin",
                      "verify kineto"):
            self.assertIn(check, plan)
        self.assertIn("-DPERFTRACKER_AGENT_ONLY=ON", plan)
        self.assertIn("--backend nccl --world-size 1", plan)
        with open(os.path.join(out, "summary.txt")) as f:
            self.assertEqual(f.read(), "")  # nothing ran
        self.assertFalse(os.path.exists(os.path.join(out, "log.txt")))

    def test_bad_arguments_say_how_to_run_it(self):
        for args in ([], ["--frobnicate", "build", self.dir]):
            r = subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 2)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_bundle_copies_the_binary_and_the_libraries_it_loads(self):
        bundle = os.path.join(self.dir, "bundle")
        r = subprocess.run(["bash", SCRIPT, "--bundle", CONFIG.perftracker, bundle],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^gpu_check: .*/perftracker and \d+ libraries in ")
        libs = set(os.listdir(os.path.join(bundle, "lib")))
        ldd = subprocess.run(["ldd", CONFIG.perftracker], capture_output=True, text=True).stdout
        for line in ldd.splitlines():
            m = re.match(r"\s*(\S+) => /", line)
            if not m:
                continue
            # glibc's own libraries (libresolv too: it calls libc's private symbols) stay
            # the target's.
            runtime = re.match(r"lib(c|m|stdc\+\+|gcc_s|pthread|dl|rt|resolv|anl|nsl|util|asan|ubsan)\.so",
                               m.group(1))
            self.assertEqual(m.group(1) in libs, not runtime, m.group(1))
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(bundle, "lib"))
        r = subprocess.run([os.path.join(bundle, "perftracker"), "--version"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_nvml_check_reads_the_probe(self):
        probe = os.path.join(self.dir, "probe.log")
        with open(probe, "w") as f:
            f.write("NVML    1 GPU(s), 17 metric values in the second sample\n")
        rc, last, out = verify("nvml", probe)
        self.assertEqual((rc, last), (0, "PASS nvml: 1 GPU(s), 17 metric values in one sample"))
        with open(probe, "w") as f:
            f.write("NVML    not available: NVML: cannot load libnvidia-ml.so.1\n")
        rc, last, out = verify("nvml", probe)
        self.assertEqual(rc, 1)
        self.assertIn("FAIL nvml: perftracker probe: NVML    not available", last)

    def test_window_report_check_on_a_real_run_with_the_fake_cupti(self):
        if not CONFIG.fake_cupti or not os.path.exists(CONFIG.fake_cupti):
            self.skipTest("no fake libcupti (built only with the CUDA toolkit's CUPTI headers)")
        reports = os.path.join(self.dir, "reports")
        env = dict(os.environ, PERFTRACKER_CUPTI_LIBRARY=CONFIG.fake_cupti)
        # The one window is the forced one, 3 s in: the detector is off (--slowdown-ratio
        # 100) and the job runs long enough to reach it. With the detector on, start-up
        # noise opened a slowdown window 0.3 s after the first hello (--max-windows 1: the
        # only one), which held no fake-CUPTI kernel ("rank 0 has no device work"); and on a
        # quiet machine 150 steps end in ~3.2 s, before the forced trigger. It failed 2 of 5,
        # and 4 of 4 run by hand, on main at ccb741a and b6c621e (2026-11-26).
        r = subprocess.run(
            [CONFIG.perftracker, "run", "--report-dir", reports, "--gpu-tracing", "always",
             "--slowdown-ratio", "100",
             "--trigger-at-seconds", "3", "--window-seconds", "3", "--max-windows", "1",
             "--window-iterations", "20", "--", CONFIG.torch_python, LIVE_JOB,
             "--world-size", "1", "--fault-rank", "0", "--steps", "600"],
            env=env, capture_output=True, text=True, timeout=900)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        rc, last, out = verify("window-report", reports)
        self.assertEqual(rc, 0, out)
        self.assertRegex(last, r"^PASS window-report: 1 report\(s\); kernels on every worker")
        self.assertIn("cudaLaunchKernel", out)
        self.assertIn("Memcpy HtoD", out)
        # The plugin check reads NCCL's own log: this CPU job's has no NCCL line.
        log = os.path.join(self.dir, "job.log")
        with open(log, "w") as f:
            f.write(r.stdout + r.stderr)
        rc, last, out = verify("nccl-plugin", reports, log)
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL nccl-plugin: NCCL did not load perftracker's profiler plugin", last)
        # NCCL 2.28.9's lines on the H200 machine (2026-11-27), world size 1: loaded, and a
        # 1-rank communicator records no operation; with 2 ranks and none recorded: a failure.
        loaded = ("vm:894:894 [0] NCCL INFO PROFILER/Plugin: Loaded perftracker (v5)\n"
                  "vm:894:894 [0] NCCL INFO ncclCommInitRankConfig comm 0x3f61f5c0 rank 0 "
                  "nranks %d cudaDev 0 nvmlDev 0 busId 60 commId 0xf891263a60eabe0c - Init "
                  "COMPLETE\n")
        with open(log, "w") as f:
            f.write(loaded % 1)
        rc, last, out = verify("nccl-plugin", reports, log)
        self.assertEqual(rc, 0, out)
        self.assertIn("PASS nccl-plugin: NCCL loaded the plugin (v5); a 1-rank communicator", last)
        with open(log, "w") as f:
            f.write(loaded % 2)
        rc, last, out = verify("nccl-plugin", reports, log)
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL nccl-plugin: NCCL loaded the plugin (v5) but no nccl:* operation", last)
        rc, last, out = verify("window-report", os.path.join(self.dir, "nothing"))
        self.assertEqual(rc, 1)
        self.assertIn("FAIL window-report: no window report", last)

    def test_kineto_check_on_a_real_gpu_trace(self):
        trace = os.path.join(CONFIG.kineto_dir or "", "alexnet_1gpu.json.gz")
        if not os.path.exists(trace):
            self.skipTest("no shared GPU trace %s" % trace)
        diagnosis = os.path.join(self.dir, "diagnose.json")
        with open(diagnosis, "w") as f:
            r = subprocess.run([CONFIG.perftracker, "diagnose", "--format", "json", trace],
                               stdout=f, stderr=subprocess.PIPE, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        rc, last, out = verify("kineto", diagnosis, trace)
        self.assertEqual(rc, 0, out)
        self.assertRegex(last, r"^PASS kineto: 1 worker\(s\), \d+ events imported of \d+ "
                               r"complete events in the trace, none lost$")
        with open(diagnosis) as f:
            report = json.load(f)
        report["workers"][0]["stats"]["dropped_events"] = 3
        with open(diagnosis, "w") as f:
            json.dump(report, f)
        rc, last, out = verify("kineto", diagnosis, trace)
        self.assertEqual(rc, 1)
        self.assertIn("lost events: {'dropped_events': 3}", last)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--perftracker", required=True)
    ap.add_argument("--torch-python", default="/usr/bin/python3")
    ap.add_argument("--fake-cupti", default="")
    ap.add_argument("--kineto-dir", default="")
    CONFIG, rest = ap.parse_known_args()
    CONFIG.perftracker = os.path.abspath(CONFIG.perftracker)
    unittest.main(argv=[sys.argv[0]] + rest)
