#!/usr/bin/python3
"""A real, small, multi-process PyTorch training job for perftracker's live mode.

It knows nothing about perftracker: no import, no profiler, no annotation. It is diagnosed
by running it under `perftracker run`, which loads the agent into every rank:

  perftracker run --report-dir /tmp/reports -- \\
      /usr/bin/python3 tests/e2e/live_job.py --fault slow_compute --fault-rank 2

N ranks (default 4) on this host, gloo over an env:// rendezvous on a store this launcher hosts,
DistributedDataParallel over a model of three blocks (classes Block1, Block2, Block3, each
an nn.Module whose forward is a Python method, so that the agent's call paths name
`Block2.forward`), a real torch.utils.data.DataLoader over a Dataset, SGD, one torch
thread per rank. Ranks are started by torch.multiprocessing.spawn (--launcher spawn, the
default) or as plain subprocesses with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT /
LOCAL_RANK in their environment, as torchrun starts them (--launcher env).

Faults, injected on --fault-rank from step --fault-after-steps on (by then the agent's
detector has learned the iteration, so its slowdown trigger fires on the change):
  slow_data       a sleep of --data-delay-ms in the Dataset's __getitem__ (per sample)
  slow_data_all   the same on every rank (an input pipeline too slow for the whole job)
  slow_compute    Block2.forward repeats its work --slow-repeats extra times
  gc              a large live heap of container objects, and a full gc.collect() of it
                  in every step (the kind of pause a leaky object graph causes)
  hang            Block2.forward sleeps forever; the other ranks block in DDP's all-reduce
                  (whoever runs the job must end it: SIGTERM / SIGKILL its process group)
  cpu_contention  nothing inside the job: the caller starts busy processes pinned to the
                  fault rank's CPU (see --pin isolate)
  host_sync       every rank reads each block's output back with .item() in every step (as
                  per-layer metrics logging does): a host-device synchronization per block
                  on the critical path; needs --device cuda (on the CPU .item() waits for
                  no device)
  net_rate_limit  the fault rank's network link sends at most --link-mbit Mbit/s (tc tbf on
                  its interface); needs --launcher netns
  pause           every --pause-every steps the fault rank calls save_checkpoint(), a plain
                  Python function that takes --pause-seconds (a sleep, as a blocking write
                  to slow storage would); the peers wait for it in the next all-reduce. An
                  intermittent pause, not a hang: the job goes on after each one
  busy            once, after step --fault-after-steps, the fault rank runs post_process()
                  for --pause-seconds: pure Python work outside the training loop (small
                  objects built one call each, as torch.profiler's prof.events() does with a
                  long profile); the peers wait for it in the next all-reduce. Its main
                  thread runs all the time: a pause for work, not a hang
  spin            once, after step --fault-after-steps, the fault rank runs
                  spin_forever(): the busy fault's work in a loop that never ends (no
                  iteration completes again); the peers wait in the next all-reduce. Busy,
                  and hung (whoever runs the job must end it, as for hang)
  extra_annotation  code the other ranks never run: evaluate_on_rank() (matrix products in
                  record_function("extra_eval"), --extra-repeats rounds) after the forward
  extra_function  the same work in a plain Python function, compute_metrics(), that the
                  other ranks never call
--fault-rank takes one rank or a comma-separated list (the extra_* faults on several ranks).

--loader-workers N gives the DataLoader N worker processes (they are started at each epoch
and joined when it ends, as in most real jobs). --teardown-seconds S: after the training
loop and destroy_process_group(), every rank spends S more seconds before it exits (what
real jobs do at the end: saving the final model, writing metrics, joining threads).

--roles two_models: the first half of the ranks trains the three-block model, the second half
a different model (EncoderDecoder), each half with DistributedDataParallel over its own
process group, and the loss is all-reduced over all ranks every step: a healthy job whose
ranks have genuinely different roles.

--launcher netns (as root, with iproute2): every rank in a network namespace of its own,
its interface eth0 (10.77.0.R+1/24) on a bridge of this job, so that each rank has its own
link and gloo's traffic crosses them (GLOO_SOCKET_IFNAME=eth0). The namespaces, veths and
bridge are named after this process (ptlink-PID-R, ptlPIDhR, ptlPIDbr), removed when the job
ends, and removed by the next netns job if this one was killed.

--pin isolate pins the fault rank alone to the last allowed CPU and every other rank to the
first one; --pin round_robin pins rank R to CPU R mod #CPUs.

--device cuda puts the model and the batches on the GPUs (rank R on GPU R mod #GPUs; with
gloo the gradients travel through the host), --backend nccl uses NCCL (one GPU per rank):
what docs/gpu-sources.md's runs on a GPU machine used.

--progress-file FILE: rank 0 appends "step wall_time_s" after each optimizer step (the
end-to-end tests follow the job's progress and step rate with it).

Needs Debian's python3-torch (CPU): run it with /usr/bin/python3.
"""

