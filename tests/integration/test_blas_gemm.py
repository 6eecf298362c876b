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
