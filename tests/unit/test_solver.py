"""gpud/solver.py against NumPy, on column-major buffers as cuSOLVER sees them: the factors land where cuSOLVER
leaves them (pivots 1-based, the other triangle of a Cholesky factor untouched, gesvd's 'O' jobs into A), and a
singular matrix is an info, not an error."""

from __future__ import annotations

import numpy as np
import pytest

from gpud.solver import solve_numpy
from proto.errors import CudaError
from proto.messages import SolverCall
from proto.solver import extents

RNG = np.random.default_rng(0)


def col(a: np.ndarray) -> np.ndarray:
    return np.asfortranarray(a).copy(order="F")


def call(**kw: object) -> SolverCall:
    s = SolverCall(**kw)  # type: ignore[arg-type]
    extents(s)  # the shape rules both ends apply
    solve_numpy(s)
    return s


@pytest.mark.parametrize("dtype,typ", [(np.float64, "f64"), (np.complex64, "c64")])
def test_lu_solve_and_inverse(dtype: type, typ: str) -> None:
    a = RNG.standard_normal((5, 5)).astype(dtype)
    b = RNG.standard_normal((5, 2)).astype(dtype)
    lu, piv, info = col(a), np.zeros(5, np.int32), np.full(1, 7, np.int32)
    call(op="getrf", dtype=typ, m=5, n=5, a=lu.ctypes.data, lda=5, ipiv=piv.ctypes.data, info=info.ctypes.data)
    assert info[0] == 0 and piv.min() >= 1 and piv.max() <= 5
    x = col(b)
    for trans, ref in ((0, a), (1, a.T)):
        x = col(b)
        call(
            op="getrs",
            dtype=typ,
            m=5,
            n=5,
            k=2,
            trans=trans,
            a=lu.ctypes.data,
            lda=5,
            ipiv=piv.ctypes.data,
            b=x.ctypes.data,
            ldb=5,
            info=info.ctypes.data,
        )
        assert np.allclose(ref @ x, b, atol=1e-4)
    inv = np.zeros((5, 5), dtype, order="F")
    call(op="getri", dtype=typ, m=5, n=5, a=lu.ctypes.data, lda=5, ipiv=piv.ctypes.data, b=inv.ctypes.data, ldb=5)
    assert np.allclose(inv @ a, np.eye(5), atol=1e-4)


def test_a_singular_matrix_is_an_info() -> None:
    a, piv, info = np.ones((3, 3), order="F"), np.zeros(3, np.int32), np.zeros(1, np.int32)
    call(op="getrf", dtype="f64", m=3, n=3, a=a.ctypes.data, lda=3, ipiv=piv.ctypes.data, info=info.ctypes.data)
    assert info[0] == 2  # U(2,2) is exactly zero (LAPACK's 1-based index)


@pytest.mark.parametrize("uplo", [0, 1])
def test_cholesky_leaves_the_other_triangle(uplo: int) -> None:
    m = RNG.standard_normal((4, 4))
    spd = m @ m.T + 4 * np.eye(4)
    a = col(spd)
    call(op="potrf", dtype="f64", m=4, n=4, uplo=uplo, a=a.ctypes.data, lda=4)
    want = np.linalg.cholesky(spd)
    if uplo == 0:
        assert np.allclose(np.tril(a), want) and np.array_equal(np.triu(a, 1), np.triu(spd, 1))
    else:
        assert np.allclose(np.triu(a), want.T) and np.array_equal(np.tril(a, -1), np.tril(spd, -1))
    b = col(RNG.standard_normal((4, 1)))
    rhs = b.copy()
    call(op="potrs", dtype="f64", m=4, n=4, k=1, uplo=uplo, a=a.ctypes.data, lda=4, b=b.ctypes.data, ldb=4)
    assert np.allclose(spd @ b, rhs)


