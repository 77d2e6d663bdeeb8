#!/usr/bin/python3
"""The web UI and /metrics as a user meets them (stdlib only).

Both tests run perftracker_ui_fixture: an HttpServer over a SqliteStore holding the real
diagnosis of examples/straggler (4 ranks; rank 2 is a compute straggler in block2).

test_ui:         Debian's headless Chromium loads the UI with the login URL, runs its
                 JavaScript, and the rendered DOM must show the finding (code and culprit
                 worker), the heat map and the drill-down bars; no script or CSP error.
                 --screenshot PATH also saves the diagnosis page as a PNG (docs/).
test_ui_compare: the job page shows its windows side by side; window 2's "Compare with
                 baseline" opens the compare view against window 1, which names the function
                 made slower on every rank; window 1's Perfetto link downloads its export
                 (with the token only).
test_ui_hostile: the same for a job whose every name is HTML / script: shown as text on
                 every page, never run.
test_ui_wide:    a 64-rank job's chart shows min / median / max over ranks, and its window,
                 abandoned when a killed server restarted, shows that state and why.
test_prometheus: Debian's Prometheus scrapes /metrics with the bearer token every second;
                 the value read back through Prometheus' HTTP API (/api/v1/query) must be
                 the one the server exposes, and a scrape with a wrong token must fail.
"""
import argparse
import json
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
import urllib.error
import urllib.parse
import urllib.request

