"""Driver API: streams, events, host callbacks.

Stream and event handles are the client-chosen ids of shim.driver (creates cost no round trip).
Host callbacks (cuLaunchHostFunc, cuStreamAddCallback) run on the calling thread once the
stream's earlier work is done: stricter ordering than CUDA's, same results.
"""

from __future__ import annotations

import ctypes
from ctypes import c_int, c_size_t, c_uint, c_uint64, c_void_p

from proto import errors as codes
from proto.errors import CudaError
from shim.native import cu_capture
from shim.native.registry import api, put_f32, put_i32, put_u32, put_u64
from shim.native.state import STATE

P = c_void_p

HOST_FN = ctypes.CFUNCTYPE(None, c_void_p)
STREAM_CALLBACK = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p)


def _s(h: int | None) -> int:
    return int(h or 0)


@api("cuStreamCreate", 2000, P, c_uint)
def cuStreamCreate(out: int, flags: int) -> None:
    cuStreamCreateWithPriority(out, flags, 0)


@api("cuStreamCreateWithPriority", 5050, P, c_uint, c_int)
def cuStreamCreateWithPriority(out: int, flags: int, priority: int) -> None:
    STATE.require_current()
    if flags not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"cuStreamCreate: bad flags {flags}")
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuStreamCreate: phStream is NULL")
    priority = max(-5, min(0, priority))
    h = STATE.driver().stream_create(flags, priority)
    STATE.stream_flags[h] = (flags, priority)
    put_u64(out, h)


@api("cuStreamDestroy", 4000, P)
def cuStreamDestroy(h: int | None) -> None:
    STATE.driver_for(_s(h)).stream_destroy(_s(h))
    STATE.stream_flags.pop(_s(h), None)
    for key in [k for k in _stream_attrs if k[0] == _s(h)]:
        del _stream_attrs[key]


@api("cuStreamSynchronize", 2000, P)
def cuStreamSynchronize(h: int | None) -> None:
    cu_capture.refuse_sync(h, "cuStreamSynchronize")
    STATE.driver_for(_s(h)).stream_synchronize(_s(h))


@api("cuStreamQuery", 2000, P)
def cuStreamQuery(h: int | None) -> int:
    cu_capture.refuse_sync(h, "cuStreamQuery")
    return 0 if STATE.driver_for(_s(h)).stream_query(_s(h)) else codes.NOT_READY


@api("cuStreamWaitEvent", 3020, P, P, c_uint)
def cuStreamWaitEvent(h: int | None, event: int | None, flags: int) -> None:
    if cu_capture.stream_waits(_s(h), int(event or 0)):
        return
    drv, owner = STATE.driver_for(_s(h)), STATE.driver_for(int(event or 0))
    if owner is not drv:  # an event of another device (NOTE [devices of a program]): its session is not this
        # stream's, so the wait happens here, before anything later is queued on the stream
        owner.event_synchronize(int(event or 0))
        return
    drv.stream_wait_event(_s(h), int(event or 0))


def _stream_info(h: int | None) -> tuple[int, int]:
    s = _s(h)
    if s in (0, 1, 2):
        return 0, 0
    info = STATE.stream_flags.get(s)
    if info is None:
        raise CudaError(codes.INVALID_HANDLE, f"invalid stream handle {s}")
    return info


@api("cuStreamGetPriority", 5050, P, P)
def cuStreamGetPriority(h: int | None, out: int) -> None:
    put_i32(out, _stream_info(h)[1])


@api("cuStreamGetFlags", 5050, P, P)
def cuStreamGetFlags(h: int | None, out: int) -> None:
    put_u32(out, _stream_info(h)[0])


@api("cuStreamGetId", 12000, P, P)
def cuStreamGetId(h: int | None, out: int) -> None:
    _stream_info(h)
    put_u64(out, _s(h))


