"""Dense LAPACK routines on tenants' device memory: the gpud side of the cuSOLVER stand-in.

NOTE [vendor libraries] (gpud/blas.py): a ``SolverCall`` is one routine of cuSOLVER's dense API (getrf, getrs,
potrf, potrs, geqrf, orgqr/ungqr, gesvd, syevd/heevd) or one matrix of cuBLAS's batched LU (getrf, getrs, getri),
its operands' extents checked against the session's allocations before it was queued (proto/solver.py). On the
CPU backend SciPy's LAPACK runs it on NumPy views of the tenant's memory, in the routine's own precision, and the
results land where cuSOLVER leaves them: the factors in place, 1-based pivots, and LAPACK's ``info`` in the
device int the call named (a singular matrix is ``info > 0``, not an error, as on a GPU). cuSOLVER keeps the other
triangle of a Cholesky factor as it was, and so does this.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from gpud.blas import _load
from proto import errors as codes
from proto.errors import CudaError
from proto.solver import COMPLEX, REAL

_PREFIX = {"f32": "s", "f64": "d", "c64": "c", "c128": "z"}


def _ints(addr: int, count: int) -> np.ndarray:
    raw = (ctypes.c_char * (4 * count)).from_address(addr)
    return np.ndarray((count,), np.int32, memoryview(raw))


def _vector(addr: int, count: int, typ: str) -> np.ndarray:
    return _load(addr, count, 1, max(1, count), typ)[:, 0]


def _lapack(s: Any, name: str) -> Any:
    from scipy.linalg import lapack

    complex_ = s.dtype in ("c64", "c128")
    real_names = {"orgqr": "ungqr", "syevd": "heevd"}
    routine = _PREFIX[s.dtype] + (real_names.get(name, name) if complex_ else name)
    fn = getattr(lapack, routine, None)
    if fn is None:
        raise CudaError(codes.NOT_SUPPORTED, f"cusolver {s.op}: LAPACK {routine} is not in gpud's SciPy")
    return fn


def solve_numpy(s: Any) -> None:
    """Run a checked ``SolverCall`` with SciPy's LAPACK."""
    m, n, k, op = s.m, s.n, s.k, s.op
    info = 0
    if op == "getrf":
        if m and n:
            a = _load(s.a, m, n, s.lda, s.dtype)
            lu, piv, info = _lapack(s, "getrf")(a)
            a[...] = lu
            _ints(s.ipiv, min(m, n))[...] = piv + 1
    elif op in ("getrs", "getri"):
        if n:
            a = _load(s.a, n, n, s.lda, s.dtype)
            piv = _ints(s.ipiv, n).astype(np.int32) - 1
            if ((piv < 0) | (piv >= n)).any():
                info = -7 if op == "getrs" else -4  # LAPACK: the pivot argument is illegal
            elif op == "getrs" and k:
                b = _load(s.b, n, k, s.ldb, s.dtype)
                x, info = _lapack(s, "getrs")(a, piv, b, trans=s.trans)
                b[...] = x
            elif op == "getri":
                inv, info = _lapack(s, "getri")(a, piv)
                if info > 0:  # a zero pivot: no inverse (LAPACK stops; cuBLAS computes one of infs and NaNs)
                    inv = np.full((n, n), np.nan, a.dtype)
                _load(s.b, n, n, s.ldb, s.dtype)[...] = inv
    elif op == "potrf":
        if n:
            a = _load(s.a, n, n, s.lda, s.dtype)
            c, info = _lapack(s, "potrf")(a, lower=1 - s.uplo, clean=0)
            a[...] = c
    elif op == "potrs":
        if n and k:
            a = _load(s.a, n, n, s.lda, s.dtype)
            b = _load(s.b, n, k, s.ldb, s.dtype)
            x, info = _lapack(s, "potrs")(a, b, lower=1 - s.uplo)
            b[...] = x
    elif op == "geqrf":
        if m and n:
            a = _load(s.a, m, n, s.lda, s.dtype)
            qr, tau, _, info = _lapack(s, "geqrf")(a)
            a[...] = qr
            _vector(s.w, min(m, n), s.dtype)[...] = tau
    elif op == "orgqr":
        if m and n:
            a = _load(s.a, m, n, s.lda, s.dtype)
            tau = _vector(s.w, k, s.dtype).copy() if k else np.zeros(1, a.dtype)
            if not k:  # no reflectors: the first n columns of the identity
                q, info = np.eye(m, n, dtype=a.dtype), 0
            else:
                q, _, info = _lapack(s, "orgqr")(a, tau)
            a[...] = q
    elif op == "gesvd":
        if m and n:
            a = _load(s.a, m, n, s.lda, s.dtype)
            want = s.jobu != "N" or s.jobvt != "N"
            full = "A" in (s.jobu, s.jobvt)
            u, sv, vt, info = _lapack(s, "gesvd")(a, compute_uv=int(want), full_matrices=int(full))
            _vector(s.w, min(m, n), REAL[s.dtype])[...] = sv
            r = min(m, n)
            if s.jobu != "N":  # "O": the first r columns of U overwrite A
                cols = m if s.jobu == "A" else r
                dst = (s.a, s.lda) if s.jobu == "O" else (s.u, s.ldu)
                _load(dst[0], m, cols, dst[1], s.dtype)[...] = u[:, :cols]
            if s.jobvt != "N":  # "O": the first r rows of VT overwrite A
                rows = n if s.jobvt == "A" else r
                dst = (s.a, s.lda) if s.jobvt == "O" else (s.vt, s.ldvt)
                _load(dst[0], rows, n, dst[1], s.dtype)[...] = vt[:rows, :]
    elif op == "gesvdj":
        if m and n:
            a = _load(s.a, m, n, s.lda, s.dtype)
            full = s.jobu == "A"
            u, sv, vt, info = _lapack(s, "gesvd")(a, compute_uv=int(s.vectors), full_matrices=int(full))
            r = min(m, n)
            _vector(s.w, r, REAL[s.dtype])[...] = sv
            if s.vectors:
                _load(s.u, m, m if full else r, s.ldu, s.dtype)[...] = u
                _load(s.vt, n, n if full else r, s.ldvt, s.dtype)[...] = vt.conj().T
    elif op == "geev":
        if n:
            a = _load(s.a, n, n, s.lda, s.dtype)
            geev = _lapack(s, "geev")
            if s.dtype in ("c64", "c128"):
                w, vl, vr, info = geev(a, compute_vl=int(s.left), compute_vr=int(s.vectors))
            else:  # real: eigenvalues from their two parts; vectors in LAPACK's packed real form, as cuSOLVER's
                wr, wi, vl, vr, info = geev(a, compute_vl=int(s.left), compute_vr=int(s.vectors))
                w = wr + 1j * wi
            _vector(s.w, n, COMPLEX[s.dtype])[...] = w
            if s.left:
                _load(s.u, n, n, s.ldu, s.dtype)[...] = vl
            if s.vectors:
                _load(s.vt, n, n, s.ldvt, s.dtype)[...] = vr
    elif op == "syevd":
        if n:
            a = _load(s.a, n, n, s.lda, s.dtype)
            w, v, info = _lapack(s, "syevd")(a, compute_v=int(s.vectors), lower=1 - s.uplo)
            _vector(s.w, n, REAL[s.dtype])[...] = w
            if s.vectors:
                a[...] = v
    else:  # the wire schema admits no other
        raise CudaError(codes.NOT_SUPPORTED, f"cusolver {op} is not supported")
    if s.info:
        _ints(s.info, 1)[0] = int(info)
