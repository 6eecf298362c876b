"""cuFFT, remoted at its API: the client half of NOTE [vendor libraries] (gpud/fft.py).

The native library exports every cuFFT symbol (src/exports_cufft.h) and is found as libcufft.so.11 (CUDA 12) and
libcufft.so.12 (CUDA 13) under ``wooly run``. A plan is kept here, as cuFFT keeps it on the host: its geometry
(cuFFT's advanced layout, proto/fft.py), its stream and its work area. Each execution becomes an ``fft_exec``
operation queued on the plan's stream, as a kernel launch is, carrying the geometry, so gpud keeps no plan. Plans
need no work area from the program (the node's FFT allocates its own): the sizes reported are 0. Half-precision
transforms and multi-GPU (cufftXt descriptors, callbacks) return CUFFT_NOT_SUPPORTED and name themselves once.
"""

from __future__ import annotations

import itertools
from ctypes import c_int, c_int64, c_void_p
from dataclasses import dataclass, field

from proto import errors as codes
from proto.codec import ProtocolError, check
from proto.errors import CudaError
from proto.fft import FORWARD, INVERSE, NAMES, TYPES, extents
from proto.fft import plan as check_plan
from proto.messages import Direction, FftExec
from shim.native import cu_capture
from shim.native.registry import api, put_i32, put_u64
from shim.native.state import STATE

P = c_void_p
VERSION = 11401  # the cuFFT these signatures follow (cufftGetVersion of CUDA 12.9's cuFFT 11.4.1)
# cudaDataType_t of cufftXtMakePlanMany -> (input, output) -> cufftType
_XT_TYPES = {(0, 4): 0x2A, (4, 0): 0x2C, (4, 4): 0x29, (1, 5): 0x6A, (5, 1): 0x6C, (5, 5): 0x69}


@dataclass
class Plan:
    type: int = 0
    rank: int = 0
    n: list[int] = field(default_factory=list)
    batch: int = 1
    inembed: list[int] = field(default_factory=list)
    istride: int = 1
    idist: int = 0
    onembed: list[int] = field(default_factory=list)
    ostride: int = 1
    odist: int = 0
    stream: int = 0
    made: bool = False


_plans: dict[int, Plan] = {}
_ids = itertools.count(0x0FF7000)


def _plan(h: int) -> Plan:
    p = _plans.get(int(h))
    if p is None:
        raise CudaError(codes.INVALID_HANDLE, f"invalid cuFFT plan {int(h)}")
    return p


def _ints(ptr: int | None, n: int, wide: bool = False) -> list[int]:
    if not ptr:
        return []
    return list(((c_int64 if wide else c_int) * n).from_address(ptr)) if n > 0 else []


def _make(
    h: int, rank: int, n: list[int], inembed: list[int], istride: int, idist: int, onembed: list[int], ostride: int,
    odist: int, typ: int, batch: int, work: int | None,
) -> None:  # fmt: skip
    p = _plan(h)
    if p.made:
        raise CudaError(codes.INVALID_VALUE, "this cuFFT plan was made already (cufftCreate a new one)")
    if typ not in TYPES:
        raise CudaError(codes.INVALID_VALUE, f"unknown cufftType 0x{typ:x}")
    if not inembed or not onembed:  # cuFFT: either embedding missing means the basic layout on both sides
        inembed, onembed, istride, idist, ostride, odist = [], [], 1, 0, 1, 0
    cand = Plan(typ, rank, list(n), batch, list(inembed), istride, idist, list(onembed), ostride, odist)
    check_plan(cand)  # the same rules gpud applies to each execution
    cand.stream, cand.made = p.stream, True
    _plans[int(h)] = cand
    if work:
        put_u64(work, 0)


def _new(out: int) -> int:
    if not STATE.initialized:  # cuFFT initialises CUDA itself
        STATE.init()
    h = next(_ids)
    _plans[h] = Plan()
    put_i32(out, h)
    return h


# ---------------------------------------------------------------------------- plans
@api("cufftCreate", 0, P, library="cufft")
def cufftCreate(out: int) -> None:
    _new(out)


@api("cufftDestroy", 0, c_int, library="cufft")
def cufftDestroy(h: int) -> None:
    _plan(h)
    del _plans[int(h)]


@api("cufftPlan1d", 0, P, c_int, c_int, c_int, library="cufft")
def cufftPlan1d(out: int, nx: int, typ: int, batch: int) -> None:
    _make(_new(out), 1, [nx], [], 1, 0, [], 1, 0, typ, batch, None)


@api("cufftPlan2d", 0, P, c_int, c_int, c_int, library="cufft")
def cufftPlan2d(out: int, nx: int, ny: int, typ: int) -> None:
    _make(_new(out), 2, [nx, ny], [], 1, 0, [], 1, 0, typ, 1, None)


@api("cufftPlan3d", 0, P, c_int, c_int, c_int, c_int, library="cufft")
def cufftPlan3d(out: int, nx: int, ny: int, nz: int, typ: int) -> None:
    _make(_new(out), 3, [nx, ny, nz], [], 1, 0, [], 1, 0, typ, 1, None)


