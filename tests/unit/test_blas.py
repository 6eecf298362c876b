"""The BLAS operations behind the cuBLAS stand-in (NOTE [vendor libraries]): shape rules and NumPy execution."""

from __future__ import annotations

import numpy as np
import pytest

from gpud.blas import gemm_numpy
from proto.blas import extents
from proto.errors import CudaError
from proto.messages import BlasGemm


def _gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, **kw: object) -> BlasGemm:
    """A gemm over Fortran-ordered NumPy arrays (their memory stands for device memory here)."""
    fields = dict(
        trans_a=0,
        trans_b=0,
        m=c.shape[0],
        n=c.shape[1],
        k=a.shape[1],
        a_type="f32",
        b_type="f32",
        c_type="f32",
        compute_type="f32",
        a=a.ctypes.data,
        lda=a.shape[0],
        b=b.ctypes.data,
        ldb=b.shape[0],
        c=c.ctypes.data,
        ldc=c.shape[0],
    )
    fields.update(kw)
    return BlasGemm(**fields)


def test_extents_follow_leading_dimensions_and_batches() -> None:
    a, b, c = (np.zeros((4, 3), np.float32, order="F") for _ in range(3))
    g = _gemm(a, b[:3, :2], c[:, :2], k=3, ldb=4, lda=4, ldc=4)
    spans = {op: size for op, _addr, size in extents(g)}
    assert spans == {"A": 4 * 3 * 4, "B": (4 * 1 + 3) * 4, "C": (4 * 1 + 4) * 4}
    with pytest.raises(CudaError, match="lda = 2"):
        extents(_gemm(a, b, c, lda=2))
    batched = _gemm(a, b, c, batch=3, stride_a=12, stride_b=12, stride_c=12)
    assert {op: size for op, _a, size in extents(batched)}["C"] == (2 * 12 + 12) * 4


def test_gemm_matches_numpy_for_transposes_complex_and_bf16() -> None:
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.standard_normal((5, 7)) + 1j * rng.standard_normal((5, 7)))
    b = np.asfortranarray(rng.standard_normal((5, 3)) + 1j * rng.standard_normal((5, 3)))
    c = np.asfortranarray(np.ones((7, 3), np.complex128))
    want = (2 - 1j) * (a.conj().T @ b) + 0.5 * c
    gemm_numpy(
        _gemm(
            a,
            b,
            c,
            trans_a=2,
            m=7,
            n=3,
            k=5,
            a_type="c128",
            b_type="c128",
            c_type="c128",
            compute_type="c128",
            alpha=[2.0, -1.0],
            beta=[0.5, 0.0],
        )
    )
    assert np.allclose(c, want)
    x = np.asfortranarray(rng.standard_normal((4, 6)).astype(np.float32))
    y = np.asfortranarray(rng.standard_normal((6, 2)).astype(np.float32))
    to_bf16 = lambda v: (np.ascontiguousarray(v, np.float32).view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731
    xb, yb = np.asfortranarray(to_bf16(x).reshape(x.shape)), np.asfortranarray(to_bf16(y).reshape(y.shape))
    out = np.asfortranarray(np.full((4, 2), np.nan, np.float32))  # beta = 0: C is not read
    gemm_numpy(_gemm(xb, yb, out, a_type="bf16", b_type="bf16", compute_type="f32"))
    widen = lambda v: (v.astype(np.uint32) << 16).view(np.float32)  # noqa: E731
    assert np.allclose(out, widen(xb) @ widen(yb), rtol=1e-6)


def test_device_scalars_are_read_as_cuBLAS_stores_them() -> None:
    """With f16 compute, alpha/beta in device memory are halves (2 bytes, the extent gpud checked)."""
    a = np.asfortranarray(np.array([[1, 2], [3, 4]], np.float16))
    c = np.asfortranarray(np.ones((2, 2), np.float16))
    scalars = np.array([2.0, 0.5], np.float16)
    gemm_numpy(
        _gemm(
            a,
            a,
            c,
            a_type="f16",
            b_type="f16",
            c_type="f16",
            compute_type="f16",
            scalars_on_device=True,
            alpha_ptr=scalars.ctypes.data,
            beta_ptr=scalars.ctypes.data + 2,
        )
    )
    assert np.allclose(c.astype(np.float32), 2.0 * (a.astype(np.float32) @ a.astype(np.float32)) + 0.5)
