"""Dynamic shared memory past the 48 KiB default, as CUDA programs ask for it: refused at the launch until
cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) opts in, then run by gpud (the launch rules of
proto/launch.py on both ends: the client and gpud agree on the opt-in limit). Prints 'dynamic shared OK'."""

import ctypes

import numpy as np
from cuda.bindings import driver as drv
from numba import cuda


def kernel(out):
    s = cuda.shared.array(0, dtype=np.float32)
    i = cuda.threadIdx.x
    s[i + 16000] = i * 2.0  # 64 000 bytes in: past the default
    cuda.syncthreads()
    out[i] = s[i + 16000]


def ok(r):
    err = r[0] if isinstance(r, tuple) else r
    assert err == drv.CUresult.CUDA_SUCCESS, err
    return r[1] if isinstance(r, tuple) and len(r) > 1 else None


ptx, _ = cuda.compile_ptx(kernel, "void(float32[:])", cc=(8, 0))
ok(drv.cuInit(0))
ctx = ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))
ok(drv.cuCtxSetCurrent(ctx))
mod = ok(drv.cuModuleLoadData(ptx.encode() + b"\0"))
name = next(line.split()[-1].rstrip("(") for line in ptx.splitlines() if ".entry" in line)
fn = ok(drv.cuModuleGetFunction(mod, name.encode()))
buf = ok(drv.cuMemAlloc(32 * 4))
vals = [ctypes.c_uint64(v) for v in (0, 0, 32, 4, int(buf), 32, 4)]  # numba's 1-d array: meminfo ... strides
ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
smem = 80 * 1024
err = drv.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, smem, 0, ctypes.addressof(ptrs), 0)[0]
assert err == drv.CUresult.CUDA_ERROR_INVALID_VALUE, err  # at the call, as a driver does
attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
too_much = drv.cuFuncSetAttribute(fn, attr, 1 << 20)[0]
assert too_much == drv.CUresult.CUDA_ERROR_INVALID_VALUE, too_much  # past the device's opt-in limit
ok(drv.cuFuncSetAttribute(fn, attr, smem))
ok(drv.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, smem, 0, ctypes.addressof(ptrs), 0))
ok(drv.cuCtxSynchronize())
host = np.zeros(32, np.float32)
ok(drv.cuMemcpyDtoH(host.ctypes.data, buf, 128))
assert host.tolist() == [i * 2.0 for i in range(32)], host
print("dynamic shared OK")
