"""cuBLAS, remoted at its API: the client half of NOTE [vendor libraries] (gpud/blas.py).

The native library exports every cuBLAS and cuBLASLt symbol (src/exports_cublas.h) and is found as
libcublas.so.12/.13 and libcublasLt.so.12/.13 under ``wooly run``; the entry points implemented here
turn into ``blas_gemm``, ``blas_geam``, ``blas_vector`` (level 1) and ``blas_matrix`` (gemv, ger)
operations queued on the handle's stream, as a kernel launch is. Handles keep what cuBLAS keeps per
handle: the stream, the pointer mode (alpha and beta read here from host memory,
or by gpud from device memory), the math mode and workspace (accepted: the node's BLAS chooses its
own algorithms). Every other cuBLAS entry point returns CUBLAS_STATUS_NOT_SUPPORTED and names itself
once on stderr.
"""

from __future__ import annotations

import ctypes
import itertools
import struct
from ctypes import c_int, c_int64, c_size_t, c_void_p
from dataclasses import dataclass
from typing import Any

from proto import errors as codes
from proto.blas import REDUCTIONS, SCALARS, extents, geam_extents, matrix_extents, result_size, vector_extents
from proto.codec import ProtocolError, check
from proto.errors import CudaError
from proto.messages import (
    BlasGeam,
    BlasGemm,
    BlasMatrix,
    BlasType,
    BlasVector,
    GeamType,
    MatrixOp,
    Trans,
    VectorOp,
)
from shim.native import cu_capture
from shim.native.registry import api, put_i32, put_u64
from shim.native.state import STATE

P = c_void_p
VERSION = 120903  # the cuBLAS API these signatures follow (12.9)

# cudaDataType_t -> wire type; cublasComputeType_t (and the legacy cudaDataType compute types) -> wire type
DATA: dict[int, BlasType] = {0: "f32", 1: "f64", 2: "f16", 4: "c64", 5: "c128", 14: "bf16"}
COMPUTE: dict[int, BlasType] = {
    64: "f16",
    65: "f16",
    68: "f32",
    69: "f32",
    74: "f32",
    75: "f32",
    77: "f32",
    70: "f64",
    71: "f64",
    0: "f32",
    1: "f64",
    2: "f16",
    4: "c64",
    5: "c128",
}
_SCALAR = {"f16": (2, "<e"), "f32": (4, "<f"), "f64": (8, "<d"), "c64": (8, "<ff"), "c128": (16, "<dd")}


@dataclass
class Handle:
    stream: int = 0
    pointer_mode: int = 0  # CUBLAS_POINTER_MODE_HOST
    math_mode: int = 0
    atomics: int = 0
    scratch: int = 0  # device word for reductions' results in host pointer mode (``_scratch``)


_handles: dict[int, Handle] = {}
_ids = itertools.count(0xB1A5000)


def _h(h: int | None) -> Handle:
    handle = _handles.get(int(h or 0))
    if handle is None:
        raise CudaError(codes.NOT_INITIALIZED, f"invalid cuBLAS handle 0x{int(h or 0):x}")
    return handle


@api("cublasCreate_v2", 0, P, library="cublas")
def cublasCreate_v2(out: int) -> None:
    if not STATE.initialized:  # cuBLAS initialises CUDA itself: a missing gpud is CUBLAS_STATUS_NOT_INITIALIZED
        STATE.init()
    h = next(_ids)
    _handles[h] = Handle()
    put_u64(out, h)


@api("cublasDestroy_v2", 0, P, library="cublas")
def cublasDestroy_v2(h: int | None) -> None:
    handle = _h(h)
    del _handles[int(h or 0)]
    if handle.scratch:
        STATE.driver().mem_free(handle.scratch)


@api("cublasGetVersion_v2", 0, P, P, library="cublas")
def cublasGetVersion_v2(h: int | None, out: int) -> None:
    put_i32(out, VERSION)