@api("cuStreamGetCtx", 9020, P, P)
def cuStreamGetCtx(h: int | None, out: int) -> None:
    _stream_info(h)
    ctx = STATE.require_current()
    index = STATE.driver_for(_s(h)).index  # the stream's device (NOTE [devices of a program])
    put_u64(out, ctx.handle if index == ctx.device else STATE.primary(index).handle)


@api("cuStreamGetCtx", 12050, P, P, P)
def cuStreamGetCtx_v2(h: int | None, out: int, green: int) -> None:
    cuStreamGetCtx(h, out)
    if green:
        put_u64(green, 0)


@api("cuStreamGetDevice", 12080, P, P)
def cuStreamGetDevice(h: int | None, out: int) -> None:
    _stream_info(h)
    put_i32(out, STATE.current_device())


# NOTE [stream attributes]: a stream's launch attributes (the L2 access-policy window, the synchronisation policy,
# priority...) are hints to a GPU's caches and scheduler. They are kept per stream and read back as set; gpud's
# CPU backend has no L2 to steer, so they change nothing there (a GPU, too, may ignore them).
_ATTR_BYTES = 64  # sizeof(CUlaunchAttributeValue)
_stream_attrs: dict[tuple[int, int], bytes] = {}


def _check_stream(h: int) -> None:
    if h not in (0, 1, 2) and h not in STATE.stream_flags:
        raise CudaError(codes.INVALID_HANDLE, f"0x{h:x} is not a stream of this process")


@api("cuStreamSetAttribute", 11000, P, c_int, P)
def cuStreamSetAttribute(h: int | None, attr: int, value: int) -> None:
    if not value or not 0 < attr < 64:
        raise CudaError(codes.INVALID_VALUE, f"cuStreamSetAttribute: bad attribute {attr} or NULL value")
    _check_stream(_s(h))
    _stream_attrs[(_s(h), attr)] = ctypes.string_at(value, _ATTR_BYTES)


@api("cuStreamGetAttribute", 11000, P, c_int, P)
def cuStreamGetAttribute(h: int | None, attr: int, out: int) -> None:
    if not out or not 0 < attr < 64:
        raise CudaError(codes.INVALID_VALUE, f"cuStreamGetAttribute: bad attribute {attr} or NULL value")
    _check_stream(_s(h))
    ctypes.memmove(out, _stream_attrs.get((_s(h), attr), bytes(_ATTR_BYTES)), _ATTR_BYTES)


@api("cuStreamCopyAttributes", 11000, P, P)
def cuStreamCopyAttributes(dst: int | None, src: int | None) -> None:
    _check_stream(_s(dst))
    _check_stream(_s(src))
    for (h, attr), v in list(_stream_attrs.items()):
        if h == _s(src):
            _stream_attrs[(_s(dst), attr)] = v


def issue_host(node: cu_capture.Node, stream: int) -> None:
    """A host node: the function runs once the stream's earlier work is done."""
    fn, user = node.params
    STATE.driver_for(cu_capture.stream_key(stream)).stream_synchronize(cu_capture.stream_key(stream))
    HOST_FN(fn)(user)


@api("cuLaunchHostFunc", 10000, P, P, P)
def cuLaunchHostFunc(h: int | None, fn: int | None, user: int | None) -> None:
    if not fn:
        raise CudaError(codes.INVALID_VALUE, "cuLaunchHostFunc: fn is NULL")
    if cu_capture.record(h, cu_capture.HOST, (int(fn), user), issue_host):
        return
    STATE.driver_for(_s(h)).stream_synchronize(_s(h))
    HOST_FN(fn)(user)


