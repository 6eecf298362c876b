"""The shape rules of the BLAS operations on the wire (``BlasGemm``, ``BlasGeam``, ``BlasVector``,
``BlasMatrix``), shared by both ends: the client checks a call before queueing it (cuBLAS answers
CUBLAS_STATUS_INVALID_VALUE at once), gpud checks it again against the session's allocations
(NOTE [vendor libraries], gpud/blas.py)."""

from __future__ import annotations

from typing import Any

from proto import errors as codes
from proto.errors import CudaError

ITEM = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}


def shape(g: Any, which: str) -> tuple[int, int, int, int, int, str]:
    """(rows, cols, ld, stride, address, type) of operand ``which`` as stored (column-major)."""
    if which == "a":
        rows, cols = (g.m, g.k) if g.trans_a == 0 else (g.k, g.m)
        return rows, cols, g.lda, g.stride_a, g.a, g.a_type
    if which == "b":
        rows, cols = (g.k, g.n) if g.trans_b == 0 else (g.n, g.k)
        return rows, cols, g.ldb, g.stride_b, g.b, g.b_type
    return g.m, g.n, g.ldc, g.stride_c, g.c, g.c_type


def extents(g: Any) -> list[tuple[str, int, int]]:
    """(operand, address, bytes) each operand spans over the whole batch; raises INVALID_VALUE for bad leading
    dimensions (cuBLAS: CUBLAS_STATUS_INVALID_VALUE)."""
    out = []
    for which in ("a", "b", "c"):
        rows, cols, ld, stride, addr, typ = shape(g, which)
        if ld < max(1, rows):
            raise CudaError(codes.INVALID_VALUE, f"gemm: ld{which} = {ld} is below the {rows} rows of {which.upper()}")
        if which != "c" and (g.k == 0 or (g.alpha == [0.0, 0.0] and not g.scalars_on_device)):
            continue  # not read
        if rows == 0 or cols == 0:
            continue
        one = ((cols - 1) * ld + rows) * ITEM[typ]
        if g.batch > 1 and stride == 0 and which == "c":
            raise CudaError(codes.INVALID_VALUE, "gemm: a batch writing one C (stride 0) is not defined")
        out.append((which.upper(), addr, (g.batch - 1) * stride * ITEM[typ] + one))
    return out


def geam_extents(g: Any) -> list[tuple[str, int, int]]:
    """(operand, address, bytes) of a ``BlasGeam``'s operands that it reads or writes; INVALID_VALUE for leading
    dimensions cuBLAS refuses, and for an in-place C that is not laid out as the operand it overwrites."""
    item = ITEM[g.type]
    out = []
    for which, trans, ld, addr, scalar in (("A", g.trans_a, g.lda, g.a, g.alpha), ("B", g.trans_b, g.ldb, g.b, g.beta)):
        rows, cols = (g.m, g.n) if trans == 0 else (g.n, g.m)
        if ld < max(1, rows):
            raise CudaError(codes.INVALID_VALUE, f"geam: ld{which.lower()} = {ld} is below the {rows} rows of {which}")
        if scalar != [0.0, 0.0] and rows and cols:
            if addr == g.c and (trans != 0 or ld != g.ldc):
                raise CudaError(codes.INVALID_VALUE, f"geam: C overwrites {which} in place with another layout")
            out.append((which, addr, ((cols - 1) * ld + rows) * item))
    if g.ldc < max(1, g.m):
        raise CudaError(codes.INVALID_VALUE, f"geam: ldc = {g.ldc} is below the {g.m} rows of C")
    if g.m and g.n:
        out.append(("C", g.c, ((g.n - 1) * g.ldc + g.m) * item))
    return out


# NOTE [strided vectors]: a BLAS vector of n elements with increment inc starts at its address and spans
# (n - 1) * |inc| + 1 elements; a negative increment walks it backwards (element i lies at (n - 1 - i) * |inc|),
# an increment of 0 repeats one element. nrm2, asum, scal, iamax and iamin do nothing for inc <= 0 (their result
# is 0), as reference BLAS; a vector that is written may not have increment 0 (its result would depend on order).
REDUCTIONS = ("dot", "dotc", "nrm2", "asum", "iamax", "iamin")
_READS_X_ONLY = ("nrm2", "asum", "scal", "iamax", "iamin")


def span(n: int, inc: int, item: int) -> int:
    """Bytes a strided vector of ``n`` elements spans (NOTE [strided vectors])."""
    return ((n - 1) * abs(inc) + 1) * item if n > 0 else 0


def result_size(v: Any) -> int:
    """Bytes of a ``BlasVector`` reduction's result: the element for dot, its real part for nrm2/asum, an index."""
    if v.op in ("iamax", "iamin"):
        return 8 if v.result_int64 else 4
    return ITEM[v.type] // (2 if v.op in ("nrm2", "asum") and v.type in ("c64", "c128") else 1)