@api("cublasGetProperty", 0, c_int, P, library="cublas")
def cublasGetProperty(which: int, out: int) -> None:
    put_i32(out, (VERSION // 10000, VERSION // 100 % 100, VERSION % 100)[which] if 0 <= which <= 2 else 0)


@api("cublasSetStream_v2", 0, P, P, library="cublas")
def cublasSetStream_v2(h: int | None, stream: int | None) -> None:
    _h(h).stream = int(stream or 0)


@api("cublasGetStream_v2", 0, P, P, library="cublas")
def cublasGetStream_v2(h: int | None, out: int) -> None:
    put_u64(out, _h(h).stream)


@api("cublasSetPointerMode_v2", 0, P, c_int, library="cublas")
def cublasSetPointerMode_v2(h: int | None, mode: int) -> None:
    if mode not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"pointer mode {mode} (0 host, 1 device)")
    _h(h).pointer_mode = mode


@api("cublasGetPointerMode_v2", 0, P, P, library="cublas")
def cublasGetPointerMode_v2(h: int | None, out: int) -> None:
    put_i32(out, _h(h).pointer_mode)


@api("cublasSetMathMode", 0, P, c_int, library="cublas")
def cublasSetMathMode(h: int | None, mode: int) -> None:
    _h(h).math_mode = mode


@api("cublasGetMathMode", 0, P, P, library="cublas")
def cublasGetMathMode(h: int | None, out: int) -> None:
    put_i32(out, _h(h).math_mode)


@api("cublasSetAtomicsMode", 0, P, c_int, library="cublas")
def cublasSetAtomicsMode(h: int | None, mode: int) -> None:
    _h(h).atomics = mode


@api("cublasGetAtomicsMode", 0, P, P, library="cublas")
def cublasGetAtomicsMode(h: int | None, out: int) -> None:
    put_i32(out, _h(h).atomics)


@api("cublasSetWorkspace_v2", 0, P, P, c_size_t, library="cublas")
def cublasSetWorkspace_v2(h: int | None, ptr: int | None, size: int) -> None:
    _h(h)  # the node's BLAS needs no workspace from the tenant


# ---------------------------------------------------------------------------- gemm
_TRANS: dict[int, Trans] = {
    0: 0,
    1: 1,
    2: 2,
    ord("N"): 0,
    ord("n"): 0,
    ord("T"): 1,
    ord("t"): 1,
    ord("C"): 2,
    ord("c"): 2,
}


def _trans(op: int) -> Trans:
    t = _TRANS.get(int(op))
    if t is None:
        raise CudaError(codes.INVALID_VALUE, f"transpose operation {op} (0 N, 1 T, 2 C)")
    return t


def _scalar(h: Handle, ptr: int | None, typ: str, what: str) -> list[float]:
    if not ptr:
        raise CudaError(codes.INVALID_VALUE, f"{what} is NULL")
    size, fmt = _SCALAR["f32" if typ == "bf16" else typ]
    v = struct.unpack(fmt, ctypes.string_at(ptr, size))
    return [float(v[0]), float(v[1]) if len(v) > 1 else 0.0]


def gemm(
    h: int | None,
    ta: int,
    tb: int,
    m: int,
    n: int,
    k: int,
    alpha: int | None,
    a: int | None,
    lda: int,
    b: int | None,
    ldb: int,
    beta: int | None,
    c: int | None,
    ldc: int,
    *,
    types: tuple[BlasType, BlasType, BlasType, BlasType],
    strides: tuple[int, int, int] = (0, 0, 0),
    batch: int = 1,
) -> None:
    handle = _h(h)
    if min(m, n, k, lda, ldb, ldc, batch) < 0 or min(strides) < 0:
        raise CudaError(codes.INVALID_VALUE, f"gemm: negative size (m={m} n={n} k={k} batch={batch})")
    if batch == 0 or m == 0 or n == 0:
        return
    at, bt, ct, compute = types
    scale = compute if compute in _SCALAR else "f32"
    msg = BlasGemm(
        trans_a=_trans(ta),
        trans_b=_trans(tb),
        m=m,
        n=n,
        k=k,
        a_type=at,
        b_type=bt,
        c_type=ct,
        compute_type=compute,
        a=int(a or 0),
        lda=lda,
        stride_a=strides[0],
        b=int(b or 0),
        ldb=ldb,
        stride_b=strides[1],
        c=int(c or 0),
        ldc=ldc,
        stride_c=strides[2],
        batch=batch,
    )
    if handle.pointer_mode == 1:
        msg.scalars_on_device, msg.alpha_ptr, msg.beta_ptr = True, int(alpha or 0), int(beta or 0)
    else:
        msg.alpha, msg.beta = _scalar(handle, alpha, scale, "alpha"), _scalar(handle, beta, scale, "beta")
    drv = STATE.driver()
    msg.stream = drv._stream(handle.stream)
    try:  # the wire schema and the shape rules, here as in gpud: bad arguments fail now, not at the next sync
        extents(check(msg))
    except ProtocolError as exc:
        raise CudaError(codes.INVALID_VALUE, f"gemm: {exc.message}") from None
    cu_capture.post(msg)


def _typed(name: str, typ: BlasType) -> None:
    args = (P, c_int, c_int, c_int, c_int, c_int, P, P, c_int, P, c_int, P, P, c_int)

    @api(name, 0, *args, library="cublas")
    def plain(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) -> None:  # noqa: ANN001
        gemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, types=(typ, typ, typ, typ))

    strided = (
        P,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        P,
        P,
        c_int,
        c_int64,
        P,
        c_int,
        c_int64,
        P,
        P,
        c_int,
        c_int64,
        c_int,
    )

    @api(name.replace("_v2", "") + "StridedBatched", 0, *strided, library="cublas")
    def batched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count) -> None:  # noqa: ANN001
        gemm(
            h,
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            lda,
            b,
            ldb,
            beta,
            c,
            ldc,
            types=(typ, typ, typ, typ),
            strides=(sa, sb, sc),
            batch=count,
        )


