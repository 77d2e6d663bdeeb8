"""perftracker.host_load on a fixture procfs (a directory of stat and schedstat files): the
share of the host's CPU time that the hypervisor stole (steal_fraction), the process's
threads' CPU time and run-queue wait, and what it says when /proc/stat is not what it
expects (a line that is not numbers, a kernel without the steal field): nothing about steal,
the rest all the same. Standard library only; nothing timed.
"""

import os
import shutil
import tempfile
import unittest

from perftracker.host_load import ProcessLoad


class StealTimeTest(unittest.TestCase):
    def setUp(self):
        self.proc = tempfile.mkdtemp(prefix="perftracker-host-load-")
        self.addCleanup(shutil.rmtree, self.proc)
        os.makedirs(os.path.join(self.proc, "self", "task", "1"))
        os.makedirs(os.path.join(self.proc, "self", "task", "2"))

    def write(self, path, text):
        with open(os.path.join(self.proc, path), "w") as f:
            f.write(text)

    def threads(self, cpu_ns, delay_ns):
        """Two threads, the process's time split evenly between them."""
        for tid in ("1", "2"):
            self.write(f"self/task/{tid}/schedstat", f"{cpu_ns // 2} {delay_ns // 2} 17\n")

    def stat(self, cpu_line):
        self.write("stat", cpu_line + "\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 12345\n")

    def measure(self, before, after):
        """ProcessLoad's args over a span: /proc/stat's cpu line `before` at start(),
        `after` at stop(); the threads ran 2 ms and waited 0.5 ms for a CPU in it."""
        self.threads(1_000_000, 100_000)
        self.stat(before)
        load = ProcessLoad(proc=self.proc)
        load.start()
        self.threads(3_000_000, 600_000)
        self.stat(after)
        return load.stop()

    def test_steal_is_its_share_of_all_cpu_time_in_the_span(self):
        # user nice system idle iowait irq softirq steal guest guest_nice: in the span
        # 1000 ticks in all (400 + 0 + 100 + 250 + 0 + 0 + 50 + 200), 200 of them stolen; the
        # guest fields (inside user and nice already) are not counted twice.
        load = self.measure("cpu  1000 10 500 8000 40 0 20 300 700 5",
                            "cpu  1400 10 600 8250 40 0 70 500 990 5")
        self.assertAlmostEqual(load["steal_fraction"], 0.2)
        self.assertEqual(load["cpu_ns"], 2_000_000)
        self.assertEqual(load["run_delay_ns"], 500_000)
        self.assertGreaterEqual(load["wall_ns"], 0)

    def test_no_steal_on_bare_metal_is_zero(self):
        load = self.measure("cpu  100 0 50 800 0 0 0 0 0 0", "cpu  300 0 100 1300 0 0 0 0 0 0")
        self.assertEqual(load["steal_fraction"], 0.0)

    def test_a_malformed_cpu_line_says_nothing_about_steal(self):
        for bad in ("cpu  1400 10 six 8250 40 0 70 500 0 0",  # not a number
                    "cpu  1400 10 600 8250 40 0 70",  # a kernel without the steal field
                    "intr 1 2 3 4 5 6 7 8 9",  # no cpu line first
                    ""):  # an empty file
            with self.subTest(after=bad):
                load = self.measure("cpu  1000 10 500 8000 40 0 20 300 0 0", bad)
                self.assertNotIn("steal_fraction", load)
                self.assertEqual(load["cpu_ns"], 2_000_000)  # the threads' times all the same
                self.assertEqual(load["run_delay_ns"], 500_000)

    def test_steal_counters_that_went_back_say_nothing(self):
        load = self.measure("cpu  1000 10 500 8000 40 0 20 300 0 0",
                            "cpu  1400 10 600 8250 40 0 70 100 0 0")
        self.assertNotIn("steal_fraction", load)

    def test_without_procfs_the_event_says_nothing(self):
        load = ProcessLoad(proc=os.path.join(self.proc, "absent"))
        load.start()
        self.assertEqual(load.stop(), {})


if __name__ == "__main__":
    unittest.main()
