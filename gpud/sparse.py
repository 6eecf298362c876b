"""Sparse matrix-vector products on tenants' device memory: the gpud side of the cuSPARSE stand-in (NOTE [vendor
libraries] in gpud/blas.py). The CPU backend runs them with SciPy's sparse kernels on views of the tenant's
arrays, after proto/sparse.py ``check_indices`` has refused any index that would reach outside them."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from gpud.blas import NUMPY, _device_scalar
from proto.sparse import INDEX, check_indices, dense, lengths


def _array(addr: int, n: int, dtype: Any) -> np.ndarray:
    size = n * np.dtype(dtype).itemsize
    if not size:
        return np.zeros(0, dtype)
    return np.ndarray((n,), dtype, memoryview((ctypes.c_char * size).from_address(addr)))


def _matrix(addr: int, shape: tuple[int, int], ld: int, row_major: bool, dtype: Any) -> np.ndarray:
    """A (rows x cols) view of a dense matrix with leading dimension ``ld`` (its extent checked by the caller)."""
    rows, cols = shape
    item = np.dtype(dtype).itemsize
    if not rows or not cols:
        return np.zeros(shape, dtype)
    lead, other = (cols, rows) if row_major else (rows, cols)
    flat = _array(addr, (other - 1) * ld + lead, dtype)
    strides = (ld * item, item) if row_major else (item, ld * item)
    return np.lib.stride_tricks.as_strided(flat, shape=shape, strides=strides)


def spmv_numpy(s: Any) -> None:
    """Run a checked ``SparseMv``: y = alpha op(A) x + beta y, or SpMM's C = alpha op(A) op(B) + beta C."""
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
    if s.solve:
        _spsv(s, a, typ)
        return
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

    alpha, beta = scalar("alpha"), scalar("beta")
    if s.to_dense:
        c = _matrix(s.y, (s.rows, s.cols), s.ldc, s.c_row_major, typ)
        c[...] = a.toarray() if s.nnz else 0
        return
    if s.n:  # SpMM: strided views of B and C in their orders
        bshape, cshape = dense(s)
        b, c = _matrix(s.x, bshape, s.ldb, s.b_row_major, typ), _matrix(s.y, cshape, s.ldc, s.c_row_major, typ)
        if s.op_b == 1:
            b = b.T
        elif s.op_b == 2:
            b = b.conj().T
        prod = np.asarray(a @ b) * alpha if alpha != 0 and s.nnz else np.zeros(cshape, typ)
        c[...] = prod if beta == 0 else prod + beta * c  # beta == 0: C is not read
        return
    x = _array(s.x, nx, typ)
    y = _array(s.y, ny, typ)
    prod = (a @ x) * alpha if alpha != 0 and s.nnz else np.zeros(ny, typ)
    y[...] = prod if beta == 0 else prod + beta * y  # beta == 0: y is not read (it may hold NaNs)