def _pointer_batched(name: str, typ: BlasType) -> None:
    """gemm over arrays of device pointers: the arrays are read (in stream order) and each product queued."""
    args = (P, c_int, c_int, c_int, c_int, c_int, P, P, c_int, P, c_int, P, P, c_int, c_int)

    @api(name, 0, *args, library="cublas")
    def batched(h, ta, tb, m, n, k, alpha, aa, lda, ba, ldb, beta, ca, ldc, count) -> None:  # noqa: ANN001
        if count < 0:
            raise CudaError(codes.INVALID_VALUE, f"batchCount {count}")
        if count == 0:
            return
        drv = STATE.driver()
        stream = drv._stream(_h(h).stream)
        ptrs = [
            struct.unpack(f"<{count}Q", bytes(drv.memcpy_dtoh(int(arr or 0), 8 * count, stream)))
            for arr in (aa, ba, ca)
        ]
        for a, b, c in zip(*ptrs, strict=True):
            gemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, types=(typ, typ, typ, typ))


_BATCHED: tuple[tuple[str, BlasType], ...] = (
    ("cublasSgemmBatched", "f32"),
    ("cublasDgemmBatched", "f64"),
    ("cublasCgemmBatched", "c64"),
    ("cublasZgemmBatched", "c128"),
    ("cublasHgemmBatched", "f16"),
)
for _name, _typ in _BATCHED:
    _pointer_batched(_name, _typ)

_PLAIN: tuple[tuple[str, BlasType], ...] = (
    ("cublasSgemm_v2", "f32"),
    ("cublasDgemm_v2", "f64"),
    ("cublasCgemm_v2", "c64"),
    ("cublasZgemm_v2", "c128"),
    ("cublasHgemm", "f16"),
)
for _name, _typ in _PLAIN:
    _typed(_name, _typ)


def _types(at: int, bt: int, ct: int, compute: int) -> tuple[BlasType, BlasType, BlasType, BlasType]:
    try:
        a, b, c = DATA[at], DATA[bt], DATA[ct]
        comp = COMPUTE[compute]
    except KeyError as exc:
        raise CudaError(codes.NOT_SUPPORTED, f"gemm: data or compute type {exc.args[0]} is not supported") from None
    if a in ("c64", "c128"):
        comp = "c64" if comp == "f32" else "c128" if comp == "f64" else comp
    return a, b, c, comp


