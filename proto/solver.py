"""The operand rules of the dense solver routines on the wire (``SolverCall``), shared by both ends: the client
checks a call before queueing it (cuSOLVER answers CUSOLVER_STATUS_INVALID_VALUE at once), gpud checks each
operand's extent again against the session's allocations before it runs (NOTE [vendor libraries],
gpud/solver.py)."""

from __future__ import annotations

from typing import Any

from proto import errors as codes
from proto.blas import ITEM
from proto.errors import CudaError

REAL = {"f32": "f32", "f64": "f64", "c64": "f32", "c128": "f64"}  # the type of singular values and eigenvalues
COMPLEX = {"f32": "c64", "f64": "c128", "c64": "c64", "c128": "c128"}  # the type of a general matrix's eigenvalues


def _matrix(name: str, rows: int, cols: int, ld: int, what: str) -> int:
    if ld < max(1, rows):
        raise CudaError(codes.INVALID_VALUE, f"{what}: ld{name.lower()} = {ld} is below the {rows} rows of {name}")
    return (cols - 1) * ld + rows if rows and cols else 0


def extents(s: Any) -> list[tuple[str, int, int, bool]]:
    """(operand, address, bytes, written) of every operand the routine touches; INVALID_VALUE for the arguments
    cuSOLVER refuses (leading dimensions, shapes, a missing operand)."""
    what = f"cusolver {s.op}"
    item, real = ITEM[s.dtype], ITEM[REAL[s.dtype]]
    m, n, k = s.m, s.n, s.k
    out: list[tuple[str, int, int, bool]] = []

    def add(name: str, addr: int, nbytes: int, written: bool) -> None:
        if nbytes:
            if not addr:
                raise CudaError(codes.INVALID_VALUE, f"{what}: {name} is NULL")
            out.append((name, addr, nbytes, written))

    def square() -> None:
        if s.op in ("getrs", "getri", "potrf", "potrs", "syevd", "geev") and m not in (0, n):
            raise CudaError(codes.INVALID_VALUE, f"{what}: A must be square (m = {m}, n = {n})")

    square()
    if s.op == "getrf":
        add("A", s.a, _matrix("A", m, n, s.lda, what) * item, True)
        add("ipiv", s.ipiv, min(m, n) * 4, True)
    elif s.op == "getrs":
        add("A", s.a, _matrix("A", n, n, s.lda, what) * item, False)
        add("ipiv", s.ipiv, n * 4 if k else 0, False)
        add("B", s.b, _matrix("B", n, k, s.ldb, what) * item, True)
    elif s.op == "getri":
        add("A", s.a, _matrix("A", n, n, s.lda, what) * item, False)
        add("ipiv", s.ipiv, n * 4, False)
        add("C", s.b, _matrix("C", n, n, s.ldb, what) * item, True)
    elif s.op == "potrf":
        add("A", s.a, _matrix("A", n, n, s.lda, what) * item, True)
    elif s.op == "potrs":
        add("A", s.a, _matrix("A", n, n, s.lda, what) * item, False)
        add("B", s.b, _matrix("B", n, k, s.ldb, what) * item, True)
    elif s.op == "geqrf":
        add("A", s.a, _matrix("A", m, n, s.lda, what) * item, True)
        add("tau", s.w, min(m, n) * item, True)
    elif s.op == "orgqr":
        if not m >= n >= k:
            raise CudaError(codes.INVALID_VALUE, f"{what}: needs m >= n >= k (m = {m}, n = {n}, k = {k})")
        add("A", s.a, _matrix("A", m, n, s.lda, what) * item, True)
        add("tau", s.w, k * item, False)
    elif s.op == "gesvd":
        if m < n:
            raise CudaError(codes.INVALID_VALUE, f"{what}: cuSOLVER's gesvd needs m >= n (m = {m}, n = {n})")
        if s.jobu == "O" and s.jobvt == "O":
            raise CudaError(codes.INVALID_VALUE, f"{what}: jobu and jobvt cannot both be 'O'")
        add("A", s.a, _matrix("A", m, n, s.lda, what) * item, True)
        add("S", s.w, min(m, n) * real, True)
        if s.jobu in ("A", "S"):
            add("U", s.u, _matrix("U", m, m if s.jobu == "A" else min(m, n), s.ldu, what) * item, True)
        if s.jobvt in ("A", "S"):
            add("VT", s.vt, _matrix("VT", n if s.jobvt == "A" else min(m, n), n, s.ldvt, what) * item, True)
    elif s.op == "gesvdj":  # V, not V^H; jobu "A" (full) or "S" (economy) for both U and V
        r = min(m, n)
        add("A", s.a, _matrix("A", m, n, s.lda, what) * item, True)
        add("S", s.w, r * real, True)
        if s.vectors:
            add("U", s.u, _matrix("U", m, m if s.jobu == "A" else r, s.ldu, what) * item, True)
            add("V", s.vt, _matrix("V", n, n if s.jobu == "A" else r, s.ldvt, what) * item, True)
    elif s.op == "geev":
        add("A", s.a, _matrix("A", n, n, s.lda, what) * item, True)
        add("W", s.w, n * ITEM[COMPLEX[s.dtype]], True)
        if s.left:
            add("VL", s.u, _matrix("VL", n, n, s.ldu, what) * item, True)
        if s.vectors:
            add("VR", s.vt, _matrix("VR", n, n, s.ldvt, what) * item, True)
    elif s.op == "syevd":
        add("A", s.a, _matrix("A", n, n, s.lda, what) * item, True)
        add("W", s.w, n * real, True)
    if s.info:
        out.append(("info", s.info, 4, True))
    return out
