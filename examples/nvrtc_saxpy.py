"""The cuda-python NVRTC saxpy program, checked against numpy.

Compiles CUDA C++ with NVRTC to PTX, loads it with the driver API and launches it, as in the
cuda-python documentation. Runs unmodified on a GPU machine and under ``wooly run``.
"""

from __future__ import annotations

import sys

import numpy as np
from cuda.bindings import driver, nvrtc

SAXPY = r"""
extern "C" __global__
void saxpy(float a, float *x, float *y, float *out, size_t n)
{
    size_t tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < n) {
        out[tid] = a * x[tid] + y[tid];
    }
}
"""


def check(result):
    err, *values = result
    if isinstance(err, driver.CUresult) and err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error: {driver.cuGetErrorName(err)[1].decode()}: {err}")
    if isinstance(err, nvrtc.nvrtcResult) and err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC error: {err}")
    return values[0] if len(values) == 1 else values


def main() -> int:
    check(driver.cuInit(0))
    device = check(driver.cuDeviceGet(0))
    major = check(
        driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
    )
    minor = check(
        driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
    )

    prog = check(nvrtc.nvrtcCreateProgram(SAXPY.encode(), b"saxpy.cu", 0, [], []))
    opts = [b"--fmad=false", f"--gpu-architecture=compute_{major}{minor}".encode()]
    check(nvrtc.nvrtcCompileProgram(prog, len(opts), opts))
    ptx = b" " * check(nvrtc.nvrtcGetPTXSize(prog))
    check(nvrtc.nvrtcGetPTX(prog, ptx))

    context = check(driver.cuDevicePrimaryCtxRetain(device))
    check(driver.cuCtxSetCurrent(context))
    module = check(driver.cuModuleLoadData(np.char.array(ptx).ctypes.data))
    kernel = check(driver.cuModuleGetFunction(module, b"saxpy"))

    n = 1 << 16
    threads, blocks = 256, (n + 255) // 256
    rng = np.random.default_rng(1)
    a = np.array([2.0], dtype=np.float32)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    size = x.nbytes

    stream = check(driver.cuStreamCreate(0))
    d_x, d_y, d_out = (check(driver.cuMemAlloc(size)) for _ in range(3))
    check(driver.cuMemcpyHtoDAsync(d_x, x.ctypes.data, size, stream))
    check(driver.cuMemcpyHtoDAsync(d_y, y.ctypes.data, size, stream))

    # kernelParams: an array of pointers, one per argument, each to the argument's value
    args = [
        a,
        np.array([int(d_x)], dtype=np.uint64),
        np.array([int(d_y)], dtype=np.uint64),
        np.array([int(d_out)], dtype=np.uint64),
        np.array([n], dtype=np.uint64),
    ]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(driver.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, stream, params.ctypes.data, 0))
    check(driver.cuMemcpyDtoHAsync(out.ctypes.data, d_out, size, stream))
    check(driver.cuStreamSynchronize(stream))

    ok = np.allclose(out, a[0] * x + y, rtol=1e-6)
    for d in (d_x, d_y, d_out):
        check(driver.cuMemFree(d))
    check(driver.cuStreamDestroy(stream))
    check(driver.cuModuleUnload(module))
    check(driver.cuDevicePrimaryCtxRelease(device))
    print("nvrtc_saxpy:", "OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
