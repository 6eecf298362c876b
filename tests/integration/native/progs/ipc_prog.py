"""CUDA IPC between two processes (run under ``wooly run``): the parent fills an allocation and exports it with
cuIpcGetMemHandle; a spawned child opens the handle with cuIpcOpenMemHandle (the 64-byte handle passed by value,
through ctypes: the C calling convention of the real entry point), reads and modifies the memory, and closes it;
the parent sees the child's write. Prints "ipc OK"."""

from __future__ import annotations

import ctypes
import multiprocessing as mp

import numpy as np
from cuda.bindings import driver as cu


class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def check(res):  # noqa: ANN001, ANN201
    err = res[0] if isinstance(res, tuple) else res
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return res[1] if isinstance(res, tuple) and len(res) == 2 else res


def libcuda() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), IpcHandle, ctypes.c_uint]
    lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(IpcHandle), ctypes.c_uint64]
    lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
    lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    return lib


def context() -> None:
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))


def child(raw: bytes, n: int, q) -> None:  # noqa: ANN001
    try:
        context()
        lib = libcuda()
        ptr = ctypes.c_uint64()
        rc = lib.cuIpcOpenMemHandle_v2(
            ctypes.byref(ptr), IpcHandle.from_buffer_copy(raw), 1
        )  # IpcHandle(raw) stops at a zero byte
        assert rc == 0, f"open: {rc}"
        host = np.empty(n, np.int32)
        check(cu.cuMemcpyDtoH(host.ctypes.data, ptr.value, host.nbytes))
        assert lib.cuMemFree_v2(ptr.value) == 1  # INVALID_VALUE: an opened handle is closed, not freed
        sevens = np.full(n, 7, np.int32)
        check(cu.cuMemcpyHtoD(ptr.value, sevens.ctypes.data, 4 * n))
        assert lib.cuIpcCloseMemHandle(ptr.value) == 0
        assert lib.cuIpcCloseMemHandle(ptr.value) == 1  # closed already
        q.put(int(host.sum()))
    except BaseException as e:  # noqa: BLE001
        q.put(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    context()
    lib = libcuda()
    n = 1000
    dptr = check(cu.cuMemAlloc(4 * n))
    data = np.arange(n, dtype=np.int32)
    check(cu.cuMemcpyHtoD(dptr, data.ctypes.data, data.nbytes))
    h = IpcHandle()
    assert lib.cuIpcGetMemHandle(ctypes.byref(h), int(dptr)) == 0
    assert lib.cuIpcGetMemHandle(ctypes.byref(IpcHandle()), int(dptr) + 4) == 1  # not an allocation's start
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    raw = bytes(h)  # all 64 bytes: h.reserved would stop at the handle's first zero byte
    assert len(raw) == 64
    p = ctx.Process(target=child, args=(raw, n, q))
    p.start()
    got = q.get(timeout=120)
    p.join(60)
    assert got == int(data.sum()), got
    back = np.empty(n, np.int32)
    check(cu.cuMemcpyDtoH(back.ctypes.data, dptr, back.nbytes))
    assert (back == 7).all(), back[:4]
    ptr = ctypes.c_uint64()
    assert lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, 1) == 201  # INVALID_CONTEXT: its own memory
    check(cu.cuMemFree(dptr))
    print("ipc OK")
