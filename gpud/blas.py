"""BLAS on tenants' device memory: the gpud side of the cuBLAS stand-in.

NOTE [vendor libraries]: cuBLAS, cuFFT and the other vendor libraries ship machine code only, so their
kernels cannot be translated; the client gets stand-in libraries whose calls travel to gpud as
operations (proto ``BlasGemm``, ``BlasGeam``, ``FftExec``, ``RandGenerate``, ``SolverCall``) in stream order,
where the node's own implementation runs them on the tenant's device memory: NumPy's BLAS (this module),
pocketfft (gpud/fft.py), Philox (proto/rand.py) and SciPy's LAPACK (gpud/solver.py) on the CPU backend, the real
cuBLAS/cuFFT/cuSOLVER or hipBLAS/rocFFT/rocSOLVER on GPU nodes (not yet). Every operand's extent is checked against the
session's allocations before the operation is queued (``extents``), as a copy's is: a gemm or an FFT cannot read
or write another tenant's memory.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from proto import errors as codes
from proto.blas import ITEM, shape
from proto.errors import CudaError

NUMPY: dict[str, Any] = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "c64": np.complex64,
    "c128": np.complex128,
}


def _load(addr: int, rows: int, cols: int, ld: int, typ: str) -> np.ndarray:
    """The operand as a NumPy view of device memory (column-major, leading dimension ``ld``)."""
    item = ITEM[typ]
    nbytes = ((cols - 1) * ld + rows) * item
    raw = (ctypes.c_char * nbytes).from_address(addr)
    if typ == "bf16":
        bits = np.ndarray((rows, cols), np.uint16, memoryview(raw), strides=(item, ld * item))
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return np.ndarray((rows, cols), NUMPY[typ], memoryview(raw), strides=(item, ld * item))


def _store(view_addr: int, rows: int, cols: int, ld: int, typ: str, value: np.ndarray) -> None:
    if typ == "bf16":
        x = np.ascontiguousarray(value, np.float32).view(np.uint32)
        rounded = ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype(np.uint16)
        nan = np.isnan(value)
        rounded[nan] = 0x7FC0
        item = 2
        raw = (ctypes.c_char * (((cols - 1) * ld + rows) * item)).from_address(view_addr)
        np.ndarray((rows, cols), np.uint16, memoryview(raw), strides=(item, ld * item))[...] = rounded
        return
    _load(view_addr, rows, cols, ld, typ)[...] = value


def _op(x: np.ndarray, trans: int) -> np.ndarray:
    return x if trans == 0 else (x.T if trans == 1 else x.conj().T)


def _scalar(g: Any, which: str, compute: type) -> complex:
    if not g.scalars_on_device:
        re, im = g.alpha if which == "alpha" else g.beta
        return complex(re, im) if np.issubdtype(compute, np.complexfloating) else re
    addr = g.alpha_ptr if which == "alpha" else g.beta_ptr
    stored = NUMPY[g.compute_type]  # as cuBLAS stores it (a half for f16 compute): the bytes gpud checked
    return compute(np.ndarray((1,), stored, memoryview((ctypes.c_char * ITEM[g.compute_type]).from_address(addr)))[0])


def gemm_numpy(g: Any) -> None:
    """Run a checked ``BlasGemm`` with NumPy (BLAS for f32/f64/c64/c128; f16 and bf16 computed in f32)."""
    compute = {"f16": np.float32, "bf16": np.float32}.get(g.compute_type) or NUMPY[g.compute_type]
    alpha, beta = _scalar(g, "alpha", compute), _scalar(g, "beta", compute)
    for i in range(g.batch):
        cr, cc, ldc, sc, c_addr, ct = shape(g, "c")
        if cr == 0 or cc == 0:
            return
        c_at = c_addr + i * sc * ITEM[ct]
        if g.k == 0 or alpha == 0:
            prod = np.zeros((cr, cc), compute)
        else:
            ar, ac, lda, sa, a_addr, at = shape(g, "a")
            br, bc, ldb, sb, b_addr, bt = shape(g, "b")
            a = _op(_load(a_addr + i * sa * ITEM[at], ar, ac, lda, at).astype(compute, copy=False), g.trans_a)
            b = _op(_load(b_addr + i * sb * ITEM[bt], br, bc, ldb, bt).astype(compute, copy=False), g.trans_b)
            prod = a @ b
            if alpha != 1:
                prod *= alpha
        if beta != 0:  # beta == 0: C is not read (it may hold NaNs), as in cuBLAS
            prod = prod + beta * _load(c_at, cr, cc, ldc, ct).astype(compute)
        _store(c_at, cr, cc, ldc, ct, prod)


def check_types(g: Any) -> None:
    """The type combinations this implements (cuBLAS's gemm/GemmEx table, less the integer ones)."""
    ok = {
        ("f32", "f32", "f32", "f32"),
        ("f64", "f64", "f64", "f64"),
        ("c64", "c64", "c64", "c64"),
        ("c128", "c128", "c128", "c128"),
        ("f16", "f16", "f16", "f16"),
        ("f16", "f16", "f16", "f32"),
        ("f16", "f16", "f32", "f32"),
        ("bf16", "bf16", "bf16", "f32"),
        ("bf16", "bf16", "f32", "f32"),
    }
    key = (g.a_type, g.b_type, g.c_type, g.compute_type)
    if key not in ok:
        raise CudaError(codes.NOT_SUPPORTED, f"gemm with A/B/C/compute types {'/'.join(key)} is not supported")


def geam_numpy(g: Any) -> None:
    """Run a checked ``BlasGeam``: C = alpha op(A) + beta op(B). Operands are read in full before C is written (in
    place is allowed)."""
    if g.m == 0 or g.n == 0:
        return
    typ = NUMPY[g.type]
    cplx = g.type in ("c64", "c128")
    total = np.zeros((g.m, g.n), typ)
    for trans, ld, addr, (re, im) in ((g.trans_a, g.lda, g.a, g.alpha), (g.trans_b, g.ldb, g.b, g.beta)):
        if re == 0 and im == 0:
            continue  # not read (it may be NULL, or hold NaNs)
        rows, cols = (g.m, g.n) if trans == 0 else (g.n, g.m)
        scale = complex(re, im) if cplx else re
        total += scale * _op(_load(addr, rows, cols, ld, g.type), trans)
    _store(g.c, g.m, g.n, g.ldc, g.type, total)


def _vector(addr: int, n: int, inc: int, typ: str) -> np.ndarray:
    """The strided vector as a NumPy view of device memory, element i first (NOTE [strided vectors])."""
    from proto.blas import span

    item = ITEM[typ]
    raw = (ctypes.c_char * span(n, inc, item)).from_address(addr)
    view = np.ndarray((n,), NUMPY[typ], memoryview(raw), strides=(abs(inc) * item,))
    return view[::-1] if inc < 0 else view


def _device_scalar(addr: int, typ: str, real: bool) -> complex:
    from proto.blas import scalar_size

    size = scalar_size(typ, real)
    stored = {4: np.float32, 8: np.float64}[size] if real or typ in ("f32", "f64") else NUMPY[typ]
    return complex(np.ndarray((1,), stored, memoryview((ctypes.c_char * size).from_address(addr)))[0])


def _put(addr: int, value: Any, dtype: Any) -> None:
    np.ndarray((1,), dtype, memoryview((ctypes.c_char * np.dtype(dtype).itemsize).from_address(addr)))[0] = value


def vector_numpy(v: Any) -> None:
    """Run a checked ``BlasVector`` (NOTE [strided vectors]); a reduction's result is written even for n = 0."""
    from proto.blas import REDUCTIONS

    typ = NUMPY[v.type]
    cplx = v.type in ("c64", "c128")
    real = np.float32 if v.type in ("f32", "c64") else np.float64
    quiet = v.n == 0 or (v.op in ("nrm2", "asum", "scal", "iamax", "iamin") and v.incx <= 0)
    if v.op in REDUCTIONS:
        if v.op in ("iamax", "iamin"):
            out_type: Any = np.int64 if v.result_int64 else np.int32
        else:
            out_type = real if v.op in ("nrm2", "asum") else typ
        if quiet:
            _put(v.result, 0, out_type)
            return
        x = _vector(v.x, v.n, v.incx, v.type)
        if v.op in ("dot", "dotc"):
            y = _vector(v.y, v.n, v.incy, v.type)
            value = np.vdot(x, y) if v.op == "dotc" else np.dot(x, y)  # dot of a strided view: BLAS, not a loop
        elif v.op == "nrm2":
            value = np.linalg.norm(x)
        else:
            mag = np.abs(x.real) + np.abs(x.imag) if cplx else np.abs(x)
            value = (
                mag.sum(dtype=real) if v.op == "asum" else (np.argmax(mag) if v.op == "iamax" else np.argmin(mag)) + 1
            )
        _put(v.result, value, out_type)
        return
    if quiet:
        return
    if v.scalars_on_device:
        alpha: complex = _device_scalar(v.alpha_ptr, v.type, v.alpha_real)
    else:
        alpha = complex(*v.alpha)
    scale = alpha if cplx else alpha.real
    x = _vector(v.x, v.n, v.incx, v.type)
    if v.op == "scal":
        x *= scale
        return
    y = _vector(v.y, v.n, v.incy, v.type)
    if v.op == "copy":
        y[...] = x
    elif v.op == "swap":
        held = x.copy()
        x[...] = y
        y[...] = held
    else:  # axpy
        y += (scale * x).astype(typ, copy=False)


def matrix_numpy(g: Any) -> None:
    """Run a checked ``BlasMatrix`` (gemv, ger, gerc, sbmv, dgmm, syrk; A column-major as stored)."""
    from proto.blas import matrix_extents

    if not matrix_extents(g):
        return  # a size of 0: nothing is read or written
    typ = NUMPY[g.type]
    cplx = g.type in ("c64", "c128")

    def scalar(which: str) -> Any:
        if g.scalars_on_device:
            value = _device_scalar(g.alpha_ptr if which == "alpha" else g.beta_ptr, g.type, False)
        else:
            value = complex(*(g.alpha if which == "alpha" else g.beta))
        return value if cplx else value.real

    if g.op == "dgmm":
        a = _load(g.a, g.m, g.n, g.lda, g.type)
        x = _vector(g.x, g.m if g.side == 0 else g.n, g.incx, g.type)
        _load(g.c, g.m, g.n, g.ldc, g.type)[...] = x[:, None] * a if g.side == 0 else a * x[None, :]
        return
    if g.op == "syrk":
        c = _load(g.c, g.n, g.n, g.ldc, g.type)
        alpha, beta = scalar("alpha"), scalar("beta")
        if g.k and alpha != 0:
            a = _op(_load(g.a, *((g.n, g.k) if g.trans == 0 else (g.k, g.n)), g.lda, g.type), g.trans)
            new = alpha * (a @ a.T)
        else:
            new = np.zeros((g.n, g.n), typ)
        if beta != 0:  # beta == 0: C is not read (it may hold NaNs)
            new = new + beta * c
        rows, cols = np.tril_indices(g.n) if g.uplo == 0 else np.triu_indices(g.n)
        c[rows, cols] = new[rows, cols]  # the other triangle is left as it was
        return
    alpha = scalar("alpha")
    if g.op in ("ger", "gerc"):
        a = _load(g.a, g.m, g.n, g.lda, g.type)
        x = _vector(g.x, g.m, g.incx, g.type)
        y = _vector(g.y, g.n, g.incy, g.type)
        a += alpha * np.outer(x, y.conj() if g.op == "gerc" else y).astype(typ, copy=False)
        return
    if g.op == "sbmv":
        x = _vector(g.x, g.n, g.incx, g.type)
        band = _load(g.a, g.k + 1, g.n, g.lda, g.type)
        prod = np.zeros(g.n, typ)
        for d in range(min(g.k, g.n - 1) + 1):  # diagonal d below (lower) or above (upper) the main one
            v = band[d, : g.n - d] if g.uplo == 0 else band[g.k - d, d:]  # A[j + d, j] = A[j, j + d], j < n - d
            prod[d:] += v * x[: g.n - d]
            if d:
                prod[: g.n - d] += v * x[d:]
        ny = g.n
    else:  # gemv
        nx, ny = (g.n, g.m) if g.trans == 0 else (g.m, g.n)
        x = _vector(g.x, nx, g.incx, g.type)
        prod = _op(_load(g.a, g.m, g.n, g.lda, g.type), g.trans) @ x
    y = _vector(g.y, ny, g.incy, g.type)
    beta = scalar("beta")
    out = alpha * prod if alpha != 0 else np.zeros(ny, typ)
    y[...] = out if beta == 0 else out + beta * y  # beta == 0: y is not read (it may hold NaNs)
