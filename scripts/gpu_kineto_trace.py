#!/usr/bin/env python3
"""Writes one GPU Kineto trace with the torch of this interpreter, for scripts/gpu_check.sh:
torch.profiler (CPU + CUDA activities) around a few training steps of a small model on
cuda:0 (a DataLoader, host-to-device copies, matmul kernels, an optimizer step per
iteration, ProfilerStep#N markers), exported as Chrome trace JSON to OUTDIR/rank0.json.

    python3 scripts/gpu_kineto_trace.py OUTDIR [--steps 12]
"""

import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--width", type=int, default=2048)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_kineto_trace: torch %s sees no CUDA device" % torch.__version__)
    os.makedirs(args.outdir, exist_ok=True)
    device = torch.device("cuda", 0)
    model = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(64 * args.steps, args.width),
                                          torch.randn(64 * args.steps, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=64, pin_memory=True)
    warmup = 2
    path = os.path.join(args.outdir, "rank0.json")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=0, warmup=warmup, active=args.steps - warmup,
                                   repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            prof.step()
    torch.cuda.synchronize()
    if not os.path.exists(path):
        sys.exit("gpu_kineto_trace: the profiler wrote no trace")
    print("gpu_kineto_trace: torch %s, %d steps, %s (%d bytes)"
          % (torch.__version__, args.steps, path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
