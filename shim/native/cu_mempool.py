"""Driver API: stream-ordered memory pools (``cudaMallocAsync``/``cudaFreeAsync`` and ``cudaMemPool*``).

NOTE [memory pools]: a pool here is bookkeeping on the client: each allocation from it is an ordinary gpud
allocation (quota-charged, bounds-checked), and a free is gpud's ``cuMemFree``, which returns the memory once
the work queued before it is done, which is what stream ordering asks (it also orders after the other
streams' work: stricter, never wrong). A pool keeps nothing cached, so its reserved and used figures are the
same, and trimming has nothing to give back. Its attributes (release threshold, reuse flags) are kept and read
back as set; the current and high-water figures are the pool's own allocations.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import c_int, c_size_t, c_uint64, c_void_p

from proto import errors as codes
from proto.errors import CudaError
from shim.native import cu_capture, cu_memory
from shim.native.registry import api, put_u64
from shim.native.state import STATE

P = c_void_p
D = c_uint64

# CUmemPool_attribute
_REUSE_FOLLOW_EVENT_DEPENDENCIES, _REUSE_ALLOW_OPPORTUNISTIC, _REUSE_ALLOW_INTERNAL_DEPENDENCIES = 1, 2, 3
_RELEASE_THRESHOLD, _RESERVED_CURRENT, _RESERVED_HIGH, _USED_CURRENT, _USED_HIGH = 4, 5, 6, 7, 8
_INT_ATTRS = (_REUSE_FOLLOW_EVENT_DEPENDENCIES, _REUSE_ALLOW_OPPORTUNISTIC, _REUSE_ALLOW_INTERNAL_DEPENDENCIES)


class _Pool:
    def __init__(self, device: int) -> None:
        self.device = device
        self.ints = dict.fromkeys(_INT_ATTRS, 1)
        self.release_threshold = 0
        self.used = 0
        self.high = 0
        self.allocs: dict[int, int] = {}  # address -> size


_lock = threading.Lock()
_pools: dict[int, _Pool] = {}  # handle -> pool
_default: dict[int, int] = {}  # device -> its default pool's handle
_current: dict[int, int] = {}  # device -> the pool cuMemAllocAsync uses
_owner: dict[int, int] = {}  # address -> pool handle
_next = [0x5000]


def _new(device: int) -> int:
    _next[0] += 0x10
    _pools[_next[0]] = _Pool(device)
    return _next[0]


def _pool(handle: int | None) -> _Pool:
    p = _pools.get(int(handle or 0))
    if p is None:
        raise CudaError(codes.INVALID_VALUE, f"0x{int(handle or 0):x} is not a memory pool")
    return p


def _default_of(device: int) -> int:
    if device not in _default:
        _default[device] = _new(device)
    return _default[device]


def _check_device(device: int) -> None:
    count = STATE.device_count()
    if not 0 <= device < count:
        raise CudaError(codes.INVALID_DEVICE, f"device {device} does not exist ({count} visible)")


@api("cuDeviceGetDefaultMemPool", 11020, P, c_int)
def cuDeviceGetDefaultMemPool(out: int, device: int) -> None:
    _check_device(device)
    with _lock:
        put_u64(out, _default_of(device))


@api("cuDeviceGetMemPool", 11020, P, c_int)
def cuDeviceGetMemPool(out: int, device: int) -> None:
    _check_device(device)
    with _lock:
        put_u64(out, _current.get(device) or _default_of(device))


@api("cuDeviceSetMemPool", 11020, c_int, P)
def cuDeviceSetMemPool(device: int, pool: int) -> None:
    _check_device(device)
    with _lock:
        if _pool(pool).device != device:
            raise CudaError(codes.INVALID_DEVICE, "cuDeviceSetMemPool: the pool belongs to another device")
        _current[device] = int(pool)


@api("cuMemPoolCreate", 11020, P, P)
def cuMemPoolCreate(out: int, props: int) -> None:
    if not out or not props:
        raise CudaError(codes.INVALID_VALUE, "cuMemPoolCreate: NULL argument")
    # CUmemPoolProps: allocType (int), handleTypes (int), location {type (int), id (int)}, ...
    alloc_type, _handles, loc_type, loc_id = (ctypes.c_int * 4).from_address(props)
    if alloc_type != 1 or loc_type != 1:  # PINNED, on a DEVICE
        raise CudaError(codes.NOT_SUPPORTED, "cuMemPoolCreate: only pinned device-memory pools are supported")
    _check_device(loc_id)
    with _lock:
        put_u64(out, _new(loc_id))


@api("cuMemPoolDestroy", 11020, P)
def cuMemPoolDestroy(pool: int) -> None:
    with _lock:
        p = _pool(pool)
        if int(pool) in _default.values():
            raise CudaError(codes.INVALID_VALUE, "cuMemPoolDestroy: a device's default pool cannot be destroyed")
        if p.allocs:  # as CUDA: the pool goes once its allocations are freed; ours hold no cache, so now
            for addr in p.allocs:
                _owner.pop(addr, None)
        del _pools[int(pool)]
        for dev, h in list(_current.items()):
            if h == int(pool):
                del _current[dev]


@api("cuMemPoolSetAttribute", 11020, P, c_int, P)
def cuMemPoolSetAttribute(pool: int, attr: int, value: int) -> None:
    if not value:
        raise CudaError(codes.INVALID_VALUE, "cuMemPoolSetAttribute: value is NULL")
    with _lock:
        p = _pool(pool)
        if attr in _INT_ATTRS:
            p.ints[attr] = 1 if ctypes.c_int.from_address(value).value else 0
        elif attr == _RELEASE_THRESHOLD:
            p.release_threshold = ctypes.c_uint64.from_address(value).value
        elif attr in (_RESERVED_HIGH, _USED_HIGH):
            if ctypes.c_uint64.from_address(value).value != 0:
                raise CudaError(codes.INVALID_VALUE, "a pool's high-water mark can only be reset to 0")
            p.high = p.used
        else:
            raise CudaError(codes.INVALID_VALUE, f"cuMemPoolSetAttribute: attribute {attr} cannot be set")


@api("cuMemPoolGetAttribute", 11020, P, c_int, P)
def cuMemPoolGetAttribute(pool: int, attr: int, value: int) -> None:
    if not value:
        raise CudaError(codes.INVALID_VALUE, "cuMemPoolGetAttribute: value is NULL")
    with _lock:
        p = _pool(pool)
        if attr in _INT_ATTRS:
            ctypes.c_int.from_address(value).value = p.ints[attr]
            return
        figures = {
            _RELEASE_THRESHOLD: p.release_threshold,
            _RESERVED_CURRENT: p.used,
            _RESERVED_HIGH: p.high,
            _USED_CURRENT: p.used,
            _USED_HIGH: p.high,
        }
        if attr not in figures:
            raise CudaError(codes.INVALID_VALUE, f"cuMemPoolGetAttribute: no attribute {attr}")
        ctypes.c_uint64.from_address(value).value = figures[attr]


@api("cuMemPoolTrimTo", 11020, P, c_size_t)
def cuMemPoolTrimTo(pool: int, keep: int) -> None:
    with _lock:
        _pool(pool)  # nothing is cached: nothing to give back


@api("cuMemPoolSetAccess", 11020, P, P, c_size_t)
def cuMemPoolSetAccess(pool: int, descs: int, count: int) -> None:
    with _lock:
        p = _pool(pool)
    for i in range(count):  # CUmemAccessDesc: location {type, id}, flags
        loc_type, loc_id, _flags = (ctypes.c_int * 3).from_address(descs + 12 * i)
        if loc_type != 1 or loc_id != p.device:
            raise CudaError(codes.INVALID_DEVICE, "cuMemPoolSetAccess: peer access to another device is not supported")


@api("cuMemPoolGetAccess", 11020, P, P, P)
def cuMemPoolGetAccess(out: int, pool: int, location: int) -> None:
    with _lock:
        p = _pool(pool)
    loc_type, loc_id = (ctypes.c_int * 2).from_address(location)
    ctypes.c_int.from_address(out).value = 3 if (loc_type == 1 and loc_id == p.device) else 0  # READWRITE / NONE


def _alloc(out: int, size: int, handle: int) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, "dptr is NULL")
    cu_memory.cuMemAlloc(out, size)
    addr = ctypes.c_uint64.from_address(out).value
    with _lock:
        p = _pools[handle]
        p.allocs[addr] = size
        p.used += size
        p.high = max(p.high, p.used)
        _owner[addr] = handle


@api("cuMemAllocAsync", 11020, P, c_size_t, P)
def cuMemAllocAsync(out: int, size: int, stream: int | None) -> None:
    STATE.require_current()
    if _captured_alloc(out, size, stream):
        return
    device = STATE.current_device()
    with _lock:
        handle = _current.get(device) or _default_of(device)
    _alloc(out, size, handle)


@api("cuMemAllocFromPoolAsync", 11020, P, c_size_t, P, P)
def cuMemAllocFromPoolAsync(out: int, size: int, pool: int, stream: int | None) -> None:
    STATE.require_current()
    with _lock:
        _pool(pool)
    if _captured_alloc(out, size, stream):
        return
    _alloc(out, size, int(pool))


def _captured_alloc(out: int, size: int, stream: int | None) -> bool:
    """While ``stream`` captures, the allocation is graph memory (NOTE [graphs in the native face])."""
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuMemAllocAsync: dptr is NULL")
    addr = cu_capture.capture_alloc(stream, size)
    if addr is None:
        return False
    put_u64(out, addr)
    return True


@api("cuMemFreeAsync", 11020, D, P)
def cuMemFreeAsync(ptr: int, stream: int | None) -> None:
    if cu_capture.capture_free(stream, ptr) or cu_capture.is_graph_memory(ptr):
        return
    cu_memory.cuMemFree(ptr)  # gpud frees it once the work queued before it is done (NOTE [memory pools])
    with _lock:
        handle = _owner.pop(ptr, None)
        p = _pools.get(handle) if handle is not None else None
        if p is not None and ptr in p.allocs:
            p.used -= p.allocs.pop(ptr)
