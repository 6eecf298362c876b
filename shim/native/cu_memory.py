"""Driver API: device and host memory, copies in every direction, memsets, pointer attributes.

Device memory lives in gpud; host ("pinned") memory is plain local memory, page-aligned. Copies
validate device ranges here, before queueing, so a bad pointer fails at the call as on a real
driver instead of at the next synchronization.
"""

from __future__ import annotations

import ctypes
import platform
from ctypes import c_int, c_size_t, c_ubyte, c_uint, c_uint16, c_uint32, c_uint64, c_void_p
from typing import Any

from proto import errors as codes
from proto.errors import CudaError
from shim.native import cu_capture, hostmem
from shim.native.registry import api, put_i32, put_u32, put_u64
from shim.native.state import STATE

P = c_void_p
D = c_uint64  # CUdeviceptr

_host: dict[int, hostmem.HostBlock] = {}  # page-locked / managed allocations by host address
_mapped: dict[int, hostmem.HostBlock] = {}  # the same blocks by their device (gpud) address
_registered: dict[int, tuple[int, int]] = {}  # cuMemHostRegister'ed ranges: start -> (size, flags)


# ---------------------------------------------------------------------------- pointer classification
def device_range(ptr: int) -> tuple[int, int] | None:
    """(base, size) of the device allocation or module global holding ``ptr`` (of any device of the program)."""
    drv = STATE.driver_at(ptr)
    try:
        return drv.mem_get_address_range(ptr)
    except CudaError:
        pass
    for base, size in STATE.global_ranges.items():
        if base <= ptr < base + size:
            return base, size
    for base, block in _mapped.items():
        if base <= ptr < base + block.size:
            return base, block.size
    return None


def check_device(ptr: int, size: int, what: str) -> None:
    r = device_range(ptr)
    if r is None:
        raise CudaError(codes.INVALID_VALUE, f"{what}: 0x{ptr:x} is not a device pointer of this context")
    base, length = r
    if ptr + size > base + length:
        raise CudaError(
            codes.INVALID_VALUE,
            f"{what}: {size} bytes at 0x{ptr:x} run past the end of the allocation at 0x{base:x} ({length} bytes)",
        )


def host_range(ptr: int) -> tuple[int, int, int] | None:
    """(base, size, flags) of the page-locked / registered host range holding ``ptr``."""
    for base, block in _host.items():
        if base <= ptr < base + block.size:
            return base, block.size, block.flags
    for base, (size, flags) in _registered.items():
        if base <= ptr < base + size:
            return base, size, flags
    return None


def _host_buf(ptr: int, size: int) -> ctypes.Array:
    if not ptr:
        raise CudaError(codes.INVALID_VALUE, "host pointer is NULL")
    return (c_ubyte * size).from_address(ptr)


def _stream(h: int | None) -> int:
    return int(h or 0)


def _on(ptr: int, stream: int) -> tuple[Any, int]:
    """The driver of the device holding ``ptr`` and the stream to queue a copy on there: with unified addressing
    a copy may name memory of a device other than the current one, or a stream of another device (NOTE [devices
    of a program] in shim/runtime.py). Such a stream's earlier work is waited for here, and the copy goes on the
    memory's device's NULL stream."""
    drv = STATE.driver_at(ptr)
    if stream > 2:
        owner = STATE.driver_for(stream)
        if owner is not drv:
            owner.stream_synchronize(stream)
            return drv, 0
    return drv, stream


# ---------------------------------------------------------------------------- device memory
@api("cuMemAlloc", 3020, P, c_size_t)
def cuMemAlloc(out: int, size: int) -> None:
    STATE.require_current()
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuMemAlloc: dptr is NULL")
    put_u64(out, STATE.driver().mem_alloc(size))


@api("cuMemAllocPitch", 3020, P, P, c_size_t, c_size_t, c_uint)
def cuMemAllocPitch(out: int, pitch_out: int, width: int, height: int, elem: int) -> None:
    if elem not in (4, 8, 16) or width == 0 or height == 0:
        raise CudaError(codes.INVALID_VALUE, "cuMemAllocPitch: bad width, height or element size")
    pitch = (width + 511) // 512 * 512
    cuMemAlloc(out, pitch * height)
    put_u64(pitch_out, pitch)