import argparse
import collections
import gc
import itertools
import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn import functional as F

FAULTS = ("none", "slow_data", "slow_compute", "gc", "hang", "cpu_contention",
          "slow_data_all", "net_rate_limit", "host_sync", "pause", "busy", "extra_annotation",
          "extra_function", "spin")


class RandomDataset(torch.utils.data.Dataset):
    """Synthetic regression samples; each sample takes `delay_s` longer when it is set.
    The samples repeat a pool of at most 2^24 values per tensor (64 MiB), so that memory does
    not grow with steps x batch (3000 steps of 8192 x 1024 would be 200 GB)."""

    POOL_VALUES = 1 << 24

    def __init__(self, size, features, seed):
        gen = torch.Generator().manual_seed(seed)
        rows = max(1, min(size, self.POOL_VALUES // features))
        self.size = size
        self.x = torch.randn(rows, features, generator=gen)
        self.y = torch.randn(rows, features, generator=gen)
        self.delay_s = 0.0  # set by the training loop once the slow_data fault starts

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        index %= len(self.x)
        return self.x[index], self.y[index]


class LinearBlock(nn.Module):
    """A Linear layer's parameters; each block's forward applies them itself (F.linear), so
    that a block's work is its forward's own time, as in models that call torch ops
    directly."""

    def __init__(self, width):
        super().__init__()
        layer = nn.Linear(width, width)
        self.weight = layer.weight
        self.bias = layer.bias


class Block1(LinearBlock):
    def forward(self, x):
        return torch.relu(F.linear(x, self.weight, self.bias))


class Block2(LinearBlock):
    """The block the faults live in: extra work (slow_compute) or a hang."""

    def __init__(self, width):
        super().__init__(width)
        self.extra_repeats = 0
        self.hang = False

    def forward(self, x):
        y = torch.relu(F.linear(x, self.weight, self.bias))
        if self.extra_repeats:
            # The same ops again, outside autograd (as a slower core would take longer on
            # them): the backward pass is unchanged.
            with torch.no_grad():
                for _ in range(self.extra_repeats):
                    torch.relu(F.linear(x, self.weight, self.bias))
        if self.hang:
            while True:  # stuck, as on a lock or a dead device; the peers wait in all-reduce
                time.sleep(3600)
        return y


class Block3(LinearBlock):
    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Model(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.block1 = Block1(width)
        self.block2 = Block2(width)
        self.block3 = Block3(width)
        self.last_norms = []

        self.sync_per_block = False  # host_sync: read every block's output on the host

    def forward(self, x):
        if not self.sync_per_block:
            return self.block3(self.block2(self.block1(x)))
        norms = []
        for block in (self.block1, self.block2, self.block3):
            x = block(x)
            norms.append(x.detach().norm().item())  # waits for the device
        self.last_norms = norms
        return x


class EncoderDecoder(nn.Module):
    """The other role's model (--roles two_models): different code."""

    def __init__(self, width):
        super().__init__()
        self.encoder = nn.Linear(width, width // 2)
        self.decoder = nn.Linear(width // 2, width)

    def forward(self, x):
        return self.decoder(torch.tanh(self.encoder(x)))


def compute_metrics(x, weight, repeats):
    """extra_function (and inside evaluate_on_rank): work only the fault ranks do."""
    with torch.no_grad():
        acc = x
        for _ in range(repeats):
            acc = torch.tanh(acc @ weight) + x
        return float(acc.sum())


def evaluate_on_rank(x, weight, repeats):
    """extra_annotation: the extra work in an annotated block, as users mark evaluation."""
    with torch.profiler.record_function("extra_eval"):
        return compute_metrics(x, weight, repeats)


class LeakyCache:
    """The gc fault: a big graph of small containers that stays alive (a cache that only
    grows), and a full collection of it in every step, as code calling gc.collect() per
    step (or a low gc threshold over a large heap) does."""

    def __init__(self, objects):
        self.nodes = []
        for i in range(objects):
            node = {"id": i, "peers": []}
            node["peers"].append(node)  # a reference cycle
            self.nodes.append(node)

    def collect(self):
        gc.collect()


def save_checkpoint(seconds):
    """The pause fault: a blocking write to slow storage, here a sleep."""
    time.sleep(seconds)


class Span:
    """One record of the busy fault's post-processing (profiler_util.Interval's shape)."""
    __slots__ = ("start", "end", "width")

    def __init__(self, start, end):
        self.start = start
        self.end = end
        self.width = sum(range(6000))  # tens of microseconds of work in C per call


def post_process(seconds):
    """The busy fault: `seconds` of Python work, one Span() call at a time. starmap and
    deque run the loop in C, so the main thread's Python stack is this function and
    Span.__init__, the same at every instant (as torch.profiler's was in Interval.__init__),
    while it makes tens of thousands of calls a second."""
    end = time.monotonic() + seconds
    made = 0
    while time.monotonic() < end:
        collections.deque(itertools.starmap(Span, zip(range(5000), range(5000))), maxlen=0)
        made += 5000
    return made


def spin_forever():
    """The spin fault: post_process's work, in a loop that never ends."""
    while True:
        collections.deque(itertools.starmap(Span, zip(range(5000), range(5000))), maxlen=0)


def sync_gradients(model, world_size):
    """--sync allreduce: the gradient all-reduce as explicit torch.distributed calls after
    the backward pass (instead of DDP's, which overlaps the backward pass in C++)."""
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size


def pin(rank, args):
    if args.pin == "none" or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin == "round_robin":
        cpu = cpus[rank % len(cpus)]
    else:  # isolate: the fault rank alone on the last CPU, the others on the first one
        cpu = cpus[-1] if rank in args.fault_ranks else cpus[0]
    os.sched_setaffinity(0, {cpu})


def run_rank(rank, args):
    torch.set_num_threads(1)  # several ranks share few cores, as on a real node
    pin(rank, args)
    torch.manual_seed(0)
    if args.device == "cuda":  # ranks share the GPUs round-robin (gloo copies via the host)
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, init_method="env://", rank=rank,
                            world_size=args.world_size)
    faulty = args.fault != "none" and (rank in args.fault_ranks or
                                       args.fault in ("slow_data_all", "host_sync"))
    role_group = None
    if args.roles == "two_models":
        half = args.world_size // 2
        groups = [dist.new_group(list(range(half))),
                  dist.new_group(list(range(half, args.world_size)))]
        role_group = groups[0] if rank < half else groups[1]
    model = (Model(args.width) if role_group is None or rank < args.world_size // 2
             else EncoderDecoder(args.width)).to(device)
    ddp_devices = [device] if device.type == "cuda" else None
    net = (nn.parallel.DistributedDataParallel(model, device_ids=ddp_devices,
                                               process_group=role_group)
           if args.sync == "ddp" else model)
    extra = None
    extra_weight = torch.randn(args.width, args.width, device=device) / args.width ** 0.5
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    dataset = RandomDataset(args.steps * args.batch * args.world_size, args.width, seed=1234)
    sampler = torch.utils.data.distributed.DistributedSampler(
        dataset, num_replicas=args.world_size, rank=rank, shuffle=False)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, sampler=sampler,
                                         num_workers=args.loader_workers)
    progress = open(args.progress_file, "a", buffering=1) if (
        args.progress_file and rank == 0) else None
    cache = None

    prof = None
    prof_from, prof_to = (args.torch_profiler or (None, None))
    started = time.time()

    for step, (x, y) in enumerate(loader):
        if prof_from is not None:  # --torch-profiler: the job's own torch.profiler session
            elapsed = time.time() - started
            if prof is None and prof_from <= elapsed < prof_to:
                prof = torch.profiler.profile()
                prof.__enter__()
                print(f"live_job: rank {rank} torch.profiler on", file=sys.stderr, flush=True)
            elif prof is not None and elapsed >= prof_to:
                prof.__exit__(None, None, None)
                # Not prof.events(): torch post-processes a GPU profile in Python for
                # 30+ s (seen on an H200 with torch 2.11), a stall of the job's own making.
                print(f"live_job: rank {rank} torch.profiler off", file=sys.stderr, flush=True)
                prof, prof_from = None, None
        if faulty and step == args.fault_after_steps:
            if args.fault in ("slow_data", "slow_data_all"):
                dataset.delay_s = args.data_delay_ms / 1000.0
            elif args.fault == "slow_compute":
                model.block2.extra_repeats = args.slow_repeats
            elif args.fault == "hang":
                model.block2.hang = True
            elif args.fault == "gc":
                cache = LeakyCache(args.gc_objects)
            elif args.fault == "net_rate_limit":
                limit_link(args.link_mbit)
            elif args.fault == "host_sync":
                model.sync_per_block = True
            elif args.fault in ("pause", "busy", "spin"):
                pass  # below, after the step
            elif args.fault in ("extra_annotation", "extra_function"):
                extra = args.fault
            print(f"live_job: rank {rank} fault {args.fault} starts at step {step} "
                  f"({time.time():.3f})", file=sys.stderr, flush=True)
        if device.type == "cuda":
            x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        if extra == "extra_annotation":
            evaluate_on_rank(x, extra_weight, args.extra_repeats)
        elif extra == "extra_function":
            compute_metrics(x, extra_weight, args.extra_repeats)
        loss.backward()
        if role_group is not None:  # one job: the roles agree on the loss every step
            dist.all_reduce(loss.detach().clone())
        if args.sync == "allreduce":
            sync_gradients(model, args.world_size)
        opt.step()
        if cache is not None:
            cache.collect()
        if (faulty and args.fault == "pause" and step >= args.fault_after_steps and
                (step - args.fault_after_steps) % args.pause_every == 0):
            print(f"live_job: rank {rank} pauses {args.pause_seconds:g} s at step {step} "
                  f"({time.time():.3f})", file=sys.stderr, flush=True)
            save_checkpoint(args.pause_seconds)
        if faulty and args.fault == "busy" and step == args.fault_after_steps:
            print(f"live_job: rank {rank} busy in post_process() for {args.pause_seconds:g} s "
                  f"at step {step} ({time.time():.3f})", file=sys.stderr, flush=True)
            made = post_process(args.pause_seconds)
            print(f"live_job: rank {rank} post_process() made {made} spans "
                  f"({time.time():.3f})", file=sys.stderr, flush=True)
        if faulty and args.fault == "spin" and step == args.fault_after_steps:
            print(f"live_job: rank {rank} spins forever in spin_forever() at step {step} "
                  f"({time.time():.3f})", file=sys.stderr, flush=True)
            spin_forever()
        if args.step_sleep_ms:
            time.sleep(args.step_sleep_ms / 1000.0)
        if progress is not None:
            progress.write(f"{step} {time.time():.6f}\n")
    dist.barrier()
    dist.destroy_process_group()
    if args.teardown_seconds:
        time.sleep(args.teardown_seconds)
    if progress is not None:
        progress.close()


def host_rendezvous_store(world_size):
    """The job's rendezvous store, hosted by this launcher as torchrun's agent hosts it:
    bound to a port the kernel picks and held from then on. Ranks reach it through
    MASTER_ADDR / MASTER_PORT with TORCHELASTIC_USE_AGENT_STORE=True, so rank 0 connects
    to it instead of binding the port itself. (A port found free by binding a socket and
    closing it can be taken by any other process's connection before rank 0 binds it: a
    busy CI machine running other jobs beside this one saw 'Address already in use'.)
    The caller keeps the returned store alive until the ranks are done."""
    store = dist.TCPStore("127.0.0.1", 0, world_size, True, wait_for_workers=False)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port),
                      TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
    return store


def env_worker(args):
    """--launcher env: this process is one rank, as torchrun would start it."""
    run_rank(int(os.environ["RANK"]), args)


def launch_env(args, argv, netns_pid=None):
    """Starts one subprocess per rank with torchrun's environment (in rank R's namespace
    with netns_pid); the first failure ends the others. Returns the exit code (0 when every
    rank exited 0)."""
    procs = []
    for rank in range(args.world_size):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE=str(args.world_size), LOCAL_WORLD_SIZE=str(args.world_size),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", *argv]
        if netns_pid is not None:
            env.update(MASTER_ADDR=f"{NETNS_SUBNET}1", GLOO_SOCKET_IFNAME="eth0")
            cmd = ["ip", "netns", "exec", netns_names(netns_pid, rank)[0]] + cmd
        procs.append(subprocess.Popen(cmd, env=env))
    rc = 0
    alive = list(procs)
    while alive:
        for p in list(alive):
            code = p.poll()
            if code is None:
                continue
            alive.remove(p)
            if code != 0 and rc == 0:
                rc = code if code > 0 else 128 - code
                for q in alive:
                    q.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    return rc


NETNS_SUBNET = "10.77.0."


def netns_problem():
    """Why --launcher netns cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, or use --launcher env)"
    for tool in ("ip", "tc"):
        if not any(os.access(os.path.join(d, tool), os.X_OK)
                   for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/sbin", "/sbin"]):
            return f"'{tool}' was not found (install iproute2)"
    return None


def ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def netns_names(pid, rank=None):
    return (f"ptlink-{pid}-{rank}" if rank is not None else f"ptlink-{pid}-",
            f"ptl{pid}h{rank}", f"ptl{pid}br")


def remove_netns(pid):
    prefix, _, bridge = netns_names(pid)
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix):
            ip("netns", "del", name, check=False)  # its veth pair goes with it
    ip("link", "del", bridge, check=False)


def remove_stale_netns():
    """Namespaces and bridges of netns jobs that were killed before they could clean up."""
    for line in ip("netns", "list", check=False).stdout.splitlines():
        parts = line.split()[0].split("-") if line.split() else []
        if len(parts) == 3 and parts[0] == "ptlink" and parts[1].isdigit():
            if not os.path.exists(f"/proc/{parts[1]}"):
                remove_netns(int(parts[1]))


def setup_netns(world_size):
    pid = os.getpid()
    remove_stale_netns()
    _, _, bridge = netns_names(pid)
    try:
        ip("link", "add", bridge, "type", "bridge")
        ip("link", "set", bridge, "up")
        for rank in range(world_size):
            ns, host_if, _ = netns_names(pid, rank)
            ip("netns", "add", ns)
            ip("link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", host_if, "master", bridge, "up")
            ip("-n", ns, "addr", "add", f"{NETNS_SUBNET}{rank + 1}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except Exception:
        remove_netns(pid)
        raise
    return pid


def launch_netns(args, argv):
    """launch_env's subprocesses, each rank in a network namespace of its own."""
    pid = setup_netns(args.world_size)
    # SIGTERM (the job's end, from whoever runs it) unwinds, so the namespaces go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        args.port = 29500
        return launch_env(args, argv, netns_pid=pid)
    finally:
        remove_netns(pid)


def limit_link(mbit):
    """net_rate_limit: this rank's interface (it is in its own namespace) sends at most
    `mbit` Mbit/s: a token bucket on eth0's egress, as a NIC negotiated down would."""
    r = subprocess.run(["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate",
                        f"{mbit:g}mbit", "burst", "32kb", "latency", "50ms"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"live_job: tc tbf on eth0 failed: {r.stderr.strip()}", file=sys.stderr,
              flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-rank", default="2",
                   help="the rank (or comma-separated ranks) the fault is injected on")
    p.add_argument("--extra-repeats", type=int, default=12,
                   help="extra_annotation / extra_function: rounds of compute_metrics()")
    p.add_argument("--roles", choices=("same", "two_models"), default="same")
    p.add_argument("--fault-after-steps", type=int, default=80,
                   help="steps before the fault starts (the detector learns the iteration "
                        "first)")
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--launcher", choices=("spawn", "env", "netns"), default="spawn",
                   help="torch.multiprocessing.spawn, or subprocesses with torchrun's "
                        "environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); netns: "
                        "those subprocesses, each in a network namespace of its own (root)")
    p.add_argument("--sync", choices=("ddp", "allreduce"), default="ddp",
                   help="gradient synchronization: DistributedDataParallel (default) or "
                        "explicit dist.all_reduce calls after the backward pass")
    p.add_argument("--pin", choices=("none", "round_robin", "isolate"), default="none")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: model and batches on the GPUs (rank r on GPU r mod #GPUs)")
    p.add_argument("--torch-profiler", type=lambda t: tuple(float(v) for v in t.split(":")),
                   default=None, metavar="FROM:TO",
                   help="run torch.profiler from FROM to TO seconds after the first step")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                   help="nccl needs --device cuda and one GPU per rank")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--slow-repeats", type=int, default=12,
                   help="slow_compute: extra runs of Block2's forward work")
    p.add_argument("--data-delay-ms", type=float, default=0.5,
                   help="slow_data: extra delay per sample")
    p.add_argument("--link-mbit", type=float, default=100,
                   help="net_rate_limit: the fault rank's send rate limit in Mbit/s")
    p.add_argument("--gc-objects", type=int, default=100000,
                   help="gc: live container objects a full collection walks every step")
    p.add_argument("--step-sleep-ms", type=float, default=0.0,
                   help="a sleep at the end of every step (every rank): a longer iteration "
                        "without more CPU work, as host work a bigger model would do")
    p.add_argument("--pause-seconds", type=float, default=3.0,
                   help="pause: how long each save_checkpoint() takes; busy: how long "
                   "post_process() runs")
    p.add_argument("--pause-every", type=int, default=40,
                   help="pause: steps between two pauses")
    p.add_argument("--loader-workers", type=int, default=0,
                   help="DataLoader worker processes per rank")
    p.add_argument("--teardown-seconds", type=float, default=0.0,
                   help="seconds each rank spends after destroy_process_group() before exiting")
    p.add_argument("--progress-file", default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        args.fault_ranks = {int(r) for r in args.fault_rank.split(",")}
    except ValueError:
        p.error(f"--fault-rank {args.fault_rank!r} is not a rank or a comma-separated list")
    if not all(0 <= r < args.world_size for r in args.fault_ranks):
        p.error(f"--fault-rank {args.fault_rank} is not in [0, {args.world_size})")
    if args.fault == "host_sync" and args.device != "cuda":
        p.error("--fault host_sync needs --device cuda (on the CPU .item() waits for no device)")
    if args.fault == "net_rate_limit" and args.launcher != "netns":
        p.error("--fault net_rate_limit needs --launcher netns (each rank its own link)")
    if args.link_mbit <= 0:
        p.error(f"--link-mbit {args.link_mbit} is not a positive rate")
    if args.launcher == "netns" and not args.worker:
        problem = netns_problem()
        if problem:
            p.error(f"--launcher netns: {problem}")
    return args


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        env_worker(args)
        return 0
    start = time.monotonic()
    if args.launcher == "spawn":
        store = host_rendezvous_store(args.world_size)  # held until the ranks are done
        mp.spawn(run_rank, args=(args,), nprocs=args.world_size, join=True)
        rc = 0
    elif args.launcher == "env":
        store = host_rendezvous_store(args.world_size)
        args.port = store.port
        rc = launch_env(args, argv)
    elif args.launcher == "netns":
        rc = launch_netns(args, argv)
    print(f"live_job: {args.world_size} ranks, {args.steps} steps, fault={args.fault} "
          f"(rank {args.fault_rank} from step {args.fault_after_steps}), "
          f"{time.monotonic() - start:.1f} s, exit {rc}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