@api("cuStreamAddCallback", 5000, P, P, P, c_uint)
def cuStreamAddCallback(h: int | None, cb: int | None, user: int | None, flags: int) -> None:
    if not cb or flags != 0:
        raise CudaError(codes.INVALID_VALUE, "cuStreamAddCallback: callback is NULL or flags are not 0")
    cu_capture.refuse_sync(h, "cuStreamAddCallback")  # CUDA refuses it while capturing (use cuLaunchHostFunc)
    status = 0
    try:
        STATE.driver_for(_s(h)).stream_synchronize(_s(h))
    except CudaError as exc:
        status = exc.code
    STREAM_CALLBACK(cb)(h, status, user)


# ---------------------------------------------------------------------------- events
@api("cuEventCreate", 2000, P, c_uint)
def cuEventCreate(out: int, flags: int) -> None:
    STATE.require_current()
    if flags & ~0xF:
        raise CudaError(codes.INVALID_VALUE, f"cuEventCreate: bad flags {flags}")
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuEventCreate: phEvent is NULL")
    h = STATE.driver().event_create(flags)
    STATE.event_flags[h] = flags
    put_u64(out, h)


@api("cuEventRecord", 2000, P, P)
def cuEventRecord(event: int | None, h: int | None) -> None:
    drv = STATE.driver_for(int(event or 0))
    drv._event(int(event or 0))
    if not cu_capture.event_recorded(int(event or 0), _s(h)):
        drv.event_record(int(event or 0), _s(h))


@api("cuEventRecordWithFlags", 11010, P, P, c_uint)
def cuEventRecordWithFlags(event: int | None, h: int | None, flags: int) -> None:
    cuEventRecord(event, h)


@api("cuEventQuery", 2000, P)
def cuEventQuery(event: int | None) -> int:
    return 0 if STATE.driver_for(int(event or 0)).event_query(int(event or 0)) else codes.NOT_READY


@api("cuEventSynchronize", 2000, P)
def cuEventSynchronize(event: int | None) -> None:
    STATE.driver_for(int(event or 0)).event_synchronize(int(event or 0))


@api("cuEventDestroy", 4000, P)
def cuEventDestroy(event: int | None) -> None:
    STATE.driver_for(int(event or 0)).event_destroy(int(event or 0))
    STATE.event_flags.pop(int(event or 0), None)


@api("cuEventElapsedTime", (2000, 12080), P, P, P)
def cuEventElapsedTime(out: int, start: int | None, end: int | None) -> None:
    for e in (start, end):
        if STATE.event_flags.get(int(e or 0), 0) & 2:  # CU_EVENT_DISABLE_TIMING
            raise CudaError(codes.INVALID_HANDLE, "cuEventElapsedTime: event created with CU_EVENT_DISABLE_TIMING")
    put_f32(out, STATE.driver_for(int(start or 0)).event_elapsed_time(int(start or 0), int(end or 0)))


_ = c_uint64


@api("cuStreamAttachMemAsync", 6000, P, P, c_size_t, c_uint)
def cuStreamAttachMemAsync(h: int | None, ptr: int | None, length: int, flags: int) -> None:
    """Accepted for managed memory: it is one mapping shared by this process and gpud (NOTE [host map]), coherent
    whichever stream it is attached to, so the attachment changes nothing; the stream and range are checked."""
    from shim.native.cu_memory import _host

    if flags not in (1, 2, 4):  # CU_MEM_ATTACH_GLOBAL, HOST, SINGLE
        raise CudaError(codes.INVALID_VALUE, f"cuStreamAttachMemAsync: bad flags {flags}")
    block = next((b for b in _host.values() if b.managed and b.host <= int(ptr or 0) < b.host + b.size), None)
    if block is None:
        raise CudaError(codes.INVALID_VALUE, f"cuStreamAttachMemAsync: 0x{int(ptr or 0):x} is not managed memory")
    if length and int(ptr or 0) + length > block.host + block.size:
        raise CudaError(codes.INVALID_VALUE, "cuStreamAttachMemAsync: the range runs past the managed allocation")
    STATE.driver_for(_s(h))._stream(_s(h))  # an unknown stream is CUDA_ERROR_INVALID_HANDLE
