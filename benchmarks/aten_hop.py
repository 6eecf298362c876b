"""Run under ``wooly run`` by benchmarks/torch_overhead.py: the cost of the PyTorch face's two kinds of traffic,
measured the same way against a gpud with per-tenant executors and one without (NOTE [executors]).

Prints one JSON line: ``sync_us`` (a synchronous op: ``item()`` of a 1-element tensor, median of many) and
``stream_us_per_op`` (small ops streamed in batches, then one sync, per op)."""

import json
import statistics
import sys
import time

import torch

quick = "--quick" in sys.argv
x = torch.ones(1, device="cuda")
for _ in range(50):
    x.item()
samples = []
for _ in range(300 if quick else 2000):
    t0 = time.perf_counter()
    x.item()
    samples.append(time.perf_counter() - t0)
a = torch.ones(64, device="cuda")
for _ in range(200):  # the op's metadata is cached on the client after its first call
    a = a + 1
torch.cuda.synchronize()
n = 3000 if quick else 20000
t0 = time.perf_counter()
for _ in range(n):
    a = a + 1
torch.cuda.synchronize()
stream = (time.perf_counter() - t0) / n
print(json.dumps({"sync_us": statistics.median(samples) * 1e6, "stream_us_per_op": stream * 1e6}))
