"""A numba-cuda program of many small steps whose state lives on the device (run unmodified by the drain tests).

Each step is a kernel over device arrays and a synchronising copy of one element back; the state after the last
step is printed as a checksum, so a run that moved between nodes mid-way can be compared with one that did not."""

import os
import sys
import time

import numpy as np
from numba import cuda

STEPS = int(os.environ.get("STEPS", "60"))
PAUSE = float(os.environ.get("PAUSE", "0.05"))


@cuda.jit
def step(x, v, k):
    i = cuda.grid(1)
    if i < x.size:
        v[i] = np.float32(0.99) * v[i] - np.float32(0.01) * x[i] + np.float32(k) * np.float32(1e-4)
        x[i] = x[i] + v[i]


n = 1 << 18
rng = np.random.default_rng(7)
x = cuda.to_device(rng.standard_normal(n).astype(np.float32))
v = cuda.to_device(np.zeros(n, np.float32))
for k in range(STEPS):
    step[(n + 255) // 256, 256](x, v, k)
    probe = x[0:1].copy_to_host()  # a synchronisation point every step
    if k % 10 == 0:
        print(f"step {k} x0={probe[0]:.6f}", flush=True)
    if k == 5:
        print("READY", flush=True)
    time.sleep(PAUSE)
h = x.copy_to_host()
print(f"checksum {float(np.sum(h.astype(np.float64))):.9f} {float(np.abs(h).max()):.9f}")
sys.stdout.flush()
