"""FSDP2 (``fully_shard``) as torchrun runs it, on "cuda" under wooly run or on "cpu" with Gloo (the host reference).

A small transformer-like stack, each block sharded over the ranks and the whole model too, trains a few Adam steps
with gradient clipping on per-rank data; FSDP frees every block's unsharded parameters after its forward and
backward and grows them back before the next all-gather (NOTE [storage resize] in shim/torch/storage.py). Rank 0
prints the losses, the gradient norms and a checksum of the full parameters. With "init" (cuda only), the model is
built on the meta device and initialised by ``reset_parameters`` on the shards (DTensor's random ops, which set the
generator's Philox offset per shard: NOTE [rng state] in gpud/aten_exec.py), as pytorch/examples' FSDP2 does.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

on = sys.argv[1]
init = len(sys.argv) > 2 and sys.argv[2] == "init"
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if on == "cpu":
    dist.init_process_group("gloo")
mesh = init_device_mesh(on, (world,))
dev = torch.device(on, torch.cuda.current_device()) if on == "cuda" else torch.device("cpu")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.up = nn.Linear(16, 48)
        self.down = nn.Linear(48, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    def reset_parameters(self) -> None:
        self.norm.reset_parameters()
        self.up.reset_parameters()
        self.down.reset_parameters()


def build() -> nn.Module:
    return nn.Sequential(nn.Embedding(64, 16), Block(), Block(), Block(), nn.Linear(16, 64))


torch.manual_seed(0)
if init:
    with torch.device("meta"):
        model = build()
else:
    model = build().to(dev)
for block in list(model)[1:4]:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
if init:
    model.to_empty(device=dev)
    for m in model.modules():
        if isinstance(m, (nn.Embedding, nn.Linear, Block)):
            m.reset_parameters()
opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True)  # as on cuda by default
g = torch.Generator().manual_seed(100 + rank)
for step in range(4):
    x = torch.randint(0, 64, (8, 12), generator=g).to(dev)
    loss = nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0, foreach=True)
    opt.step()
    opt.zero_grad()
    if rank == 0:
        print("loss", step, loss.item().hex(), "norm", norm.full_tensor().item().hex(), flush=True)
full = sum(p.full_tensor().double().sum().item() for p in model.parameters())
if rank == 0:
    print("params", float(full).hex(), model[1].up.weight.to_local().device.type)
    if on == "cuda":
        print("allocated", torch.cuda.memory_allocated() > 0, flush=True)
dist.destroy_process_group()
if on == "cpu":  # Gloo's teardown on the host aborts now and then at exit ("terminate called without an active
    sys.stdout.flush()  # exception", after everything is printed): the host reference skips it, as fsdp1_train.py
    os._exit(0)
