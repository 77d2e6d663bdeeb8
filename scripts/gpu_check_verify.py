#!/usr/bin/env python3
"""The pass / fail checks of scripts/gpu_check.sh, one subcommand per check. Each prints what
it found and ends with one line "PASS <check>: ..." or "FAIL <check>: <reason>" (exit 1).
Standard library only: runs with the GPU machine's Python and with this one (--self-check).

  window-report REPORT_DIR   a `perftracker run` window of a GPU job: every worker ran device
                             work, and the stored window summaries hold CUPTI's kernels,
                             copies and launches (their names: "Memcpy ...", cudaLaunchKernel)
  nccl-plugin REPORT_DIR LOG NCCL loaded perftracker's profiler plugin (its INFO log), and its
                             operations ("nccl:AllReduce ...") are in the stored summaries (a
                             1-rank communicator has none: NCCL bypasses its profiler there)
  nvml PROBE_OUTPUT          `perftracker probe` found GPUs and read NVML metric values
  kineto DIAGNOSE_JSON TRACE `perftracker diagnose --format json` of a GPU Kineto trace: every
                             worker has device work, and no event was dropped, malformed,
                             out of order or too deep
"""

import collections
import gzip
import json
import os
import re
import sqlite3
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_files  # noqa: E402  (the report directory's file names)


class CheckFailed(Exception):
    pass


def window_reports(report_dir):
    paths = report_files.window_report_paths(report_dir)
    if not paths:
        raise CheckFailed("no window report (window-*.json) in %s" % report_dir)
    reports = []
    for path in paths:
        with open(path) as f:
            reports.append((path, json.load(f)))
    return reports


def summary_blobs(report_dir):
    db = os.path.join(report_dir, "perftracker.db")
    if not os.path.exists(db):
        raise CheckFailed("no store %s (the window summaries)" % db)
    conn = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        return [(rank, bytes(blob)) for rank, blob in
                conn.execute("SELECT rank, summary FROM summaries ORDER BY window_id, rank")]
    finally:
        conn.close()


def string_table(blob):
    """A summary's names: the wire format (src/perftracker/wire/summary_codec.cc) keeps them
    as one zlib stream (best compression: header 78 da) of length-prefixed strings. Every
    offset where such a stream starts and inflates completely is taken."""
    out = []
    at = blob.find(b"\x78\xda")
    while at >= 0:
        z = zlib.decompressobj()
        try:
            text = z.decompress(blob[at:], 64 << 20)
            if z.eof:
                out.append(text)
        except zlib.error:
            pass
        at = blob.find(b"\x78\xda", at + 1)
    return b"\n".join(out)


def names_in(blobs, pattern):
    """Distinct names matching `pattern` (bytes regex) in the summaries, with their counts."""
    found = collections.Counter()
    for _, blob in blobs:
        for m in re.finditer(pattern, string_table(blob)):
            found[m.group(0).decode("utf-8", "replace")] += 1
    return found


LAUNCH = rb"(?:cudaLaunchKernel\w*|cuLaunchKernel\w*|cudaGraphLaunch\w*|cuGraphLaunch\w*)"
COPY = rb"Memcpy (?:HtoD|DtoH|DtoD|HtoH|PtoP)(?: \([^)\x00-\x1f\"]{0,50}\))?"
NCCL = rb"nccl:[A-Za-z]+"


def check_window_report(report_dir):
    for path, report in window_reports(report_dir):
        workers = report.get("workers", [])
        if not workers:
            raise CheckFailed("%s has no worker" % path)
        for w in workers:
            print("  %s rank %s: has_device %s, compute %.3f, events %s, dropped %s" % (
                os.path.basename(path), w.get("rank"), w.get("has_device"),
                w.get("breakdown", {}).get("compute", 0), w.get("stats", {}).get("events"),
                w.get("stats", {}).get("dropped_events")))
            if not w.get("has_device"):
                raise CheckFailed("rank %s has no device work in %s (no CUPTI kernel)"
                                  % (w.get("rank"), path))
    blobs = summary_blobs(report_dir)
    launches = names_in(blobs, LAUNCH)
    copies = names_in(blobs, COPY)
    print("  launches: %s" % dict(launches.most_common(5)))
    print("  copies: %s" % dict(copies.most_common(5)))
    if not launches:
        raise CheckFailed("no kernel launch (cudaLaunchKernel, ...) in the window summaries")
    if not copies:
        raise CheckFailed("no copy (Memcpy ...) in the window summaries")
    return "%d report(s); kernels on every worker, %d launch and %d copy names" % (
        len(window_reports(report_dir)), len(launches), len(copies))


