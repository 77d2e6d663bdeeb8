#!/usr/bin/env python3
"""Every shell command in the docs runs as written (issue 13 §7).

Each ```sh block of README.md and docs/*.md is run with `bash -euo pipefail` in a fresh
directory where `perftracker` on PATH is the build's binary, `build/` is the build tree and
the source folders the docs name (examples/, scenarios/, scripts/, bench/, tests/, python/)
are links to the source tree. A block fails the test with its file and line when it exits
non-zero or runs past its time limit.

Markers, an HTML comment on the line just above the fence (invisible on a rendered page):

  <!-- doc-test: skip (needs a GPU) -->    not run; the reason is required and printed.
                                           For commands that need a GPU, root, other
                                           hosts, a database, the network or minutes.
  <!-- doc-test: server -->                run against a real `perftracker server` the test
                                           starts in that directory with the defaults a user
                                           gets (--report-dir perftracker-server, so the token
                                           is perftracker-server/server.token) and a collector
                                           of job `my-job`; the default addresses
                                           127.0.0.1:7070 / 127.0.0.1:7071 in the block are
                                           replaced by the ports it got.
  <!-- doc-test: timeout 120 -->           a longer limit than the default 60 s.

  /usr/bin/python3 tests/docs/test_docs_commands.py --perftracker build/src/perftracker/cli/perftracker
"""
import argparse
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

CONFIG = argparse.Namespace(perftracker=None, source=None, build=None)
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
LINKED = ["examples", "scenarios", "scripts", "bench", "tests", "python", "docs"]


def blocks():
    """(file relative to the source, line of the fence, marker text, body) per sh block."""
    files = [os.path.join(CONFIG.source, "README.md")] + sorted(
        glob.glob(os.path.join(CONFIG.source, "docs", "*.md")))
    for path in files:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if m.group(1) in ("sh", "bash", "shell"):
                marker = MARKER.match(lines[i - 1]) if i > 0 else None
                yield (os.path.relpath(path, CONFIG.source), i + 1,
                       marker.group(1) if marker else "", "\n".join(lines[i + 1:j]))
            i = j + 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sandbox:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="perftracker-docs-")
        self.bin = os.path.join(self.dir, ".bin")
        os.mkdir(self.bin)
        os.symlink(os.path.abspath(CONFIG.perftracker), os.path.join(self.bin, "perftracker"))
        os.symlink(CONFIG.build, os.path.join(self.dir, "build"))
        for name in LINKED:
            os.symlink(os.path.join(CONFIG.source, name), os.path.join(self.dir, name))
        self.procs = []
        self.env = dict(os.environ, PATH=self.bin + os.pathsep + os.environ["PATH"],
                        PERFTRACKER_SOURCE_DIR=CONFIG.source)

    def start(self, cmd, log):
        with open(log, "wb") as out:
            p = subprocess.Popen(cmd, cwd=self.dir, env=self.env, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def server(self):
        """A real server with a collector of job my-job; returns (grpc, http) addresses."""
        grpc, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        log = os.path.join(self.dir, "server.log")
        self.start([CONFIG.perftracker, "server", "--listen", grpc, "--http-listen", http,
                    "--report-dir", "perftracker-server"], log)
        wait_for(lambda: "listening:" in read(log), 30, "the server to listen", log)
        clog = os.path.join(self.dir, "collector.log")
        self.start([CONFIG.perftracker, "collector", "--server", grpc, "--token-file",
                    "perftracker-server/server.token", "--job-id", "my-job", "--socket",
                    os.path.join(self.dir, "c.sock")], clog)
        wait_for(lambda: re.search(r"collector .* registered", read(log)), 30,
                 "the collector of my-job to register", log)
        return grpc, http

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_for(pred, timeout, what, log):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{read(log)[-2000:]}")


class DocsCommandsTest(unittest.TestCase):
    def test_every_sh_block_runs_as_written(self):
        ran, skipped, failures = 0, [], []
        for doc, line, marker, body in blocks():
            where = f"{doc}:{line}"
            skip = re.match(r"skip\s*\((.+)\)$", marker)
            if marker.startswith("skip"):
                self.assertIsNotNone(skip, f"{where}: a skip marker needs a reason: skip (why)")
                skipped.append(f"{where}: {skip.group(1)}")
                continue
            timeout = 60
            t = re.search(r"timeout\s+(\d+)", marker)
            if t:
                timeout = int(t.group(1))
            box = Sandbox()
            try:
                script = body
                if "server" in marker.split():
                    grpc, http = box.server()
                    script = script.replace("127.0.0.1:7071", http).replace("127.0.0.1:7070", grpc)
                try:
                    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=box.dir,
                                       env=box.env, capture_output=True, text=True,
                                       timeout=timeout, start_new_session=True)
                    if r.returncode != 0:
                        failures.append(f"{where}: exit {r.returncode}\n{script}\n--- output ---\n"
                                        f"{(r.stdout + r.stderr)[-1500:]}")
                except subprocess.TimeoutExpired:
                    failures.append(f"{where}: still running after {timeout} s\n{script}")
                ran += 1
            finally:
                box.close()
        for s in skipped:
            print(f"skipped {s}")
        print(f"{ran} blocks ran, {len(skipped)} skipped, {len(failures)} failed")
        self.assertEqual(failures, [], "\n\n".join(failures))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--perftracker", required=True)
    p.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    args, rest = p.parse_known_args()
    CONFIG.perftracker = os.path.abspath(args.perftracker)
    CONFIG.source = os.path.abspath(args.source)
    # The build tree: .../src/perftracker/cli/perftracker -> ...
    CONFIG.build = os.path.abspath(os.path.join(os.path.dirname(CONFIG.perftracker), "..", "..", ".."))
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