@api(
    "cublasGemmEx",
    0,
    P,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    P,
    P,
    c_int,
    c_int,
    P,
    c_int,
    c_int,
    P,
    P,
    c_int,
    c_int,
    c_int,
    c_int,
    library="cublas",
)
def cublasGemmEx(h, ta, tb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc, compute, algo) -> None:  # noqa: ANN001
    gemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, types=_types(atype, btype, ctype, compute))


@api(
    "cublasGemmStridedBatchedEx",
    0,
    P,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    P,
    P,
    c_int,
    c_int,
    c_int64,
    P,
    c_int,
    c_int,
    c_int64,
    P,
    P,
    c_int,
    c_int,
    c_int64,
    c_int,
    c_int,
    c_int,
    library="cublas",
)
def cublasGemmStridedBatchedEx(
    h,
    ta,
    tb,
    m,
    n,
    k,
    alpha,
    a,
    atype,
    lda,
    sa,
    b,
    btype,
    ldb,
    sb,
    beta,
    c,
    ctype,
    ldc,  # noqa: ANN001
    sc,
    count,
    compute,
    algo,
) -> None:
    gemm(
        h,
        ta,
        tb,
        m,
        n,
        k,
        alpha,
        a,
        lda,
        b,
        ldb,
        beta,
        c,
        ldc,
        types=_types(atype, btype, ctype, compute),
        strides=(sa, sb, sc),
        batch=count,
    )


@api(
    "cublasSgemmEx",
    0,
    P,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    P,
    P,
    c_int,
    c_int,
    P,
    c_int,
    c_int,
    P,
    P,
    c_int,
    c_int,
    library="cublas",
)
def cublasSgemmEx(h, ta, tb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc) -> None:  # noqa: ANN001
    gemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, types=_types(atype, btype, ctype, 68))


# ---------------------------------------------------------------------------- host <-> device helpers
def _check_copy(rows: int, cols: int, elem: int, lda: int, ldb: int) -> None:
    if rows < 0 or cols < 0 or elem <= 0 or lda < max(rows, 1) or ldb < max(rows, 1):
        raise CudaError(codes.INVALID_VALUE, f"rows={rows} cols={cols} elemSize={elem} lda={lda} ldb={ldb}")


def _set_matrix(
    rows: int, cols: int, elem: int, host: int | None, lda: int, dev: int | None, ldb: int, stream: int = 0
) -> None:
    """Column by column host -> device (one copy when both are packed): cublasSetMatrix/SetVector."""
    _check_copy(rows, cols, elem, lda, ldb)
    if rows == 0 or cols == 0:
        return
    if not host or not dev:
        raise CudaError(codes.INVALID_VALUE, "matrix pointer is NULL")
    drv = STATE.driver()
    if lda == ldb == rows:
        drv.memcpy_htod(int(dev), ctypes.string_at(host, rows * cols * elem), stream)
        return
    for j in range(cols):
        drv.memcpy_htod(int(dev) + j * ldb * elem, ctypes.string_at(host + j * lda * elem, rows * elem), stream)


def _get_matrix(
    rows: int, cols: int, elem: int, dev: int | None, lda: int, host: int | None, ldb: int, stream: int = 0
) -> None:
    _check_copy(rows, cols, elem, lda, ldb)
    if rows == 0 or cols == 0:
        return
    if not host or not dev:
        raise CudaError(codes.INVALID_VALUE, "matrix pointer is NULL")
    drv = STATE.driver()
    span = ((cols - 1) * lda + rows) * elem
    data = bytes(drv.memcpy_dtoh(int(dev), span, stream))
    if lda == ldb == rows:
        ctypes.memmove(host, data, span)
        return
    for j in range(cols):
        ctypes.memmove(host + j * ldb * elem, data[j * lda * elem : j * lda * elem + rows * elem], rows * elem)


def _vector_as_matrix(n: int, elem: int, incx: int, incy: int) -> tuple[int, int, int, int]:
    """A strided vector is a 1 x n matrix with leading dimension inc (rows=1, cols=n)."""
    if incx <= 0 or incy <= 0:
        raise CudaError(codes.INVALID_VALUE, f"incx={incx} incy={incy} must be positive")
    return 1, n, incx, incy