def check_nccl_plugin(report_dir, nccl_log):
    """NCCL's own log (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS including INIT) says whether it
    loaded the plugin; the summaries say whether the plugin's operations reached a window.
    A communicator of one rank records none: NCCL runs its collectives as a local copy
    (ncclLaunchOneRank) without a task, a proxy or a profiler event, so on a machine with one
    GPU the plugin's loading is all there is to see."""
    with open(nccl_log, errors="replace") as f:
        log = f.read()
    loaded = re.search(r"PROFILER/Plugin: Loaded perftracker \((v\d+)\)", log)
    one_rank = re.search(r"nranks 1 ", log) is not None
    ops = names_in(summary_blobs(report_dir), NCCL)
    print("  NCCL loaded the plugin: %s; 1-rank communicator: %s; NCCL operations: %s"
          % (loaded.group(1) if loaded else "no", one_rank, dict(ops.most_common(8))))
    if ops:
        return "%d NCCL operation name(s) in the window summaries" % len(ops)
    if not loaded:
        raise CheckFailed("NCCL did not load perftracker's profiler plugin (no \"PROFILER/Plugin:"
                          " Loaded perftracker\" in %s) and no nccl:* operation is in the window "
                          "summaries" % nccl_log)
    if one_rank:
        return ("NCCL loaded the plugin (%s); a 1-rank communicator records no operation "
                "(ncclLaunchOneRank): operations need 2 GPUs" % loaded.group(1))
    raise CheckFailed("NCCL loaded the plugin (%s) but no nccl:* operation reached the window "
                      "summaries" % loaded.group(1))


def check_nvml(probe_output):
    with open(probe_output, errors="replace") as f:
        text = f.read()
    m = re.search(r"^NVML +(\d+) GPU\(s\), (\d+) metric values", text, re.M)
    if not m:
        line = next((l for l in text.splitlines() if l.startswith("NVML")), "no NVML line")
        raise CheckFailed("perftracker probe: %s" % line.strip())
    gpus, values = int(m.group(1)), int(m.group(2))
    if gpus < 1 or values < 1:
        raise CheckFailed("perftracker probe: %d GPU(s), %d metric values" % (gpus, values))
    return "%d GPU(s), %d metric values in one sample" % (gpus, values)


def trace_event_counts(trace):
    opener = gzip.open if trace.endswith(".gz") else open
    with opener(trace, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    return collections.Counter(e.get("cat", "?") for e in events if e.get("ph") == "X")


def check_kineto(diagnose_json, trace):
    with open(diagnose_json) as f:
        report = json.load(f)
    by_cat = trace_event_counts(trace)
    print("  trace %s: complete events by category %s" % (os.path.basename(trace),
                                                         dict(by_cat.most_common())))
    for needed in ("kernel", "cuda_runtime"):
        if not by_cat.get(needed):
            raise CheckFailed("the trace itself has no %r events: not a GPU trace" % needed)
    workers = report.get("workers", [])
    if not workers:
        raise CheckFailed("diagnose found no worker")
    for w in workers:
        stats = w.get("stats", {})
        print("  rank %s: has_device %s, stats %s" % (w.get("rank"), w.get("has_device"),
                                                      json.dumps(stats)))
        if not w.get("has_device"):
            raise CheckFailed("rank %s: no device work imported" % w.get("rank"))
        lost = {k: stats.get(k) for k in ("dropped_events", "malformed_events",
                                          "out_of_order_events", "deep_events")
                if stats.get(k)}
        if lost:
            raise CheckFailed("rank %s lost events: %s (first problem: %s)"
                              % (w.get("rank"), lost, stats.get("first_problem", "")))
        if not stats.get("events"):
            raise CheckFailed("rank %s: no event imported" % w.get("rank"))
    return "%d worker(s), %d events imported of %d complete events in the trace, none lost" % (
        len(workers), sum(w["stats"]["events"] for w in workers), sum(by_cat.values()))


CHECKS = {
    "window-report": (check_window_report, 1),
    "nccl-plugin": (check_nccl_plugin, 2),
    "nvml": (check_nvml, 1),
    "kineto": (check_kineto, 2),
}


def main(argv):
    if len(argv) < 2 or argv[1] not in CHECKS or len(argv) != 2 + CHECKS[argv[1]][1]:
        sys.exit(__doc__)
    name = argv[1]
    fn = CHECKS[name][0]
    try:
        print("PASS %s: %s" % (name, fn(*argv[2:])))
        return 0
    except CheckFailed as e:
        print("FAIL %s: %s" % (name, e))
    except (OSError, ValueError, sqlite3.Error) as e:
        print("FAIL %s: %s" % (name, e))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
