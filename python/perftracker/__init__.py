"""perftracker: diagnoses slow distributed PyTorch training jobs.

This package is what runs inside the training processes (the agent, perftracker.agent) and
its native extension perftracker._agent. It is loaded by `perftracker run` through
PYTHONPATH (perftracker/_boot/sitecustomize.py); importing it has no side effects.
"""

__version__ = "0.1.0"
