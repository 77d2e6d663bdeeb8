"""scripts/report_files.py: a report directory's files as the server names them."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_files  # noqa: E402


class ReportFilesTest(unittest.TestCase):
    def test_a_window_report_is_its_window_and_reason(self):
        self.assertEqual(report_files.parse_window_report_name("window-12-slowdown.json"),
                         (12, "slowdown"))
        self.assertEqual(report_files.parse_window_report_name("/r/window-3-hang.json"),
                         (3, "hang"))

    def test_the_other_files_of_a_report_directory_are_not_reports(self):
        for name in ("window-3.perfetto.json", "window-3-vs-1.json", "window-3-stacks.txt",
                     "window-3-hang.html", "window-3-hang.json.tmp", "window--hang.json",
                     "window-x-manual.json", "window-3-other.json"):
            self.assertIsNone(report_files.parse_window_report_name(name), name)

    def test_reports_come_in_window_order_and_by_reason(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("window-10-manual.json", "window-2-slowdown.json",
                         "window-2.perfetto.json", "window-10-vs-2.json", "window-9-hang.json"):
                open(os.path.join(d, name), "w").close()
            self.assertEqual([os.path.basename(p) for p in report_files.window_report_paths(d)],
                             ["window-2-slowdown.json", "window-9-hang.json",
                              "window-10-manual.json"])
            self.assertEqual([os.path.basename(p)
                              for p in report_files.window_report_paths(d, "hang")],
                             ["window-9-hang.json"])
            self.assertEqual(report_files.window_report_paths(os.path.join(d, "none")), [])


if __name__ == "__main__":
    unittest.main()