@api("cublasSetMatrix", 0, c_int, c_int, c_int, P, c_int, P, c_int, library="cublas")
def cublasSetMatrix(rows, cols, elem, a, lda, b, ldb) -> None:  # noqa: ANN001
    _set_matrix(rows, cols, elem, a, lda, b, ldb)


@api("cublasGetMatrix", 0, c_int, c_int, c_int, P, c_int, P, c_int, library="cublas")
def cublasGetMatrix(rows, cols, elem, a, lda, b, ldb) -> None:  # noqa: ANN001
    _get_matrix(rows, cols, elem, a, lda, b, ldb)


@api("cublasSetMatrixAsync", 0, c_int, c_int, c_int, P, c_int, P, c_int, P, library="cublas")
def cublasSetMatrixAsync(rows, cols, elem, a, lda, b, ldb, stream) -> None:  # noqa: ANN001
    _set_matrix(rows, cols, elem, a, lda, b, ldb, STATE.driver()._stream(int(stream or 0)))


@api("cublasGetMatrixAsync", 0, c_int, c_int, c_int, P, c_int, P, c_int, P, library="cublas")
def cublasGetMatrixAsync(rows, cols, elem, a, lda, b, ldb, stream) -> None:  # noqa: ANN001
    _get_matrix(rows, cols, elem, a, lda, b, ldb, STATE.driver()._stream(int(stream or 0)))


@api("cublasSetVector", 0, c_int, c_int, P, c_int, P, c_int, library="cublas")
def cublasSetVector(n, elem, x, incx, y, incy) -> None:  # noqa: ANN001
    rows, cols, lda, ldb = _vector_as_matrix(n, elem, incx, incy)
    _set_matrix(rows, cols, elem, x, lda, y, ldb)


@api("cublasGetVector", 0, c_int, c_int, P, c_int, P, c_int, library="cublas")
def cublasGetVector(n, elem, x, incx, y, incy) -> None:  # noqa: ANN001
    rows, cols, lda, ldb = _vector_as_matrix(n, elem, incx, incy)
    _get_matrix(rows, cols, elem, x, lda, y, ldb)


@api("cublasSetVectorAsync", 0, c_int, c_int, P, c_int, P, c_int, P, library="cublas")
def cublasSetVectorAsync(n, elem, x, incx, y, incy, stream) -> None:  # noqa: ANN001
    rows, cols, lda, ldb = _vector_as_matrix(n, elem, incx, incy)
    _set_matrix(rows, cols, elem, x, lda, y, ldb, STATE.driver()._stream(int(stream or 0)))


@api("cublasGetVectorAsync", 0, c_int, c_int, P, c_int, P, c_int, P, library="cublas")
def cublasGetVectorAsync(n, elem, x, incx, y, incy, stream) -> None:  # noqa: ANN001
    rows, cols, lda, ldb = _vector_as_matrix(n, elem, incx, incy)
    _get_matrix(rows, cols, elem, x, lda, y, ldb, STATE.driver()._stream(int(stream or 0)))


# ---------------------------------------------------------------------------- geam
def geam(h, ta, tb, m, n, alpha, a, lda, beta, b, ldb, c, ldc, typ: GeamType) -> None:  # noqa: ANN001
    """C = alpha op(A) + beta op(B) (cublas<t>geam), queued on the handle's stream as ``blas_geam``."""
    handle = _h(h)
    if min(m, n, lda, ldb, ldc) < 0:
        raise CudaError(codes.INVALID_VALUE, f"geam: negative size (m={m} n={n})")
    drv = STATE.driver()
    if handle.pointer_mode == 1:  # scalars in device memory: read them now (the call returns after that on a GPU too)
        size, fmt = _SCALAR[typ]
        vals = []
        for ptr in (alpha, beta):
            v = struct.unpack(fmt, bytes(drv.memcpy_dtoh(int(ptr or 0), size)))
            vals.append([float(v[0]), float(v[1]) if len(v) > 1 else 0.0])
        sa, sb = vals
    else:
        sa, sb = _scalar(handle, alpha, typ, "alpha"), _scalar(handle, beta, typ, "beta")
    if m == 0 or n == 0:
        return
    msg = BlasGeam(
        trans_a=_trans(ta),
        trans_b=_trans(tb),
        m=m,
        n=n,
        type=typ,
        alpha=sa,
        beta=sb,
        a=int(a or 0),
        lda=lda,
        b=int(b or 0),
        ldb=ldb,
        c=int(c or 0),
        ldc=ldc,
        stream=drv._stream(handle.stream),
    )
    try:
        for operand, addr, size in geam_extents(check(msg)):
            drv._check_range(addr, size, f"geam ({operand})")
    except ProtocolError as exc:
        raise CudaError(codes.INVALID_VALUE, f"geam: {exc.message}") from None
    cu_capture.post(msg)