@api("cuMemFree", 3020, D)
def cuMemFree(ptr: int) -> None:
    if ptr == 0 or cu_capture.is_graph_memory(ptr):
        return  # graph memory is its graph's until the graph goes (NOTE [graphs in the native face])
    block = _host.get(ptr)
    if block is not None and block.managed:
        _release(block)
        return
    from shim.native.cu_vmm import is_reservation

    if is_reservation(ptr):
        raise CudaError(
            codes.INVALID_VALUE, f"cuMemFree: 0x{ptr:x} was reserved by cuMemAddressReserve: cuMemAddressFree it"
        )
    STATE.driver_at(ptr).mem_free(ptr)


@api("cuMemGetInfo", 3020, P, P)
def cuMemGetInfo(free: int, total: int) -> None:
    STATE.require_current()
    f, t = STATE.driver().mem_get_info()
    put_u64(free, f)
    put_u64(total, t)


@api("cuMemGetAddressRange", 3020, P, P, D)
def cuMemGetAddressRange(base_out: int, size_out: int, ptr: int) -> None:
    r = device_range(ptr)
    if r is None:
        raise CudaError(codes.NOT_FOUND, f"cuMemGetAddressRange: 0x{ptr:x} is not inside a device allocation")
    if base_out:
        put_u64(base_out, r[0])
    if size_out:
        put_u64(size_out, r[1])


# ---------------------------------------------------------------------------- host memory
def _allocate_host(out: int, size: int, flags: int, managed: bool) -> None:
    STATE.require_current()
    if not out:
        raise CudaError(codes.INVALID_VALUE, "output pointer is NULL")
    block = hostmem.allocate(size, flags, managed)
    _host[block.host] = block
    if block.device is not None:
        _mapped[block.device] = block
    ctypes.c_void_p.from_address(out).value = block.host


@api("cuMemHostAlloc", 2020, P, c_size_t, c_uint)
def cuMemHostAlloc(out: int, size: int, flags: int) -> None:
    if flags & ~0x7:
        raise CudaError(codes.INVALID_VALUE, f"cuMemHostAlloc: bad flags {flags}")
    _allocate_host(out, size, flags, False)


@api("cuMemAllocHost", 3020, P, c_size_t)
def cuMemAllocHost(out: int, size: int) -> None:
    cuMemHostAlloc(out, size, 0)


@api("cuMemAllocManaged", 6000, P, c_size_t, c_uint)
def cuMemAllocManaged(out: int, size: int, flags: int) -> None:
    if flags not in (1, 2):  # CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST
        raise CudaError(codes.INVALID_VALUE, f"cuMemAllocManaged: bad flags {flags}")
    _allocate_host(out, size, flags, True)


def _release(block: hostmem.HostBlock) -> None:
    _host.pop(block.host, None)
    if block.device is not None:
        _mapped.pop(block.device, None)
    hostmem.release(block)


@api("cuMemFreeHost", 2000, P)
def cuMemFreeHost(ptr: int | None) -> None:
    block = _host.get(int(ptr or 0))
    if block is None or block.managed:
        raise CudaError(codes.INVALID_VALUE, f"cuMemFreeHost: 0x{int(ptr or 0):x} was not allocated by cuMemHostAlloc")
    _release(block)


@api("cuMemHostGetFlags", 2030, P, P)
def cuMemHostGetFlags(out: int, ptr: int | None) -> None:
    r = host_range(int(ptr or 0))
    if r is None:
        raise CudaError(codes.INVALID_VALUE, "cuMemHostGetFlags: not a page-locked host pointer")
    put_u32(out, r[2])


@api("cuMemHostGetDevicePointer", 3020, P, P, c_uint)
def cuMemHostGetDevicePointer(out: int, ptr: int | None, flags: int) -> None:
    r = host_range(int(ptr or 0))
    if r is None or flags != 0:
        raise CudaError(codes.INVALID_VALUE, "cuMemHostGetDevicePointer: not page-locked host memory (or flags != 0)")
    block = _host.get(r[0])
    if block is None or block.device is None:
        raise CudaError(
            codes.NOT_SUPPORTED, "cuMemHostGetDevicePointer: host memory is mapped only when gpud runs on this host"
        )
    put_u64(out, block.device + (int(ptr or 0) - block.host))


