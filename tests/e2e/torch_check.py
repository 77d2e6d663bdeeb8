"""Whether an interpreter has torch, for the end-to-end tests that run torch jobs.

A machine without torch skips those tests with a reason; a busy machine must not. The check
used to import torch.distributed with a 120 s limit and called a timeout "not importable":
beside two busy loops at load ~27 (ASan runtimes preloaded, under nice) the import took
longer, and e2e_live skipped 13 of its 17 tests and passed. Now the check only looks for the
package (importlib.util.find_spec: nothing is imported), and an interpreter that does not
answer at all is an error, never a skip.
"""
import subprocess

FIND_TORCH = ("import importlib.util, sys\n"
              "sys.exit(0 if importlib.util.find_spec('torch') is not None else 3)\n")


def torch_missing(python, timeout=600):
    """None when `python` has torch; else the reason to skip. Raises RuntimeError when the
    interpreter cannot be run or does not answer within `timeout` s."""
    try:
        r = subprocess.run([python, "-c", FIND_TORCH], capture_output=True, text=True,
                           timeout=timeout)
    except OSError as e:
        raise RuntimeError(f"cannot run {python}: {e}") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{python} did not say within {timeout} s whether it has torch "
                           "(a loaded machine is no reason to skip)") from None
    if r.returncode == 0:
        return None
    if r.returncode == 3:
        return f"torch is not installed for {python} (install python3-torch)"
    raise RuntimeError(f"{python} failed to look for torch (exit {r.returncode}): "
                       f"{r.stderr.strip()[-500:]}")
