"""Tensor parallelism as torchrun runs it (DTensor over a DeviceMesh), on "cuda" under wooly run or on "cpu" with Gloo.

A two-layer MLP split column-wise then row-wise over the ranks trains a few AdamW steps on the same data on every
rank; rank 0 prints the losses, a checksum of its local shards and how many collective works are still registered.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch._C._distributed_c10d import _get_work_registry_size
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

on = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if on == "cpu":
    dist.init_process_group("gloo")
mesh = init_device_mesh(on, (world,))  # under wooly: the "nccl" of a cuda mesh, each rank on cuda:LOCAL_RANK

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5)).to(on)
model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
opt = torch.optim.AdamW(model.parameters(), lr=0.05, foreach=True)
for step in range(4):
    torch.manual_seed(step)
    x = torch.rand(8, 10, device=on)
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if rank == 0:
        print("loss", step, loss.item().hex(), flush=True)
local = sum(p.to_local().double().sum().item() for p in model.parameters())
if rank == 0:
    print("device", model[0].weight.to_local().device.type)
    print("shards", float(local).hex())
    print("pending works", _get_work_registry_size())
dist.destroy_process_group()
