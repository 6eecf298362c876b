"""The same loop as launch_loop.cu through the Python driver face (cuda.bindings), under ``wooly run``."""

import ctypes
import sys
import time

from cuda.bindings import driver as d

PTX = b"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry empty(.param .u64 p) { ret; }
"""


def ok(result):
    if result[0] != d.CUresult.CUDA_SUCCESS:
        raise SystemExit(f"error {result[0]}")
    return result[1:]


n, rounds = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (2000, 5)
ok(d.cuInit(0))
(dev,) = ok(d.cuDeviceGet(0))
(ctx,) = ok(d.cuDevicePrimaryCtxRetain(dev))
ok(d.cuCtxSetCurrent(ctx))
(mod,) = ok(d.cuModuleLoadData(PTX))
(fn,) = ok(d.cuModuleGetFunction(mod, b"empty"))
args = ((0,), (ctypes.c_void_p,))
ok(d.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, args, 0))
ok(d.cuCtxSynchronize())
best = 1e9
for _ in range(rounds):
    t0 = time.perf_counter()
    for _ in range(n):
        d.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, args, 0)
    ok(d.cuCtxSynchronize())
    best = min(best, (time.perf_counter() - t0) / n)
print(f"{best:.9f}")