def _geam(name: str, typ: GeamType) -> None:
    @api(name, 0, P, c_int, c_int, c_int, c_int, P, P, c_int, P, P, c_int, P, c_int, library="cublas")
    def impl(h, ta, tb, m, n, alpha, a, lda, beta, b, ldb, c, ldc) -> None:  # noqa: ANN001
        geam(h, ta, tb, m, n, alpha, a, lda, beta, b, ldb, c, ldc, typ)

    @api(name + "_64", 0, P, c_int, c_int, c_int64, c_int64, P, P, c_int64, P, P, c_int64, P, c_int64, library="cublas")
    def impl64(h, ta, tb, m, n, alpha, a, lda, beta, b, ldb, c, ldc) -> None:  # noqa: ANN001
        geam(h, ta, tb, m, n, alpha, a, lda, beta, b, ldb, c, ldc, typ)


_GEAMS: tuple[tuple[str, GeamType], ...] = (
    ("cublasSgeam", "f32"),
    ("cublasDgeam", "f64"),
    ("cublasCgeam", "c64"),
    ("cublasZgeam", "c128"),
)
for _gname, _gtyp in _GEAMS:
    _geam(_gname, _gtyp)


# ---------------------------------------------------------------------------- level 1 and level 2
_VTYPES: tuple[tuple[str, GeamType], ...] = (("S", "f32"), ("D", "f64"), ("C", "c64"), ("Z", "c128"))
_REAL_OF = {"c64": "f32", "c128": "f64"}


def _scratch(handle: Handle) -> int:
    """The handle's device word for reductions in host pointer mode (read back on the handle's stream)."""
    if not handle.scratch:
        handle.scratch = STATE.driver().mem_alloc(16)
    return handle.scratch


def vector(
    h: int | None,
    op: VectorOp,
    typ: GeamType,
    n: int,
    x: int | None,
    incx: int,
    y: int | None = None,
    incy: int = 1,
    *,
    alpha: int | None = None,
    alpha_real: bool = False,
    result: int | None = None,
    result_int64: bool = False,
) -> None:
    """One level-1 call queued on the handle's stream as ``blas_vector``; in host pointer mode a reduction's
    result is read back (the call returns when it is known, as cuBLAS's does)."""
    handle = _h(h)
    if n < 0:
        n = 0  # BLAS: n <= 0 is a quick return (a reduction's result is 0)
    msg = BlasVector(op=op, type=typ, n=n, x=int(x or 0), incx=incx, y=int(y or 0), incy=incy, alpha_real=alpha_real)
    drv = STATE.driver()
    msg.stream = drv._stream(handle.stream)
    if op in ("axpy", "scal"):
        if handle.pointer_mode == 1:
            msg.scalars_on_device, msg.alpha_ptr = True, int(alpha or 0)
        else:
            msg.alpha = _scalar(handle, alpha, _REAL_OF.get(typ, typ) if alpha_real else typ, "alpha")
    host_result = 0
    if op in REDUCTIONS:
        if not result:
            raise CudaError(codes.INVALID_VALUE, f"{op}: result is NULL")
        msg.result_int64 = result_int64
        if handle.pointer_mode == 1:
            msg.result = int(result)
        else:
            host_result, msg.result = int(result), _scratch(handle)
    try:
        for operand, addr, size, _ in vector_extents(check(msg)):
            if not host_result or operand != "result":
                drv._check_range(addr, size, f"{op} ({operand})")
    except ProtocolError as exc:
        raise CudaError(codes.INVALID_VALUE, f"{op}: {exc.message}") from None
    if host_result:
        cu_capture.refuse_sync(msg.stream, f"{op} with its result in host memory")
    cu_capture.post(msg)
    if host_result:
        size = result_size(msg)
        ctypes.memmove(host_result, bytes(drv.memcpy_dtoh(msg.result, size, msg.stream)), size)


