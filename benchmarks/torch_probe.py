"""Run under ``wooly run`` by benchmarks.torch_overhead: client cost per op and round trips per step."""

import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

quick = "--quick" in sys.argv
a = torch.randn(16, 16, device="cuda")
b = torch.randn(16, 16, device="cuda")
for _ in range(300):
    c = a + b
torch.cuda.synchronize()
n = 2000 if quick else 10000
best = float("inf")
for _ in range(3):
    t0 = time.perf_counter()
    for _ in range(n):
        c = a + b
    best = min(best, (time.perf_counter() - t0) / n)
    torch.cuda.synchronize()

from shim.torch import stream as S  # noqa: E402

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 32).cuda(), torch.randint(0, 10, (64,)).cuda()


def step() -> float:
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


for _ in range(3):
    step()
conn = S.current().conn
steps = 10 if quick else 30
r0 = conn.round_trips
for _ in range(steps):
    step()
print(json.dumps({"op_us": best * 1e6, "round_trips_per_step": (conn.round_trips - r0) / steps}))
