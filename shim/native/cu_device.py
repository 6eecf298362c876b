"""Driver API: initialization, versions, error strings, devices, and the context family."""

from __future__ import annotations

import ctypes
import uuid as uuidlib
from ctypes import c_int, c_size_t, c_uint, c_uint64, c_void_p
from typing import Any

from proto import errors as codes
from proto.errors import CudaError
from shim.driver import DRIVER_VERSION
from shim.native.registry import api, last_error, put_i32, put_str, put_u32, put_u64
from shim.native.state import STATE

P = c_void_p
VIRTUAL_MEMORY_MANAGEMENT = 102  # CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
MANAGED_MEMORY = 83  # CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: cuMemAllocManaged works when gpud shares this host

# ---------------------------------------------------------------------------- init, version, errors
_strings: dict[tuple[str, int, str], ctypes.Array] = {}


def _static_str(kind: str, code: int, text: str) -> int:
    """A C string that stays alive for the process (cuGetErrorString hands out const char*)."""
    key = (kind, code, text)
    buf = _strings.get(key)
    if buf is None:
        buf = _strings[key] = ctypes.create_string_buffer(text.encode())
    return ctypes.addressof(buf)


@api("cuInit", 2000, c_uint)
def cuInit(flags: int) -> None:
    if flags != 0:
        raise CudaError(codes.INVALID_VALUE, "cuInit: flags must be 0")
    STATE.init()


@api("cuDriverGetVersion", 2020, P)
def cuDriverGetVersion(out: int) -> None:
    put_i32(out, DRIVER_VERSION)


@api("cuGetErrorName", 6000, c_int, P)
def cuGetErrorName(code: int, out: int) -> int:
    if code not in codes.CURESULT:
        ctypes.c_void_p.from_address(out).value = None
        return codes.INVALID_VALUE
    ctypes.c_void_p.from_address(out).value = _static_str("name", code, codes.error_name(code))
    return 0


@api("cuGetErrorString", 6000, c_int, P)
def cuGetErrorString(code: int, out: int) -> int:
    if code not in codes.CURESULT:
        ctypes.c_void_p.from_address(out).value = None
        return codes.INVALID_VALUE
    text = codes.error_string(code)
    last = last_error()
    if last is not None and last[0] == code:  # the detail of this thread's failure, for the user's message
        text = f"{text} ({last[1]})"
    ctypes.c_void_p.from_address(out).value = _static_str("string", code, text)
    return 0


# ---------------------------------------------------------------------------- devices
def _dev(ordinal: int) -> dict:
    return STATE.device_info(ordinal)


@api("cuDeviceGet", 2000, P, c_int)
def cuDeviceGet(out: int, ordinal: int) -> None:
    put_i32(out, STATE.check_device(ordinal))


@api("cuDeviceGetCount", 2000, P)
def cuDeviceGetCount(out: int) -> None:
    put_i32(out, STATE.device_count())


@api("cuDeviceGetName", 2000, P, c_int, c_int)
def cuDeviceGetName(buf: int, length: int, dev: int) -> None:
    put_str(buf, length, _dev(dev)["name"])


@api("cuDeviceGetUuid", (9020, 11040), P, c_int)
def cuDeviceGetUuid(out: int, dev: int) -> None:
    raw = uuidlib.UUID(_dev(dev)["uuid"]).bytes
    ctypes.memmove(out, raw, 16)


@api("cuDeviceGetLuid", 10000, P, P, c_int)
def cuDeviceGetLuid(luid: int, mask: int, dev: int) -> int:
    _dev(dev)
    return codes.NOT_SUPPORTED  # LUIDs exist on Windows only


@api("cuDeviceTotalMem", 3020, P, c_int)
def cuDeviceTotalMem(out: int, dev: int) -> None:
    put_u64(out, int(_dev(dev)["total_mem"]))


@api("cuDeviceGetAttribute", 2000, P, c_int, c_int)
def cuDeviceGetAttribute(out: int, attrib: int, dev: int) -> None:
    attrs = _dev(dev)["attributes"]
    value = attrs.get(attrib, attrs.get(str(attrib)))
    if value is None:
        raise CudaError(codes.INVALID_VALUE, f"cuDeviceGetAttribute: unknown attribute {attrib}")
    if attrib == VIRTUAL_MEMORY_MANAGEMENT:  # the client builds it on gpud's allocations (shim/native/cu_vmm.py)
        value = 1
    if attrib == MANAGED_MEMORY:  # a property of the connection, not only of the device (shim/native/hostmem.py)
        from shim.native.hostmem import can_map

        value = int(can_map())
    put_i32(out, int(value))


@api("cuDeviceComputeCapability", 2000, P, P, c_int)
def cuDeviceComputeCapability(major: int, minor: int, dev: int) -> None:
    cc = _dev(dev)["compute_capability"]
    put_i32(major, int(cc[0]))
    put_i32(minor, int(cc[1]))


