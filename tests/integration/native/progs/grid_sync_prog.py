"""Cooperative launches with grid-wide sync (run under ``wooly run``), both ways a program gets one:
numba-cuda's `cuda.cg.this_grid().sync()` (cuda.core launches it with the cooperative attribute of
cuLaunchKernelEx; the cudadevrt it links is supplied by the JIT) and nvcc PTX launched with
cuLaunchCooperativeKernel through cuda.bindings. A grid larger than the device's occupancy allows is refused
with CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE; an ordinary launch of grid-sync code traps. Prints "grid sync OK"."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
from cuda.bindings import driver as cu
from numba import cuda, int32, void

ROOT = Path(__file__).resolve().parents[4]
PTX = ROOT / "tests" / "unit" / "jit" / "ptx" / "grid_sync_nvcc.ptx"
sys.path.insert(0, str(ROOT))
from tests.unit.jit.grid_sync_ref import expect  # noqa: E402
from tests.unit.jit.grid_sync_ref import rounds as _rounds  # noqa: E402

rounds = cuda.jit(void(int32[::1], int32[::1], int32))(_rounds)


def numba_part() -> None:
    most = rounds.overloads[rounds.signatures[0]].max_cooperative_grid_blocks(64)
    assert most >= 2, most
    grid = min(most, 24)
    a0 = np.random.default_rng(1).integers(-1000, 1000, grid * 64, dtype=np.int32)
    a, b = cuda.to_device(a0), cuda.device_array(grid * 64, np.int32)
    rounds[grid, 64](a, b, 4)
    assert np.array_equal(a.copy_to_host(), expect("numba", a0, 4)), "numba grid sync"


def check(res):  # noqa: ANN001, ANN201
    err = res[0] if isinstance(res, tuple) else res
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return res[1] if isinstance(res, tuple) and len(res) == 2 else res


def driver_part() -> None:
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    dev = check(cu.cuDeviceGet(0))
    attr = cu.CUdevice_attribute
    assert check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev)) == 1
    sms = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
    mod = check(cu.cuModuleLoadData(PTX.read_bytes() + b"\0"))
    fn = check(cu.cuModuleGetFunction(mod, b"k"))
    per_sm = check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, 128, 0))
    grid = min(per_sm * sms, 16)
    n = grid * 128
    a0 = np.random.default_rng(2).integers(-1000, 1000, n, dtype=np.int32)
    da, db = check(cu.cuMemAlloc(n * 4)), check(cu.cuMemAlloc(n * 4))
    check(cu.cuMemcpyHtoD(da, a0.ctypes.data, n * 4))
    args = [ctypes.c_uint64(int(da)), ctypes.c_uint64(int(db)), ctypes.c_int32(6)]
    ptrs = (ctypes.c_void_p * 3)(*(ctypes.addressof(x) for x in args))
    check(cu.cuLaunchCooperativeKernel(fn, grid, 1, 1, 128, 1, 1, 0, 0, ctypes.addressof(ptrs)))
    check(cu.cuCtxSynchronize())
    out = np.empty(n, np.int32)
    check(cu.cuMemcpyDtoH(out.ctypes.data, da, n * 4))
    assert np.array_equal(out, expect("nvcc", a0, 6)), "nvcc grid sync"
    too_many = per_sm * sms + 1
    err = cu.cuLaunchCooperativeKernel(fn, too_many, 1, 1, 128, 1, 1, 0, 0, ctypes.addressof(ptrs))[0]
    assert err == cu.CUresult.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, err
    # an ordinary launch has no grid workspace: the kernel traps, and the context is lost, as on a GPU
    check(cu.cuLaunchKernel(fn, 2, 1, 1, 128, 1, 1, 0, 0, ctypes.addressof(ptrs), 0))
    err = cu.cuCtxSynchronize()[0]
    assert err == cu.CUresult.CUDA_ERROR_LAUNCH_FAILED, err


numba_part()
driver_part()
print("grid sync OK")
sys.stdout.flush()
