"""Driver API: pointer attributes and 2D copies."""

from __future__ import annotations

import ctypes
import struct
from ctypes import c_int, c_uint, c_uint64, c_void_p

from proto import errors as codes
from proto.errors import CudaError
from shim.native import cu_memory, cu_texture
from shim.native.registry import api
from shim.native.state import STATE

P = c_void_p

# CUpointer_attribute -> size in bytes of its value
CONTEXT, MEMORY_TYPE, DEVICE_POINTER, HOST_POINTER, P2P_TOKENS, SYNC_MEMOPS, BUFFER_ID, IS_MANAGED = range(1, 9)
DEVICE_ORDINAL, IS_LEGACY_IPC, RANGE_START, RANGE_SIZE, MAPPED, ALLOWED_HANDLES, GPU_DIRECT_RDMA = range(9, 16)
ACCESS_FLAGS, MEMPOOL_HANDLE, MAPPING_SIZE, MAPPING_BASE, MEMORY_BLOCK_ID, HW_DECOMPRESS = range(16, 22)
_SIZES = {
    CONTEXT: 8,
    MEMORY_TYPE: 4,
    DEVICE_POINTER: 8,
    HOST_POINTER: 8,
    P2P_TOKENS: 16,
    SYNC_MEMOPS: 4,
    BUFFER_ID: 8,
    IS_MANAGED: 4,
    DEVICE_ORDINAL: 4,
    IS_LEGACY_IPC: 4,
    RANGE_START: 8,
    RANGE_SIZE: 8,
    MAPPED: 4,
    ALLOWED_HANDLES: 8,
    GPU_DIRECT_RDMA: 4,
    ACCESS_FLAGS: 4,
    MEMPOOL_HANDLE: 8,
    MAPPING_SIZE: 8,
    MAPPING_BASE: 8,
    MEMORY_BLOCK_ID: 8,
    HW_DECOMPRESS: 4,
}
MEMTYPE_HOST, MEMTYPE_DEVICE = 1, 2


def attribute(attr: int, ptr: int) -> int | None:
    """Value of one pointer attribute; None where the pointer is unknown to CUDA."""
    if attr not in _SIZES:
        raise CudaError(codes.INVALID_VALUE, f"unknown pointer attribute {attr}")
    ctx = STATE.current() or STATE.primary(0)
    block = next((b for d, b in cu_memory._mapped.items() if d <= ptr < d + b.size), None)
    if (
        block is not None and block.device is not None
    ):  # mapped pinned memory seen by its device address, or managed memory
        off = ptr - block.device
        return {
            CONTEXT: ctx.handle,
            MEMORY_TYPE: MEMTYPE_DEVICE if block.managed else MEMTYPE_HOST,
            DEVICE_POINTER: ptr,
            HOST_POINTER: block.host + off,
            SYNC_MEMOPS: 1,
            BUFFER_ID: block.device,
            IS_MANAGED: int(block.managed),
            DEVICE_ORDINAL: ctx.device,
            RANGE_START: block.device,
            RANGE_SIZE: block.size,
            MAPPED: 1,
        }.get(attr)
    dev = cu_memory.device_range(ptr)
    if dev is not None:
        base, size = dev
        index = STATE.driver_at(ptr).index  # the device holding it (NOTE [devices of a program] in shim/runtime.py)
        if index != ctx.device:
            ctx = STATE.primary(index)
        return {
            CONTEXT: ctx.handle,
            MEMORY_TYPE: MEMTYPE_DEVICE,
            DEVICE_POINTER: ptr,
            SYNC_MEMOPS: 1,
            BUFFER_ID: base,
            IS_MANAGED: 0,
            DEVICE_ORDINAL: ctx.device,
            IS_LEGACY_IPC: 0,
            RANGE_START: base,
            RANGE_SIZE: size,
            MAPPED: 1,
            ALLOWED_HANDLES: 0,
            GPU_DIRECT_RDMA: 0,
            ACCESS_FLAGS: 0,
            MEMPOOL_HANDLE: 0,
            MAPPING_SIZE: size,
            MAPPING_BASE: base,
            MEMORY_BLOCK_ID: base,
            HW_DECOMPRESS: 0,
        }.get(attr)
    host = cu_memory.host_range(ptr)
    if host is not None:
        base, size, _flags = host
        block = cu_memory._host.get(base)
        device = None if block is None or block.device is None else block.device + (ptr - base)
        return {
            CONTEXT: ctx.handle,
            MEMORY_TYPE: MEMTYPE_HOST,
            HOST_POINTER: ptr,
            DEVICE_POINTER: device,
            SYNC_MEMOPS: 1,
            BUFFER_ID: base,
            IS_MANAGED: 0,
            DEVICE_ORDINAL: ctx.device,
            RANGE_START: base,
            RANGE_SIZE: size,
            MAPPED: 1,
        }.get(attr)
    return None


