"""cupy.linalg as CuPy users call it, on the cuSOLVER stand-in (and cuBLAS's batched LU); prints OK when every
result matches NumPy's."""

import cupy as cp
import cupyx
import numpy as np

rng = np.random.default_rng(3)
for dt, tol in ((np.float64, 1e-10), (np.float32, 1e-4), (np.complex128, 1e-10), (np.complex64, 1e-4)):
    a = rng.standard_normal((6, 6)).astype(dt)
    if np.iscomplexobj(a):
        a = a + 1j * rng.standard_normal((6, 6)).astype(dt)
    b = rng.standard_normal((6, 3)).astype(dt)
    spd = a @ a.conj().T + 6 * np.eye(6, dtype=dt)
    ga, gb, gs = cp.asarray(a), cp.asarray(b), cp.asarray(spd)
    assert np.allclose(cp.asnumpy(cp.linalg.solve(ga, gb)), np.linalg.solve(a, b), atol=tol)  # getrf + getrs
    assert np.allclose(cp.asnumpy(cp.linalg.inv(ga)), np.linalg.inv(a), atol=tol)  # cuBLAS getrf/getriBatched
    assert np.isclose(complex(cp.linalg.det(ga)), np.linalg.det(a), rtol=tol * 10)
    l_ = cp.asnumpy(cp.linalg.cholesky(gs))  # potrf
    assert np.allclose(l_, np.linalg.cholesky(spd), atol=tol * 10)
    q, r = cp.linalg.qr(ga)  # geqrf + orgqr/ungqr
    assert np.allclose(cp.asnumpy(q @ r), a, atol=tol * 10)
    assert np.allclose(cp.asnumpy(q.conj().T @ q), np.eye(6), atol=tol * 10)
    s = cp.asnumpy(cp.linalg.svd(ga, compute_uv=False))  # gesvd
    assert np.allclose(s, np.linalg.svd(a, compute_uv=False), atol=tol * 10)
    u, s2, vh = cp.linalg.svd(cp.asarray(a[:, :4]), full_matrices=False)
    assert np.allclose(cp.asnumpy((u * s2) @ vh), a[:, :4], atol=tol * 10)
    w, v = cp.linalg.eigh(gs)  # syevd / heevd
    assert np.allclose(cp.asnumpy(w), np.linalg.eigvalsh(spd), atol=tol * 100)
    assert np.allclose(cp.asnumpy(gs @ v), cp.asnumpy(v * w), atol=tol * 100)
# batched: solve and cholesky of a stack (cuBLAS getrf/getrsBatched, cuSOLVER potrf/potrsBatched)
st = rng.standard_normal((4, 5, 5))
rhs = rng.standard_normal((4, 5, 2))
assert np.allclose(cp.asnumpy(cp.linalg.solve(cp.asarray(st), cp.asarray(rhs))), np.linalg.solve(st, rhs))
spds = st @ st.transpose(0, 2, 1) + 5 * np.eye(5)
assert np.allclose(cp.asnumpy(cp.linalg.cholesky(cp.asarray(spds))), np.linalg.cholesky(spds))
assert np.allclose(cp.asnumpy(cp.linalg.inv(cp.asarray(st))), np.linalg.inv(st))
# stacks of eigen- and singular value problems (cuSOLVER's Jacobi methods, syevj/gesvdjBatched), a general
# matrix's eigenvalues (Xgeev), and the inverse of a singular matrix in a stack (NaN, so cond is inf)
herm = st + st.transpose(0, 2, 1)
w3, v3 = cp.linalg.eigh(cp.asarray(herm))
assert np.allclose(cp.asnumpy(w3), np.linalg.eigvalsh(herm))
assert np.allclose(cp.asnumpy(cp.asarray(herm) @ v3), cp.asnumpy(v3 * w3[:, None, :]))
s3 = cp.asnumpy(cp.linalg.svd(cp.asarray(st), compute_uv=False))
assert np.allclose(s3, np.linalg.svd(st, compute_uv=False))
u3, s3b, vh3 = cp.linalg.svd(cp.asarray(st))
assert np.allclose(cp.asnumpy((u3 * s3b[:, None, :]) @ vh3), st)
gen = rng.standard_normal((5, 5))
ev, evec = cp.linalg.eig(cp.asarray(gen))
assert np.allclose(np.sort_complex(cp.asnumpy(ev)), np.sort_complex(np.linalg.eigvals(gen)))
assert np.allclose(cp.asnumpy(cp.asarray(gen) @ evec), cp.asnumpy(evec * ev))
zg = gen + 1j * rng.standard_normal((5, 5))
assert np.allclose(
    np.sort_complex(cp.asnumpy(cp.linalg.eigvals(cp.asarray(zg)))), np.sort_complex(np.linalg.eigvals(zg))
)
pair = np.stack([np.ones((2, 2)), np.eye(2)])
assert np.isinf(float(cp.linalg.cond(cp.asarray(pair), 1)[0]))
# derived: least squares, pseudo-inverse, rank, 2-norm
tall = rng.standard_normal((8, 3))
y = rng.standard_normal(8)
assert np.allclose(
    cp.asnumpy(cp.linalg.lstsq(cp.asarray(tall), cp.asarray(y), rcond=None)[0]), np.linalg.lstsq(tall, y, rcond=None)[0]
)
assert np.allclose(cp.asnumpy(cp.linalg.pinv(cp.asarray(tall))), np.linalg.pinv(tall))
assert int(cp.linalg.matrix_rank(cp.asarray(tall @ tall.T))) == 3
assert np.isclose(float(cp.linalg.norm(cp.asarray(tall), 2)), np.linalg.norm(tall, 2))
# a singular matrix: LAPACK's info comes back, and CuPy's own error state reports it
sing = cp.asarray(np.ones((3, 3)))
with cupyx.errstate(linalg="raise"):
    try:
        cp.linalg.solve(sing, cp.ones(3))
        raise SystemExit("a singular solve did not raise")
    except cp.linalg.LinAlgError as exc:
        assert "getrf" in str(exc) or "singular" in str(exc).lower(), exc
# bad arguments get cuBLAS's own status, not an internal error: getriBatched with NULL pivots
from cupy_backends.cuda.libs import cublas as _cublas  # noqa: E402

m3 = cp.asarray(np.eye(3)[None])
ptrs = cp.asarray([m3.data.ptr], dtype=cp.uint64)
out3 = cp.empty_like(m3)
optrs = cp.asarray([out3.data.ptr], dtype=cp.uint64)
infos = cp.zeros(1, dtype=cp.int32)
handle = cp.cuda.device.get_cublas_handle()
try:
    _cublas.dgetriBatched(handle, 3, ptrs.data.ptr, 3, 0, optrs.data.ptr, 3, infos.data.ptr, 1)
    raise SystemExit("getriBatched with NULL pivots was accepted")
except _cublas.CUBLASError as exc:
    assert "INVALID_VALUE" in str(exc), exc
print("OK")
