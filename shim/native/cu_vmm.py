"""Driver API: virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap and their kin).

NOTE [virtual memory on gpud]: gpud hands out device memory as allocations, not as pages to map, so the client
builds CUDA's model on them. A reservation (cuMemAddressReserve) is one gpud allocation: its addresses are
valid device addresses at once, and every copy, kernel and library call checks them as any allocation's. A
physical allocation (cuMemCreate) is a gpud allocation of its own (its "home", so quotas count it when it is
created, as CUDA does); mapping it copies its bytes into the reservation at the mapped address, unmapping copies
them back home, in stream order on the legacy stream. So contents survive unmap/remap and a handle can move
between reservations. What this cannot do is alias: one physical allocation mapped at two addresses at once is
CUDA_ERROR_NOT_SUPPORTED, naming itself (the two copies would drift apart). Memory use is twice the mapped bytes.
"""

from __future__ import annotations

import ctypes
import itertools
from ctypes import c_int, c_size_t, c_uint64, c_ulonglong, c_void_p
from dataclasses import dataclass, field

from proto import errors as codes
from proto.errors import CudaError
from shim.native.registry import api, put_u64
from shim.native.state import STATE

P = c_void_p
D = c_uint64  # CUdeviceptr
GRANULARITY = 2 << 20  # what cuMemGetAllocationGranularity reports (the common 2 MiB of NVIDIA's GPUs)
PINNED, DEVICE = 1, 1  # CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE
READWRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE


class _Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [
        ("type", c_int),
        ("handle_types", c_int),
        ("loc_type", c_int),
        ("loc_id", c_int),
        ("win32", c_void_p),
        ("compression", ctypes.c_ubyte),
        ("rdma", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("loc_type", c_int), ("loc_id", c_int), ("flags", c_int)]


@dataclass
class Physical:
    size: int
    home: int  # the gpud allocation holding the bytes while unmapped
    prop: bytes
    mapped_at: int | None = None
    released: bool = False


@dataclass
class Reservation:
    size: int
    maps: dict[int, tuple[int, int]] = field(default_factory=dict)  # address -> (handle, size)
    access: int = 0


_physical: dict[int, Physical] = {}
_reserved: dict[int, Reservation] = {}  # base -> reservation
_ids = itertools.count(0xF00D000)


def _prop(ptr: int | None) -> _Prop:
    if not ptr:
        raise CudaError(codes.INVALID_VALUE, "CUmemAllocationProp is NULL")
    p = _Prop.from_address(int(ptr))
    if p.type != PINNED or p.loc_type != DEVICE:
        raise CudaError(
            codes.INVALID_VALUE, f"allocation type {p.type}, location type {p.loc_type}: PINNED on a DEVICE"
        )
    if not 0 <= p.loc_id < STATE.device_count():
        raise CudaError(codes.INVALID_DEVICE, f"location id {p.loc_id}")
    return p


def _reservation(ptr: int, size: int, what: str) -> tuple[int, Reservation]:
    for base, r in _reserved.items():
        if base <= ptr < base + r.size:
            if ptr + size > base + r.size:
                raise CudaError(codes.INVALID_VALUE, f"{what}: 0x{ptr:x} + {size} runs past its reservation")
            return base, r
    raise CudaError(codes.INVALID_VALUE, f"{what}: 0x{ptr:x} is not in a range reserved by cuMemAddressReserve")


def _phys(handle: int) -> Physical:
    p = _physical.get(int(handle))
    if p is None or p.released and p.mapped_at is None:
        raise CudaError(codes.INVALID_VALUE, f"invalid memory handle 0x{int(handle):x}")
    return p


@api("cuMemGetAllocationGranularity", 10020, P, P, c_int)
def cuMemGetAllocationGranularity(out: int, prop: int | None, option: int) -> None:
    _prop(prop)
    if option not in (0, 1):  # MINIMUM, RECOMMENDED
        raise CudaError(codes.INVALID_VALUE, f"granularity option {option}")
    put_u64(out, GRANULARITY)


@api("cuMemAddressReserve", 10020, P, c_size_t, c_size_t, D, c_ulonglong)
def cuMemAddressReserve(out: int, size: int, alignment: int, hint: int, flags: int) -> None:
    if size == 0 or size % GRANULARITY or (alignment and alignment & (alignment - 1)):
        raise CudaError(codes.INVALID_VALUE, f"size {size} (a multiple of {GRANULARITY}), alignment {alignment}")
    base = STATE.driver().mem_alloc(size)  # the address hint is a hint: gpud places allocations itself
    _reserved[base] = Reservation(size)
    put_u64(out, base)


@api("cuMemAddressFree", 10020, D, c_size_t)
def cuMemAddressFree(ptr: int, size: int) -> None:
    r = _reserved.get(ptr)
    if r is None or r.size != size:
        raise CudaError(codes.INVALID_VALUE, f"cuMemAddressFree: 0x{ptr:x} ({size} bytes) is not a reservation")
    if r.maps:
        raise CudaError(codes.INVALID_VALUE, "cuMemAddressFree: the range still has mappings (cuMemUnmap them)")
    del _reserved[ptr]
    STATE.driver().mem_free(ptr)


@api("cuMemCreate", 10020, P, c_size_t, P, c_ulonglong)
def cuMemCreate(out: int, size: int, prop: int | None, flags: int) -> None:
    p = _prop(prop)
    if size == 0 or size % GRANULARITY or flags:
        raise CudaError(codes.INVALID_VALUE, f"size {size} (a multiple of {GRANULARITY}), flags {flags} (0)")
    home = STATE.driver().mem_alloc(size)
    handle = next(_ids)
    _physical[handle] = Physical(size, home, bytes(p))
    put_u64(out, handle)


def _free_home(p: Physical) -> None:
    STATE.driver().mem_free(p.home)
    for h, q in list(_physical.items()):
        if q is p:
            del _physical[h]


@api("cuMemRelease", 10020, c_ulonglong)
def cuMemRelease(handle: int) -> None:
    p = _phys(handle)
    if p.released:
        raise CudaError(codes.INVALID_VALUE, f"memory handle 0x{handle:x} was released already")
    p.released = True
    if p.mapped_at is None:  # a mapped one lives until its last unmap, as in CUDA
        _free_home(p)


@api("cuMemMap", 10020, D, c_size_t, c_size_t, c_ulonglong, c_ulonglong)
def cuMemMap(ptr: int, size: int, offset: int, handle: int, flags: int) -> None:
    p = _phys(handle)
    if offset or size != p.size or flags:
        raise CudaError(codes.INVALID_VALUE, f"cuMemMap: map the whole allocation ({p.size} bytes) at offset 0")
    if p.mapped_at is not None:
        raise CudaError(
            codes.NOT_SUPPORTED,
            f"cuMemMap: the allocation is mapped at 0x{p.mapped_at:x} already; mapping one allocation at two addresses"
            " is not supported (NOTE [virtual memory on gpud])",
        )
    base, r = _reservation(ptr, size, "cuMemMap")
    if any(a < ptr + size and ptr < a + s for a, (_, s) in r.maps.items()):
        raise CudaError(codes.INVALID_VALUE, f"cuMemMap: 0x{ptr:x} + {size} overlaps a mapping")
    STATE.driver().memcpy_dtod(ptr, p.home, size)
    r.maps[ptr] = (int(handle), size)
    p.mapped_at = ptr


@api("cuMemUnmap", 10020, D, c_size_t)
def cuMemUnmap(ptr: int, size: int) -> None:
    base, r = _reservation(ptr, size, "cuMemUnmap")
    inside = sorted(a for a in r.maps if ptr <= a < ptr + size)
    if not inside or any(a + r.maps[a][1] > ptr + size for a in inside) or inside[0] != ptr:
        raise CudaError(codes.INVALID_VALUE, f"cuMemUnmap: 0x{ptr:x} + {size} must span whole mappings")
    drv = STATE.driver()
    for a in inside:
        handle, length = r.maps.pop(a)
        p = _physical[handle]
        p.mapped_at = None
        if p.released:
            _free_home(p)
        else:
            drv.memcpy_dtod(p.home, a, length)
    if not r.maps:
        r.access = 0


@api("cuMemSetAccess", 10020, D, c_size_t, P, c_size_t)
def cuMemSetAccess(ptr: int, size: int, desc: int | None, count: int) -> None:
    base, r = _reservation(ptr, size, "cuMemSetAccess")
    if not desc or count <= 0:
        raise CudaError(codes.INVALID_VALUE, "cuMemSetAccess: no access descriptors")
    for d in (_Access * count).from_address(int(desc)):
        if d.loc_type != DEVICE or not 0 <= d.loc_id < STATE.device_count() or d.flags not in (0, 1, 3):
            raise CudaError(
                codes.INVALID_VALUE, f"access descriptor: location {d.loc_type}/{d.loc_id}, flags {d.flags}"
            )
        r.access = d.flags


@api("cuMemGetAccess", 10020, P, P, D)
def cuMemGetAccess(out: int, location: int | None, ptr: int) -> None:
    _, r = _reservation(ptr, 1, "cuMemGetAccess")
    put_u64(out, r.access if any(a <= ptr < a + s for a, (_, s) in r.maps.items()) else 0)


@api("cuMemGetAllocationPropertiesFromHandle", 10020, P, c_ulonglong)
def cuMemGetAllocationPropertiesFromHandle(out: int, handle: int) -> None:
    ctypes.memmove(out, _phys(handle).prop, ctypes.sizeof(_Prop))


@api("cuMemRetainAllocationHandle", 11000, P, P)
def cuMemRetainAllocationHandle(out: int, ptr: int | None) -> None:
    for r in _reserved.values():
        for a, (handle, _) in r.maps.items():
            if a == int(ptr or 0):
                put_u64(out, handle)
                return
    raise CudaError(codes.INVALID_VALUE, f"0x{int(ptr or 0):x} is not the start of a mapping")


def is_reservation(ptr: int) -> bool:
    """Whether ``ptr`` is a reservation's base (cuMemFree refuses it: cuMemAddressFree frees it)."""
    return ptr in _reserved


__all__ = ["GRANULARITY", "is_reservation"]