@api("cuDeviceGetProperties", 2000, P, c_int)
def cuDeviceGetProperties(out: int, dev: int) -> None:
    a = _dev(dev)["attributes"]
    g = lambda k: int(a.get(k, a.get(str(k), 0)))  # noqa: E731
    # CUdevprop: maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], sharedMemPerBlock,
    # totalConstantMemory, SIMDWidth, memPitch, regsPerBlock, clockRate, textureAlign
    vals = [g(1), g(2), g(3), g(4), g(5), g(6), g(7), g(8), g(9), g(10), g(11), g(12), g(13), g(14)]
    props = (ctypes.c_int * 14).from_address(out)
    for i, v in enumerate(vals):
        props[i] = v


def _bus_id(dev: int) -> str:
    return str(_dev(dev).get("pci_bus_id") or f"0000:00:{dev:02x}.0")


@api("cuDeviceGetPCIBusId", 4010, P, c_int, c_int)
def cuDeviceGetPCIBusId(buf: int, length: int, dev: int) -> None:
    put_str(buf, length, _bus_id(dev))


@api("cuDeviceGetByPCIBusId", 4010, P, ctypes.c_char_p)
def cuDeviceGetByPCIBusId(out: int, bus_id: bytes) -> None:
    want = (bus_id or b"").decode().lower()
    for d in range(STATE.device_count()):
        if _bus_id(d).lower() == want or _bus_id(d).lower().endswith(want):
            put_i32(out, d)
            return
    raise CudaError(codes.INVALID_DEVICE, f"no device at PCI bus id {want!r}")


@api("cuDeviceCanAccessPeer", 4000, P, c_int, c_int)
def cuDeviceCanAccessPeer(out: int, dev: int, peer: int) -> None:
    STATE.check_device(dev)
    STATE.check_device(peer)
    put_i32(out, 0)


@api("cuDeviceGetP2PAttribute", 8000, P, c_int, c_int, c_int)
def cuDeviceGetP2PAttribute(out: int, attrib: int, src: int, dst: int) -> None:
    STATE.check_device(src)
    STATE.check_device(dst)
    put_i32(out, 0)


@api("cuDeviceGetExecAffinitySupport", 11040, P, c_int, c_int)
def cuDeviceGetExecAffinitySupport(out: int, kind: int, dev: int) -> None:
    STATE.check_device(dev)
    put_i32(out, 0)


@api("cuDeviceGetTexture1DLinearMaxWidth", 11010, P, c_int, c_uint, c_int)
def cuDeviceGetTexture1DLinearMaxWidth(out: int, fmt: int, channels: int, dev: int) -> None:
    STATE.check_device(dev)
    put_u64(out, 1 << 28)


def _ctx_driver(ctx: Any) -> Any:
    """The driver of a context's device (NOTE [devices of a program] in shim/runtime.py)."""
    from shim import runtime

    STATE.driver()  # cuInit first
    return runtime.device_driver(ctx.device)


# ---------------------------------------------------------------------------- primary contexts
@api("cuDevicePrimaryCtxRetain", 7000, P, c_int)
def cuDevicePrimaryCtxRetain(out: int, dev: int) -> None:
    ctx = STATE.primary(dev)
    ctx.retains += 1
    put_u64(out, ctx.handle)


@api("cuDevicePrimaryCtxRelease", (7000, 11000), c_int)
def cuDevicePrimaryCtxRelease(dev: int) -> None:
    ctx = STATE.primary(dev)
    if ctx.retains <= 0:
        raise CudaError(codes.INVALID_CONTEXT, "cuDevicePrimaryCtxRelease: the primary context is not retained")
    ctx.retains -= 1


@api("cuDevicePrimaryCtxSetFlags", (7000, 11000), c_int, c_uint)
def cuDevicePrimaryCtxSetFlags(dev: int, flags: int) -> None:
    STATE.primary(dev).flags = flags


@api("cuDevicePrimaryCtxGetState", 7000, c_int, P, P)
def cuDevicePrimaryCtxGetState(dev: int, flags: int, active: int) -> None:
    ctx = STATE.primary(dev)
    put_u32(flags, ctx.flags)
    put_i32(active, 1 if ctx.retains > 0 else 0)


@api("cuDevicePrimaryCtxReset", (7000, 11000), c_int)
def cuDevicePrimaryCtxReset(dev: int) -> None:
    ctx = STATE.primary(dev)
    if ctx.retains > 0:
        _ctx_driver(ctx).ctx_synchronize()
    ctx.retains = 0


# ---------------------------------------------------------------------------- the cuCtx family
@api("cuCtxCreate", 3020, P, c_uint, c_int)
def cuCtxCreate(out: int, flags: int, dev: int) -> None:
    ctx = STATE.create(dev, flags)
    STATE.push(ctx.handle)
    put_u64(out, ctx.handle)


@api("cuCtxCreate", 12050, P, P, c_uint, c_int)
def cuCtxCreate_v4(out: int, params: int, flags: int, dev: int) -> None:
    cuCtxCreate(out, flags, dev)


@api("cuCtxDestroy", 4000, P)
def cuCtxDestroy(handle: int) -> None:
    STATE.destroy(handle or 0)


