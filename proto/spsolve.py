"""Sparse direct solves, one definition for both ends (NOTE [sparse solves]): cuSOLVER's sparse API runs it on the
client for its ``*Host`` functions (shim/native/cusolver_sp.py) and in gpud for the device ones (``SparseSolve``,
gpud/sparse.py).

# NOTE [sparse solves]
# cusolverSp's solvers (csrlsv{chol,lu,qr}, the low-level csrchol*/csrqr* families) all answer x with A x = b (QR:
# the least-squares x when A has more rows than columns; Cholesky reads A's lower triangle) and a "singularity": -1 when A is invertible under ``tol``,
# else the index of a pivot at most ``tol`` in magnitude (for Cholesky: at most ``tol``, so a matrix that is not
# positive definite is reported too). Here every square system is factorised by SuperLU (SciPy's ``splu``): for
# Cholesky without row pivoting on a symmetric fill-reducing ordering (minimum degree on A^T + A), so that U's
# diagonal holds the Cholesky pivots squared and their signs; for LU and QR with partial pivoting on a COLAMD
# ordering. The reported index is the column of A at the first small pivot. A rectangular QR system is solved by
# dense least squares (LAPACK's gelsd) up to 2^22 entries, by LSQR beyond. ``reorder`` does not change the result
# (SuperLU always orders), so it is accepted and ignored; the fill-reducing orderings of the API (symrcm,
# symamd, metisnd) are offered on their own: reverse Cuthill-McKee is SciPy's, symamd and metisnd answer SuperLU's
# minimum-degree ordering of A^T + A (a fill-reducing symmetric ordering, not METIS's nested dissection).
"""

from __future__ import annotations

from typing import Any

import numpy as np

KINDS = ("chol", "lu", "qr")
DENSE_LSTSQ_LIMIT = 1 << 22  # rectangular QR: entries of A solved densely


def csr(m: int, n: int, offsets: np.ndarray, indices: np.ndarray, values: np.ndarray | None, base: int) -> Any:
    """A checked SciPy CSR matrix from cuSOLVER's int32 arrays (``values`` None: a pattern of ones). Raises
    ValueError naming what is wrong: offsets must rise from ``base`` to nnz + ``base``, indices lie in [base,
    n + base)."""
    import scipy.sparse as sp

    off = np.asarray(offsets, np.int64) - base
    idx = np.asarray(indices, np.int64) - base
    nnz = len(idx)
    if len(off) != m + 1 or off[0] != 0 or off[-1] != nnz or np.any(np.diff(off) < 0):
        raise ValueError(f"row offsets must rise from {base} to nnz + {base} = {nnz + base}")
    if nnz and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"a column index lies outside [{base}, {n + base})")
    data = np.ones(nnz) if values is None else np.asarray(values)
    return sp.csr_matrix((data, idx, off), shape=(m, n))


def factor(kind: str, a: Any, tol: float, mu: float = 0.0) -> tuple[Any, int]:
    """(factorisation or None, singularity) of the square ``a - mu I`` (NOTE [sparse solves])."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    m, n = a.shape
    if m != n:
        if kind != "qr" or m < n:
            raise ValueError(f"{kind} needs a square matrix (QR: at least as many rows as columns), not {m} x {n}")
        return None, -1  # a tall QR system: solved by least squares, nothing to factorise here
    a = a - mu * sp.identity(n, format="csr") if mu else a
    if kind == "chol":  # Cholesky reads A's lower triangle only, as cuSOLVER's does
        low = sp.tril(a, format="csr")
        a = (low + sp.tril(a, -1, format="csr").T).tocsr()
    try:
        if kind == "chol":
            lu = splu(a.tocsc(), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
        else:
            lu = splu(a.tocsc(), permc_spec="COLAMD")
    except RuntimeError:  # exactly singular: SuperLU names no column
        return None, 0
    d = lu.U.diagonal()
    small = (d.real <= tol) if kind == "chol" else (np.abs(d) <= tol)
    where = np.flatnonzero(small)
    if len(where):  # the column of A that the factorisation took at that step (perm_c maps A's column to a step)
        return lu, int(np.flatnonzero(lu.perm_c == where[0])[0])
    return lu, -1


def solve(kind: str, a: Any, b: np.ndarray, tol: float, mu: float = 0.0) -> tuple[np.ndarray | None, int]:
    """(x, singularity): x solves (a - mu I) x = b (least squares for a tall QR system); None when singular."""
    m, n = a.shape
    if m != n:
        if kind != "qr":
            raise ValueError(f"{kind} needs a square matrix, not {m} x {n}")
        if m < n:
            raise ValueError(f"QR needs at least as many rows as columns, not {m} x {n}")
        if m * n <= DENSE_LSTSQ_LIMIT:
            x, _, rank, _ = np.linalg.lstsq(a.toarray(), b, rcond=None)
            return (x, -1) if rank == n else (None, int(rank))
        from scipy.sparse.linalg import lsqr

        return lsqr(a, b, atol=0.0, btol=0.0, conlim=0.0, iter_lim=10 * n)[0], -1
    lu, singularity = factor(kind, a, tol, mu)
    if lu is None or singularity >= 0:
        return None, singularity
    return lu.solve(np.asarray(b)), -1


def reverse_cuthill_mckee(a: Any) -> np.ndarray:
    """symrcm: the ordering of A^T + A's pattern (int32, from 0)."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee as rcm

    pattern = (abs(a) + abs(a.T)).tocsr()
    return np.asarray(rcm(pattern, symmetric_mode=True), np.int32)


def minimum_degree(a: Any) -> np.ndarray:
    """symamd / metisnd: SuperLU's minimum-degree ordering of A^T + A (int32, from 0)."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    n = a.shape[0]
    # a diagonally dominant matrix on A^T + A's pattern factors without breakdown; only its column order is kept
    pattern = (abs(a) + abs(a.T)).tocsr()
    pattern.data[:] = 1.0
    spd = pattern + sp.identity(n, format="csr") * (n + 1.0)
    lu = splu(spd.tocsc(), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
    order = np.empty(n, np.int64)
    order[lu.perm_c] = np.arange(n)  # perm_c maps column j to its position: the ordering lists columns by position
    return order.astype(np.int32)


def permute(
    m: int, n: int, offsets: np.ndarray, indices: np.ndarray, base: int, p: np.ndarray, q: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """csrperm: B = A(p, q), B(i, j) = A(p[i], q[j]); (offsets, indices, where) of B, with ``base``; where[k] is the
    position in A's arrays of B's k-th entry (each row's columns ascending)."""
    nnz = len(indices)
    a = csr(m, n, offsets, indices, np.arange(1, nnz + 1, dtype=np.float64), base)
    for name, perm, size in (("p", p, m), ("q", q, n)):
        if len(perm) != size or not np.array_equal(np.sort(perm), np.arange(size)):
            raise ValueError(f"{name} is not a permutation of 0..{size - 1}")
    b = a[np.asarray(p), :][:, np.asarray(q)].tocsr()
    b.sort_indices()
    return (b.indptr + base).astype(np.int32), (b.indices + base).astype(np.int32), b.data.astype(np.int64) - 1
