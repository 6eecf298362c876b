"""Run under ``wooly run`` by benchmarks.torch_overhead: client cost per op, round trips per step, and a
training step replayed from a CUDA graph against the same step streamed op by op."""

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
round_trips = (conn.round_trips - r0) / steps

# The same step captured once as a CUDA graph (torch.cuda.graph, the pattern of PyTorch's docs) and
# replayed, against the step streamed op by op; both read the loss each step (one sync per step).
gmodel = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
gopt = torch.optim.AdamW(gmodel.parameters(), lr=1e-3, capturable=True)


def gstep() -> torch.Tensor:
    gopt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(gmodel(x), y)
    loss.backward()
    gopt.step()
    return loss


for _ in range(3):
    gstep().item()
graph = torch.cuda.CUDAGraph()
gopt.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    static_loss = gstep()
n_steps = 20 if quick else 60
streamed = replayed = float("inf")
for _ in range(3):
    t0 = time.perf_counter()
    for _ in range(n_steps):
        gstep().item()
    streamed = min(streamed, (time.perf_counter() - t0) / n_steps)
    t0 = time.perf_counter()
    for _ in range(n_steps):
        graph.replay()
        static_loss.item()
    replayed = min(replayed, (time.perf_counter() - t0) / n_steps)
print(
    json.dumps(
        {
            "op_us": best * 1e6,
            "round_trips_per_step": round_trips,
            "graph_ops": graph._ops,
            "streamed_step_ms": streamed * 1e3,
            "replayed_step_ms": replayed * 1e3,
        }
    )
)