@api("cuCtxGetCurrent", 4000, P)
def cuCtxGetCurrent(out: int) -> None:
    ctx = STATE.current()
    put_u64(out, ctx.handle if ctx else 0)


@api("cuCtxSetCurrent", 4000, P)
def cuCtxSetCurrent(handle: int | None) -> None:
    STATE.set_current(handle)


@api("cuCtxPushCurrent", 4000, P)
def cuCtxPushCurrent(handle: int | None) -> None:
    STATE.push(handle or 0)


@api("cuCtxPopCurrent", 4000, P)
def cuCtxPopCurrent(out: int) -> None:
    h = STATE.pop()
    if out:
        put_u64(out, h)


@api("cuCtxGetDevice", 2000, P)
def cuCtxGetDevice(out: int) -> None:
    put_i32(out, STATE.require_current().device)


@api("cuCtxGetDevice", 13000, P, P)
def cuCtxGetDevice_v2(out: int, ctx: int | None) -> None:
    """CUDA 13: the device of ``ctx``, or of the current context when ``ctx`` is NULL."""
    put_i32(out, (STATE.context(ctx) if ctx else STATE.require_current()).device)


@api("cuCtxGetFlags", 7000, P)
def cuCtxGetFlags(out: int) -> None:
    put_u32(out, STATE.require_current().flags)


@api("cuCtxSetFlags", 12010, c_uint)
def cuCtxSetFlags(flags: int) -> None:
    STATE.require_current().flags = flags


@api("cuCtxGetId", 12000, P, P)
def cuCtxGetId(handle: int | None, out: int) -> None:
    ctx = STATE.context(handle) if handle else STATE.require_current()
    put_u64(out, ctx.ident)


@api("cuCtxGetApiVersion", 3020, P, P)
def cuCtxGetApiVersion(handle: int | None, out: int) -> None:
    if handle:
        STATE.context(handle)
    else:
        STATE.require_current()
    put_u32(out, 3020)


@api("cuCtxSynchronize", 2000)
def cuCtxSynchronize() -> None:
    STATE.require_current()
    STATE.driver().ctx_synchronize()


@api("cuCtxSynchronize", 13000, P)
def cuCtxSynchronize_v2(ctx: int | None) -> None:
    """CUDA 13: wait for ``ctx`` (NULL: the current one); a device's contexts share its session."""
    _ctx_driver(STATE.context(ctx) if ctx else STATE.require_current()).ctx_synchronize()


@api("cuCtxGetLimit", 3010, P, c_int)
def cuCtxGetLimit(out: int, limit: int) -> None:
    ctx = STATE.require_current()
    if limit not in ctx.limits:
        raise CudaError(215, f"cuCtxGetLimit: unsupported limit {limit}")  # CUDA_ERROR_UNSUPPORTED_LIMIT
    put_u64(out, ctx.limits[limit])


@api("cuCtxSetLimit", 3010, c_int, c_size_t)
def cuCtxSetLimit(limit: int, value: int) -> None:
    ctx = STATE.require_current()
    if limit not in ctx.limits:
        raise CudaError(215, f"cuCtxSetLimit: unsupported limit {limit}")
    ctx.limits[limit] = int(value)


@api("cuCtxGetCacheConfig", 3020, P)
def cuCtxGetCacheConfig(out: int) -> None:
    put_i32(out, STATE.require_current().cache_config)


@api("cuCtxSetCacheConfig", 3020, c_int)
def cuCtxSetCacheConfig(config: int) -> None:
    if config not in (0, 1, 2, 3):
        raise CudaError(codes.INVALID_VALUE, f"cuCtxSetCacheConfig: bad config {config}")
    STATE.require_current().cache_config = config


@api("cuCtxGetSharedMemConfig", 4020, P)
def cuCtxGetSharedMemConfig(out: int) -> None:
    STATE.require_current()
    put_i32(out, 1)  # CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE


@api("cuCtxSetSharedMemConfig", 4020, c_int)
def cuCtxSetSharedMemConfig(config: int) -> None:
    STATE.require_current()


@api("cuCtxGetStreamPriorityRange", 5050, P, P)
def cuCtxGetStreamPriorityRange(least: int, greatest: int) -> None:
    if least:
        put_i32(least, 0)
    if greatest:
        put_i32(greatest, -5)


@api("cuCtxResetPersistingL2Cache", 11000)
def cuCtxResetPersistingL2Cache() -> None:
    STATE.require_current()


@api("cuCtxAttach", 2000, P, c_uint)
def cuCtxAttach(out: int, flags: int) -> None:
    put_u64(out, STATE.require_current().handle)


@api("cuCtxDetach", 2000, P)
def cuCtxDetach(handle: int | None) -> None:
    STATE.context(handle)


_ = c_uint64  # re-exported types keep imports uniform across the api modules


# ---------------------------------------------------------------------------- profiler control
@api("cuProfilerStart", 4000)
def cuProfilerStart() -> None:
    """Profiling a remote device is gpud's business; starting and stopping succeed and do nothing."""
    STATE.require_current()


@api("cuProfilerStop", 4000)
def cuProfilerStop() -> None:
    STATE.require_current()
