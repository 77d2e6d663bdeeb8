# How HangAnalyzerTest.RealTorch113DdpHang's stacks were captured (run with /usr/bin/python3:
# torch 1.13.1, gloo, CPU). Rank 1 sleeps in forward at step 3; 4 s later a thread on each
# rank writes its main-thread stack to /tmp/hangcheck/rank<N>.txt and exits.
import os, sys, threading, time, traceback
import torch, torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

def dump(rank):
    time.sleep(4)
    main = threading.main_thread().ident
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    text = "".join(f"Thread {i} ({names.get(i,'?')}) (most recent call last):\n" + "".join(traceback.format_stack(f)) for i, f in frames.items() if i == main)
    with open(f"/tmp/hangcheck/rank{rank}.txt", "w") as fh: fh.write(text)
    os._exit(0)

class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(64, 64)
    def forward(self, x, rank, step):
        if rank == 1 and step == 3:
            time.sleep(3600)
        return self.l(x)

def run(rank):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("gloo", rank=rank, world_size=2)
    m = DDP(M()); opt = torch.optim.SGD(m.parameters(), lr=0.1)
    threading.Thread(target=dump, args=(rank,), daemon=True).start()
    for step in range(100):
        loss = m(torch.randn(8, 64), rank, step).sum()
        opt.zero_grad(); loss.backward(); opt.step()

if __name__ == "__main__":
    mp.spawn(run, nprocs=2)
