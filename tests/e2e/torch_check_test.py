#!/usr/bin/python3
"""torch_check.torch_missing: a slow interpreter is an error, never a reason to skip.

  /usr/bin/python3 tests/e2e/torch_check_test.py -v
"""
import os
import stat
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_check import torch_missing  # noqa: E402


class TorchCheckTest(unittest.TestCase):
    def fake_python(self, body):
        """An executable that stands in for an interpreter: a shell script."""
        d = tempfile.mkdtemp(prefix="perftracker-torch-check-")
        self.addCleanup(lambda: (os.unlink(os.path.join(d, "python")), os.rmdir(d)))
        path = os.path.join(d, "python")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body + "\n")
        os.chmod(path, stat.S_IRWXU)
        return path

    def test_an_interpreter_that_does_not_answer_in_time_is_an_error_not_a_skip(self):
        # What a loaded machine did to the old check (a 120 s import of torch.distributed).
        slow = self.fake_python("exec sleep 30")
        with self.assertRaisesRegex(RuntimeError, "did not say within 1 s"):
            torch_missing(slow, timeout=1)

    def test_an_interpreter_without_torch_is_a_reason_to_skip(self):
        # This interpreter without its site directories (-S): no torch package to find.
        bare = self.fake_python(f'exec {sys.executable} -S "$@"')
        self.assertIn("torch is not installed", torch_missing(bare))

    def test_an_interpreter_that_fails_is_an_error(self):
        with self.assertRaisesRegex(RuntimeError, "exit 1"):
            torch_missing(self.fake_python("echo broken >&2; exit 1"))
        with self.assertRaisesRegex(RuntimeError, "cannot run"):
            torch_missing("/nonexistent/python3")

    def test_the_answer_for_this_interpreter_is_whether_it_has_torch(self):
        import importlib.util
        has = importlib.util.find_spec("torch") is not None
        self.assertEqual(torch_missing(sys.executable, timeout=120) is None, has)


if __name__ == "__main__":
    unittest.main()