ARGS = None
TOKEN = "web-test-token-0123456789abcdef"
JOB = "job-17"
HOSTILE = '<img src=x onerror="document.body.dataset.pwned=1">'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fixture:
    """perftracker_ui_fixture in the background; .port once it listens."""

    def __init__(self, work_dir):
        store = os.path.join(work_dir, "store.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(store + suffix):
                os.remove(store + suffix)
        self.proc = subprocess.Popen(
            [ARGS.fixture, "--traces", ARGS.traces, "--store", store, "--token", TOKEN,
             "--job", JOB, "--hostile", "--wide"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening (\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("fixture did not start: %r %s" % (line, self.proc.stderr.read()))
        self.port = int(m.group(1))
        self.base = "http://127.0.0.1:%d" % self.port

    def get(self, path, token=TOKEN):
        req = urllib.request.Request(self.base + path)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read().decode()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        if self.proc.returncode != 0:
            raise RuntimeError("fixture exited with %d: %s" % (self.proc.returncode, err))


def chromium(url, work_dir, extra):
    """Runs headless Chromium on url; returns (stdout, stderr). Virtual time lets the
    page's fetches and scripts finish before the DOM is dumped."""
    profile = tempfile.mkdtemp(prefix="chromium-", dir=work_dir)
    try:
        cmd = ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
               "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0",
               "--virtual-time-budget=10000", "--window-size=1400,1900",
               "--hide-scrollbars"] + extra + [url]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return r.stdout, r.stderr
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def rendered_dom(url, work_dir, tries=3):
    """--dump-dom of url once the app has rendered: headless Chromium sometimes dumps the page
    before the app's first fetch came back (seen once in CI under ASan with other tests
    running: the page still said "Loading…"), so a page still loading is asked for again."""
    for attempt in range(tries):
        dom, err = chromium(url, work_dir, ["--dump-dom"])
        if '<p class="muted">Loading…</p>' not in dom or attempt == tries - 1:
            return dom, err
        time.sleep(1)


def console_errors(stderr):
    return [l for l in stderr.splitlines()
            if "CONSOLE" in l and ("Uncaught" in l or "Refused" in l or "Content Security" in l
                                   or "Error" in l)]


class WebTest(unittest.TestCase):
    def setUp(self):
        os.makedirs(ARGS.work_dir, exist_ok=True)
        self.fixture = Fixture(ARGS.work_dir)

    def tearDown(self):
        self.fixture.stop()

    def test_ui(self):
        f = self.fixture
        diag = json.loads(f.get("/api/v1/jobs/%s/windows/1/diagnosis" % JOB))
        top = diag["diagnosis"]["findings"][0]
        self.assertEqual(top["code"], "PT-STRAGGLER-COMPUTE")
        self.assertEqual(top["workers"], [2])

        # The diagnosis page, logged in by the login URL (cookie), after JavaScript ran.
        url = "%s/?token=%s#/job/%s/window/1" % (f.base, TOKEN, JOB)
        dom, err = rendered_dom(url, ARGS.work_dir)
        self.assertEqual(console_errors(err), [], err[-3000:])
        m = re.search(r'<section class="finding material" data-code="([^"]+)" data-workers="([^"]*)"', dom)
        self.assertIsNotNone(m, "no material finding rendered:\n" + dom[:3000])
        self.assertEqual(m.group(1), "PT-STRAGGLER-COMPUTE")
        self.assertEqual(m.group(2), "2")
        self.assertIn('<span class="culprits">rank 2</span>', dom)
        self.assertIn('id="verdict">rank 2 is the straggler', dom)
        # The heat map: 4 worker rows, rank 2 marked as the culprit, block2 among the columns.
        heat = dom[dom.index('id="heatmap"'):]
        self.assertEqual(len(re.findall(r"<th>rank \d+</th>", heat)), 4)
        self.assertIn('<tr class="culprit"><th>rank 2</th>', heat)
        self.assertRegex(heat, r'<th class="fn" title="[^"]*block2[^"]*">')

        # Drill-down from the finding to its function on every worker: three bar charts and
        # a row per worker, rank 2 the culprit with the largest time per iteration.
        key = top["function_key"]
        url = "%s/?token=%s#/job/%s/window/1/function/%s" % (
            f.base, TOKEN, JOB, urllib.parse.quote(key, safe=""))
        dom, err = rendered_dom(url, ARGS.work_dir)
        self.assertEqual(console_errors(err), [], err[-3000:])
        self.assertEqual(dom.count("<canvas"), 3, dom[:3000])
        rows = re.findall(r'<tr( class="culprit")? data-rank="(\d+)"><td class="num">\d+</td>'
                          r'<td>[^<]*</td><td class="num">[^<]*</td><td class="num">([0-9.]+) ms</td>', dom)
        self.assertEqual(len(rows), 4, dom[-4000:])
        by_rank = {int(r[1]): (bool(r[0]), float(r[2])) for r in rows}
        self.assertTrue(by_rank[2][0])
        self.assertEqual(max(by_rank, key=lambda r: by_rank[r][1]), 2)

        # The job page: the iteration-time chart (a canvas) and the window linking to it.
        dom, err = rendered_dom("%s/?token=%s#/job/%s" % (f.base, TOKEN, JOB), ARGS.work_dir)
        self.assertEqual(console_errors(err), [], err[-3000:])
        self.assertIn('id="iteration-chart"', dom)
        self.assertIn("<canvas", dom)
        self.assertIn(">PT-STRAGGLER-COMPUTE</a>", dom)
        for rank in range(4):
            self.assertIn(">rank %d</" % rank, dom)  # legend entries

        # Without the token the page says how to log in and shows no data.
        dom, _ = chromium(f.base + "/#/job/" + JOB, ARGS.work_dir, ["--dump-dom"])
        self.assertIn("?token=&lt;token&gt;", dom)  # how to log in
        self.assertIn("token file", dom)  # where the token is
        self.assertNotIn("PT-STRAGGLER", dom)

        if ARGS.screenshot:
            url = "%s/?token=%s#/job/%s/window/1" % (f.base, TOKEN, JOB)
            chromium(url, ARGS.work_dir, ["--screenshot=" + os.path.abspath(ARGS.screenshot)])
            self.assertTrue(os.path.getsize(ARGS.screenshot) > 10000)

    def test_ui_compare(self):
        f = self.fixture
        # The job page: its two windows side by side, window 1 the baseline with its Perfetto
        # export, window 2 with a link to the compare view against the baseline.
        dom, err = rendered_dom("%s/?token=%s#/job/%s" % (f.base, TOKEN, JOB), ARGS.work_dir)
        self.assertEqual(console_errors(err), [], err[-3000:])
        windows = dom[dom.index('id="windows"'):]
        cards = re.findall(r'<section class="window-card( baseline)?" data-window="(\d+)">', windows)
        self.assertEqual(cards, [("", "2"), (" baseline", "1")], windows[:3000])
        card1 = windows[windows.index('data-window="1"'):]
        card2 = windows[windows.index('data-window="2"'):windows.index('data-window="1"')]
        self.assertIn('<span class="badge">baseline</span>', card1)
        m = re.search(r'<a href="([^"]+)" class="button compare"[^>]*>Compare with baseline</a>', card2)
        self.assertIsNotNone(m, card2)
        compare_hash = m.group(1)
        self.assertEqual(compare_hash, "#/job/%s/compare/1/2" % JOB)
        self.assertNotIn('class="button compare"', card1)  # the baseline is not compared with itself
        m = re.search(r'<a href="([^"]+)" download="window-1.perfetto.json" class="perfetto"', card1)
        self.assertIsNotNone(m, card1)
        perfetto_url = m.group(1)
        self.assertNotIn('class="perfetto"', card2)  # window 2 has no export

        # The compare view the button opens: both windows side by side, the verdict and the
        # function made slower on every rank first.
        dom, err = rendered_dom("%s/?token=%s%s" % (f.base, TOKEN, compare_hash), ARGS.work_dir)
        self.assertEqual(console_errors(err), [], err[-3000:])
        m = re.search(r'id="compare-verdict">([^<]*)<', dom)
        self.assertIsNotNone(m, dom[:3000])
        self.assertRegex(m.group(1), r"^block2 is slower on all 4 workers")
        sides = re.findall(r'<section class="side (baseline|current)" data-window="(\d+)">', dom)
        self.assertEqual(sides, [("baseline", "1"), ("current", "2")], dom[:3000])
        rows = re.findall(r'<tr class="change (slower|faster)" data-function="([^"]*)" '
                          r'data-direction="\w+" data-workers="([^"]*)">', dom)
        self.assertTrue(rows, dom[-4000:])
        self.assertEqual(rows[0], ("slower", "block2", "0,1,2,3"))
        self.assertEqual(len(re.findall(r'<tr data-rank="\d+">', dom)), 4)  # iteration per worker

        # The download link: the export itself, as an attachment, only with the token.
        req = urllib.request.Request(f.base + perfetto_url)
        req.add_header("Authorization", "Bearer " + TOKEN)
        with urllib.request.urlopen(req, timeout=30) as r:
            self.assertEqual(r.headers["Content-Disposition"],
                             'attachment; filename="window-1.perfetto.json"')
            trace = json.load(r)
        ranks = {e["args"]["name"] for e in trace["traceEvents"]
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
        self.assertEqual(len(ranks), 4, ranks)
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f.base + perfetto_url, timeout=10)
        self.assertEqual(refused.exception.code, 401)

    def test_ui_hostile(self):
        """A job whose names are all markup (from a hostile or unlucky training script):
        every page shows them as text and runs none of them."""
        f = self.fixture
        for page in ("", "job/hostile", "job/hostile/window/1", "job/hostile/compare/1/1",
                     "job/hostile/window/1/function/" + urllib.parse.quote("python:" + HOSTILE, safe="")):
            dom, err = rendered_dom("%s/?token=%s#/%s" % (f.base, TOKEN, page), ARGS.work_dir)
            self.assertEqual(console_errors(err), [], err[-3000:])
            self.assertNotIn("data-pwned", dom, page)
            self.assertNotIn('<img src="x"', dom, page)
            self.assertNotRegex(dom, r"<script>document", page)
            self.assertIn("&lt;img src=x onerror=", dom, page)  # shown, as text

    def test_ui_wide(self):
        """A 64-rank job: the iteration chart shows min / median / max over ranks (one
        line per rank would be unreadable), and the job page lists every worker."""
        f = self.fixture
        dom, err = rendered_dom("%s/?token=%s#/job/wide" % (f.base, TOKEN), ARGS.work_dir)
        self.assertEqual(console_errors(err), [], err[-3000:])
        self.assertIn('id="iteration-chart"', dom)
        self.assertIn("<canvas", dom)
        for label in ("max over ranks", "median", "min over ranks"):
            self.assertIn(">%s</" % label, dom)
        self.assertNotIn(">rank 13</div>", dom)  # no per-rank legend entries
        self.assertEqual(len(re.findall(r"<td>node-\d+</td>", dom)), 64)
        # Its window, abandoned when a killed server restarted, says so and why.
        m = re.search(r'<span class="state abandoned" title="([^"]*)">abandoned</span>', dom)
        self.assertIsNotNone(m, "no abandoned window shown:\n" + dom[-3000:])
        self.assertIn("found open when the server restarted", m.group(1))
        self.assertIn('<div class="muted state-reason">the server stopped before the window '
                      'completed (killed or crashed: its summaries were lost); found open when '
                      'the server restarted at 2026-11-26 00:41:02 UTC</div>', dom)

    def test_prometheus(self):
        f = self.fixture
        metrics = f.get("/metrics")
        m = re.search(r'^perftracker_iteration_seconds\{job_id="%s",rank="2"\} (\S+)$' % JOB,
                      metrics, re.M)
        self.assertIsNotNone(m, metrics)
        exposed = float(m.group(1))

        prom_dir = tempfile.mkdtemp(prefix="prometheus-", dir=ARGS.work_dir)
        config = os.path.join(prom_dir, "prometheus.yml")
        with open(config, "w") as out:
            out.write("""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: perftracker
    scrape_interval: 1s
    authorization:
      type: Bearer
      credentials: %s
    static_configs:
      - targets: ['127.0.0.1:%d']
  - job_name: wrong-token
    scrape_interval: 1s
    authorization:
      type: Bearer
      credentials: not-the-token-0123456789
    static_configs:
      - targets: ['127.0.0.1:%d']
""" % (TOKEN, f.port, f.port))
        prom, prom_port = start_prometheus(config, prom_dir + "/data")
        try:
            def query(q):
                url = "http://127.0.0.1:%d/api/v1/query?%s" % (
                    prom_port, urllib.parse.urlencode({"query": q}))
                try:
                    with urllib.request.urlopen(url, timeout=5) as r:
                        body = json.load(r)
                except OSError:
                    return None
                self.assertEqual(body["status"], "success")
                return body["data"]["result"]

            deadline = time.time() + 25
            series = None
            while time.time() < deadline:
                if prom.poll() is not None:
                    self.fail("prometheus exited: " + prom.stderr.read())
                series = query('perftracker_iteration_seconds{job_id="%s",rank="2"}' % JOB)
                if series:
                    break
                time.sleep(0.5)
            self.assertTrue(series, "Prometheus never scraped the iteration time")
            self.assertEqual(series[0]["metric"]["job"], "perftracker")
            self.assertAlmostEqual(float(series[0]["value"][1]), exposed, places=9)
            findings = query('perftracker_findings_total{code="PT-STRAGGLER-COMPUTE"}')
            self.assertEqual(float(findings[0]["value"][1]), 1.0)
            # Both scrape jobs have run at least once (Prometheus spreads their offsets over
            # the interval).
            up = {}
            while time.time() < deadline + 5 and len(up) < 2:
                up = {r["metric"]["job"]: r["value"][1] for r in query("up") or []}
                time.sleep(0.2)
            self.assertEqual(up.get("perftracker"), "1")
            self.assertEqual(up.get("wrong-token"), "0")  # refused: 401
        finally:
            prom.terminate()
            try:
                prom.wait(timeout=15)
            except subprocess.TimeoutExpired:
                prom.kill()
            shutil.rmtree(prom_dir, ignore_errors=True)


def start_prometheus(config, data_dir):
    """Prometheus on a port found free. A port found by binding and closing a socket can be
    taken by another process before Prometheus binds it (Prometheus cannot be asked for port 0
    and say which it got): then it exits at once with 'address already in use', and it is
    started again on another port. Returns (process, port)."""
    for _ in range(3):
        port = free_port()
        prom = subprocess.Popen(
            ["prometheus", "--config.file=" + config, "--storage.tsdb.path=" + data_dir,
             "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            prom.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return prom, port  # listening (or failing later, which the test reports)
        err = prom.stderr.read()
        if "address already in use" not in err:
            raise AssertionError("prometheus exited: " + err)
    raise AssertionError("prometheus found no free port in 3 tries: " + err)


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--fixture", required=True)
    p.add_argument("--traces", required=True)
    p.add_argument("--work-dir", default=tempfile.gettempdir())
    p.add_argument("--screenshot", help="also save the diagnosis page as this PNG")
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
