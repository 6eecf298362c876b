"""cuSOLVER's dense API, remoted: the client half of the solver stand-in (gpud/solver.py).

The native library exports every cuSOLVER symbol (src/exports_cusolver.h) and is found as libcusolver.so.11/.12
under ``wooly run``. A handle keeps its stream. Each routine implemented here (getrf, getrs, potrf, potrs and
their batched forms, geqrf, orgqr/ungqr, gesvd, syevd/heevd, for S/D/C/Z) becomes one ``solver`` operation
queued on that stream, as a kernel launch is; LAPACK's ``info`` lands in the device int the call names. gpud needs
no workspace, so the ``_bufferSize`` queries answer one element (programs allocate what they are told and pass
it back unread). cuBLAS's batched LU (getrfBatched, getrsBatched, getriBatched), which CuPy's ``inv``, ``det`` and
batched ``solve`` call, is here too: the pointer arrays are read from device memory and each matrix is one
operation. Every other entry point returns CUSOLVER_STATUS_NOT_SUPPORTED and names itself once on stderr.
"""

from __future__ import annotations

import itertools
import struct
from ctypes import c_byte, c_int, c_int64, c_size_t, c_uint64, c_void_p
from dataclasses import dataclass
from typing import Any

from proto import errors as codes
from proto.blas import ITEM
from proto.codec import ProtocolError, check
from proto.errors import CudaError
from proto.messages import GeamType, SolverCall
from proto.solver import COMPLEX, REAL, extents
from shim.native import cu_capture
from shim.native.registry import api, put_i32, put_u64
from shim.native.state import STATE

P = c_void_p
I = c_int  # noqa: E741 - the C signatures' int
VERSION = 11705  # the cuSOLVER these signatures follow (CUDA 12.9's cuSOLVER 11.7.5)
TYPES: dict[str, GeamType] = {"S": "f32", "D": "f64", "C": "c64", "Z": "c128"}
_JOBS = {ord("A"): "A", ord("S"): "S", ord("O"): "O", ord("N"): "N"}


@dataclass
class Handle:
    stream: int = 0


class Handles:
    """A library's handles (each keeps its stream), numbered from ``first``; a bad one is NOT_INITIALIZED, which
    the library's table maps to its own status."""

    def __init__(self, what: str, first: int) -> None:
        self.what = what
        self.table: dict[int, Handle] = {}
        self.ids = itertools.count(first)

    def __call__(self, h: int | None) -> Handle:
        handle = self.table.get(int(h or 0))
        if handle is None:
            raise CudaError(codes.NOT_INITIALIZED, f"invalid {self.what} handle 0x{int(h or 0):x}")
        return handle

    def create(self, out: int) -> None:
        if not STATE.initialized:  # the library initialises CUDA itself
            STATE.init()
        h = next(self.ids)
        self.table[h] = Handle()
        put_u64(out, h)

    def destroy(self, h: int | None) -> None:
        self(h)
        del self.table[int(h or 0)]

    def set_stream(self, h: int | None, stream: int | None) -> None:
        self(h).stream = int(stream or 0)

    def get_stream(self, h: int | None, out: int) -> None:
        put_u64(out, self(h).stream)


_h = Handles("cuSOLVER", 0x501E000)
_params = itertools.count(0x9A4A000)
api("cusolverDnCreate", 0, P, library="cusolver")(_h.create)
api("cusolverDnDestroy", 0, P, library="cusolver")(_h.destroy)
api("cusolverDnSetStream", 0, P, P, library="cusolver")(_h.set_stream)
api("cusolverDnGetStream", 0, P, P, library="cusolver")(_h.get_stream)


@api("cusolverGetVersion", 0, P, library="cusolver")
def cusolverGetVersion(out: int) -> None:
    put_i32(out, VERSION)


