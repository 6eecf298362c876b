"""blas_gemm against a real gpud (NOTE [vendor libraries]): results, and no reach past a tenant's allocations."""

from __future__ import annotations

import numpy as np
import pytest

from proto.errors import CudaError


def _gemm(**kw: object) -> dict:
    msg = dict(
        kind="blas_gemm",
        trans_a=0,
        trans_b=0,
        m=2,
        n=2,
        k=2,
        a_type="f32",
        b_type="f32",
        c_type="f32",
        compute_type="f32",
        lda=2,
        ldb=2,
        ldc=2,
    )
    msg.update(kw)
    return msg


def test_gemm_runs_in_stream_order(driver) -> None:
    a = driver.mem_alloc(64)
    driver.memcpy_htod(a, np.array([1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0], np.float32).tobytes())
    driver.conn.post(_gemm(a=a, b=a + 16, c=a + 32, alpha=[1.0, 0.0], beta=[0.0, 0.0]))
    c = np.frombuffer(bytes(driver.memcpy_dtoh(a + 32, 16)), np.float32).reshape(2, 2, order="F")
    a_m = np.array([1, 2, 3, 4], np.float32).reshape(2, 2, order="F")
    b_m = np.array([5, 6, 7, 8], np.float32).reshape(2, 2, order="F")
    assert (c == a_m @ b_m).all()


@pytest.mark.parametrize("where", ["c", "a", "alpha_ptr"])
def test_gemm_outside_an_allocation_is_refused(driver, where: str) -> None:
    """An operand (or a device scalar) running past the tenant's allocation: CUDA_ERROR_INVALID_VALUE, nothing
    written; the neighbour allocation keeps its bytes."""
    a = driver.mem_alloc(16)
    other = driver.mem_alloc(4096)
    driver.memcpy_htod(other, b"\x11" * 4096)
    kw = dict(a=a, b=a, c=a)
    if where == "alpha_ptr":
        kw.update(scalars_on_device=True, alpha_ptr=a + 16, beta_ptr=a)
    else:
        kw[where] = a + 8  # 16 bytes from 8 bytes into a 16-byte allocation
    driver.conn.post(_gemm(**kw))
    with pytest.raises(CudaError) as err:
        driver.ctx_synchronize()
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert bytes(driver.memcpy_dtoh(other, 4096)) == b"\x11" * 4096


def test_level1_reduction_writes_its_result_in_stream_order(driver) -> None:
    """blas_vector: a dot of x (stride 2) and y walked backwards, the result in device memory (NOTE [strided
    vectors])."""
    x = np.arange(12, dtype=np.float64)
    y = np.linspace(-1, 1, 6)
    buf = driver.mem_alloc(256)
    driver.memcpy_htod(buf, x.tobytes() + y.tobytes())
    driver.conn.post(
        dict(kind="blas_vector", op="dot", type="f64", n=6, x=buf, incx=2, y=buf + 96, incy=-1, result=buf + 200)
    )
    got = np.frombuffer(bytes(driver.memcpy_dtoh(buf + 200, 8)), np.float64)[0]
    assert got == np.dot(x[::2], y[::-1])


@pytest.mark.parametrize(
    "msg",
    [
        dict(kind="blas_vector", op="nrm2", type="f32", n=4, x=0, incx=1, result=64),  # result past the end
        dict(kind="blas_vector", op="axpy", type="f32", n=5, x=0, incx=1, y=48, incy=-1),  # y's span runs over
        dict(kind="blas_vector", op="scal", type="f32", n=3, x=0, incx=30),  # x's stride runs over
        dict(kind="blas_vector", op="copy", type="c128", n=4, x=0, incx=1, y=16, incy=0),  # written with inc 0
        dict(kind="blas_matrix", op="gemv", type="f32", trans=1, m=4, n=4, a=0, lda=4, x=0, incx=1, y=64, incy=1),
        dict(kind="blas_matrix", op="ger", type="f64", m=4, n=3, a=0, lda=4, x=0, incx=1, y=0, incy=1),  # A: 96 B
        dict(kind="blas_matrix", op="syrk", type="f32", n=5, k=1, a=0, lda=5, c=0, ldc=4),  # ldc below n
        dict(kind="blas_matrix", op="dgmm", type="f32", m=4, n=4, a=0, lda=4, x=0, incx=1, c=0, ldc=5),  # C over
    ],
    ids=["result", "neg-inc", "stride", "inc0", "gemv-y", "ger-A", "syrk-ldc", "dgmm-C"],
)
def test_level1_and_2_outside_an_allocation_are_refused(driver, msg: dict) -> None:
    """A level-1/2 operand (or result) reaching past the tenant's 64-byte allocation, or a shape cuBLAS refuses:
    CUDA_ERROR_INVALID_VALUE and nothing written; the neighbour allocation keeps its bytes."""
    mine = driver.mem_alloc(64)
    other = driver.mem_alloc(4096)
    driver.memcpy_htod(other, b"\x11" * 4096)
    msg = {k: (mine + v if k in ("x", "y", "a", "c", "result") else v) for k, v in msg.items()}
    driver.conn.post(msg)
    with pytest.raises(CudaError) as err:
        driver.ctx_synchronize()
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert bytes(driver.memcpy_dtoh(other, 4096)) == b"\x11" * 4096