def _level1(prefix: str, typ: GeamType) -> None:
    """Register the level-1 entry points of one type: the _v2 (int) and _v2_64 (int64_t) forms."""
    cplx = typ in ("c64", "c128")
    real_prefix = {"C": "Sc", "Z": "Dz"}.get(prefix, prefix)  # nrm2/asum of a complex vector: Scnrm2, Dznrm2
    for suffix, i in (("_v2", c_int), ("_v2_64", c_int64)):
        wide = suffix == "_v2_64"

        def reg(name: str, args: tuple, func: Any, suffix: str = suffix) -> None:
            api(f"cublas{name}{suffix}", 0, P, *args, library="cublas")(func)

        reg(
            f"{prefix}axpy",
            (i, P, P, i, P, i),
            lambda h, n, a, x, ix, y, iy, t=typ: vector(h, "axpy", t, n, x, ix, y, iy, alpha=a),
        )
        reg(f"{prefix}copy", (i, P, i, P, i), lambda h, n, x, ix, y, iy, t=typ: vector(h, "copy", t, n, x, ix, y, iy))
        reg(f"{prefix}swap", (i, P, i, P, i), lambda h, n, x, ix, y, iy, t=typ: vector(h, "swap", t, n, x, ix, y, iy))
        reg(f"{prefix}scal", (i, P, P, i), lambda h, n, a, x, ix, t=typ: vector(h, "scal", t, n, x, ix, alpha=a))
        for dot, name in (("dot", f"{prefix}dotu" if cplx else f"{prefix}dot"), ("dotc", f"{prefix}dotc")):
            if dot == "dotc" and not cplx:
                continue
            reg(
                name,
                (i, P, i, P, i, P),
                lambda h, n, x, ix, y, iy, r, t=typ, d=dot: vector(h, d, t, n, x, ix, y, iy, result=r),
            )
        reg(f"{real_prefix}nrm2", (i, P, i, P), lambda h, n, x, ix, r, t=typ: vector(h, "nrm2", t, n, x, ix, result=r))
        reg(f"{real_prefix}asum", (i, P, i, P), lambda h, n, x, ix, r, t=typ: vector(h, "asum", t, n, x, ix, result=r))
        for which in ("amax", "amin"):
            reg(
                f"I{prefix.lower()}{which}",
                (i, P, i, P),
                lambda h, n, x, ix, r, t=typ, w=which, wd=wide: vector(
                    h, "i" + w, t, n, x, ix, result=r, result_int64=wd
                ),
            )
        if cplx:  # a real scalar for a complex vector: Csscal, Zdscal
            reg(
                f"{prefix}{'s' if typ == 'c64' else 'd'}scal",
                (i, P, P, i),
                lambda h, n, a, x, ix, t=typ: vector(h, "scal", t, n, x, ix, alpha=a, alpha_real=True),
            )


