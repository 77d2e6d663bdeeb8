"""perftracker's sitecustomize (on PYTHONPATH only under `perftracker run`).

1. Runs the sitecustomize this one shadows (Debian ships one in /usr/lib/python3.X).
2. If PERFTRACKER_SOCKET is set, starts the perftracker agent in this process.

Never raises: on any error it prints one line "perftracker agent: disabled: <reason>" to
stderr and the program runs normally, without the agent.
"""


def _perftracker_run_shadowed_sitecustomize():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    paths = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None:
        return
    if spec.origin and os.path.abspath(spec.origin) == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _perftracker_start_agent():
    import os

    if not os.environ.get("PERFTRACKER_SOCKET"):
        return
    from perftracker import agent

    agent.start()


try:
    _perftracker_run_shadowed_sitecustomize()
except Exception as _e:  # what Python itself does for a failing sitecustomize
    import sys as _sys

    print("Error in sitecustomize (shadowed by perftracker): %r" % (_e,), file=_sys.stderr)

try:
    _perftracker_start_agent()
except BaseException as _e:  # never let the agent break the program, whatever happens
    import sys as _sys

    if isinstance(_e, (KeyboardInterrupt, SystemExit)):
        raise
    print("perftracker agent: disabled: %s" % (str(_e).splitlines()[0] if str(_e) else type(_e).__name__),
          file=_sys.stderr)
