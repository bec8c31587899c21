"""Data-parallel training with real PyTorch DistributedDataParallel (CPU, gloo), started by
`msrun-ssh --contract torch`: every process gets torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ...), so init_process_group("gloo") with init_method
env:// works unchanged, exactly as under torchrun.

The data is made here (a noisy linear function, a different shard per rank, the same for every
run) and fed by a DataLoader with worker processes, as real training does; the model is a small
MLP. Each rank prints its loss per epoch and, at the end, a SHA-256 of
its final weights: DDP keeps them identical on every rank.

    msrun-ssh --contract torch --hostfile hosts.toml examples/torch_ddp/train.py --epochs 5
    python train.py ... [--fail_rank R --fail_epoch E]   (rank R raises in epoch E, for tests)
"""
import argparse
import hashlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=5)
ap.add_argument("--steps", type=int, default=20, help="batches per epoch and rank")
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--fail_rank", type=int, default=-1)
ap.add_argument("--fail_epoch", type=int, default=1)
ap.add_argument("--loader_workers", type=int, default=1, help="DataLoader worker processes")
a = ap.parse_args()

dist.init_process_group("gloo")  # init_method env:// from MASTER_ADDR, MASTER_PORT, RANK, ...
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ["LOCAL_RANK"])
print(f"rank {rank}/{world} (local {local}, node {os.environ['GROUP_RANK']}) joined", flush=True)

torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=a.lr)
gen = torch.Generator().manual_seed(1000 + rank)  # this rank's shard
true_w = torch.arange(1, 9, dtype=torch.float32).unsqueeze(1) / 8
xs = torch.randn(a.steps * a.batch, 8, generator=gen)
ys = xs @ true_w + 0.01 * torch.randn(a.steps * a.batch, 1, generator=gen)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=a.batch,
                                     num_workers=a.loader_workers,
                                     persistent_workers=a.loader_workers > 0)

for epoch in range(1, a.epochs + 1):
    if rank == a.fail_rank and epoch == a.fail_epoch:
        raise RuntimeError(f"rank {rank}: injected failure in epoch {epoch}")
    total = 0.0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        total += loss.item()
    print(f"rank {rank} epoch {epoch} loss {total / a.steps:.6f}", flush=True)

digest = hashlib.sha256()
for p in model.module.parameters():
    digest.update(p.detach().numpy().tobytes())
print(f"rank {rank} final weights sha256 {digest.hexdigest()}", flush=True)
dist.barrier()
dist.destroy_process_group()
