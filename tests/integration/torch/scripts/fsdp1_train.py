"""FSDP1 (``FullyShardedDataParallel``, what Hugging Face's Trainer and accelerate use for ``fsdp``) as torchrun runs
it, on "cuda" under wooly run; on the host, where FSDP1 wants an accelerator, the same training with
DistributedDataParallel and Gloo, which full sharding computes exactly (gradients averaged over the ranks, Adam per
element). FSDP1 flattens the parameters into one buffer per unit, frees the unsharded buffer's storage after use and
regrows it (``_typed_storage()._resize_``), moves the flat parameter between storages (``set_``) and compares storages
by address: a remote tensor's storage answers all of it from gpud (NOTE [storage resize] in shim/torch/storage.py).
Rank 0 prints the losses and a checksum of the full parameters."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

on = sys.argv[1]
rank = int(os.environ["RANK"])
if on == "cuda":
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    dev = torch.device("cuda", rank)
else:
    dist.init_process_group("gloo")
    dev = torch.device("cpu")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 16)).to(dev)
if on == "cuda":
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    model = FSDP(model, device_id=dev)
else:
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True)
g = torch.Generator().manual_seed(100 + rank)
for step in range(5):
    x = torch.randn(8, 16, generator=g).to(dev)
    loss = (model(x) - x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if rank == 0:
        print("loss", step, loss.item().hex(), flush=True)
if on == "cuda":
    with FSDP.summon_full_params(model):
        full = sum(p.double().sum().item() for p in model.parameters())
else:
    full = sum(p.double().sum().item() for p in model.parameters())
if rank == 0:
    print("params", float(full).hex(), flush=True)
dist.destroy_process_group()
if on == "cpu":  # the CUDA build's DDP/Gloo teardown aborts now and then at exit ("terminate called without an
    os._exit(0)  # active exception", after everything is printed; 1 run in 6 here): the host reference skips it