def _write(out: int, attr: int, value: int) -> None:
    size = _SIZES[attr]
    if size == 16:
        ctypes.memset(out, 0, 16)
    elif size == 8:
        ctypes.c_uint64.from_address(out).value = value & 0xFFFFFFFFFFFFFFFF
    else:
        ctypes.c_uint32.from_address(out).value = value & 0xFFFFFFFF


@api("cuPointerGetAttribute", 4000, P, c_int, c_uint64)
def cuPointerGetAttribute(out: int, attr: int, ptr: int) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuPointerGetAttribute: data is NULL")
    STATE.driver()
    value = attribute(attr, ptr)
    if value is None:
        raise CudaError(
            codes.INVALID_VALUE, f"cuPointerGetAttribute: 0x{ptr:x} is not memory known to CUDA (attribute {attr})"
        )
    _write(out, attr, value)


@api("cuPointerGetAttributes", 7000, c_uint, P, P, c_uint64)
def cuPointerGetAttributes(n: int, attrs: int, data: int, ptr: int) -> None:
    STATE.driver()
    ids = (c_int * n).from_address(attrs)
    outs = (c_void_p * n).from_address(data)
    for i in range(n):
        if not outs[i]:
            continue
        value = attribute(ids[i], ptr)
        # Unknown memory answers with zeros (memory type 0, context NULL), as the driver does.
        _write(int(outs[i] or 0), ids[i], 0 if value is None else value)


@api("cuPointerSetAttribute", 6000, P, c_int, c_uint64)
def cuPointerSetAttribute(value: int, attr: int, ptr: int) -> None:
    if attr != SYNC_MEMOPS or cu_memory.device_range(ptr) is None:
        raise CudaError(codes.INVALID_VALUE, f"cuPointerSetAttribute: attribute {attr} cannot be set on 0x{ptr:x}")


# ---------------------------------------------------------------------------- 2D copies
_M2D = struct.Struct("<QQi4xQQQQ QQi4xQQQQ QQ")  # CUDA_MEMCPY2D
MT_HOST, MT_DEVICE, MT_ARRAY, MT_UNIFIED = 1, 2, 3, 4


def _side(mtype: int, host: int, device: int, arr: int, what: str) -> tuple[bool, int, int | None, int | None]:
    """(on the device, base address, pitch, rows) of one side of a copy; pitch and rows are a CUDA array's own
    (None: the descriptor's)."""
    if mtype == MT_HOST:
        return False, host, None, None
    if mtype == MT_DEVICE:
        return True, device, None, None
    if mtype == MT_UNIFIED:
        return cu_memory.device_range(device) is not None, device, None, None
    if mtype == MT_ARRAY:
        base, pitch, rows = cu_texture.array_side(arr, what)
        return True, base, pitch, rows
    raise CudaError(codes.INVALID_VALUE, f"{what}: unknown memory type {mtype}")


