# Regenerates torch113_gloo_rank0.json (a golden input of kineto_importer_test.cc):
#   /usr/bin/python3 generate_torch113_trace.py OUTDIR   (Debian python3-torch 1.13.1, CPU, gloo)
# then copy OUTDIR/torch113_gloo_rank0.json here and update the expected numbers in the test.
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.profiler import profile, ProfilerActivity, schedule, record_function

def run(rank, world, outdir):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = "29517"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 16), torch.randn(32, 2)), batch_size=8)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2, repeat=1)) as prof:
        for x, y in data:
            with record_function("forward_pass"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            prof.step()
    prof.export_chrome_trace(os.path.join(outdir, f"torch113_gloo_rank{rank}.json"))
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(2, sys.argv[1]), nprocs=2)
