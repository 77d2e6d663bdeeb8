#!/usr/bin/python3
"""A real, small, multi-process PyTorch training job that writes one profiler trace per rank.

It is what perftracker's end-to-end tests diagnose: N processes (default 4) on this host,
gloo over an env:// rendezvous on a store this launcher hosts, a model of three Linear blocks
(each forward inside a named torch.profiler.record_function: "block1".."block3"),
DistributedDataParallel (or, with --sync allreduce, an explicit gradient all_reduce inside
record_function("sync_gradients")), a real torch.utils.data.DataLoader over a Dataset, and
torch.profiler with a schedule (wait 2, warmup 1, active 15 steps). Each rank exports
OUTDIR/rank{R}.json (or .json.gz), with how busy the machine was over the recorded steps
(perftracker.host_load: its threads' CPU time and run-queue wait); with --tensorboard, what
torch.profiler.tensorboard_trace_handler writes instead (no rank, no load).

Faults (injected on the --fault-rank ranks only, one rank or a comma-separated list):
  slow_compute      block2's forward work repeated --slow-repeats times inside
                    record_function("block2"): that block takes 3-5x as long
  slow_data         a sleep in the Dataset's __getitem__: the DataLoader's __next__ takes
                    longer
  extra_annotation  code the other ranks never run: compute_metrics() (matrix products
                    and activations, --extra-repeats rounds) inside
                    record_function("extra_eval") after the forward pass
  extra_function    the same compute_metrics() called as a plain Python function, with no
                    annotation: only its operators are in the trace

--background-load N: N busy-loop processes run beside the job: the same job on a busier
machine (what `perftracker compare` must not call a change of the job).

--roles two_models: the first half of the ranks trains the three-block model, the second
half a different model (record_function "encode" / "decode", another width), each half with
DistributedDataParallel over its own process group; the job's loss is all-reduced over all
ranks every step. A healthy job whose ranks have genuinely different roles.

Needs Debian's python3-torch (CPU): run it with /usr/bin/python3.

  /usr/bin/python3 tests/e2e/train_job.py --outdir /tmp/straggler --fault slow_compute --fault-rank 2
"""

import argparse
import contextlib
import gzip
import os
import shutil
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule
from torch.profiler import record_function as _record_function

# perftracker's Python package, from this source tree: the machine's load goes into each trace.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from perftracker.host_load import ProcessLoad, add_to_trace  # noqa: E402

# --no-annotations: no record_function at all (set per rank process in run_rank).
ANNOTATE = True


def record_function(name):
    """torch.profiler.record_function, or nothing with --no-annotations: a trace of torch ops
    alone, as torch.profiler without with_stack writes for a job that names nothing."""
    return _record_function(name) if ANNOTATE else contextlib.nullcontext()


FAULTS = ("none", "slow_compute", "slow_data", "extra_annotation", "extra_function")


class RandomDataset(torch.utils.data.Dataset):
    """Synthetic regression samples; on the faulty rank each sample takes `delay_s` longer."""

    def __init__(self, size, features, delay_s, seed):
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, features, generator=gen)
        self.y = torch.randn(size, features, generator=gen)
        self.delay_s = delay_s

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        return self.x[index], self.y[index]


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.linear(x))


class Model(nn.Module):
    """Three blocks, each forward under a named record_function, as users annotate code."""

    def __init__(self, width, slow_block2):
        super().__init__()
        self.block1 = Block(width)
        self.block2 = Block(width)
        self.block3 = Block(width)
        self.slow_block2 = slow_block2

    def forward(self, x):
        with record_function("block1"):
            x = self.block1(x)
        with record_function("block2"):
            x = self.block2(x)
            # The injected fault: this rank repeats block2's forward work (the same ops,
            # as a slower core would take longer on them), outside autograd so the
            # backward pass is unchanged.
            with torch.no_grad():
                for _ in range(self.slow_block2):
                    self.block2(x)
        with record_function("block3"):
            x = self.block3(x)
        return x