@api("cuMemHostRegister", 6050, P, c_size_t, c_uint)
def cuMemHostRegister(ptr: int | None, size: int, flags: int) -> None:
    if not ptr or size == 0:
        raise CudaError(codes.INVALID_VALUE, "cuMemHostRegister: NULL pointer or zero size")
    if host_range(int(ptr)) is not None:
        raise CudaError(712, "cuMemHostRegister: range already registered")
    _registered[int(ptr)] = (int(size), int(flags))


@api("cuMemHostUnregister", 4000, P)
def cuMemHostUnregister(ptr: int | None) -> None:
    if _registered.pop(int(ptr or 0), None) is None:
        raise CudaError(713, "cuMemHostUnregister: pointer was not registered")


# ---------------------------------------------------------------------------- copies
def htod(dst: int, src: int, size: int, stream: int, what: str) -> None:
    if size == 0:
        return
    check_device(dst, size, what)
    if cu_capture.record(stream, cu_capture.MEMCPY, None, lambda _n, s: htod(dst, src, size, s, what)):
        return
    drv, stream = _on(dst, stream)
    drv.memcpy_htod(dst, _host_buf(src, size), stream=stream)
    _host_visible(dst, what)
    if size >= SYNC_UPLOAD_BYTES and not what.endswith("Async"):
        drv.stream_synchronize(stream)  # NOTE [synchronous uploads]


# NOTE [synchronous uploads]: a synchronous cuMemcpyHtoD (cudaMemcpy) of a large buffer returns once the bytes are
# in device memory. Queued on the legacy stream, the copy would order only against that stream and the blocking
# ones, and programs count on a kernel launched next on a *non-blocking* stream seeing the bytes (cuda-samples
# StreamPriorities does): on a GPU the DMA has long finished by then; here a large upload may still be in flight,
# and a deduplicated one (NOTE [dedup protocol]) maps its chunks later, in stream order. Waiting costs one round
# trip, which a copy of a MiB or more dwarfs; smaller copies stay queued (their window is a few microseconds, and
# the hot path of small copies followed by launches on the same stream needs no wait).
SYNC_UPLOAD_BYTES = 1 << 20


def dtoh(dst: int, src: int, size: int, stream: int, what: str) -> None:
    if size == 0:
        return
    check_device(src, size, what)
    if cu_capture.record(stream, cu_capture.MEMCPY, None, lambda _n, s: dtoh(dst, src, size, s, what)):
        return
    drv, stream = _on(src, stream)
    drv.memcpy_dtoh(src, size, stream=stream, out=_host_buf(dst, size))


def dtod(dst: int, src: int, size: int, stream: int, what: str) -> None:
    if size == 0:
        return
    check_device(src, size, what + " (source)")
    check_device(dst, size, what + " (destination)")
    if cu_capture.record(stream, cu_capture.MEMCPY, None, lambda _n, s: dtod(dst, src, size, s, what)):
        return
    drv, stream = _on(dst, stream)
    source = STATE.driver_at(src)
    if source is not drv:  # another device's memory: no session holds both (NOTE [devices of a program]), so the
        # bytes go through this process, after the work queued before the copy on either side
        source.stream_synchronize(0)
        drv.memcpy_htod(dst, source.memcpy_dtoh(src, size), stream=stream)
        drv.stream_synchronize(stream)
        return
    drv.memcpy_dtod(dst, src, size, stream=stream)
    _host_visible(dst, what)


def copy_dir(dst: int, d_dev: bool, src: int, s_dev: bool, size: int, stream: int, what: str) -> None:
    """One copy whose direction is known: device or host on either side."""
    if d_dev and s_dev:
        dtod(dst, src, size, stream, what)
    elif d_dev:
        htod(dst, src, size, stream, what)
    elif s_dev:
        dtoh(dst, src, size, stream, what)
    elif size:
        if not dst or not src:
            raise CudaError(codes.INVALID_VALUE, f"{what}: NULL pointer")
        if cu_capture.record(
            stream, cu_capture.MEMCPY, None, lambda _n, s: copy_dir(dst, False, src, False, size, s, what)
        ):
            return
        STATE.driver_for(stream).stream_synchronize(stream)
        ctypes.memmove(dst, src, size)


def copy_any(dst: int, src: int, size: int, stream: int, what: str) -> None:
    """cuMemcpy with unified addressing: the direction follows from where the pointers live."""
    copy_dir(dst, device_range(dst) is not None, src, device_range(src) is not None, size, stream, what)