def matrix(h: int | None, op: MatrixOp, typ: GeamType, **kw: Any) -> None:
    """One level-2 call (gemv, ger, gerc, sbmv, dgmm, syrk) queued on the handle's stream as ``blas_matrix``;
    ``kw``: the message's fields, with ``alpha``/``beta`` the caller's scalar pointers and ``trans``, ``uplo``
    and ``side`` cuBLAS's enums."""
    handle = _h(h)
    alpha, beta = kw.pop("alpha", None), kw.pop("beta", None)
    sizes = {k: kw[k] for k in ("m", "n", "k", "lda", "ldc") if k in kw}
    if min(sizes.values()) < 0:
        raise CudaError(codes.INVALID_VALUE, f"{op}: negative size ({' '.join(f'{k}={v}' for k, v in sizes.items())})")
    for key in ("a", "x", "y", "c"):
        kw[key] = int(kw.get(key) or 0)
    if "trans" in kw:
        kw["trans"] = _trans(kw["trans"])
    for key in ("uplo", "side"):
        if kw.get(key, 0) not in (0, 1):
            raise CudaError(codes.INVALID_VALUE, f"{op}: {key} = {kw[key]} (0 or 1)")
    drv = STATE.driver()
    msg = BlasMatrix(op=op, type=typ, stream=drv._stream(handle.stream), **kw)
    try:
        extents = matrix_extents(check(msg))
    except ProtocolError as exc:
        raise CudaError(codes.INVALID_VALUE, f"{op}: {exc.message}") from None
    if not extents:
        return  # a size of 0: nothing happens (not even the scalars are read)
    if handle.pointer_mode == 1:
        msg.scalars_on_device, msg.alpha_ptr, msg.beta_ptr = True, int(alpha or 0), int(beta or 0)
    else:
        for name in SCALARS[op]:
            setattr(msg, name, _scalar(handle, alpha if name == "alpha" else beta, typ, name))
    for operand, addr, size, _ in extents:
        drv._check_range(addr, size, f"{op} ({operand})")
    cu_capture.post(msg)


def _level2(prefix: str, typ: GeamType) -> None:
    """Register gemv, ger/geru/gerc, sbmv (real types), dgmm and syrk of one type, _v2 and _v2_64."""
    cplx = typ in ("c64", "c128")
    for suffix, i in (("_v2", c_int), ("_v2_64", c_int64)):

        def gemv(h, t, m, n, al, a, lda, x, ix, be, y, iy, ty=typ) -> None:  # noqa: ANN001
            matrix(h, "gemv", ty, trans=t, m=m, n=n, alpha=al, a=a, lda=lda, x=x, incx=ix, beta=be, y=y, incy=iy)

        api(f"cublas{prefix}gemv{suffix}", 0, P, c_int, i, i, P, P, i, P, i, P, P, i, library="cublas")(gemv)
        for name, op in ((f"{prefix}geru", "ger"), (f"{prefix}gerc", "gerc")) if cplx else ((f"{prefix}ger", "ger"),):

            def ger(h, m, n, al, x, ix, y, iy, a, lda, ty=typ, o=op) -> None:  # noqa: ANN001
                matrix(h, o, ty, m=m, n=n, alpha=al, x=x, incx=ix, y=y, incy=iy, a=a, lda=lda)

            api(f"cublas{name}{suffix}", 0, P, i, i, P, P, i, P, i, P, i, library="cublas")(ger)
        if not cplx:

            def sbmv(h, uplo, n, k, al, a, lda, x, ix, be, y, iy, ty=typ) -> None:  # noqa: ANN001
                matrix(h, "sbmv", ty, uplo=uplo, n=n, k=k, alpha=al, a=a, lda=lda, x=x, incx=ix, beta=be, y=y, incy=iy)

            api(f"cublas{prefix}sbmv{suffix}", 0, P, c_int, i, i, P, P, i, P, i, P, P, i, library="cublas")(sbmv)

        def syrk(h, uplo, t, n, k, al, a, lda, be, c, ldc, ty=typ) -> None:  # noqa: ANN001
            matrix(h, "syrk", ty, uplo=uplo, trans=t, n=n, k=k, alpha=al, a=a, lda=lda, beta=be, c=c, ldc=ldc)

        api(f"cublas{prefix}syrk{suffix}", 0, P, c_int, c_int, i, i, P, P, i, P, P, i, library="cublas")(syrk)

    for suffix, i in (("", c_int), ("_64", c_int64)):  # dgmm has no _v2

        def dgmm(h, side, m, n, a, lda, x, ix, c, ldc, ty=typ) -> None:  # noqa: ANN001
            matrix(h, "dgmm", ty, side=side, m=m, n=n, a=a, lda=lda, x=x, incx=ix, c=c, ldc=ldc)

        api(f"cublas{prefix}dgmm{suffix}", 0, P, c_int, i, i, P, i, P, i, P, i, library="cublas")(dgmm)


for _prefix, _vtyp in _VTYPES:
    _level1(_prefix, _vtyp)
    _level2(_prefix, _vtyp)