@api("cusolverGetProperty", 0, I, P, library="cusolver")
def cusolverGetProperty(which: int, out: int) -> None:
    put_i32(out, (VERSION // 1000, VERSION // 100 % 10, VERSION % 100)[which] if 0 <= which <= 2 else 0)


@api("cusolverDnCreateParams", 0, P, library="cusolver")
def cusolverDnCreateParams(out: int) -> None:
    put_u64(out, next(_params))  # the 64-bit API's options: accepted, nothing here reads them


@api("cusolverDnDestroyParams", 0, P, library="cusolver")
def cusolverDnDestroyParams(p: int | None) -> None:
    return None


def _queue(h: int | None, **fields: Any) -> None:
    """Check one routine and queue it on the handle's stream."""
    _queue_on(_h(h).stream, **fields)


_ADDRESSES = frozenset({"a", "b", "ipiv", "w", "u", "vt", "info"})  # NULL arrives as None


def _queue_on(stream: int, **fields: Any) -> None:
    fields = {k: int(v or 0) if k in _ADDRESSES else v for k, v in fields.items()}
    drv = STATE.driver()
    try:
        msg = SolverCall(stream=drv._stream(stream), **fields)
        check(msg)
        spans = extents(msg)
    except ProtocolError as exc:
        raise CudaError(codes.INVALID_VALUE, f"cusolver {fields.get('op')}: {exc.message}") from None
    for operand, addr, size, _ in spans:
        drv._check_range(addr, size, f"cusolver {msg.op} ({operand})")
    cu_capture.post(msg)


def _fill(uplo: int) -> int:
    if uplo not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"fill mode {uplo} (0 lower, 1 upper)")
    return uplo


def _trans(trans: int) -> int:
    if trans not in (0, 1, 2):
        raise CudaError(codes.INVALID_VALUE, f"operation {trans} (0 N, 1 T, 2 C)")
    return trans


def _dims(*values: int) -> None:
    if any(v < 0 for v in values):
        raise CudaError(codes.INVALID_VALUE, f"negative dimension in {values}")


def _lwork(out: int) -> None:
    put_i32(out, 1)  # gpud needs no workspace (module docstring)


def _define(t: str, typ: GeamType) -> None:
    orgqr = "orgqr" if t in "SD" else "ungqr"
    syevd = "syevd" if t in "SD" else "heevd"

    @api(f"cusolverDn{t}getrf_bufferSize", 0, P, I, I, P, I, P, library="cusolver")
    def getrf_size(h: int | None, m: int, n: int, a: int | None, lda: int, lwork: int) -> None:
        _h(h)
        _dims(m, n)
        _lwork(lwork)

    @api(f"cusolverDn{t}getrf", 0, P, I, I, P, I, P, P, P, library="cusolver")
    def getrf(h: int | None, m: int, n: int, a: int | None, lda: int, work: Any, ipiv: int | None, info: Any) -> None:
        _dims(m, n)
        if not ipiv and min(m, n):
            raise CudaError(codes.NOT_SUPPORTED, "getrf without pivoting (devIpiv = NULL) is not supported")
        _queue(h, op="getrf", dtype=typ, m=m, n=n, a=a, lda=lda, ipiv=ipiv, info=info)

    @api(f"cusolverDn{t}getrs", 0, P, I, I, I, P, I, P, P, I, P, library="cusolver")
    def getrs(
        h: int | None, trans: int, n: int, nrhs: int, a: Any, lda: int, ipiv: Any, b: Any, ldb: int, info: Any
    ) -> None:
        _dims(n, nrhs)
        _queue(
            h,
            op="getrs",
            dtype=typ,
            m=n,
            n=n,
            k=nrhs,
            trans=_trans(trans),
            a=a,
            lda=lda,
            ipiv=ipiv,
            b=b,
            ldb=ldb,
            info=info,
        )

    @api(f"cusolverDn{t}potrf_bufferSize", 0, P, I, I, P, I, P, library="cusolver")
    def potrf_size(h: int | None, uplo: int, n: int, a: Any, lda: int, lwork: int) -> None:
        _h(h)
        _fill(uplo)
        _dims(n)
        _lwork(lwork)

    @api(f"cusolverDn{t}potrf", 0, P, I, I, P, I, P, I, P, library="cusolver")
    def potrf(h: int | None, uplo: int, n: int, a: Any, lda: int, work: Any, lwork: int, info: Any) -> None:
        _dims(n)
        _queue(h, op="potrf", dtype=typ, m=n, n=n, uplo=_fill(uplo), a=a, lda=lda, info=info)

    @api(f"cusolverDn{t}potrs", 0, P, I, I, I, P, I, P, I, P, library="cusolver")
    def potrs(h: int | None, uplo: int, n: int, nrhs: int, a: Any, lda: int, b: Any, ldb: int, info: Any) -> None:
        _dims(n, nrhs)
        _queue(h, **_potrs(typ, uplo, n, nrhs, a, lda, b, ldb, info))

    @api(f"cusolverDn{t}potrfBatched", 0, P, I, I, P, I, P, I, library="cusolver")
    def potrf_batched(h: int | None, uplo: int, n: int, arr: Any, lda: int, infos: Any, batch: int) -> None:
        _dims(n, batch)
        for i, a in enumerate(_pointers(h, arr, batch)):
            _queue(h, op="potrf", dtype=typ, m=n, n=n, uplo=_fill(uplo), a=a, lda=lda, info=_at(infos, i))

    @api(f"cusolverDn{t}potrsBatched", 0, P, I, I, I, P, I, P, I, P, I, library="cusolver")
    def potrs_batched(
        h: int | None, uplo: int, n: int, nrhs: int, aa: Any, lda: int, ba: Any, ldb: int, info: Any, batch: int
    ) -> None:
        _dims(n, nrhs, batch)
        if nrhs != 1:
            raise CudaError(codes.INVALID_VALUE, f"potrsBatched supports nrhs = 1 only (as cuSOLVER), got {nrhs}")
        for a, b in zip(_pointers(h, aa, batch), _pointers(h, ba, batch), strict=True):
            _queue(h, **_potrs(typ, uplo, n, nrhs, a, lda, b, ldb, info))

    @api(f"cusolverDn{t}geqrf_bufferSize", 0, P, I, I, P, I, P, library="cusolver")
    def geqrf_size(h: int | None, m: int, n: int, a: Any, lda: int, lwork: int) -> None:
        _h(h)
        _dims(m, n)
        _lwork(lwork)

    @api(f"cusolverDn{t}geqrf", 0, P, I, I, P, I, P, P, I, P, library="cusolver")
    def geqrf(h: int | None, m: int, n: int, a: Any, lda: int, tau: Any, work: Any, lwork: int, info: Any) -> None:
        _dims(m, n)
        _queue(h, op="geqrf", dtype=typ, m=m, n=n, a=a, lda=lda, w=tau, info=info)

    @api(f"cusolverDn{t}{orgqr}_bufferSize", 0, P, I, I, I, P, I, P, P, library="cusolver")
    def orgqr_size(h: int | None, m: int, n: int, k: int, a: Any, lda: int, tau: Any, lwork: int) -> None:
        _h(h)
        _dims(m, n, k)
        _lwork(lwork)

    @api(f"cusolverDn{t}{orgqr}", 0, P, I, I, I, P, I, P, P, I, P, library="cusolver")
    def orgqr_(
        h: int | None, m: int, n: int, k: int, a: Any, lda: int, tau: Any, work: Any, lwork: int, info: Any
    ) -> None:
        _dims(m, n, k)
        _queue(h, op="orgqr", dtype=typ, m=m, n=n, k=k, a=a, lda=lda, w=tau, info=info)

    @api(f"cusolverDn{t}gesvd_bufferSize", 0, P, I, I, P, library="cusolver")
    def gesvd_size(h: int | None, m: int, n: int, lwork: int) -> None:
        _h(h)
        _dims(m, n)
        _lwork(lwork)

    @api(f"cusolverDn{t}gesvd", 0, P, c_byte, c_byte, I, I, P, I, P, P, I, P, I, P, I, P, P, library="cusolver")
    def gesvd(
        h: int | None,
        jobu: int,
        jobvt: int,
        m: int,
        n: int,
        a: Any,
        lda: int,
        s: Any,
        u: Any,
        ldu: int,
        vt: Any,
        ldvt: int,
        work: Any,
        lwork: int,
        rwork: Any,
        info: Any,
    ) -> None:
        _dims(m, n)
        ju, jv = _JOBS.get(jobu & 0xFF), _JOBS.get(jobvt & 0xFF)
        if ju is None or jv is None:
            raise CudaError(codes.NOT_SUPPORTED, f"gesvd jobu={chr(jobu & 0xFF)!r} jobvt={chr(jobvt & 0xFF)!r}")
        _queue(
            h,
            op="gesvd",
            dtype=typ,
            m=m,
            n=n,
            jobu=ju,
            jobvt=jv,
            a=a,
            lda=lda,
            w=s,
            u=u,
            ldu=ldu,
            vt=vt,
            ldvt=ldvt,
            info=info,
        )

    @api(f"cusolverDn{t}{syevd}_bufferSize", 0, P, I, I, I, P, I, P, P, library="cusolver")
    def syevd_size(h: int | None, jobz: int, uplo: int, n: int, a: Any, lda: int, w: Any, lwork: int) -> None:
        _h(h)
        _fill(uplo)
        _dims(n)
        _lwork(lwork)

    @api(f"cusolverDn{t}{syevd}", 0, P, I, I, I, P, I, P, P, I, P, library="cusolver")
    def syevd_(
        h: int | None, jobz: int, uplo: int, n: int, a: Any, lda: int, w: Any, work: Any, lwork: int, info: Any
    ) -> None:
        _syevd(h, typ, jobz, uplo, n, a, lda, w, info)

    # Jacobi methods: the same routines as syevd and gesvd here (the results agree to rounding; the tolerance
    # and sweep limits of the info object are accepted and not needed)
    heevj = "syevj" if t in "SD" else "heevj"
    item, real = ITEM[typ], ITEM[REAL[typ]]

    @api(f"cusolverDn{t}{heevj}_bufferSize", 0, P, I, I, I, P, I, P, P, P, library="cusolver")
    def syevj_size(h: int | None, jobz: int, uplo: int, n: int, a: Any, lda: int, w: Any, lwork: int, p: Any) -> None:
        _h(h)
        _lwork(lwork)

    @api(f"cusolverDn{t}{heevj}", 0, P, I, I, I, P, I, P, P, I, P, P, library="cusolver")
    def syevj(
        h: int | None, jobz: int, uplo: int, n: int, a: Any, lda: int, w: Any, work: Any, lw: int, info: Any, p: Any
    ) -> None:
        _syevd(h, typ, jobz, uplo, n, a, lda, w, info)

    @api(f"cusolverDn{t}{heevj}Batched_bufferSize", 0, P, I, I, I, P, I, P, P, P, I, library="cusolver")
    def syevj_batched_size(
        h: int | None, jobz: int, uplo: int, n: int, a: Any, lda: int, w: Any, lwork: int, p: Any, batch: int
    ) -> None:
        _h(h)
        _lwork(lwork)

    @api(f"cusolverDn{t}{heevj}Batched", 0, P, I, I, I, P, I, P, P, I, P, P, I, library="cusolver")
    def syevj_batched(
        h: int | None,
        jobz: int,
        uplo: int,
        n: int,
        a: Any,
        lda: int,
        w: Any,
        work: Any,
        lw: int,
        info: Any,
        p: Any,
        batch: int,
    ) -> None:
        _dims(n, batch)
        for i in range(batch):
            _syevd(h, typ, jobz, uplo, n, _off(a, i * lda * n * item), lda, _off(w, i * n * real), _at(info, i))

    @api(f"cusolverDn{t}gesvdj_bufferSize", 0, P, I, I, I, I, P, I, P, P, I, P, I, P, P, library="cusolver")
    def gesvdj_size(h: int | None, jobz: int, econ: int, m: int, n: int, *rest: Any) -> None:
        _h(h)
        _lwork(rest[-2])

    @api(f"cusolverDn{t}gesvdj", 0, P, I, I, I, I, P, I, P, P, I, P, I, P, I, P, P, library="cusolver")
    def gesvdj(
        h: int | None,
        jobz: int,
        econ: int,
        m: int,
        n: int,
        a: Any,
        lda: int,
        sv: Any,
        u: Any,
        ldu: int,
        v: Any,
        ldv: int,
        work: Any,
        lw: int,
        info: Any,
        p: Any,
    ) -> None:
        _gesvdj(h, typ, jobz, "S" if econ else "A", m, n, a, lda, sv, u, ldu, v, ldv, info)

    @api(f"cusolverDn{t}gesvdjBatched_bufferSize", 0, P, I, I, I, P, I, P, P, I, P, I, P, P, I, library="cusolver")
    def gesvdj_batched_size(h: int | None, jobz: int, m: int, n: int, *rest: Any) -> None:
        _h(h)
        _lwork(rest[-3])

    @api(f"cusolverDn{t}gesvdjBatched", 0, P, I, I, I, P, I, P, P, I, P, I, P, I, P, P, I, library="cusolver")
    def gesvdj_batched(
        h: int | None,
        jobz: int,
        m: int,
        n: int,
        a: Any,
        lda: int,
        sv: Any,
        u: Any,
        ldu: int,
        v: Any,
        ldv: int,
        work: Any,
        lw: int,
        info: Any,
        p: Any,
        batch: int,
    ) -> None:
        _dims(m, n, batch)
        r = min(m, n)
        for i in range(batch):
            _gesvdj(
                h,
                typ,
                jobz,
                "A",
                m,
                n,
                _off(a, i * lda * n * item),
                lda,
                _off(sv, i * r * real),
                _off(u, i * ldu * m * item),
                ldu,
                _off(v, i * ldv * n * item),
                ldv,
                _at(info, i),
            )

    # cuBLAS's batched LU (its handles are cuBLAS's: shim/native/cublas.py)
    @api(f"cublas{t}getrfBatched", 0, P, I, P, I, P, P, I, library="cublas")
    def getrf_batched(h: int | None, n: int, arr: Any, lda: int, piv: Any, infos: Any, batch: int) -> None:
        _dims(n, batch)
        if not piv and n:
            raise CudaError(codes.NOT_SUPPORTED, "getrfBatched without pivoting (PivotArray = NULL) is not supported")
        for i, a in enumerate(_blas_pointers(h, arr, batch)):
            _blas_queue(h, op="getrf", dtype=typ, m=n, n=n, a=a, lda=lda, ipiv=_off(piv, 4 * n * i), info=_at(infos, i))

    @api(f"cublas{t}getrsBatched", 0, P, I, I, I, P, I, P, P, I, P, I, library="cublas")
    def getrs_batched(
        h: int | None, trans: int, n: int, nrhs: int, aa: Any, lda: int, piv: Any, ba: Any, ldb: int, info: int, b: int
    ) -> None:
        _dims(n, nrhs, b)
        put_i32(info, 0)  # a host int: argument errors only, reported by the status
        for i, (a, bb) in enumerate(zip(_blas_pointers(h, aa, b), _blas_pointers(h, ba, b), strict=True)):
            _blas_queue(
                h,
                op="getrs",
                dtype=typ,
                m=n,
                n=n,
                k=nrhs,
                trans=_trans(trans),
                a=a,
                lda=lda,
                ipiv=_off(piv, 4 * n * i),
                b=bb,
                ldb=ldb,
            )

    @api(f"cublas{t}getriBatched", 0, P, I, P, I, P, P, I, P, I, library="cublas")
    def getri_batched(
        h: int | None, n: int, aa: Any, lda: int, piv: Any, ca: Any, ldc: int, infos: Any, batch: int
    ) -> None:
        _dims(n, batch)
        for i, (a, c) in enumerate(zip(_blas_pointers(h, aa, batch), _blas_pointers(h, ca, batch), strict=True)):
            _blas_queue(
                h,
                op="getri",
                dtype=typ,
                m=n,
                n=n,
                a=a,
                lda=lda,
                ipiv=_off(piv, 4 * n * i),
                b=c,
                ldb=ldc,
                info=_at(infos, i),
            )


# the 64-bit generic API (cusolverDnX*): the data types travel as cudaDataType
_DATA: dict[int, GeamType] = {0: "f32", 1: "f64", 4: "c64", 5: "c128"}


def _data(which: str, code: int) -> GeamType:
    typ = _DATA.get(code)
    if typ is None:
        raise CudaError(codes.NOT_SUPPORTED, f"data type {code} for {which} (float, double and their complex only)")
    return typ


@api("cusolverDnXsyevd_bufferSize", 0, P, P, I, I, c_int64, I, P, c_int64, I, P, I, P, P, library="cusolver")
def cusolverDnXsyevd_bufferSize(
    h: int | None,
    params: Any,
    jobz: int,
    uplo: int,
    n: int,
    ta: int,
    a: Any,
    lda: int,
    tw: int,
    w: Any,
    tc: int,
    device_bytes: int,
    host_bytes: int,
) -> None:
    _h(h)
    _fill(uplo)
    _dims(n)
    _data("A", ta)
    put_u64(device_bytes, 1)
    put_u64(host_bytes, 1)


@api(
    "cusolverDnXsyevd", 0, P, P, I, I, c_int64, I, P, c_int64, I, P, I, P, c_size_t, P, c_size_t, P, library="cusolver"
)
def cusolverDnXsyevd(
    h: int | None,
    params: Any,
    jobz: int,
    uplo: int,
    n: int,
    ta: int,
    a: Any,
    lda: int,
    tw: int,
    w: Any,
    tc: int,
    dev_buf: Any,
    dev_bytes: int,
    host_buf: Any,
    host_bytes: int,
    info: Any,
) -> None:
    typ = _data("A", ta)
    if _data("W", tw) != REAL[typ]:
        raise CudaError(codes.INVALID_VALUE, f"syevd: W of type {tw} for A of {typ} (W holds A's real type)")
    _syevd(h, typ, jobz, uplo, n, a, lda, w, info)


@api(
    "cusolverDnXgeev_bufferSize",
    0,
    *(P, P, I, I, c_int64, I, P, c_int64, I, P, I, P, c_int64, I, P, c_int64, I, P, P),
    library="cusolver",
)
def cusolverDnXgeev_bufferSize(h: int | None, *args: Any) -> None:
    _h(h)
    _data("A", args[4])
    put_u64(args[-2], 1)
    put_u64(args[-1], 1)


@api(
    "cusolverDnXgeev",
    0,
    *(P, P, I, I, c_int64, I, P, c_int64, I, P, I, P, c_int64, I, P, c_int64, I, P, c_size_t, P, c_size_t, P),
    library="cusolver",
)
def cusolverDnXgeev(
    h: int | None,
    params: Any,
    jobvl: int,
    jobvr: int,
    n: int,
    ta: int,
    a: Any,
    lda: int,
    tw: int,
    w: Any,
    tvl: int,
    vl: Any,
    ldvl: int,
    tvr: int,
    vr: Any,
    ldvr: int,
    tc: int,
    *rest: Any,
) -> None:
    _dims(n)
    typ = _data("A", ta)
    if _data("W", tw) != COMPLEX[typ]:
        raise CudaError(codes.INVALID_VALUE, f"geev: W of type {tw} for A of {typ} (W holds complex eigenvalues)")
    for name, job, t_ in (("VL", jobvl, tvl), ("VR", jobvr, tvr)):
        if job not in (0, 1):
            raise CudaError(codes.INVALID_VALUE, f"geev: job{name.lower()} = {job} (0 no vectors, 1 vectors)")
        if job and _data(name, t_) != typ:
            raise CudaError(codes.INVALID_VALUE, f"geev: {name} of type {t_} for A of {typ}")
    _queue(
        h,
        op="geev",
        dtype=typ,
        m=n,
        n=n,
        left=bool(jobvl),
        vectors=bool(jobvr),
        a=a,
        lda=lda,
        w=w,
        u=vl,
        ldu=ldvl,
        vt=vr,
        ldvt=ldvr,
        info=rest[-1],
    )


def _syevd(h: int | None, typ: GeamType, jobz: int, uplo: int, n: int, a: Any, lda: int, w: Any, info: Any) -> None:
    _dims(n)
    if jobz not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"eig mode {jobz} (0 no vectors, 1 vectors)")
    _queue(
        h,
        op="syevd",
        dtype=typ,
        m=n,
        n=n,
        uplo=_fill(uplo),
        vectors=bool(jobz),
        a=a,
        lda=lda,
        w=w,
        info=info,
    )