def _spsv(s: Any, a: Any, typ: Any) -> None:
    """cusparseSpSV_solve: y = alpha op(T)^-1 x, T the lower or upper triangle of A (ones on its diagonal when
    ``unit``); entries of the other triangle are ignored, as cuSPARSE ignores them. A zero on T's diagonal
    gives NaNs in y (a GPU's substitution divides by it: infinities and NaNs), not an error."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import spsolve_triangular

    t = (sp.tril(a) if s.lower else sp.triu(a)).tocsr()
    if s.unit:
        t = (t - sp.diags(t.diagonal()) + sp.identity(s.rows, dtype=t.dtype)).tocsr()
    lower = s.lower
    if s.op:
        t = (t.conj().T if s.op == 2 else t.T).tocsr()
        lower = not lower
    if s.scalars_on_device:
        alpha = _device_scalar(s.alpha_ptr, s.type, False)
    else:
        alpha = complex(*s.alpha)
    if s.type not in ("c64", "c128"):
        alpha = alpha.real
    x = _array(s.x, s.rows, typ).copy()
    y = _array(s.y, s.rows, typ)
    if not s.rows:
        return
    try:
        with np.errstate(all="ignore"):
            y[...] = np.asarray(spsolve_triangular(t, x * alpha, lower=lower), dtype=typ)
    except np.linalg.LinAlgError:  # a zero on the diagonal
        y[...] = np.nan


def ilu0_numpy(s: Any) -> int:
    """Run a ``SparseIlu0`` on a checked copy of the index arrays: ILU(0) in place (the IKJ order, over each row's
    entries left of the diagonal), in float64 or complex128, written back in the matrix's type. Returns the first
    row with a structural or numerical zero pivot (counting from ``base``), or -1."""
    import types

    offsets = _array(s.offsets, s.m + 1, np.int32).astype(np.int64)
    indices = _array(s.indices, s.nnz, np.int32).astype(np.int64)
    shape = types.SimpleNamespace(format="csr", rows=s.m, cols=s.m, nnz=s.nnz, base=s.base)
    check_indices(shape, offsets, None, indices)
    off = (offsets - s.base).tolist()
    col = (indices - s.base).tolist()
    values = _array(s.values, s.nnz, NUMPY[s.type])
    a = values.tolist()
    where = [{col[p]: p for p in range(off[i], off[i + 1])} for i in range(s.m)]
    diag = [where[i].get(i, -1) for i in range(s.m)]
    zero = -1
    for i in range(s.m):
        row = where[i]
        for p in range(off[i], off[i + 1]):
            k = col[p]
            if k >= i:
                break
            dk = diag[k]
            if dk < 0 or a[dk] == 0:
                continue  # the pivot row k was reported; cuSPARSE goes on
            a[p] /= a[dk]
            lik = a[p]
            for q in range(dk + 1, off[k + 1]):  # row k right of its diagonal
                t = row.get(col[q])
                if t is not None:
                    a[t] -= lik * a[q]
        if zero < 0 and (diag[i] < 0 or a[diag[i]] == 0):
            zero = i + s.base
    values[...] = np.asarray(a, dtype=values.dtype)
    return zero


def transpose_numpy(s: Any) -> None:
    """Run a ``SparseTranspose`` (csr2csc) on checked copies of the source indices."""
    import types

    import scipy.sparse as sp

    offsets = _array(s.offsets, s.m + 1, np.int32).astype(np.int64)
    indices = _array(s.indices, s.nnz, np.int32).astype(np.int64)
    shape = types.SimpleNamespace(format="csr", rows=s.m, cols=s.n, nnz=s.nnz, base=s.base)
    check_indices(shape, offsets, None, indices)
    perm = sp.csr_matrix(
        (np.arange(1, s.nnz + 1, dtype=np.int64), indices - s.base, offsets - s.base), shape=(s.m, s.n)
    ).tocsc()  # each entry's data is its position + 1: where it went
    csc = sp.csc_matrix(perm)
    csc.has_sorted_indices = False  # (tocsc sorts them already; cuSPARSE's output is sorted: make sure)
    csc.sort_indices()
    _array(s.out_offsets, s.n + 1, np.int32)[...] = csc.indptr + s.base
    _array(s.out_indices, s.nnz, np.int32)[...] = csc.indices + s.base
    if s.numeric and s.nnz:
        values = _array(s.values, s.nnz, NUMPY[s.type]).copy()
        _array(s.out_values, s.nnz, NUMPY[s.type])[...] = values[csc.data - 1]


def indices_numpy(s: Any) -> None:
    """Run a ``SparseIndices``: CSR row offsets to COO row indices, or back, on a checked copy of the source."""
    from proto import errors as codes
    from proto.errors import CudaError

    if s.to_coo:
        offsets = _array(s.src, s.m + 1, np.int32).astype(np.int64)
        if offsets[0] != s.base or offsets[-1] != s.nnz + s.base or (np.diff(offsets) < 0).any():
            raise CudaError(codes.INVALID_VALUE, f"csr2coo: the row offsets must rise from {s.base} to nnz + {s.base}")
        rows = np.repeat(np.arange(s.m, dtype=np.int32) + s.base, np.diff(offsets))
        _array(s.dst, s.nnz, np.int32)[...] = rows
        return
    rows = _array(s.src, s.nnz, np.int32).astype(np.int64)
    if s.nnz and (rows.min() < s.base or rows.max() >= s.m + s.base):
        raise CudaError(codes.INVALID_VALUE, f"coo2csr: a row index lies outside [{s.base}, {s.m + s.base})")
    counts = np.bincount(rows - s.base, minlength=s.m) if s.nnz else np.zeros(s.m, np.int64)
    out = _array(s.dst, s.m + 1, np.int32)
    out[0] = s.base
    out[1:] = np.cumsum(counts) + s.base


def sort_numpy(s: Any) -> None:
    """Run a ``SparseSort``: permute copies of the index arrays and the permutation, then write them back."""
    from proto import errors as codes
    from proto.errors import CudaError

    perm = _array(s.perm, s.nnz, np.int32)
    if s.mode == "identity":
        perm[...] = np.arange(s.nnz, dtype=np.int32)
        return
    cols = _array(s.cols, s.nnz, np.int32)
    if s.mode == "csr":
        offsets = _array(s.rows, s.m + 1, np.int32).astype(np.int64)
        if offsets[0] != s.base or offsets[-1] != s.nnz + s.base or (np.diff(offsets) < 0).any():
            raise CudaError(codes.INVALID_VALUE, f"csrsort: the row offsets must rise from {s.base} to nnz + {s.base}")
        row_of = np.repeat(np.arange(s.m), np.diff(offsets))
        order = np.lexsort((cols.copy(), row_of))
        cols[...], perm[...] = cols[order], perm[order]
        return
    rows = _array(s.rows, s.nnz, np.int32)
    r, c = rows.copy(), cols.copy()
    order = np.lexsort((c, r)) if s.mode == "coo_row" else np.lexsort((r, c))
    rows[...], cols[...], perm[...] = r[order], c[order], perm[order]


def gather_numpy(s: Any) -> None:
    """Run a ``SparseGather`` (or its scatter) on a checked copy of the indices."""
    from proto import errors as codes
    from proto.errors import CudaError

    idx = _array(s.indices, s.nnz, np.int32 if s.index_type == "i32" else np.int64).astype(np.int64) - s.base
    if s.nnz and (idx.min() < 0 or idx.max() >= s.size):
        raise CudaError(codes.INVALID_VALUE, f"gather: an index lies outside [{s.base}, {s.size + s.base})")
    typ = NUMPY[s.type]
    if s.scatter:
        _array(s.y, s.size, typ)[idx] = _array(s.values, s.nnz, typ)
    else:
        _array(s.values, s.nnz, typ)[...] = _array(s.y, s.size, typ)[idx]


SPGEMM_MAX_PRODUCTS = 1 << 26  # partial products one SpGEMM may form on gpud (host memory, ~16 bytes each)


def spgemm_numpy(s: Any) -> int:
    """Run a ``SparseGemm``: C = alpha A B from checked copies of A's and B's indices; C's nnz (``count``) or C
    written (its nnz must be the one ``count`` gave)."""
    import types

    import scipy.sparse as sp

    from proto import errors as codes
    from proto.errors import CudaError

    idx = np.int32 if s.index_type == "i32" else np.int64
    typ = NUMPY[s.type]

    def csr(rows: int, cols: int, nnz: int, offsets: int, indices: int, values: int) -> Any:
        off = _array(offsets, rows + 1, idx).astype(np.int64)
        ind = _array(indices, nnz, idx).astype(np.int64)
        shape = types.SimpleNamespace(format="csr", rows=rows, cols=cols, nnz=nnz, base=s.base)
        check_indices(shape, off, None, ind)
        vals = _array(values, nnz, typ).copy()
        return off - s.base, ind - s.base, sp.csr_matrix((vals, ind - s.base, off - s.base), shape=(rows, cols))

    _, a_ind, a = csr(s.m, s.k, s.a_nnz, s.a_offsets, s.a_indices, s.a_values)
    b_off, _, b = csr(s.k, s.n, s.b_nnz, s.b_offsets, s.b_indices, s.b_values)
    products = int(np.diff(b_off)[a_ind].sum()) if s.a_nnz else 0
    if products > SPGEMM_MAX_PRODUCTS:
        raise CudaError(
            codes.OUT_OF_MEMORY, f"spgemm: {products} partial products (gpud forms at most {SPGEMM_MAX_PRODUCTS})"
        )
    alpha = complex(*s.alpha) if s.type in ("c64", "c128") else s.alpha[0]
    c = sp.csr_matrix(a @ b) * alpha
    c.sum_duplicates()
    c.sort_indices()
    if s.count:
        return int(c.nnz)
    if c.nnz != s.c_nnz:
        raise CudaError(codes.INVALID_VALUE, f"spgemm: C has {c.nnz} entries, not the {s.c_nnz} its arrays hold")
    _array(s.c_offsets, s.m + 1, idx)[...] = c.indptr + s.base
    _array(s.c_indices, s.c_nnz, idx)[...] = c.indices + s.base
    _array(s.c_values, s.c_nnz, typ)[...] = c.data
    return int(c.nnz)


def from_dense_numpy(s: Any) -> int:
    """Run a ``SparseFromDense``: the nonzeros of the dense matrix, sorted (CSR/COO by row, CSC by column)."""
    import scipy.sparse as sp

    from proto import errors as codes
    from proto.errors import CudaError

    typ = NUMPY[s.type]
    a = _matrix(s.values, (s.rows, s.cols), s.ld, s.row_major, typ).copy()
    conv = sp.csc_matrix(a) if s.format == "csc" else sp.csr_matrix(a)
    conv.sort_indices()
    if s.count:
        return int(conv.nnz)
    if conv.nnz != s.nnz:
        raise CudaError(codes.INVALID_VALUE, f"dense to sparse: {conv.nnz} nonzeros, not the {s.nnz} the arrays hold")
    off = {4: np.int32, 8: np.int64}[INDEX[s.offset_type]]
    idx = {4: np.int32, 8: np.int64}[INDEX[s.index_type]]
    if s.format == "coo":
        coo = conv.tocoo()
        _array(s.offsets, s.nnz, idx)[...] = coo.row + s.base
        _array(s.indices, s.nnz, idx)[...] = coo.col + s.base
        _array(s.out_values, s.nnz, typ)[...] = coo.data
        return int(s.nnz)
    _array(s.offsets, len(conv.indptr), off)[...] = conv.indptr + s.base
    _array(s.indices, s.nnz, idx)[...] = conv.indices + s.base
    _array(s.out_values, s.nnz, typ)[...] = conv.data
    return int(s.nnz)


def geam_numpy(s: Any) -> int:
    """Run a ``SparseGeam``: C = alpha A + beta B from checked copies of A's and B's indices, sorted."""
    import types

    import scipy.sparse as sp

    from proto import errors as codes
    from proto.errors import CudaError

    typ = NUMPY[s.type]

    def csr(nnz: int, offsets: int, indices: int, values: int, base: int) -> tuple[Any, Any]:
        off = _array(offsets, s.m + 1, np.int32).astype(np.int64)
        ind = _array(indices, nnz, np.int32).astype(np.int64)
        check_indices(types.SimpleNamespace(format="csr", rows=s.m, cols=s.n, nnz=nnz, base=base), off, None, ind)
        ones = sp.csr_matrix((np.ones(nnz, np.int8), ind - base, off - base), shape=(s.m, s.n))
        vals = None if s.count else sp.csr_matrix((_array(values, nnz, typ).copy(), ind - base, off - base), (s.m, s.n))
        return ones, vals

    a_ones, a = csr(s.a_nnz, s.a_offsets, s.a_indices, s.a_values, s.a_base)
    b_ones, b = csr(s.b_nnz, s.b_offsets, s.b_indices, s.b_values, s.b_base)
    cplx = s.type in ("c64", "c128")
    alpha = complex(*s.alpha) if cplx else s.alpha[0]
    beta = complex(*s.beta) if cplx else s.beta[0]
    # C's pattern is the union of A's and B's, whatever the values (entries that cancel stay, as in cuSPARSE)
    pattern = (a_ones.astype(np.int32) + b_ones.astype(np.int32)).tocsr()
    pattern.sort_indices()
    if s.count:
        _array(s.c_offsets, s.m + 1, np.int32)[...] = pattern.indptr + s.c_base
        return int(pattern.nnz)
    if pattern.nnz != s.c_nnz:
        raise CudaError(
            codes.INVALID_VALUE, f"csrgeam2: C has {pattern.nnz} entries, not the {s.c_nnz} its arrays hold"
        )
    c = (a * alpha + b * beta).tocsr()
    c.sort_indices()
    dense_vals = np.zeros(pattern.nnz, typ)
    rows = np.repeat(np.arange(s.m), np.diff(pattern.indptr))
    dense_vals[...] = np.asarray(c[rows, pattern.indices]).ravel() if pattern.nnz else dense_vals
    _array(s.c_offsets, s.m + 1, np.int32)[...] = pattern.indptr + s.c_base
    _array(s.c_indices, s.c_nnz, np.int32)[...] = pattern.indices + s.c_base
    _array(s.c_values, s.c_nnz, typ)[...] = dense_vals
    return int(s.c_nnz)


def compress_numpy(s: Any) -> int:
    """Run a ``SparseCompress``: the entries whose absolute value passes ``tol``, counted per row or written."""
    from proto import errors as codes
    from proto.errors import CudaError

    typ = NUMPY[s.type]
    offsets = _array(s.offsets, s.m + 1, np.int32).astype(np.int64)
    if offsets[0] != s.base or offsets[-1] != s.nnz + s.base or (np.diff(offsets) < 0).any():
        raise CudaError(codes.INVALID_VALUE, f"nnz_compress: the row offsets must rise from {s.base} to nnz + {s.base}")
    keep = np.abs(_array(s.values, s.nnz, typ)) > s.tol
    row_of = np.repeat(np.arange(s.m), np.diff(offsets))
    per_row = np.bincount(row_of[keep], minlength=s.m).astype(np.int32) if s.nnz else np.zeros(s.m, np.int32)
    total = int(per_row.sum())
    if s.count:
        _array(s.per_row, s.m, np.int32)[...] = per_row
        return total
    if total != s.c_nnz:
        raise CudaError(codes.INVALID_VALUE, f"csr2csr_compress: {total} entries pass tol, not the {s.c_nnz} C holds")
    _array(s.c_values, total, typ)[...] = _array(s.values, s.nnz, typ)[keep]
    _array(s.c_indices, total, np.int32)[...] = _array(s.indices, s.nnz, np.int32)[keep]
    out = _array(s.c_offsets, s.m + 1, np.int32)
    out[0] = s.base
    out[1:] = np.cumsum(per_row) + s.base
    return total


def solve_numpy(s: Any) -> int:
    """Run a ``SparseSolve`` on checked copies of the index arrays (NOTE [sparse solves], proto/spsolve.py): writes x
    unless A is singular; returns the singularity (-1: none)."""
    from proto import errors as codes
    from proto import spsolve
    from proto.errors import CudaError

    offsets = _array(s.offsets, s.m + 1, np.int32).copy()
    indices = _array(s.indices, s.nnz, np.int32).copy()
    try:
        a = spsolve.csr(s.m, s.n, offsets, indices, _array(s.values, s.nnz, np.float64).copy(), s.base)
        if not s.b and not s.x:
            return spsolve.factor(s.method, a, s.tol, s.mu)[1]
        x, singularity = spsolve.solve(s.method, a, _array(s.b, s.m, np.float64).copy(), s.tol, s.mu)
    except ValueError as exc:  # bad indices, or a shape the method does not take
        raise CudaError(codes.INVALID_VALUE, f"cusolverSp csr{s.method}: {exc}") from None
    if x is not None:
        _array(s.x, s.n, np.float64)[...] = x
    return singularity


# wire kind -> the product that runs it (gpud/backends/cpu.py)
PRODUCTS = {
    "sparse_gemm": spgemm_numpy,
    "sparse_geam": geam_numpy,
    "sparse_from_dense": from_dense_numpy,
    "sparse_compress": compress_numpy,
    "sparse_ilu0": ilu0_numpy,
    "sparse_solve": solve_numpy,
}

# wire kind -> the conversion that runs it (gpud/backends/cpu.py)
CONVERSIONS = {
    "sparse_indices": indices_numpy,
    "sparse_transpose": transpose_numpy,
    "sparse_sort": sort_numpy,
    "sparse_gather": gather_numpy,
}