@api("cufftPlanMany", 0, P, c_int, P, P, c_int, c_int, P, c_int, c_int, c_int, c_int, library="cufft")
def cufftPlanMany(out, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch) -> None:  # noqa: ANN001
    _many(_new(out), rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, None, False)


def _many(h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, work, wide) -> None:  # noqa: ANN001
    if not 1 <= rank <= 3:
        raise CudaError(codes.INVALID_VALUE, f"rank {rank} (cuFFT plans have rank 1 to 3)")
    if not n:
        raise CudaError(codes.INVALID_VALUE, "no sizes (n is NULL)")
    _make(
        h, rank, _ints(n, rank, wide), _ints(inembed, rank, wide), istride, idist, _ints(onembed, rank, wide),
        ostride, odist, typ, batch, work,
    )  # fmt: skip


@api("cufftMakePlan1d", 0, c_int, c_int, c_int, c_int, P, library="cufft")
def cufftMakePlan1d(h: int, nx: int, typ: int, batch: int, work: int) -> None:
    _make(h, 1, [nx], [], 1, 0, [], 1, 0, typ, batch, work)


@api("cufftMakePlan2d", 0, c_int, c_int, c_int, c_int, P, library="cufft")
def cufftMakePlan2d(h: int, nx: int, ny: int, typ: int, work: int) -> None:
    _make(h, 2, [nx, ny], [], 1, 0, [], 1, 0, typ, 1, work)


@api("cufftMakePlan3d", 0, c_int, c_int, c_int, c_int, c_int, P, library="cufft")
def cufftMakePlan3d(h: int, nx: int, ny: int, nz: int, typ: int, work: int) -> None:
    _make(h, 3, [nx, ny, nz], [], 1, 0, [], 1, 0, typ, 1, work)


@api("cufftMakePlanMany", 0, c_int, c_int, P, P, c_int, c_int, P, c_int, c_int, c_int, c_int, P, library="cufft")
def cufftMakePlanMany(h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, work) -> None:  # noqa: ANN001
    _many(h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, work, False)


@api(
    "cufftMakePlanMany64",
    0,
    c_int,
    c_int,
    P,
    P,
    c_int64,
    c_int64,
    P,
    c_int64,
    c_int64,
    c_int,
    c_int64,
    P,
    library="cufft",
)
def cufftMakePlanMany64(h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, work) -> None:  # noqa: ANN001
    _many(h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, work, True)


@api(
    "cufftXtMakePlanMany", 0, c_int, c_int, P, P, c_int64, c_int64, c_int, P, c_int64, c_int64, c_int, c_int64, P,
    c_int, library="cufft",
)  # fmt: skip
def cufftXtMakePlanMany(
    h, rank, n, inembed, istride, idist, itype, onembed, ostride, odist, otype, batch, work, xtype
) -> None:  # noqa: ANN001, E501
    typ = _XT_TYPES.get((itype, otype))
    if typ is None:
        raise CudaError(
            codes.NOT_SUPPORTED, f"cufftXtMakePlanMany: data types {itype}->{otype} (half precision is not supported)"
        )
    _many(h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, work, True)


# sizes: the node's FFT needs no work area from the program
def _zero(work: int) -> None:
    put_u64(work, 0)


@api("cufftEstimate1d", 0, c_int, c_int, c_int, P, library="cufft")
def cufftEstimate1d(nx: int, typ: int, batch: int, work: int) -> None:
    _zero(work)


@api("cufftEstimate2d", 0, c_int, c_int, c_int, P, library="cufft")
def cufftEstimate2d(nx: int, ny: int, typ: int, work: int) -> None:
    _zero(work)


@api("cufftEstimate3d", 0, c_int, c_int, c_int, c_int, P, library="cufft")
def cufftEstimate3d(nx: int, ny: int, nz: int, typ: int, work: int) -> None:
    _zero(work)


@api("cufftEstimateMany", 0, c_int, P, P, c_int, c_int, P, c_int, c_int, c_int, c_int, P, library="cufft")
def cufftEstimateMany(rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, work) -> None:  # noqa: ANN001
    _zero(work)


@api("cufftGetSize1d", 0, c_int, c_int, c_int, c_int, P, library="cufft")
def cufftGetSize1d(h: int, nx: int, typ: int, batch: int, work: int) -> None:
    _plan(h)
    _zero(work)


@api("cufftGetSize2d", 0, c_int, c_int, c_int, c_int, P, library="cufft")
def cufftGetSize2d(h: int, nx: int, ny: int, typ: int, work: int) -> None:
    _plan(h)
    _zero(work)


@api("cufftGetSize3d", 0, c_int, c_int, c_int, c_int, c_int, P, library="cufft")
def cufftGetSize3d(h: int, nx: int, ny: int, nz: int, typ: int, work: int) -> None:
    _plan(h)
    _zero(work)


@api("cufftGetSizeMany", 0, c_int, c_int, P, P, c_int, c_int, P, c_int, c_int, c_int, c_int, P, library="cufft")
def cufftGetSizeMany(h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, work) -> None:  # noqa: ANN001
    _plan(h)
    _zero(work)


