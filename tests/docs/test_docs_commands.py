#!/usr/bin/env python3
"""Every shell command in the docs runs as written (issue 13 §7).

Every fenced block of README.md and docs/*.md says what it holds: ```sh (commands),
```console (a transcript: `$ command` lines and what they print), ```text (output, a
synopsis, a diagram), or a language (python, json, yaml); an untyped fence fails the test,
so a command cannot hide in a block that nothing runs.

Each ```sh block is run with `bash -euo pipefail` in a fresh
directory where `perftracker` on PATH is the build's binary, `build/` is the build tree and
the source folders the docs name (examples/, scenarios/, scripts/, bench/, tests/, python/)
are links to the source tree. A block fails the test with its file and line when it exits
non-zero or runs past its time limit. Each ```console block runs its `$` commands (a `\`
at a line's end continues the command) the same way, and every finding code (PT-...) that
the transcript shows must appear in what the commands print: the transcript's verdict is
checked, not only its exit status.

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
  <!-- doc-test: job -->                   the block runs a Python job that loads perftracker's
                                           agent: it gets the --job-env settings (a sanitized
                                           build's runtimes); other blocks do not.
Markers combine: `<!-- doc-test: job, timeout 400 -->`.

  /usr/bin/python3 tests/docs/test_docs_commands.py --perftracker build/src/perftracker/cli/perftracker
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

CONFIG = argparse.Namespace(perftracker=None, source=None, build=None, job_env={})
FENCE = re.compile(r"^```(\w*)\s*$")
RUN_KINDS = ("sh", "bash", "shell", "console")
KNOWN_KINDS = RUN_KINDS + ("text", "python", "json", "yaml", "proto", "cpp", "ini", "toml")
MARKER = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
LINKED = ["examples", "scenarios", "scripts", "bench", "tests", "python", "docs"]


def fenced_blocks():
    """(file relative to the source, line of the fence, kind, marker text, body) per block."""
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
            marker = MARKER.match(lines[i - 1]) if i > 0 else None
            yield (os.path.relpath(path, CONFIG.source), i + 1, m.group(1),
                   marker.group(1) if marker else "", "\n".join(lines[i + 1:j]))
            i = j + 1


def blocks():
    """(file, line, kind, marker, body) of the blocks that are run."""
    for doc, line, kind, marker, body in fenced_blocks():
        if kind in RUN_KINDS:
            yield doc, line, kind, marker, body


def console_script(body):
    """The commands of a console transcript as one script, and the finding codes it shows."""
    commands, output, current = [], [], None
    for raw in body.split("\n"):
        if current is not None:
            current.append(raw)
        elif raw.startswith("$ "):
            current = [raw[2:]]
        else:
            output.append(raw)
            continue
        if not current[-1].rstrip().endswith("\\"):
            commands.append("\n".join(current))
            current = None
    if current is not None:
        commands.append("\n".join(current))
    codes = sorted(set(re.findall(r"\bPT-[A-Z0-9-]*[A-Z0-9]", "\n".join(output))))
    return "\n".join(commands), codes


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
        # Port 0: the server binds ports the kernel picks and says which (a port found free
        # beforehand can be taken by another process before the server binds it).
        log = os.path.join(self.dir, "server.log")
        self.start([CONFIG.perftracker, "server", "--listen", "127.0.0.1:0", "--http-listen",
                    "127.0.0.1:0", "--report-dir", "perftracker-server"], log)
        listening = r"listening: grpc=(127\.0\.0\.1:\d+) http=http://(127\.0\.0\.1:\d+)"
        wait_for(lambda: re.search(listening, read(log)), 30, "the server to listen", log)
        grpc, http = re.search(listening, read(log)).groups()
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
    def test_every_block_says_what_it_holds(self):
        untyped = []
        for doc, line, kind, _, body in fenced_blocks():
            first = body.split("\n", 1)[0]
            if kind not in KNOWN_KINDS:
                untyped.append(f"{doc}:{line}: a ``` block with no kind ({first[:60]!r}): say "
                               f"```sh (commands), ```console ($ lines and output) or ```text")
            elif kind not in RUN_KINDS and first.startswith("$ "):
                untyped.append(f"{doc}:{line}: a {kind} block starts with a command: "
                               f"make it ```console so the test runs it")
        self.assertEqual(untyped, [], "\n".join(untyped))

    def test_console_script_splits_commands_from_output(self):
        script, codes = console_script("$ a --x \\\n    --y\nout PT-STRAGGLER-COMPUTE\n"
                                       "$ b\n#1 PT-NIC-SLOW  nic")
        self.assertEqual(script, "a --x \\\n    --y\nb")
        self.assertEqual(codes, ["PT-NIC-SLOW", "PT-STRAGGLER-COMPUTE"])

    def test_every_sh_block_runs_as_written(self):
        ran, skipped, failures = 0, [], []
        for doc, line, kind, marker, body in blocks():
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
                script, codes = body, []
                if kind == "console":
                    script, codes = console_script(body)
                words = re.split(r"[\s,]+", marker)
                env = dict(box.env, **CONFIG.job_env) if "job" in words else box.env
                if "server" in words:
                    grpc, http = box.server()
                    script = script.replace("127.0.0.1:7071", http).replace("127.0.0.1:7070", grpc)
                try:
                    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=box.dir,
                                       env=env, capture_output=True, text=True,
                                       timeout=timeout, start_new_session=True)
                    if r.returncode != 0:
                        failures.append(f"{where}: exit {r.returncode}\n{script}\n--- output ---\n"
                                        f"{(r.stdout + r.stderr)[-1500:]}")
                    missing = [c for c in codes if c not in r.stdout + r.stderr]
                    if r.returncode == 0 and missing:
                        failures.append(f"{where}: the transcript shows {', '.join(missing)} but "
                                        f"the commands did not print it\n{script}\n--- output ---\n"
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
    p.add_argument("--job-env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of blocks marked `job` (e.g. a sanitized build's LD_PRELOAD)")
    args, rest = p.parse_known_args()
    CONFIG.job_env = dict(s.split("=", 1) for s in args.job_env)
    CONFIG.perftracker = os.path.abspath(args.perftracker)
    CONFIG.source = os.path.abspath(args.source)
    # The build tree: .../src/perftracker/cli/perftracker -> ...
    CONFIG.build = os.path.abspath(os.path.join(os.path.dirname(CONFIG.perftracker), "..", "..", ".."))
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
