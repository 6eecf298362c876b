"""The shape rules of the sparse operations on the wire (``SparseMv``), shared by both ends: the client checks a
call before queueing it, gpud checks each extent against the session's allocations and, before it reads x,
the index arrays themselves (``check_indices``): an index is an address computation, so a bad one must be
refused rather than followed into another tenant's memory (NOTE [vendor libraries], gpud/sparse.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from proto import errors as codes
from proto.blas import ITEM
from proto.errors import CudaError

INDEX = {"i32": 4, "i64": 8}


def lengths(s: Any) -> tuple[int, int]:
    """(length of x, length of y): op(A) is rows x cols, or cols x rows transposed."""
    return (s.cols, s.rows) if s.op == 0 else (s.rows, s.cols)


def dense(s: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    """SpMM's stored shapes of B and C (rows, columns): op(A) is m x k, op(B) k x n, C m x n (SparseToDense: C is
    A's shape, n its columns)."""
    k, m = lengths(s)
    b = (k, s.n) if s.op_b == 0 else (s.n, k)
    return b, (m, s.n)


def matrix_bytes(name: str, shape: tuple[int, int], ld: int, row_major: bool, item: int) -> int:
    """The bytes a dense (rows x cols) matrix spans with leading dimension ``ld``; INVALID_VALUE for a short ld."""
    rows, cols = shape
    lead, other = (cols, rows) if row_major else (rows, cols)
    if ld < max(lead, 1):
        order = "row" if row_major else "column"
        raise CudaError(codes.INVALID_VALUE, f"spmm: {name} is {rows} x {cols} in {order} order: ld {ld} < {lead}")
    return ((other - 1) * ld + lead) * item if rows and cols else 0


def extents(s: Any) -> list[tuple[str, int, int, bool]]:
    """(operand, address, bytes, written) of a ``SparseMv``; INVALID_VALUE for what cuSPARSE refuses."""
    if s.nnz > s.rows * s.cols:
        raise CudaError(codes.INVALID_VALUE, f"spmv: nnz = {s.nnz} exceeds rows x cols = {s.rows} x {s.cols}")
    nx, ny = lengths(s)
    item, idx = ITEM[s.type], INDEX[s.index_type]
    if s.solve and (s.rows != s.cols or s.n or s.to_dense or s.format == "csc"):
        raise CudaError(codes.INVALID_VALUE, f"spsv: A must be a square CSR or COO matrix, not {s.rows} x {s.cols}")
    if s.n:  # SpMM: B and C are matrices (SparseToDense: C only, A's own shape)
        (bshape, cshape) = dense(s)
        nx = 0 if s.to_dense else matrix_bytes("B", bshape, s.ldb, s.b_row_major, item) // item
        ny = matrix_bytes("C", cshape, s.ldc, s.c_row_major, item) // item
        if s.to_dense and (s.op != 0 or s.n != s.cols):
            raise CudaError(codes.INVALID_VALUE, "sparse to dense: C must be A's own shape")
    out = []
    if s.format in ("csr", "csc"):
        out.append(
            ("offsets", s.offsets, ((s.rows if s.format == "csr" else s.cols) + 1) * INDEX[s.offset_type], False)
        )
    else:
        out.append(("row indices", s.rows_idx, s.nnz * idx, False))
    out += [("indices", s.indices, s.nnz * idx, False), ("values", s.values, s.nnz * item, False)]
    out += [("B" if s.n else "x", s.x, nx * item, False), ("C" if s.n else "y", s.y, ny * item, True)]
    return [e for e in out if e[2]]


def check_indices(s: Any, offsets: np.ndarray | None, rows_idx: np.ndarray | None, indices: np.ndarray) -> None:
    """Refuse index arrays that would address outside the matrix (cuSPARSE leaves them undefined; here they are
    CUDA_ERROR_INVALID_VALUE): offsets start at base, never decrease and end at nnz + base; every index lies in
    [base, dimension + base). ``indices`` are CSR's and COO's column indices, CSC's row indices."""

    def within(name: str, a: np.ndarray, bound: int) -> None:
        if s.nnz and (a.min() < s.base or a.max() >= bound + s.base):
            raise CudaError(codes.INVALID_VALUE, f"spmv: a {name} index lies outside [{s.base}, {bound + s.base})")

    if offsets is not None:
        if offsets[0] != s.base or offsets[-1] != s.nnz + s.base or (np.diff(offsets) < 0).any():
            raise CudaError(
                codes.INVALID_VALUE, f"spmv: the {s.format} offsets must rise from {s.base} to nnz + {s.base}"
            )
    if rows_idx is not None:
        within("row", rows_idx, s.rows)
    within("row" if s.format == "csc" else "column", indices, s.rows if s.format == "csc" else s.cols)