@api(
    "cufftGetSizeMany64",
    0,
    c_int,
    c_int,
    P,
    P,
    c_int64,
    c_int64,
    P,
    c_int64,
    c_int64,
    c_int,
    c_int64,
    P,
    library="cufft",
)
def cufftGetSizeMany64(h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, work) -> None:  # noqa: ANN001
    _plan(h)
    _zero(work)


@api("cufftGetSize", 0, c_int, P, library="cufft")
def cufftGetSize(h: int, work: int) -> None:
    _plan(h)
    _zero(work)


@api("cufftSetWorkArea", 0, c_int, P, library="cufft")
def cufftSetWorkArea(h: int, area: int | None) -> None:
    _plan(h)  # accepted and unused


@api("cufftXtSetWorkArea", 0, c_int, P, library="cufft")
def cufftXtSetWorkArea(h: int, areas: int | None) -> None:
    _plan(h)


@api("cufftSetAutoAllocation", 0, c_int, c_int, library="cufft")
def cufftSetAutoAllocation(h: int, auto: int) -> None:
    _plan(h)


@api("cufftSetStream", 0, c_int, P, library="cufft")
def cufftSetStream(h: int, stream: int | None) -> None:
    _plan(h).stream = int(stream or 0)


@api("cufftGetVersion", 0, P, library="cufft")
def cufftGetVersion(out: int) -> None:
    put_i32(out, VERSION)


@api("cufftGetProperty", 0, c_int, P, library="cufft")
def cufftGetProperty(which: int, out: int) -> None:
    put_i32(out, (VERSION // 1000, VERSION // 100 % 10, VERSION % 100)[which] if 0 <= which <= 2 else 0)


# ---------------------------------------------------------------------------- execution
def _direction(d: int) -> Direction:
    if d == FORWARD:
        return FORWARD
    if d == INVERSE:
        return INVERSE
    raise CudaError(codes.INVALID_VALUE, f"direction {d} (CUFFT_FORWARD -1 or CUFFT_INVERSE 1)")


def _exec(h: int, idata: int | None, odata: int | None, direction: Direction, want: int) -> None:
    p = _plan(h)
    if not p.made:
        raise CudaError(codes.INVALID_HANDLE, f"cuFFT plan {int(h)} was created but never made (cufftMakePlan*)")
    if p.type != want:
        raise CudaError(
            codes.INVALID_VALUE,
            f"cufftExec{NAMES[want]} on a {NAMES.get(p.type, hex(p.type))} plan (cuFFT: invalid type)",
        )
    drv = STATE.driver()
    msg = FftExec(
        type=p.type,
        rank=p.rank,
        n=p.n,
        batch=p.batch,
        inembed=p.inembed,
        istride=p.istride,
        idist=p.idist,
        onembed=p.onembed,
        ostride=p.ostride,
        odist=p.odist,
        idata=int(idata or 0),
        odata=int(odata or 0),
        direction=direction,
        stream=drv._stream(p.stream),
    )
    try:  # the schema and the layout rules, here as in gpud: bad arguments fail now, not at the next sync
        for _, addr, size in extents(check(msg)):
            drv._check_range(addr, size, f"cufftExec{NAMES[want]}")
    except ProtocolError as exc:
        raise CudaError(codes.INVALID_VALUE, f"cufftExec{NAMES[want]}: {exc.message}") from None
    cu_capture.post(msg)


@api("cufftExecC2C", 0, c_int, P, P, c_int, library="cufft")
def cufftExecC2C(h: int, idata: int, odata: int, direction: int) -> None:
    _exec(h, idata, odata, _direction(direction), 0x29)


@api("cufftExecZ2Z", 0, c_int, P, P, c_int, library="cufft")
def cufftExecZ2Z(h: int, idata: int, odata: int, direction: int) -> None:
    _exec(h, idata, odata, _direction(direction), 0x69)


@api("cufftExecR2C", 0, c_int, P, P, library="cufft")
def cufftExecR2C(h: int, idata: int, odata: int) -> None:
    _exec(h, idata, odata, FORWARD, 0x2A)


@api("cufftExecD2Z", 0, c_int, P, P, library="cufft")
def cufftExecD2Z(h: int, idata: int, odata: int) -> None:
    _exec(h, idata, odata, FORWARD, 0x6A)


@api("cufftExecC2R", 0, c_int, P, P, library="cufft")
def cufftExecC2R(h: int, idata: int, odata: int) -> None:
    _exec(h, idata, odata, INVERSE, 0x2C)


@api("cufftExecZ2D", 0, c_int, P, P, library="cufft")
def cufftExecZ2D(h: int, idata: int, odata: int) -> None:
    _exec(h, idata, odata, INVERSE, 0x6C)


@api("cufftXtExec", 0, c_int, P, P, c_int, library="cufft")
def cufftXtExec(h: int, idata: int, odata: int, direction: int) -> None:
    p = _plan(h)
    real_in = p.type in (0x2A, 0x6A)
    real_out = p.type in (0x2C, 0x6C)
    _exec(h, idata, odata, FORWARD if real_in else INVERSE if real_out else _direction(direction), p.type)