def memcpy2d(desc: int, stream: int, what: str) -> None:
    if not desc:
        raise CudaError(codes.INVALID_VALUE, f"{what}: pCopy is NULL")
    (sx, sy, stype, shost, sdev, sarr, spitch, dx, dy, dtype, dhost, ddev, darr, dpitch, width, height) = _M2D.unpack(
        ctypes.string_at(desc, _M2D.size)
    )
    s_is_dev, sbase, s_pitch, _ = _side(stype, shost, sdev, sarr, what)
    d_is_dev, dbase, d_pitch, _ = _side(dtype, dhost, ddev, darr, what)
    spitch, dpitch = s_pitch or spitch, d_pitch or dpitch
    if width > spitch and height > 1 or width > dpitch and height > 1:
        raise CudaError(codes.INVALID_VALUE, f"{what}: WidthInBytes {width} exceeds a pitch")
    src0 = sbase + sy * spitch + sx
    dst0 = dbase + dy * dpitch + dx
    if spitch == dpitch == width or height == 1:
        cu_memory.copy_dir(dst0, d_is_dev, src0, s_is_dev, width * height, stream, what)
        return
    for row in range(height):
        cu_memory.copy_dir(dst0 + row * dpitch, d_is_dev, src0 + row * spitch, s_is_dev, width, stream, what)


_M3D = struct.Struct("<QQQQi4xQQQQQQ QQQQi4xQQQQQQ QQQ")  # CUDA_MEMCPY3D (200 bytes)


def memcpy3d(desc: int, stream: int, what: str) -> None:
    """A CUDA_MEMCPY3D between host memory, device memory and CUDA arrays: one copy when both sides are packed, else
    row by row of each slice."""
    if not desc:
        raise CudaError(codes.INVALID_VALUE, f"{what}: pCopy is NULL")
    f = _M3D.unpack(ctypes.string_at(desc, _M3D.size))
    sx, sy, sz, _slod, stype, shost, sdev, sarr, _r0, spitch, sheight = f[:11]
    dx, dy, dz, _dlod, dtype, dhost, ddev, darr, _r1, dpitch, dheight = f[11:22]
    width, height, depth = f[22:]
    s_is_dev, sbase, s_pitch, s_rows = _side(stype, shost, sdev, sarr, what)
    d_is_dev, dbase, d_pitch, d_rows = _side(dtype, dhost, ddev, darr, what)
    spitch, sheight = s_pitch or spitch, s_rows or sheight
    dpitch, dheight = d_pitch or dpitch, d_rows or dheight
    if not width or not height or not depth:
        return
    spitch, dpitch = spitch or width, dpitch or width
    sheight, dheight = sheight or height, dheight or height
    if (width > spitch or width > dpitch) and height * depth > 1:
        raise CudaError(codes.INVALID_VALUE, f"{what}: WidthInBytes {width} exceeds a pitch")
    src0 = sbase + (sz * sheight + sy) * spitch + sx
    dst0 = dbase + (dz * dheight + dy) * dpitch + dx
    if spitch == dpitch == width and (sheight == dheight == height or depth == 1):
        cu_memory.copy_dir(dst0, d_is_dev, src0, s_is_dev, width * height * depth, stream, what)
        return
    for z in range(depth):
        for row in range(height):
            cu_memory.copy_dir(
                dst0 + (z * dheight + row) * dpitch, d_is_dev, src0 + (z * sheight + row) * spitch, s_is_dev, width,
                stream, what,
            )  # fmt: skip


@api("cuMemcpy3D", 3020, P)
def cuMemcpy3D(desc: int) -> None:
    memcpy3d(desc, 0, "cuMemcpy3D")


@api("cuMemcpy3DAsync", 3020, P, P)
def cuMemcpy3DAsync(desc: int, stream: int | None) -> None:
    memcpy3d(desc, int(stream or 0), "cuMemcpy3DAsync")


@api("cuMemcpy2D", 3020, P)
def cuMemcpy2D(desc: int) -> None:
    memcpy2d(desc, 0, "cuMemcpy2D")


@api("cuMemcpy2DUnaligned", 3020, P)
def cuMemcpy2DUnaligned(desc: int) -> None:
    memcpy2d(desc, 0, "cuMemcpy2DUnaligned")


@api("cuMemcpy2DAsync", 3020, P, P)
def cuMemcpy2DAsync(desc: int, stream: int | None) -> None:
    memcpy2d(desc, int(stream or 0), "cuMemcpy2DAsync")