def _potrs(typ: GeamType, uplo: int, n: int, k: int, a: Any, lda: int, b: Any, ldb: int, info: Any) -> dict[str, Any]:
    """A potrs call's fields (the plain and the batched form)."""
    return dict(op="potrs", dtype=typ, m=n, n=n, k=k, uplo=_fill(uplo), a=a, lda=lda, b=b, ldb=ldb, info=info)


def _gesvdj(
    h: int | None,
    typ: GeamType,
    jobz: int,
    job: str,
    m: int,
    n: int,
    a: Any,
    lda: int,
    sv: Any,
    u: Any,
    ldu: int,
    v: Any,
    ldv: int,
    info: Any,
) -> None:
    _dims(m, n)
    if jobz not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"eig mode {jobz} (0 no vectors, 1 vectors)")
    fields = dict(op="gesvdj", dtype=typ, m=m, n=n, jobu=job, vectors=bool(jobz), a=a, lda=lda, w=sv)
    _queue(h, **fields, u=u, ldu=ldu, vt=v, ldvt=ldv, info=info)


def _off(addr: Any, offset: int) -> int:
    return int(addr) + offset if addr else 0


# the Jacobi methods' parameter objects: accepted (their tolerance and sweep limits are not needed here)
for _kind in ("Syevj", "Gesvdj"):
    api(f"cusolverDnCreate{_kind}Info", 0, P, library="cusolver")(lambda out: put_u64(out, next(_params)))
    api(f"cusolverDnDestroy{_kind}Info", 0, P, library="cusolver")(lambda info: None)
    x = f"cusolverDnX{_kind.lower()}"
    api(f"{x}SetTolerance", 0, P, c_uint64, library="cusolver")(lambda info, tol: None)
    api(f"{x}SetMaxSweeps", 0, P, I, library="cusolver")(lambda info, sweeps: None)
    api(f"{x}SetSortEig", 0, P, I, library="cusolver")(lambda info, sort: None)
    api(f"{x}GetResidual", 0, P, P, P, library="cusolver")(lambda h, info, out: put_u64(out, 0))  # 0.0
    api(f"{x}GetSweeps", 0, P, P, P, library="cusolver")(lambda h, info, out: put_i32(out, 0))


def _at(infos: Any, i: int) -> int:
    """The i-th int of a device array of infos (0 for NULL)."""
    return _off(infos, 4 * i)


def _read_pointers(stream: int, arr: Any, count: int) -> list[int]:
    """A device array of ``count`` device pointers, read in stream order (one round trip)."""
    if not count:
        return []
    if not arr:
        raise CudaError(codes.INVALID_VALUE, "the array of matrix pointers is NULL")
    drv = STATE.driver()
    raw = bytes(drv.memcpy_dtoh(int(arr), 8 * count, drv._stream(stream)))
    return list(struct.unpack(f"<{count}Q", raw))


def _pointers(h: int | None, arr: Any, count: int) -> list[int]:
    return _read_pointers(_h(h).stream, arr, count)


def _blas_pointers(h: int | None, arr: Any, count: int) -> list[int]:
    from shim.native.cublas import _h as blas_handle

    return _read_pointers(blas_handle(h).stream, arr, count)


def _blas_queue(h: int | None, **fields: Any) -> None:
    from shim.native.cublas import _h as blas_handle

    _queue_on(blas_handle(h).stream, **fields)


for _t, _typ in TYPES.items():
    _define(_t, _typ)
