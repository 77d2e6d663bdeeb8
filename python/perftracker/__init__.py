"""perftracker: diagnoses slow distributed PyTorch training jobs.

This package is what runs inside the training processes (the agent, perftracker.agent) and
its native extension perftracker._agent. It is loaded by `perftracker run` through
PYTHONPATH (perftracker/_boot/sitecustomize.py); importing it has no side effects.

Loops that torch's DataLoader / Optimizer.step hooks do not see (JAX, NumPy, a hand-written
loop) mark their iterations themselves, once per iteration::

    import perftracker
    for batch in data:
        train_step(batch)
        perftracker.step()

Outside `perftracker run` (no agent in the process) step() does nothing.
"""

import sys

__version__ = "0.1.0"


def step(name="step"):
    """Marks the end of one training iteration for perftracker's iteration detector (as an
    optimizer step does in a torch job). `name` labels the marker in reports. Never raises."""
    agent = sys.modules.get("perftracker.agent")
    if agent is not None:
        agent.mark_step(name)
