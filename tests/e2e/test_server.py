#!/usr/bin/env python3
"""The multi-host server as separate processes (docs/server.md).

One `perftracker server` and two "hosts" with 4 ranks each of fake_ranks_for_test (ranks
that speak the real agent protocol: shared-memory rings + the collector's Unix socket): on
host a under `perftracker run --server ... --`, on host b started apart from a
`perftracker collector`. One job of 8 ranks, rank 6 a straggler. As root, each host runs in its own network namespace with its own address
(ip netns + veth), so the server sees two peers; otherwise everything is on loopback.

Fake ranks, not torch: 8 real torch ranks (plus the server and two collectors) on a
2-core CI machine would take minutes per window; the fake ranks exercise the same collector
and server code and the same wire protocol.

Checks:
  - a window opens on all 8 ranks of both hosts; its diagnosis, read back through the HTTP
    API, names rank 6 in model.py:20 forward;
  - crash: the server is killed with SIGKILL mid-job and restarted on the same store and
    ports; the first report is still served; both collectors reconnect and register again,
    and the next window is diagnosed with all 8 ranks (window 2 in the store);
  - a window open when the server is SIGKILLed is shown abandoned, with its reason, after the
    restart;
  - security and failure paths: a wrong token is refused (and logged once per peer), an
    unreachable server is one clear line while the job runs to its exit code;
  - a job's exit code (3, or 128 + 15 when SIGTERM killed it) is what `run --server`
    exits with, and the server's log says so.
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

CONFIG = argparse.Namespace(perftracker=None, fake_ranks=None)
STARTED = []


def log(msg):
    print(f"[test_server] {msg}", file=sys.stderr, flush=True)


def can_use_netns():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    r = subprocess.run(["ip", "netns", "list"], capture_output=True)
    return r.returncode == 0


def free_subnets(count):
    """`count` values of N for which no interface here holds an address in 10.231.N.0/24."""
    r = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True)
    used = set(re.findall(r"inet 10\.231\.(\d+)\.", r.stdout))
    return [n for n in range(1, 255) if str(n) not in used][:count]


class Hosts:
    """Two network namespaces, each joined to this one by a veth pair (or loopback)."""

    def __init__(self):
        self.netns = can_use_netns()
        tag = os.getpid() % 10000
        self.names = [f"pt{tag}a", f"pt{tag}b"]
        # (address the server is reached at from the host, the host's own address), in two
        # 10.231.N.0/24 subnets no interface holds: a run killed before close() leaves its
        # namespaces and addresses behind, and the same subnet again would route this run's
        # traffic to the dead run's interface (every collector "cannot reach the server").
        nets = free_subnets(2) if self.netns else []
        if len(nets) < 2:
            self.netns = False
        else:
            self.addrs = [(f"10.231.{n}.1", f"10.231.{n}.2") for n in nets]
        self.made = []
        if not self.netns:
            self.addrs = [("127.0.0.1", "127.0.0.1"), ("127.0.0.1", "127.0.0.1")]
            return
        try:
            for i, ns in enumerate(self.names):
                outer, inner = f"{ns}o", f"{ns}i"
                server_ip, host_ip = self.addrs[i]
                for cmd in (["ip", "netns", "add", ns],
                            ["ip", "link", "add", outer, "type", "veth", "peer", "name", inner],
                            ["ip", "link", "set", inner, "netns", ns],
                            ["ip", "addr", "add", f"{server_ip}/24", "dev", outer],
                            ["ip", "link", "set", outer, "up"],
                            ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{host_ip}/24", "dev", inner],
                            ["ip", "netns", "exec", ns, "ip", "link", "set", inner, "up"],
                            ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]):
                    subprocess.run(cmd, check=True, capture_output=True)
                    if cmd[:3] == ["ip", "netns", "add"]:
                        self.made.append(ns)
        except subprocess.CalledProcessError as e:
            log(f"network namespaces unavailable ({e.stderr.decode().strip()}): loopback instead")
            self.close()
            self.netns = False
            self.addrs = [("127.0.0.1", "127.0.0.1"), ("127.0.0.1", "127.0.0.1")]

    def prefix(self, i):
        return ["ip", "netns", "exec", self.names[i]] if self.netns else []

    def close(self):
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            subprocess.run(["ip", "link", "del", f"{ns}o"], capture_output=True)
        self.made = []


def start(cmd, out_path, **kw):
    with open(out_path, "ab") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **kw)
    STARTED.append(p)
    return p


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Server:
    def __init__(self, workdir, listen_host):
        self.dir = workdir
        self.listen_host = listen_host
        self.log_path = os.path.join(workdir, "server.log")
        self.grpc_port = 0
        self.http_port = 0
        self.proc = None

    def start(self, max_windows, window_seconds=1):
        with open(self.log_path, "ab") as f:
            f.write(b"--- start ---\n")
        before = len(read(self.log_path))
        cmd = [CONFIG.perftracker, "server",
               "--listen", f"{self.listen_host}:{self.grpc_port}",
               "--http-listen", f"127.0.0.1:{self.http_port}",
               "--report-dir", os.path.join(self.dir, "reports"),
               "--store", os.path.join(self.dir, "store.db"),
               "--window-seconds", str(window_seconds), "--window-delay-ms", "200",
               "--cooldown-seconds", "1",
               "--wait-summaries-seconds", "6", "--max-windows", str(max_windows)]
        self.proc = start(cmd, self.log_path)
        m = wait_for(lambda: re.search(r"listening: grpc=\S+:(\d+).* http=http://127\.0\.0\.1:(\d+)",
                                       read(self.log_path)[before:]), 20, "the server to listen")
        self.grpc_port, self.http_port = int(m.group(1)), int(m.group(2))
        self.token = read(os.path.join(self.dir, "reports", "server.token")).strip()

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)

    def api(self, path):
        req = urllib.request.Request(f"http://127.0.0.1:{self.http_port}{path}",
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read())
        except (urllib.error.HTTPError, urllib.error.URLError, ConnectionError):
            return None

    def diagnosis(self, job, window):
        return self.api(f"/api/v1/jobs/{job}/windows/{window}/diagnosis")


class MultiHostTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="perftracker-server-test-")
        self.hosts = Hosts()
        log(f"hosts: {'network namespaces ' + str(self.hosts.addrs) if self.hosts.netns else 'loopback'}")

    def tearDown(self):
        for p in STARTED:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        STARTED.clear()
        self.hosts.close()
        if self.failed():
            for f in sorted(os.listdir(self.dir)):
                if f.endswith(".log"):
                    log(f"--- {f} ---\n{read(os.path.join(self.dir, f))[-4000:]}")
        shutil.rmtree(self.dir, ignore_errors=True)

    def failed(self):
        # Python 3.11: self._outcome.result is the TestResult; its errors and failures are
        # (test, traceback text) pairs for the whole run, so look for this test.
        result = getattr(getattr(self, "_outcome", None), "result", None)
        pairs = list(getattr(result, "errors", [])) + list(getattr(result, "failures", []))
        return any(test is self for test, _ in pairs)

    def separate_collector(self, i, server, job, first, trigger, windows):
        """`perftracker collector` and ranks started apart from it (as a scheduler would)."""
        sock = os.path.join(self.dir, f"host-{i}.sock")
        log_path = os.path.join(self.dir, f"collector-{i}.log")
        collector = start(self.hosts.prefix(i) + [
            CONFIG.perftracker, "collector", "--server", f"{self.hosts.addrs[i][0]}:{server.grpc_port}",
            "--token-file", os.path.join(self.dir, "reports", "server.token"), "--job-id", job,
            "--host", f"host-{'ab'[i]}", "--socket", sock], log_path)
        wait_for(lambda: "start the ranks with PERFTRACKER_SOCKET=" + sock in read(log_path), 20,
                 "the collector to serve its socket")
        ranks = start(self.hosts.prefix(i) + [
            CONFIG.fake_ranks, "--first-rank", str(first), "--ranks", "4", "--world-size", "8",
            "--straggler", "6", "--trigger-rank", str(trigger), "--trigger-every-ms", "1000",
            "--windows", str(windows), "--timeout-s", "150"],
            os.path.join(self.dir, f"host-{i}.log"), env=dict(os.environ, PERFTRACKER_SOCKET=sock))
        return collector, ranks

    def collector(self, i, server, job, first, trigger, windows):
        cmd = self.hosts.prefix(i) + [
            CONFIG.perftracker, "run", "--server", f"{self.hosts.addrs[i][0]}:{server.grpc_port}",
            "--token-file", os.path.join(self.dir, "reports", "server.token"),
            "--job-id", job, "--host", f"host-{'ab'[i]}", "--report-dir",
            os.path.join(self.dir, f"local-{i}"), "--",
            CONFIG.fake_ranks, "--first-rank", str(first), "--ranks", "4", "--world-size", "8",
            "--straggler", "6", "--trigger-rank", str(trigger), "--trigger-every-ms", "1000",
            "--windows", str(windows), "--timeout-s", "150"]
        return start(cmd, os.path.join(self.dir, f"host-{i}.log"))

    def check_straggler(self, d, window):
        self.assertIsNotNone(d, f"window {window} has no diagnosis")
        diag = d["diagnosis"]
        self.assertEqual(diag["num_workers"], 8, d["text"])
        self.assertEqual(d["missing_ranks"], [])
        top = diag["findings"][0]
        self.assertTrue(top["material"], d["text"])
        self.assertEqual(top["workers"], [6], d["text"])
        self.assertEqual(top["function"], "model.py:20 forward", d["text"])

    def test_two_hosts_eight_ranks_straggler_named_and_server_crash(self):
        t0 = time.monotonic()
        server = Server(self.dir, "0.0.0.0" if self.hosts.netns else "127.0.0.1")
        server.start(max_windows=1)  # the window of the old server: exactly one
        job = "two-hosts"
        a = self.collector(0, server, job, first=0, trigger=0, windows=2)
        # Host b: a `perftracker collector` and ranks launched separately.
        b_collector, b = self.separate_collector(1, server, job, first=4, trigger=-1, windows=2)

        d1 = wait_for(lambda: server.diagnosis(job, 1), 60, "the first window's diagnosis")
        self.check_straggler(d1, 1)
        slog = read(server.log_path)
        if self.hosts.netns:
            for _, host_ip in self.hosts.addrs:
                self.assertIn(f"ipv4:{host_ip}:", slog, "each host registers from its own address")
        self.assertEqual(sorted(set(re.findall(r"collector (host-[ab]) \(", slog))), ["host-a", "host-b"])
        log(f"window 1 diagnosed after {time.monotonic() - t0:.1f} s")

        server.kill()
        self.assertIsNone(a.poll(), "the job goes on without its server")
        server.start(max_windows=5)
        d1_again = server.diagnosis(job, 1)
        self.assertEqual(d1_again, d1, "the earlier report survives the crash")
        jobs = server.api("/api/v1/jobs")
        self.assertEqual([j["job_id"] for j in jobs["jobs"]], [job])

        d2 = wait_for(lambda: server.diagnosis(job, 2), 90, "the window after the restart")
        self.check_straggler(d2, 2)
        after = read(server.log_path).split("--- start ---")[-1]
        self.assertEqual(len(re.findall(r"collector host-[ab] .* registered with 4 ranks", after)), 2,
                         "both collectors registered again with their ranks")
        for p, name in ((a, "host a"), (b, "host b")):
            self.assertEqual(p.wait(timeout=60), 0, f"{name}'s job exit code")
        windows = server.api(f"/api/v1/jobs/{job}/windows")["windows"]
        self.assertEqual([w["window_id"] for w in windows if w["has_diagnosis"]], [1, 2])
        self.assertIn(f"windows and reports of job {job} are on the server",
                      read(os.path.join(self.dir, "host-0.log")))
        b_collector.send_signal(signal.SIGTERM)
        self.assertEqual(b_collector.wait(timeout=30), 0, "the collector stops cleanly")
        server.stop()
        log(f"total {time.monotonic() - t0:.1f} s")

    def test_two_hosts_window_timeline_merged_from_both_collectors(self):
        """Issue 16: the raw window events stay on each host until the server, after the
        diagnosis, asks both collectors for them and merges window-1.perfetto.json."""
        server = Server(self.dir, "0.0.0.0" if self.hosts.netns else "127.0.0.1")
        server.start(max_windows=2)
        job = "timeline"
        a = self.collector(0, server, job, first=0, trigger=0, windows=2)
        b_collector, b = self.separate_collector(1, server, job, first=4, trigger=-1, windows=2)
        d1 = wait_for(lambda: server.diagnosis(job, 1), 90, "the first window's diagnosis")
        self.check_straggler(d1, 1)
        job_dir = os.path.join(self.dir, "reports", job)
        path = os.path.join(job_dir, "window-1.perfetto.json")
        # The report is written once the timeline is merged (its notes say what it holds).
        report_path = wait_for(lambda: [p for p in glob.glob(os.path.join(job_dir, "window-1-*.json"))
                                        if "-vs-" not in p], 60, "window 1's report file")[0]
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
        self.assertTrue(os.path.exists(path), report["notes"])
        notes = "\n".join(report["notes"])
        self.assertIn("Perfetto timeline: window-1.perfetto.json (8 ranks", notes)
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        events = doc["traceEvents"]
        names = {e["pid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(sorted(names), list(range(8)), names)
        ranks = {r["rank"]: r for r in doc["otherData"]["ranks"]}
        self.assertEqual(sorted(ranks), list(range(8)))
        for r in ranks.values():
            self.assertIn("clock_offset_ns", r)
        # The recordings left their hosts once, on demand, and are gone everywhere.
        for d in (os.path.join(self.dir, "local-0", "recordings"),
                  os.path.join(self.dir, "host-1.sock.recordings"),
                  os.path.join(job_dir, "recordings")):
            self.assertEqual(glob.glob(os.path.join(d, "window-1-*")), [], d)

        # Each rank's events, re-imported by perftracker's own importer, are the events the
        # window summarized on its host: the same count per rank.
        window_events = {w["rank"]: w["stats"]["events"] for w in report["workers"]}
        per_rank = {}
        for e in events:
            if e["ph"] != "M" and e.get("cat") != "perftracker":
                per_rank.setdefault(e["pid"], []).append(e)
        self.assertEqual({r: len(evs) for r, evs in per_rank.items()}, window_events)
        files = []
        for rank, evs in sorted(per_rank.items()):
            f = os.path.join(self.dir, f"exported_rank{rank}.json")
            with open(f, "w", encoding="utf-8") as out:
                json.dump({"distributedInfo": {"rank": rank, "world_size": 8},
                           "traceEvents": evs}, out)
            files.append(f)
        r = subprocess.run([CONFIG.perftracker, "diagnose", "--format", "json", *files],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        reimported = {w["rank"]: w["stats"]["events"] for w in json.loads(r.stdout)["workers"]}
        log(f"timeline: window events per rank {window_events}, re-imported {reimported}")
        self.assertEqual(reimported, window_events)
        for p, name in ((a, "host a"), (b, "host b")):
            self.assertEqual(p.wait(timeout=90), 0, f"{name}'s job exit code")
        b_collector.send_signal(signal.SIGTERM)
        self.assertEqual(b_collector.wait(timeout=30), 0, "the collector stops cleanly")
        server.stop()

    def test_a_window_open_when_the_server_is_killed_is_abandoned_with_its_reason(self):
        """Issue 13 §4: it stayed "open" forever after the restart."""
        server = Server(self.dir, "0.0.0.0" if self.hosts.netns else "127.0.0.1")
        server.start(max_windows=1, window_seconds=120)  # open for the whole test
        job = "killed-mid-window"
        self.collector(0, server, job, first=0, trigger=0, windows=1)

        def window_one():
            got = server.api(f"/api/v1/jobs/{job}/windows")
            return got and [w for w in got["windows"] if w["window_id"] == 1]

        w = wait_for(window_one, 60, "window 1 to open")[0]
        self.assertEqual(w["state"], "open")
        self.assertEqual(w["state_reason"], "")
        server.kill()
        server.start(max_windows=1)
        w = window_one()[0]
        self.assertEqual(w["state"], "abandoned", w)
        self.assertIn("the server stopped before the window completed (killed or crashed: its "
                      "summaries were lost); found open when a server started at ", w["state_reason"])
        self.assertFalse(w["has_diagnosis"])
        after = read(server.log_path).split("--- start ---")[-1]
        self.assertIn(f"job {job}: window 1 abandoned: the server stopped", after)
        server.stop()

    def test_job_exit_code_passes_through_and_the_server_learns_it(self):
        # `perftracker run --server` exits as plain `run` does: the job's code, 128 + N when
        # signal N killed it; the collector tells the server (its log names host and code).
        server = Server(self.dir, "127.0.0.1")
        server.start(max_windows=1)
        token = os.path.join(self.dir, "reports", "server.token")
        for job, script, code in (("exits-3", "exit 3", 3),
                                  ("killed", "kill -TERM $$; sleep 10", 128 + signal.SIGTERM)):
            r = subprocess.run([CONFIG.perftracker, "run", "--server",
                                f"127.0.0.1:{server.grpc_port}", "--token-file", token,
                                "--job-id", job, "--report-dir", os.path.join(self.dir, "local"),
                                "--", "sh", "-c", script],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, code, r.stderr)
            self.assertNotIn("cannot reach", r.stderr)
            wait_for(lambda: re.search(rf"job {job}: the command on \S+ \(\S+\) exited with "
                                       rf"code {code}\b", read(server.log_path)), 20,
                     f"the server's log line of job {job}'s exit")
        server.stop()

    def test_wrong_token_and_unreachable_server(self):
        server = Server(self.dir, "127.0.0.1")
        server.start(max_windows=1)
        bad = os.path.join(self.dir, "bad.token")
        with open(bad, "w") as f:
            f.write("0123456789abcdef-not-the-token\n")
        for _ in range(2):
            r = subprocess.run([CONFIG.perftracker, "run", "--server", f"127.0.0.1:{server.grpc_port}",
                                "--token-file", bad, "--job-id", "j", "--report-dir",
                                os.path.join(self.dir, "local"), "--", "sh", "-c", "exit 3"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn("refused the token", r.stderr)
        refusals = re.findall(r"refused a collector from ipv4:127\.0\.0\.1", read(server.log_path))
        self.assertEqual(len(refusals), 1, "logged once per peer address")
        server.kill()

        t = time.monotonic()
        r = subprocess.run([CONFIG.perftracker, "run", "--server", f"127.0.0.1:{server.grpc_port}",
                            "--job-id", "j", "--report-dir", os.path.join(self.dir, "local"), "--",
                            "sh", "-c", "echo job-ran; exit 4"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 4)
        self.assertIn("job-ran", r.stdout)
        lines = [l for l in r.stderr.splitlines() if "server" in l and "cannot reach" in l]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(f"cannot reach the server at 127.0.0.1:{server.grpc_port}", lines[0])
        self.assertLess(time.monotonic() - t, 20)

        r = subprocess.run([CONFIG.perftracker, "run", "--server", "127.0.0.1:1", "--token-file",
                            os.path.join(self.dir, "missing.token"), "--report-dir",
                            os.path.join(self.dir, "local"), "--", "true"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--token-file", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


def main():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--perftracker", required=True)
    p.add_argument("--fake-ranks", required=True)
    args, rest = p.parse_known_args()
    CONFIG.perftracker = os.path.abspath(args.perftracker)
    CONFIG.fake_ranks = os.path.abspath(args.fake_ranks)
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
