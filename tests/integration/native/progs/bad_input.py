"""Bad input through the driver API (run under ``wooly run``): prints one JSON object of results.

Each case records the CUresult name the call returned; the test compares them with what a real
driver returns.
"""

from __future__ import annotations

import ctypes
import json
import sys

import numpy as np
from cuda.bindings import driver as cu

PTX = b"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry fill(.param .u64 out, .param .u32 value)
{
  .reg .u64 %rd<4>;
  .reg .u32 %r<4>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [value];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r2, %tid.x;
  mul.wide.u32 %rd3, %r2, 4;
  add.u64 %rd2, %rd2, %rd3;
  st.global.u32 [%rd2], %r1;
  ret;
}
.visible .entry boom()
{
  trap;
  ret;
}
"""

results: dict[str, str] = {}


def name(err) -> str:  # noqa: ANN001
    return err.name if hasattr(err, "name") else str(err)


def record(case: str, result) -> object:  # noqa: ANN001
    err = result[0] if isinstance(result, tuple) else result
    results[case] = name(err)
    return result[1] if isinstance(result, tuple) and len(result) > 1 else None


def main() -> None:
    record("init", cu.cuInit(0))
    record("device_out_of_range", cu.cuDeviceGet(7))
    dev = record("device", cu.cuDeviceGet(0))
    ctx = record("retain", cu.cuDevicePrimaryCtxRetain(dev))
    record("set_current", cu.cuCtxSetCurrent(ctx))

    host = np.zeros(64, dtype=np.uint32)
    ptr = record("alloc", cu.cuMemAlloc(256))
    record("alloc_zero", cu.cuMemAlloc(0))
    record("htod_invalid_pointer", cu.cuMemcpyHtoD(0xDEAD0000, host.ctypes.data, 256))
    record("htod_past_end", cu.cuMemcpyHtoD(ptr, host.ctypes.data, 512))
    record("dtoh_invalid_pointer", cu.cuMemcpyDtoH(host.ctypes.data, 0x1234, 16))
    record("memset_misaligned", cu.cuMemsetD32(int(ptr) + 2, 0, 4))
    record("free_invalid", cu.cuMemFree(0xDEAD0000))
    record("stream_invalid", cu.cuStreamSynchronize(cu.CUstream(0xABCDEF)))
    record("event_invalid", cu.cuEventRecord(cu.CUevent(0xABCDEF), 0))
    record("module_garbage", cu.cuModuleLoadData(b"this is not ptx\0"))
    record("module_cubin", cu.cuModuleLoadData(b"\x7fELF" + b"\0" * 60))
    record("function_invalid", cu.cuModuleGetFunction(cu.CUmodule(0xABCDEF), b"fill"))

    mod = record("module", cu.cuModuleLoadData(PTX))
    record("function_missing", cu.cuModuleGetFunction(mod, b"nope"))
    fn = record("function", cu.cuModuleGetFunction(mod, b"fill"))
    value = np.array([7], dtype=np.uint32)
    dptr = np.array([int(ptr)], dtype=np.uint64)
    params = np.array([dptr.ctypes.data, value.ctypes.data], dtype=np.uint64)
    record("launch_block_too_large", cu.cuLaunchKernel(fn, 1, 1, 1, 2048, 1, 1, 0, 0, params.ctypes.data, 0))
    record("launch_block_z_too_large", cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 65, 0, 0, params.ctypes.data, 0))
    record("launch_grid_zero", cu.cuLaunchKernel(fn, 0, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0))
    record("launch_too_much_shared", cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 1 << 20, 0, params.ctypes.data, 0))
    record("launch_no_params", cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0))
    # the extra form with a parameter buffer of the wrong size
    buf = (ctypes.c_ubyte * 8)()
    size = ctypes.c_size_t(8)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buf), 2, ctypes.addressof(size), 0)
    record("launch_extra_wrong_size", cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, 0, ctypes.addressof(extra)))
    record(
        "launch_invalid_stream",
        cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, cu.CUstream(0xABCDEF), params.ctypes.data, 0),
    )

    # graphs: bad handles, a kernel node with a block too large, a NULL dependency list, captures that cannot be
    graph = record("graph_create", cu.cuGraphCreate(0))
    record("graph_launch_invalid", cu.cuGraphLaunch(cu.CUgraphExec(0xABCDEF), 0))
    node = cu.CUDA_KERNEL_NODE_PARAMS()
    node.func = fn
    node.gridDimX, node.gridDimY, node.gridDimZ = 1, 1, 1
    node.blockDimX, node.blockDimY, node.blockDimZ = 2048, 1, 1
    node.kernelParams = params.ctypes.data
    record("graph_kernel_node_block_too_large", cu.cuGraphAddKernelNode(graph, None, 0, node))
    libcuda = ctypes.CDLL("libcuda.so.1")  # past the bindings' own check of the list's length
    out = ctypes.c_void_p()
    err = libcuda.cuGraphAddEmptyNode(ctypes.byref(out), ctypes.c_void_p(int(graph)), None, ctypes.c_size_t(2))
    record("graph_node_deps_null", cu.CUresult(err))
    stream = record("stream_create", cu.cuStreamCreate(0))
    record("end_capture_not_capturing", cu.cuStreamEndCapture(stream))
    record("capture_legacy_stream", cu.cuStreamBeginCapture(cu.CUstream(1), 0))
    record("graph_destroy", cu.cuGraphDestroy(graph))
    record("graph_destroy_again", cu.cuGraphDestroy(graph))

    # a good launch through the extra form still works after all of the above
    good = (ctypes.c_ubyte * 16)()
    ctypes.memmove(good, dptr.ctypes.data, 8)
    ctypes.memmove(ctypes.addressof(good) + 8, value.ctypes.data, 4)
    size16 = ctypes.c_size_t(16)
    extra16 = (ctypes.c_void_p * 5)(1, ctypes.addressof(good), 2, ctypes.addressof(size16), 0)
    record("launch_extra_ok", cu.cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, 0, 0, ctypes.addressof(extra16)))
    record("sync_ok", cu.cuCtxSynchronize())
    record("dtoh_ok", cu.cuMemcpyDtoH(host.ctypes.data, ptr, 256))
    results["kernel_result_ok"] = "yes" if (host == 7).all() else f"no: {host[:8].tolist()}"

    # a trapping kernel: the launch itself succeeds (it is queued); the error is reported at the next
    # synchronization and is sticky for the context
    boom = record("function_boom", cu.cuModuleGetFunction(mod, b"boom"))
    record("launch_boom", cu.cuLaunchKernel(boom, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0))
    record("sync_after_boom", cu.cuCtxSynchronize())
    record("sync_again_after_boom", cu.cuCtxSynchronize())
    print(json.dumps(results))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