@api("cuMemcpyHtoD", 3020, D, P, c_size_t)
def cuMemcpyHtoD(dst: int, src: int, size: int) -> None:
    htod(dst, src, size, 0, "cuMemcpyHtoD")


@api("cuMemcpyDtoH", 3020, P, D, c_size_t)
def cuMemcpyDtoH(dst: int, src: int, size: int) -> None:
    dtoh(dst, src, size, 0, "cuMemcpyDtoH")


@api("cuMemcpyDtoD", 3020, D, D, c_size_t)
def cuMemcpyDtoD(dst: int, src: int, size: int) -> None:
    dtod(dst, src, size, 0, "cuMemcpyDtoD")


@api("cuMemcpyHtoDAsync", 3020, D, P, c_size_t, P)
def cuMemcpyHtoDAsync(dst: int, src: int, size: int, stream: int | None) -> None:
    htod(dst, src, size, _stream(stream), "cuMemcpyHtoDAsync")


@api("cuMemcpyDtoHAsync", 3020, P, D, c_size_t, P)
def cuMemcpyDtoHAsync(dst: int, src: int, size: int, stream: int | None) -> None:
    dtoh(dst, src, size, _stream(stream), "cuMemcpyDtoHAsync")


@api("cuMemcpyDtoDAsync", 3020, D, D, c_size_t, P)
def cuMemcpyDtoDAsync(dst: int, src: int, size: int, stream: int | None) -> None:
    dtod(dst, src, size, _stream(stream), "cuMemcpyDtoDAsync")


@api("cuMemcpy", 4000, D, D, c_size_t)
def cuMemcpy(dst: int, src: int, size: int) -> None:
    copy_any(dst, src, size, 0, "cuMemcpy")


@api("cuMemcpyAsync", 4000, D, D, c_size_t, P)
def cuMemcpyAsync(dst: int, src: int, size: int, stream: int | None) -> None:
    copy_any(dst, src, size, _stream(stream), "cuMemcpyAsync")


@api("cuMemcpyPeer", 4000, D, P, D, P, c_size_t)
def cuMemcpyPeer(dst: int, dst_ctx: int | None, src: int, src_ctx: int | None, size: int) -> None:
    dtod(dst, src, size, 0, "cuMemcpyPeer")


@api("cuMemcpyPeerAsync", 4000, D, P, D, P, c_size_t, P)
def cuMemcpyPeerAsync(dst: int, dc: int | None, src: int, sc: int | None, size: int, stream: int | None) -> None:
    dtod(dst, src, size, _stream(stream), "cuMemcpyPeerAsync")


# ---------------------------------------------------------------------------- memset
def _host_visible(dst: int, what: str) -> None:
    """Synchronous calls that write page-locked host memory return once the host sees the bytes."""
    if not what.endswith("Async") and any(d <= dst < d + b.size for d, b in _mapped.items()):
        STATE.driver_at(dst).stream_synchronize(0)


def _memset(dst: int, value: int, elem: int, count: int, stream: int, what: str) -> None:
    if count == 0:
        return
    if dst % elem:
        raise CudaError(codes.INVALID_VALUE, f"{what}: 0x{dst:x} is not {elem}-byte aligned")
    check_device(dst, elem * count, what)
    if cu_capture.record(stream, cu_capture.MEMSET, None, lambda _n, s: _memset(dst, value, elem, count, s, what)):
        return
    drv, stream = _on(dst, stream)
    drv.memset(dst, value, elem, count, stream=stream)
    _host_visible(dst, what)


def _memset2d(dst: int, pitch: int, value: int, elem: int, width: int, height: int, stream: int, what: str) -> None:
    if pitch == width * elem:
        _memset(dst, value, elem, width * height, stream, what)
        return
    for row in range(height):
        _memset(dst + row * pitch, value, elem, width, stream, what)