def test_qr_and_svd_jobs() -> None:
    a0 = RNG.standard_normal((6, 4))
    a, tau = col(a0), np.zeros(4)
    call(op="geqrf", dtype="f64", m=6, n=4, a=a.ctypes.data, lda=6, w=tau.ctypes.data)
    r = np.triu(a[:4])
    call(op="orgqr", dtype="f64", m=6, n=4, k=4, a=a.ctypes.data, lda=6, w=tau.ctypes.data)
    assert np.allclose(a @ r, a0)
    for jobu, jobvt in (("A", "A"), ("S", "S"), ("O", "S"), ("S", "O"), ("N", "N")):
        x = col(a0)
        s, u, vt = np.zeros(4), np.zeros((6, 6), order="F"), np.zeros((4, 4), order="F")
        call(
            op="gesvd",
            dtype="f64",
            m=6,
            n=4,
            jobu=jobu,
            jobvt=jobvt,
            a=x.ctypes.data,
            lda=6,
            w=s.ctypes.data,
            u=u.ctypes.data,
            ldu=6,
            vt=vt.ctypes.data,
            ldvt=4,
        )
        assert np.allclose(s, np.linalg.svd(a0, compute_uv=False))
        uu = x[:, :4] if jobu == "O" else u[:, :4]
        vv = x[:4, :4] if jobvt == "O" else vt
        if jobu != "N":
            assert np.allclose(np.abs(uu.T @ a0 @ vv.T), np.diag(s), atol=1e-10)
    with pytest.raises(CudaError, match="cannot both be 'O'"):
        extents(SolverCall(op="gesvd", dtype="f64", m=6, n=4, jobu="O", jobvt="O", a=1, lda=6, w=1))
    with pytest.raises(CudaError, match="m >= n"):
        extents(SolverCall(op="gesvd", dtype="f64", m=3, n=4, a=1, lda=3, w=1))


def test_symmetric_eigenvalues() -> None:
    m = RNG.standard_normal((5, 5)) + 1j * RNG.standard_normal((5, 5))
    h = m @ m.conj().T
    a, w = col(h), np.zeros(5)
    call(op="syevd", dtype="c128", m=5, n=5, uplo=1, vectors=True, a=a.ctypes.data, lda=5, w=w.ctypes.data)
    assert np.allclose(w, np.linalg.eigvalsh(h)) and np.allclose(h @ a, a * w)


def test_jacobi_svd_writes_v_and_geev_packs_real_vectors() -> None:
    a0 = RNG.standard_normal((3, 5))
    a, s = col(a0), np.zeros(3)
    u, v = np.zeros((3, 3), order="F"), np.zeros((5, 5), order="F")
    call(
        op="gesvdj",
        dtype="f64",
        m=3,
        n=5,
        jobu="A",
        vectors=True,
        a=a.ctypes.data,
        lda=3,
        w=s.ctypes.data,
        u=u.ctypes.data,
        ldu=3,
        vt=v.ctypes.data,
        ldvt=5,
    )
    assert np.allclose((u * s) @ v[:, :3].T, a0)  # V itself, not V^H
    g = RNG.standard_normal((4, 4))
    a, w, vr = col(g), np.zeros(4, np.complex128), np.zeros((4, 4), order="F")
    call(
        op="geev",
        dtype="f64",
        m=4,
        n=4,
        vectors=True,
        a=a.ctypes.data,
        lda=4,
        w=w.ctypes.data,
        vt=vr.ctypes.data,
        ldvt=4,
    )
    assert np.allclose(np.sort_complex(w), np.sort_complex(np.linalg.eigvals(g)))
    j = 0
    while j < 4:  # LAPACK's packing: a complex pair's vector is column j + i * column j+1
        if abs(w[j].imag) > 1e-12:
            x = vr[:, j] + 1j * vr[:, j + 1]
            assert np.allclose(g @ x, w[j] * x)
            j += 2
        else:
            assert np.allclose(g @ vr[:, j], w[j].real * vr[:, j])
            j += 1


def test_the_inverse_of_a_singular_matrix_is_nan() -> None:
    lu, piv = np.ones((2, 2), order="F"), np.zeros(2, np.int32)
    call(op="getrf", dtype="f64", m=2, n=2, a=lu.ctypes.data, lda=2, ipiv=piv.ctypes.data)
    inv, info = np.zeros((2, 2), order="F"), np.zeros(1, np.int32)
    call(
        op="getri",
        dtype="f64",
        m=2,
        n=2,
        a=lu.ctypes.data,
        lda=2,
        ipiv=piv.ctypes.data,
        b=inv.ctypes.data,
        ldb=2,
        info=info.ctypes.data,
    )
    assert info[0] == 2 and np.isnan(inv).all()
