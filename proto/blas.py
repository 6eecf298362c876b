"""The shape rules of the BLAS operations on the wire (``BlasGemm``), shared by both ends: the client
checks a call before queueing it (cuBLAS answers CUBLAS_STATUS_INVALID_VALUE at once), gpud checks it
again against the session's allocations (NOTE [vendor libraries], gpud/blas.py)."""

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
