"""How busy the machine was while a trace was recorded, written into the trace itself.

Two runs of one job on a shared machine differ as a whole when the machine's load differs:
every function 1.25x slower because other processes took the CPUs, not because the code
changed. `perftracker compare` tells the two apart when each trace says how long its
process's threads waited for a CPU: this module measures that (Linux: the threads'
/proc/<pid>/task/*/schedstat) over the profiled steps and adds it to the trace as one
metadata event,

    {"ph": "M", "name": "perftracker_host_load", "pid": PID, "tid": 0,
     "args": {"cpu_ns": ..., "run_delay_ns": ..., "wall_ns": ..., "steal_fraction": ...}}

which Perfetto UI and chrome://tracing ignore (docs/compare.md, "Machine load").
steal_fraction (present when /proc/stat has the field) is the host's steal time over all its
CPU time in that span: on a VM, the share the hypervisor gave other guests, which slows every
CPU second of the job without any run-queue wait.

With torch.profiler::

    from perftracker.host_load import ProcessLoad, add_to_trace
    load = ProcessLoad()
    def on_trace_ready(prof):
        prof.export_chrome_trace(path)
        add_to_trace(path, load.stop())
    with profile(..., schedule=sched, on_trace_ready=on_trace_ready) as prof:
        for batch in data:
            if prof.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
                load.start()  # the first recorded step; later calls do nothing
            ...
            if prof.current_action == ProfilerAction.RECORD_AND_SAVE:
                load.stop()  # the last recorded step (before the profiler's own export)
            prof.step()

Standard library only; never raises on a machine without these files (the event then says
nothing: an empty "args").
"""

import gzip
import json
import os
import time

EVENT_NAME = "perftracker_host_load"


def _thread_times(pid="self", proc="/proc"):
    """(cpu_ns, run_delay_ns) summed over the process's threads (schedstat's first two
    fields: time on a CPU, time runnable but waiting for one), or None."""
    base = f"{proc}/{pid}/task"
    cpu = delay = 0
    try:
        tids = os.listdir(base)
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"{base}/{tid}/schedstat") as f:
                fields = f.read().split()
            cpu += int(fields[0])
            delay += int(fields[1])
        except (OSError, ValueError, IndexError):
            continue  # the thread exited, or no schedstat
    return cpu, delay


def _host_cpu_ticks(proc="/proc"):
    """(steal, total) clock ticks of all CPUs from /proc/stat's "cpu" line, or None (no file,
    a line that is not numbers, or a kernel without the steal field). Guest time is inside
    user and nice already."""
    try:
        with open(f"{proc}/stat") as f:
            fields = f.readline().split()
        if fields[0] != "cpu" or len(fields) < 9:
            return None
        ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError, IndexError):
        return None
    return ticks[7], sum(ticks)


class ProcessLoad:
    """CPU time and run-queue wait of this process's threads from start() to stop().
    `proc`: where procfs is mounted (tests give a directory of fixture files)."""

    def __init__(self, proc="/proc"):
        self._proc = proc
        self._start = None
        self._result = None

    def _sample(self):
        return time.monotonic_ns(), _thread_times(proc=self._proc), _host_cpu_ticks(self._proc)

    def start(self):
        if self._start is None and self._result is None:
            self._start = self._sample()

    def stop(self):
        """The args of the trace's metadata event (the same on later calls): {} when start()
        never ran or /proc is not readable."""
        if self._result is not None:
            return self._result
        if self._start is None:
            return {}
        t0, threads0, host0 = self._start
        t1, threads1, host1 = self._sample()
        self._result = {}
        if threads0 is not None and threads1 is not None:
            self._result = {"cpu_ns": max(0, threads1[0] - threads0[0]),
                            "run_delay_ns": max(0, threads1[1] - threads0[1]),
                            "wall_ns": t1 - t0}
            if host0 is not None and host1 is not None and host1[1] > host0[1] \
                    and host1[0] >= host0[0]:
                self._result["steal_fraction"] = (host1[0] - host0[0]) / (host1[1] - host0[1])
        return self._result


def add_to_trace(path, load, pid=None):
    """Adds the metadata event to the Chrome / Kineto trace at `path` (.json or .json.gz;
    an object with "traceEvents" or a bare list of events), rewritten in place."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    event = {"ph": "M", "name": EVENT_NAME, "pid": os.getpid() if pid is None else pid,
             "tid": 0, "args": load}
    events = trace if isinstance(trace, list) else trace.setdefault("traceEvents", [])
    events.append(event)
    tmp = path + ".tmp"
    with opener(tmp, "wt") as f:
        json.dump(trace, f)
    os.replace(tmp, path)