for _bits, _ctype in ((8, ctypes.c_ubyte), (16, c_uint16), (32, c_uint32)):
    _elem = _bits // 8

    def _make(elem: int = _elem, bits: int = _bits, ctype=_ctype) -> None:
        api(f"cuMemsetD{bits}", 3020, D, ctype, c_size_t)(
            lambda dst, v, n: _memset(dst, v, elem, n, 0, f"cuMemsetD{bits}")
        )
        api(f"cuMemsetD{bits}Async", 3020, D, ctype, c_size_t, P)(
            lambda dst, v, n, s: _memset(dst, v, elem, n, _stream(s), f"cuMemsetD{bits}Async")
        )
        api(f"cuMemsetD2D{bits}", 3020, D, c_size_t, ctype, c_size_t, c_size_t)(
            lambda dst, p, v, w, h: _memset2d(dst, p, v, elem, w, h, 0, f"cuMemsetD2D{bits}")
        )
        api(f"cuMemsetD2D{bits}Async", 3020, D, c_size_t, ctype, c_size_t, c_size_t, P)(
            lambda dst, p, v, w, h, s: _memset2d(dst, p, v, elem, w, h, _stream(s), f"cuMemsetD2D{bits}Async")
        )

    _make()


_ = (c_int, put_i32)


# ---------------------------------------------------------------------------- IPC (NOTE [ipc] in proto/messages.py)
_IPC_SIZE = 64  # sizeof(CUipcMemHandle)


@api("cuIpcGetMemHandle", 4010, P, D)
def cuIpcGetMemHandle(handle_out: int, ptr: int) -> None:
    if not handle_out:
        raise CudaError(codes.INVALID_VALUE, "cuIpcGetMemHandle: handle pointer is NULL")
    h = STATE.driver_at(ptr).ipc_get_mem_handle(ptr)
    ctypes.memmove(handle_out, h, _IPC_SIZE)


def _open(out: int, handle: bytes, flags: int) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuIpcOpenMemHandle: output pointer is NULL")
    STATE.require_current()
    put_u64(out, STATE.driver().ipc_open_mem_handle(handle))


if platform.machine() in ("x86_64", "AMD64"):
    # x86-64 SysV passes the 64-byte handle by value on the stack (class MEMORY) and the flags in the next free
    # register: the trampoline's 16 integer arguments are pdptr, flags, four unused registers, then the handle's
    # eight stack words (NOTE [trampolines] in registry.py).
    @api("cuIpcOpenMemHandle", (4010, 11000), P, c_uint, *([c_uint64] * 12))
    def cuIpcOpenMemHandle(out: int, flags: int, _r2: int, _r3: int, _r4: int, _r5: int, *words: int) -> None:
        _open(out, b"".join(int(w).to_bytes(8, "little") for w in words), flags)
else:  # AArch64 (AAPCS64) passes a struct larger than 16 bytes as a pointer to a copy

    @api("cuIpcOpenMemHandle", (4010, 11000), P, P, c_uint)
    def cuIpcOpenMemHandle(out: int, handle: int, flags: int) -> None:
        _open(out, ctypes.string_at(handle, _IPC_SIZE), flags)


@api("cuIpcCloseMemHandle", 4010, D)
def cuIpcCloseMemHandle(ptr: int) -> None:
    STATE.driver_at(ptr).ipc_close_mem_handle(ptr)


# NOTE [ipc events] (gpud/ipc.py)
_CU_EVENT_IPC_FLAGS = 0x6  # CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING: what an opened event was created with


@api("cuIpcGetEventHandle", 4010, P, P)
def cuIpcGetEventHandle(handle_out: int, event: int | None) -> None:
    if not handle_out:
        raise CudaError(codes.INVALID_VALUE, "cuIpcGetEventHandle: handle pointer is NULL")
    ctypes.memmove(handle_out, STATE.driver_for(int(event or 0)).ipc_get_event_handle(int(event or 0)), _IPC_SIZE)


def _open_event(out: int, handle: bytes) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuIpcOpenEventHandle: output pointer is NULL")
    STATE.require_current()
    h = STATE.driver().ipc_open_event_handle(handle)
    STATE.event_flags[h] = _CU_EVENT_IPC_FLAGS
    put_u64(out, h)


if platform.machine() in ("x86_64", "AMD64"):
    # the 64-byte handle by value: on the stack after the five unused argument registers (as cuIpcOpenMemHandle)
    @api("cuIpcOpenEventHandle", 4010, P, *([c_uint64] * 13))
    def cuIpcOpenEventHandle(out: int, _r1: int, _r2: int, _r3: int, _r4: int, _r5: int, *words: int) -> None:
        _open_event(out, b"".join(int(w).to_bytes(8, "little") for w in words))
else:

    @api("cuIpcOpenEventHandle", 4010, P, P)
    def cuIpcOpenEventHandle(out: int, handle: int) -> None:
        _open_event(out, ctypes.string_at(handle, _IPC_SIZE))