class EncoderDecoder(nn.Module):
    """The other role's model (--roles two_models): different code, its own annotations."""

    def __init__(self, width):
        super().__init__()
        self.encoder = nn.Linear(width, width // 2)
        self.decoder = nn.Linear(width // 2, width)

    def forward(self, x):
        with record_function("encode"):
            h = torch.tanh(self.encoder(x))
        with record_function("decode"):
            return self.decoder(h)


def compute_metrics(x, weight, repeats):
    """Work only the fault ranks do (extra_annotation / extra_function): products and
    activations of the batch, outside autograd."""
    with torch.no_grad():
        acc = x
        for _ in range(repeats):
            acc = torch.tanh(acc @ weight)
            acc = acc + x
        return float(acc.sum())


def host_rendezvous_store(world_size):
    """The ranks' rendezvous store, hosted by this launcher as torchrun's agent hosts it:
    bound to a port the kernel picks and held from then on; with
    TORCHELASTIC_USE_AGENT_STORE=True rank 0 connects to it instead of binding the port
    itself. (A port found free by binding a socket and closing it can be taken by another
    process's connection before rank 0 binds it: 'Address already in use' on a busy
    machine.) The caller keeps the store alive until the ranks are done."""
    store = dist.TCPStore("127.0.0.1", 0, world_size, True, wait_for_workers=False)
    os.environ.update(TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
    return store


def run_rank(rank, args):
    global ANNOTATE
    ANNOTATE = not args.no_annotations
    torch.set_num_threads(1)  # several ranks share few cores, as on a real node
    if args.pin and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    torch.manual_seed(0)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", init_method="env://", rank=rank,
                            world_size=args.world_size)
    faulty = rank in args.fault_ranks
    slow_block2 = args.slow_repeats if faulty and args.fault == "slow_compute" else 0
    delay_s = args.data_delay_ms / 1000.0 if faulty and args.fault == "slow_data" else 0.0
    extra = args.fault if faulty and args.fault.startswith("extra_") else None

    role_group = None
    if args.roles == "two_models":
        half = args.world_size // 2
        groups = [dist.new_group(list(range(half))),
                  dist.new_group(list(range(half, args.world_size)))]
        role_group = groups[0] if rank < half else groups[1]
        model = Model(args.width, 0) if rank < half else EncoderDecoder(args.width)
    else:
        model = Model(args.width, slow_block2)
    if args.sync == "ddp":
        model = nn.parallel.DistributedDataParallel(model, process_group=role_group)
    extra_weight = torch.randn(args.width, args.width) / args.width ** 0.5
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    steps = args.wait + args.warmup + args.active
    dataset = RandomDataset(steps * args.batch * args.world_size, args.width, delay_s,
                            seed=1234)
    sampler = torch.utils.data.distributed.DistributedSampler(
        dataset, num_replicas=args.world_size, rank=rank, shuffle=False)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, sampler=sampler,
                                         num_workers=0)

    suffix = ".json.gz" if args.gzip else ".json"
    path = os.path.join(args.outdir, f"rank{rank}{suffix}")

    load = ProcessLoad()
    if args.tensorboard:
        # What a user's own job writes: <host>_<pid>.<ms>.pt.trace.json, no rank anywhere
        # (torch 1.13 without Kineto: a bare list of events), nothing of perftracker's. Which
        # process was which rank, for the tests only, outside the trace files.
        with open(os.path.join(args.outdir, "pids.txt"), "a") as f:
            f.write(f"{rank} {os.getpid()}\n")

    def on_trace_ready(prof):
        tmp = os.path.join(args.outdir, f".rank{rank}.tmp.json")
        prof.export_chrome_trace(tmp)
        # How long this rank's threads waited for a CPU over the recorded steps: how busy
        # the machine was (perftracker compare discounts what that explains).
        add_to_trace(tmp, load.stop())
        if args.gzip:
            with open(tmp, "rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
            os.remove(tmp)
        else:
            os.replace(tmp, path)

    sched = schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=1)
    if args.tensorboard:
        on_trace_ready = torch.profiler.tensorboard_trace_handler(args.outdir)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                 on_trace_ready=on_trace_ready) as prof:
        for x, y in loader:
            if prof.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
                load.start()  # the first recorded step
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            if extra == "extra_annotation":
                with record_function("extra_eval"):
                    compute_metrics(x, extra_weight, args.extra_repeats)
            elif extra == "extra_function":
                compute_metrics(x, extra_weight, args.extra_repeats)
            loss.backward()
            if role_group is not None:
                # One job: the roles agree on the loss every step.
                total = loss.detach().clone()
                dist.all_reduce(total)
            if args.sync == "allreduce":
                with record_function("sync_gradients"):
                    for p in model.parameters():
                        dist.all_reduce(p.grad)
                        p.grad /= args.world_size
            opt.step()
            if prof.current_action == ProfilerAction.RECORD_AND_SAVE:
                load.stop()  # the last recorded step, before the profiler's export
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--outdir", required=True)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-rank", default="2",
                   help="the rank (or comma-separated ranks) the fault is injected on")
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--sync", choices=("ddp", "allreduce"), default="ddp",
                   help="gradient synchronization: DistributedDataParallel (default) or an "
                        "explicit all_reduce in record_function('sync_gradients')")
    p.add_argument("--pin", action="store_true", help="pin rank R to CPU R mod #CPUs")
    p.add_argument("--gzip", action="store_true", help="write rank{R}.json.gz")
    p.add_argument("--no-annotations", action="store_true",
                   help="no record_function anywhere: the trace holds torch ops only")
    p.add_argument("--tensorboard", action="store_true",
                   help="write the traces with torch.profiler.tensorboard_trace_handler "
                        "(<host>_<pid>.<ms>.pt.trace.json, no rank in them) and each rank's "
                        "pid in OUTDIR/pids.txt")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--slow-repeats", type=int, default=4,
                   help="extra runs of block2's forward on the faulty rank (slow_compute)")
    p.add_argument("--extra-repeats", type=int, default=12,
                   help="rounds of compute_metrics() on the fault ranks (extra_*)")
    p.add_argument("--roles", choices=("same", "two_models"), default="same")
    p.add_argument("--data-delay-ms", type=float, default=0.2,
                   help="extra delay per sample on the faulty rank (slow_data)")
    p.add_argument("--wait", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=15,
                   help="profiled steps (enough that CPU time-slicing noise averages out)")
    p.add_argument("--background-load", type=int, default=0, metavar="N",
                   help="N busy-loop processes beside the job for its whole run: a machine "
                        "busier than usual (not a fault of the job)")
    args = p.parse_args(argv)
    try:
        args.fault_ranks = {int(r) for r in args.fault_rank.split(",")}
    except ValueError:
        p.error(f"--fault-rank {args.fault_rank!r} is not a rank or a comma-separated list")
    if not all(0 <= r < args.world_size for r in args.fault_ranks):
        p.error(f"--fault-rank {args.fault_rank} is not in [0, {args.world_size})")
    os.makedirs(args.outdir, exist_ok=True)
    store = host_rendezvous_store(args.world_size)
    args.port = store.port
    start = time.monotonic()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.background_load)]
    try:
        mp.spawn(run_rank, args=(args,), nprocs=args.world_size, join=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"train_job: {args.world_size} ranks, fault={args.fault} "
          f"(rank {args.fault_rank}), traces in {args.outdir}, "
          f"{time.monotonic() - start:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
