"""proto/spsolve.py, the one definition of cuSOLVER's sparse solves (NOTE [sparse solves]), and cusparseScatter's
gpud half."""

from __future__ import annotations

import types

import numpy as np
import pytest
import scipy.sparse as sp

from proto import spsolve


def _spd(n: int = 30, seed: int = 0) -> sp.csr_matrix:
    a = sp.random(n, n, density=0.15, random_state=seed, format="csr")
    return (a + a.T + sp.identity(n) * n).tocsr()


@pytest.mark.parametrize("kind", spsolve.KINDS)
def test_solves_match_numpy(kind: str) -> None:
    a = _spd() if kind == "chol" else (_spd() + sp.random(30, 30, density=0.05, random_state=3)).tocsr()
    b = np.arange(30.0)
    x, singular = spsolve.solve(kind, a, b, 1e-12)
    assert singular == -1
    assert np.allclose(x, np.linalg.solve(a.toarray(), b), atol=1e-12)


def test_cholesky_reads_the_lower_triangle_and_reports_an_indefinite_matrix() -> None:
    a = _spd()
    upper_garbage = (sp.tril(a) + sp.triu(a, 1) * 50).tocsr()
    x, _ = spsolve.solve("chol", upper_garbage, np.ones(30), 1e-12)
    assert np.allclose(a @ x, 1.0)
    indefinite = (a - sp.identity(30) * 200).tocsr()
    assert spsolve.solve("chol", indefinite, np.ones(30), 1e-12)[1] >= 0
    assert spsolve.solve("lu", indefinite, np.ones(30), 1e-12)[1] == -1  # invertible all the same


def test_singular_matrix_names_a_column_and_leaves_no_x() -> None:
    a = _spd().tolil()
    a[:, 11] = 0.0
    x, singular = spsolve.solve("lu", a.tocsr(), np.ones(30), 1e-12)
    assert x is None and 0 <= singular < 30


def test_shift_and_least_squares() -> None:
    a = _spd()
    x, _ = spsolve.solve("qr", a, np.ones(30), 0.0, mu=2.5)
    assert np.allclose((a - sp.identity(30) * 2.5) @ x, 1.0)
    tall = sp.random(50, 20, density=0.3, random_state=5, format="csr") + sp.eye(50, 20)
    b = np.linspace(0, 1, 50)
    x, singular = spsolve.solve("qr", tall.tocsr(), b, 0.0)
    assert singular == -1 and np.allclose(x, np.linalg.lstsq(tall.toarray(), b, rcond=None)[0])
    with pytest.raises(ValueError):
        spsolve.solve("lu", tall.tocsr(), b, 0.0)


def test_orderings_and_permutation() -> None:
    a = _spd(25, 1)
    for order in (spsolve.reverse_cuthill_mckee(a), spsolve.minimum_degree(a)):
        assert sorted(order.tolist()) == list(range(25))
    p = np.arange(25)[::-1].copy()
    q = (np.arange(25) * 4) % 25
    a.sort_indices()
    off, idx, where = spsolve.permute(25, 25, a.indptr, a.indices, 0, p, q)
    b = sp.csr_matrix((a.data[where], idx, off), shape=(25, 25))
    assert (b != a[p, :][:, q]).nnz == 0
    with pytest.raises(ValueError, match="permutation"):
        spsolve.permute(25, 25, a.indptr, a.indices, 0, np.zeros(25, np.int32), q)


def test_bad_indices_are_refused() -> None:
    with pytest.raises(ValueError, match="column index"):
        spsolve.csr(2, 2, np.array([1, 2, 3]), np.array([1, 3]), None, 1)
    with pytest.raises(ValueError, match="offsets"):
        spsolve.csr(2, 2, np.array([0, 3, 2]), np.array([0, 1]), None, 0)


def test_scatter_writes_the_dense_vector() -> None:
    from gpud.sparse import gather_numpy

    y = np.zeros(6)
    values = np.array([1.5, -2.0, 3.0])
    indices = np.array([5, 1, 3], np.int32)  # base 1
    msg = types.SimpleNamespace(
        size=6, nnz=3, indices=indices.ctypes.data, values=values.ctypes.data, y=y.ctypes.data, index_type="i32",
        type="f64", base=1, scatter=True,
    )  # fmt: skip
    gather_numpy(msg)
    assert y.tolist() == [-2.0, 0.0, 3.0, 0.0, 1.5, 0.0]
    indices[0] = 7
    with pytest.raises(Exception, match="outside"):
        gather_numpy(msg)


@pytest.mark.parametrize(("method", "m", "n", "rhs"), [("lu", 3, 5, True), ("chol", 5, 3, True), ("qr", 3, 5, True),
                                                       ("chol", 5, 3, False)])  # fmt: skip
def test_gpud_refuses_a_shape_the_method_does_not_take(method: str, m: int, n: int, rhs: bool) -> None:
    """A hostile client's sparse_solve with a shape its method cannot solve is CUDA_ERROR_INVALID_VALUE in gpud,
    not an exception that escapes the operation; x is not written."""
    from gpud.sparse import solve_numpy
    from proto.errors import CudaError

    offsets = np.arange(m + 1, dtype=np.int32)
    indices = np.zeros(m, np.int32)
    values = np.ones(m)
    b, x = np.ones(m), np.full(n, 7.0)
    msg = types.SimpleNamespace(
        method=method, m=m, n=n, nnz=m, values=values.ctypes.data, offsets=offsets.ctypes.data,
        indices=indices.ctypes.data, b=b.ctypes.data if rhs else 0, x=x.ctypes.data if rhs else 0, tol=0.0, mu=0.0,
        base=0,
    )  # fmt: skip
    with pytest.raises(CudaError) as ei:
        solve_numpy(msg)
    assert ei.value.code == 1 and method in str(ei.value)
    assert (x == 7.0).all()