def scalar_size(typ: str, real: bool = False) -> int:
    """Bytes of a scalar of a ``typ`` operation as cuBLAS stores it (``real``: a real scalar of a complex one)."""
    return ITEM[typ] // (2 if real and typ in ("c64", "c128") else 1)


def vector_extents(v: Any) -> list[tuple[str, int, int, bool]]:
    """(operand, address, bytes, written) of a ``BlasVector``; INVALID_VALUE for what cuBLAS refuses."""
    item = ITEM[v.type]
    out = []
    if v.op in REDUCTIONS:
        out.append(("result", v.result, result_size(v), True))
    if v.n == 0 or (v.op in _READS_X_ONLY and v.incx <= 0):
        return out
    writes_x = v.op in ("scal", "swap")
    writes_y = v.op in ("axpy", "copy", "swap")
    for name, addr, inc, written in (("x", v.x, v.incx, writes_x), ("y", v.y, v.incy, writes_y)):
        if name == "y" and v.op in _READS_X_ONLY:
            continue
        if written and inc == 0 and v.n > 1:
            raise CudaError(codes.INVALID_VALUE, f"{v.op}: inc{name} = 0 for a vector that is written")
        out.append((name, addr, span(v.n, inc, item), written))
    return out


SCALARS = {  # the scalars each BlasMatrix operation reads
    "gemv": ("alpha", "beta"),
    "sbmv": ("alpha", "beta"),
    "syrk": ("alpha", "beta"),
    "ger": ("alpha",),
    "gerc": ("alpha",),
    "dgmm": (),
}


def _matrix(
    name: str, addr: int, rows: int, cols: int, ld: int, item: int, written: bool
) -> tuple[str, int, int, bool]:
    return (name, addr, ((cols - 1) * ld + rows) * item if rows and cols else 0, written)


def matrix_extents(g: Any) -> list[tuple[str, int, int, bool]]:
    """(operand, address, bytes, written) of a ``BlasMatrix``; INVALID_VALUE for what cuBLAS refuses; [] when
    the call does nothing (a size of 0)."""
    item = ITEM[g.type]
    # (rows of A as stored, its columns; the vectors x and y by length; C's rows and columns)
    if g.op == "syrk":
        a_rows, a_cols = (g.n, g.k) if g.trans == 0 else (g.k, g.n)
        if g.trans == 2:
            raise CudaError(codes.INVALID_VALUE, "syrk: trans = C (conjugate) is herk's, not syrk's")
        vectors: tuple = ()
        c_shape: tuple[int, int] | None = (g.n, g.n)
        empty = g.n == 0
    elif g.op == "sbmv":
        a_rows, a_cols = g.k + 1, g.n
        vectors, c_shape, empty = (("x", g.n, False), ("y", g.n, True)), None, g.n == 0
    elif g.op == "dgmm":
        a_rows, a_cols = g.m, g.n
        vectors, c_shape, empty = (("x", g.m if g.side == 0 else g.n, False),), (g.m, g.n), g.m == 0 or g.n == 0
    elif g.op == "gemv":
        a_rows, a_cols = g.m, g.n
        nx, ny = (g.n, g.m) if g.trans == 0 else (g.m, g.n)
        vectors, c_shape, empty = (("x", nx, False), ("y", ny, True)), None, g.m == 0 or g.n == 0
    else:  # ger, gerc
        a_rows, a_cols = g.m, g.n
        vectors, c_shape, empty = (("x", g.m, False), ("y", g.n, False)), None, g.m == 0 or g.n == 0
    if g.lda < max(1, a_rows):
        raise CudaError(codes.INVALID_VALUE, f"{g.op}: lda = {g.lda} is below the {a_rows} rows of A")
    if c_shape and g.ldc < max(1, c_shape[0]):
        raise CudaError(codes.INVALID_VALUE, f"{g.op}: ldc = {g.ldc} is below the {c_shape[0]} rows of C")
    for name, _, _ in vectors:
        inc = g.incx if name == "x" else g.incy
        if inc == 0 and g.op != "dgmm":  # dgmm's incx = 0: one scalar for the whole diagonal
            raise CudaError(codes.INVALID_VALUE, f"{g.op}: inc{name} = 0")
    if empty:
        return []
    if g.op == "dgmm" and g.c == g.a and g.ldc != g.lda:
        raise CudaError(codes.INVALID_VALUE, "dgmm: C overwrites A in place with another leading dimension")
    out = [_matrix("A", g.a, a_rows, a_cols, g.lda, item, g.op in ("ger", "gerc"))]
    for name, length, written in vectors:
        addr, inc = (g.x, g.incx) if name == "x" else (g.y, g.incy)
        out.append((name, addr, span(length, inc, item), written))
    if c_shape:
        out.append(_matrix("C", g.c, *c_shape, g.ldc, item, True))
    return [e for e in out if e[2]]
