"""The file names of a perftracker report directory, read by the rule that makes them
(src/perftracker/server/report_writer.h):

    window-<id>-<reason>.json    a window's report (reason: slowdown, hang, manual)
    window-<id>-<reason>.html
    window-<id>-vs-<base>.json   the window compared with the job's baseline window
    window-<id>.perfetto.json    the window's timeline
    window-<id>-stacks.txt       the ranks' Python stacks (hang windows)

Shared by the Python tools that read a report directory (tests/e2e/test_live.py,
scripts/gpu_check_verify.py, bench/agent_overhead_bench.py).
"""

import os
import re

REASONS = ("slowdown", "hang", "manual")
_WINDOW_REPORT = re.compile(r"window-(\d+)-(%s)\.json" % "|".join(REASONS))


def parse_window_report_name(name):
    """(window id, reason) of a window report's JSON file name, None for every other file
    of a report directory (the timeline, a comparison, the stacks, the HTML)."""
    m = _WINDOW_REPORT.fullmatch(os.path.basename(name))
    return (int(m.group(1)), m.group(2)) if m else None


def window_report_paths(report_dir, reason=None):
    """The window reports' JSON files in report_dir (of `reason`, when given), in window
    order; [] when there is none or no such directory."""
    try:
        names = os.listdir(report_dir)
    except OSError:
        return []
    found = []
    for name in names:
        parsed = parse_window_report_name(name)
        if parsed and (reason is None or parsed[1] == reason):
            found.append((parsed[0], os.path.join(report_dir, name)))
    return [path for _, path in sorted(found)]
