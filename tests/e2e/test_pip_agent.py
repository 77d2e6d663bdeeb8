#!/usr/bin/env python3
"""The agent installed the way a user installs it into their own environment, and found there
by `perftracker run` (docs/live-mode.md, "A job with its own Python"):

1. a fresh venv of another CPython (pyenv's, not the full build's /usr/bin/python3);
2. `pip install --no-build-isolation <checkout>` builds the agent for it, offline;
3. `perftracker run -- <venv>/bin/python launcher.py` with no PERFTRACKER_PYTHON_DIR: a
   3-process job without torch (ranks from RANK / WORLD_SIZE, iterations marked with
   perftracker.step()), one process doing 3x the work in `forward_pass`, a window forced with
   --trigger-at-seconds. The diagnosis names that process and its function;
4. the same venv without the agent: `perftracker run` says in one line what to install, and
   the job runs.

    test_pip_agent.py --perftracker <bin> --python <python3.X> --source <checkout>
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

CONFIG = argparse.Namespace()

WORKER = textwrap.dedent("""
    import os, sys, time
    import perftracker

    RANK = int(os.environ["RANK"])
    WORK = 3 if RANK == int(sys.argv[2]) else 1

    def forward_pass(n):
        s = 0
        for i in range(n):
            s += i * i % 7
        return s

    def other_work(n):
        return sum(range(n))

    end = time.time() + float(sys.argv[1])
    steps = 0
    while time.time() < end:
        forward_pass(20000 * WORK)
        other_work(20000)
        time.sleep(0.005)
        perftracker.step()
        steps += 1
    print("worker %d: %d steps" % (RANK, steps), file=sys.stderr)
""")

LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys
    here = os.path.dirname(os.path.abspath(__file__))
    procs = []
    for rank in range(3):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="3")
        procs.append(subprocess.Popen([sys.executable, os.path.join(here, "worker.py"),
                                       sys.argv[1], sys.argv[2]], env=env))
    sys.exit(max(p.wait() for p in procs))
""")


class PipAgentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="perftracker-pip-test-")
        cls.venv = os.path.join(cls.dir, "venv")
        subprocess.run([CONFIG.python, "-m", "venv", cls.venv], check=True)
        cls.py = os.path.join(cls.venv, "bin", "python")
        r = subprocess.run([cls.py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                            CONFIG.source], capture_output=True, text=True, timeout=1200)
        cls.install = r
        for name, text in (("worker.py", WORKER), ("launcher.py", LAUNCHER)):
            with open(os.path.join(cls.dir, name), "w") as f:
                f.write(text)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_job(self, reports, *run_args, seconds=14, slow_rank=2):
        env = {k: v for k, v in os.environ.items()
               if k not in ("PERFTRACKER_PYTHON_DIR", "PYTHONPATH", "LD_PRELOAD", "RANK",
                            "WORLD_SIZE", "LOCAL_RANK")}
        cmd = [CONFIG.perftracker, "run", "--report-dir", reports, *run_args, "--",
               self.py, os.path.join(self.dir, "launcher.py"), str(seconds), str(slow_rank)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)

    def test_1_pip_builds_the_agent_for_the_venvs_python(self):
        self.assertEqual(self.install.returncode, 0,
                         self.install.stdout[-3000:] + self.install.stderr[-3000:])
        r = subprocess.run([self.py, "-c", "import perftracker, perftracker._agent as a, sys; "
                            "print(a.__file__); print(a.hooks())"],
                           capture_output=True, text=True, cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(os.path.join(self.venv, "lib"), r.stdout)

    def test_2_a_job_without_torch_names_the_slow_process_and_its_function(self):
        self.assertEqual(self.install.returncode, 0, "pip install failed (test_1)")
        reports = os.path.join(self.dir, "reports")
        r = self.run_job(reports, "--trigger-at-seconds", "5", "--window-seconds", "4")
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out[-4000:])
        self.assertNotIn("agent is not available", out)
        self.assertNotIn("has no perftracker agent", out)
        m = re.search(r"^perftracker: final diagnosis: (\S+)", r.stdout, re.M)
        self.assertIsNotNone(m, out[-4000:])
        with open(m.group(1), encoding="utf-8") as f:
            report = json.load(f)
        self.assertEqual(sorted(w["rank"] for w in report["workers"]), [0, 1, 2], out[-2000:])
        material = [f for f in report["findings"] if f["material"]]
        self.assertTrue(material, json.dumps(report["findings"][:3], indent=1))
        top = material[0]
        self.assertEqual(top["workers"], [2], json.dumps(top, indent=1))
        self.assertIn("forward_pass", top["function"], json.dumps(top, indent=1))
        self.assertIn("worker.py", top["function"])
        print("\n[e2e-pip] %s: %s, workers %s, function %s" % (
            os.path.basename(self.py), top["code"], top["workers"], top["function"]),
            file=sys.stderr)

    def test_3_without_the_agent_one_line_says_what_to_install(self):
        bare = os.path.join(self.dir, "bare")
        subprocess.run([CONFIG.python, "-m", "venv", "--without-pip", bare], check=True)
        env = {k: v for k, v in os.environ.items()
               if k not in ("PERFTRACKER_PYTHON_DIR", "PYTHONPATH", "LD_PRELOAD")}
        job = os.path.join(self.dir, "hello.py")
        with open(job, "w") as f:
            f.write("print('job ran')\n")
        r = subprocess.run([CONFIG.perftracker, "run", "--report-dir",
                            os.path.join(self.dir, "bare-reports"), "--",
                            os.path.join(bare, "bin", "python"), job],
                           env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("job ran", r.stdout)
        said = [line for line in r.stderr.splitlines() if "has no perftracker agent" in line]
        self.assertEqual(len(said), 1, r.stderr)
        self.assertIn("pip install --no-build-isolation " + CONFIG.source, said[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--perftracker", required=True)
    ap.add_argument("--python", required=True, help="a CPython 3.10-3.13 with venv and pip")
    ap.add_argument("--source", required=True)
    args, rest = ap.parse_known_args()
    CONFIG.__dict__.update(vars(args))
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
