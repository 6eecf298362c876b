"""DistributedDataParallel as torchrun runs it, on "cuda" (under wooly run) or "cpu" (the host reference, Gloo).

Each rank trains the same seeded model on its own data for a few SGD steps, then runs the collectives a program
calls by hand; rank 0 prints what the test compares with the host run.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

on = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if on == "cuda":
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl")  # what a GPU script asks for
    dev = torch.device("cuda", torch.cuda.current_device())
else:
    dist.init_process_group("gloo")
    dev = torch.device("cpu")

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 3)).to(dev)
if rank == 1:  # DDP's first act: every rank starts from rank 0's parameters
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
ddp = DDP(model, device_ids=[dev.index] if on == "cuda" else None, bucket_cap_mb=0.001)  # several buckets
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
g = torch.Generator().manual_seed(100 + rank)
for _step in range(5):
    x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
    loss = nn.functional.cross_entropy(ddp(x.to(dev)), y.to(dev))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"rank{rank} loss {loss.item()!r}", flush=True)


class TwoHeads(nn.Module):  # its second head is never used
    def __init__(self) -> None:
        super().__init__()
        self.used, self.unused = nn.Linear(8, 2), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


# find_unused_parameters, which Hugging Face's Trainer asks for: the reducer keeps a pinned host copy of its map of
# the parameters each step used
torch.manual_seed(1)
heads = TwoHeads().to(dev)
ddp2 = DDP(heads, device_ids=[dev.index] if on == "cuda" else None, find_unused_parameters=True)
opt2 = torch.optim.SGD(ddp2.parameters(), lr=0.1)
for _step in range(2):
    loss2 = ddp2(torch.randn(4, 8, generator=g).to(dev)).square().mean()
    opt2.zero_grad()
    loss2.backward()
    opt2.step()
    print(f"rank{rank} loss {loss2.item()!r}", flush=True)

flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
every = [torch.empty_like(flat) for _ in range(world)]
dist.all_gather(every, flat)
same = all(torch.equal(every[0], e) for e in every)

t = torch.arange(6, dtype=torch.float32, device=dev) * (rank + 1)
dist.all_reduce(t)
b = torch.full((3,), float(rank), device=dev)
dist.broadcast(b, src=1)
whole = torch.empty(2 * world, device=dev)
dist.all_gather_into_tensor(whole, torch.tensor([rank, 10.0 * rank], device=dev))
part = torch.empty(2, device=dev)
dist.reduce_scatter_tensor(part, torch.arange(2.0 * world, device=dev) + rank)
mx = torch.tensor([3.0 * rank, -1.0], device=dev)
dist.all_reduce(mx, op=dist.ReduceOp.MAX)
h = torch.tensor([1, 2], dtype=torch.int64, device=dev) * (rank + 1)
dist.all_reduce(h)
if rank == 0:
    dist.send(torch.tensor([7.0, 8.0], device=dev), dst=1)
elif rank == 1:
    got = torch.zeros(2, device=dev)
    dist.recv(got, src=0)
    print("recv", got.tolist(), got.device.type, flush=True)
if on == "cuda":  # NCCL's average (Gloo has none): the sum over the group size
    avg = torch.tensor([1.0, 2.0], device=dev) * (rank + 1)
    work = dist.all_reduce(avg, op=dist.ReduceOp.AVG, async_op=True)
    work.wait()
    if rank == 0:
        print("avg", avg.tolist(), flush=True)
dist.barrier()
if rank == 0:
    print("same", same)
    print("params", flat.sum().item().hex())
    print("all_reduce", t.tolist(), t.device.type)
    print("broadcast", b.tolist())
    print("gather_into", whole.tolist())
    print("reduce_scatter", part.tolist())
    print("max", mx.tolist())
    print("int64", h.tolist(), h.dtype)
    print("backend", dist.get_backend(), dist.distributed_c10d.get_backend())
dist.destroy_process_group()
