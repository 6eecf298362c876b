"""Sparse matrix-vector products on tenants' device memory: the gpud side of the cuSPARSE stand-in (NOTE [vendor
libraries] in gpud/blas.py). The CPU backend runs them with SciPy's sparse kernels on views of the tenant's
arrays, after proto/sparse.py ``check_indices`` has refused any index that would reach outside them."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from gpud.blas import NUMPY, _device_scalar
from proto.sparse import INDEX, check_indices, lengths


def _array(addr: int, n: int, dtype: Any) -> np.ndarray:
    size = n * np.dtype(dtype).itemsize
    if not size:
        return np.zeros(0, dtype)
    return np.ndarray((n,), dtype, memoryview((ctypes.c_char * size).from_address(addr)))


def spmv_numpy(s: Any) -> None:
    """Run a checked ``SparseMv``: y = alpha op(A) x + beta y."""
    import scipy.sparse as sp

    typ = NUMPY[s.type]
    cplx = s.type in ("c64", "c128")
    idx = {4: np.int32, 8: np.int64}[INDEX[s.index_type]]
    offsets = rows_idx = None
    if s.format in ("csr", "csc"):
        off = {4: np.int32, 8: np.int64}[INDEX[s.offset_type]]
        offsets = _array(s.offsets, (s.rows if s.format == "csr" else s.cols) + 1, off).copy()
    else:
        rows_idx = _array(s.rows_idx, s.nnz, idx).copy()
    # copies, checked, are what the product reads: a kernel of the tenant rewriting the arrays meanwhile cannot
    # turn a checked index into one past x
    indices = _array(s.indices, s.nnz, idx).copy()
    check_indices(s, offsets, rows_idx, indices)
    values = _array(s.values, s.nnz, typ)
    shape = (s.rows, s.cols)
    if s.format == "csr":
        a = sp.csr_matrix((values, indices - s.base, offsets - s.base), shape=shape, copy=False)
    elif s.format == "csc":
        a = sp.csc_matrix((values, indices - s.base, offsets - s.base), shape=shape, copy=False)
    else:
        a = sp.coo_matrix((values, (rows_idx - s.base, indices - s.base)), shape=shape)
    if s.op == 1:
        a = a.T
    elif s.op == 2:
        a = a.conj().T
    nx, ny = lengths(s)

    def scalar(which: str) -> Any:
        if s.scalars_on_device:
            v = _device_scalar(s.alpha_ptr if which == "alpha" else s.beta_ptr, s.type, False)
        else:
            v = complex(*(s.alpha if which == "alpha" else s.beta))
        return v if cplx else v.real

    x = _array(s.x, nx, typ)
    y = _array(s.y, ny, typ)
    alpha, beta = scalar("alpha"), scalar("beta")
    prod = (a @ x) * alpha if alpha != 0 and s.nnz else np.zeros(ny, typ)
    y[...] = prod if beta == 0 else prod + beta * y  # beta == 0: y is not read (it may hold NaNs)
