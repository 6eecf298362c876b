"""sparse_mv (the cuSPARSE stand-in's SpMV) against a real gpud: results, and index arrays that would reach past
the tenant's memory refused before they are followed (proto/sparse.py ``check_indices``)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps

from proto.errors import CudaError


def _upload(driver, *arrays: np.ndarray) -> list[int]:
    out = []
    for a in arrays:
        addr = driver.mem_alloc(max(a.nbytes, 8))
        driver.memcpy_htod(addr, a.tobytes())
        out.append(addr)
    return out


def _msg(a: sps.spmatrix, fmt: str, addrs: list[int], **kw: object) -> dict:
    msg = dict(kind="sparse_mv", format=fmt, rows=a.shape[0], cols=a.shape[1], nnz=a.nnz, type="f64")
    if fmt == "coo":
        msg.update(rows_idx=addrs[0], indices=addrs[1], values=addrs[2])
    else:
        msg.update(offsets=addrs[0], indices=addrs[1], values=addrs[2])
    msg.update(kw)
    return msg


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("op", [0, 1])
def test_spmv_matches_scipy_with_one_based_indices(driver, fmt: str, op: int) -> None:
    a = sps.random(40, 25, density=0.2, format=fmt, random_state=3, dtype=np.float64)
    if fmt == "coo":
        arrays = [(a.row + 1).astype(np.int32), (a.col + 1).astype(np.int32), a.data]
    else:
        arrays = [(a.indptr + 1).astype(np.int32), (a.indices + 1).astype(np.int32), a.data]
    nx, ny = (25, 40) if op == 0 else (40, 25)
    x, y = np.linspace(-1, 1, nx), np.arange(ny, dtype=np.float64)
    addrs = _upload(driver, *arrays, x, y)
    msg = _msg(a, fmt, addrs, base=1, op=op, x=addrs[3], y=addrs[4], alpha=[2.0, 0.0], beta=[-1.0, 0.0])
    driver.conn.post(msg)
    got = np.frombuffer(bytes(driver.memcpy_dtoh(addrs[4], y.nbytes)), np.float64)
    want = 2.0 * ((a if op == 0 else a.T) @ x) - y
    assert np.allclose(got, want)


@pytest.mark.parametrize("bad", ["column", "offsets", "x-extent", "coo-row"])
def test_indices_reaching_outside_are_refused(driver, bad: str) -> None:
    """A column index past cols would read past x (into whatever follows it): CUDA_ERROR_INVALID_VALUE, y
    unchanged."""
    a = sps.random(16, 16, density=0.3, format="csr", random_state=5, dtype=np.float64)
    indptr, indices = a.indptr.astype(np.int32), a.indices.astype(np.int32)
    fmt = "csr"
    if bad == "column":
        indices[-1] = 10_000
    elif bad == "offsets":
        indptr[3], indptr[4] = indptr[4] + 1, indptr[3]
    elif bad == "coo-row":
        coo = a.tocoo()
        fmt, indptr, indices = "coo", coo.row.astype(np.int32), coo.col.astype(np.int32)
        indptr[0] = 16
    x, y = np.ones(16), np.full(16, 7.0)
    addrs = _upload(driver, indptr, indices, a.data, x, y)
    cols = 40 if bad == "x-extent" else 16  # x (16 doubles) is shorter than A's 40 columns
    msg = _msg(a, fmt, addrs, x=addrs[3], y=addrs[4], alpha=[1.0, 0.0])
    msg["cols"] = cols
    if bad == "x-extent":
        msg["rows"] = 16
        msg["op"] = 1  # x then has rows (16) elements, y cols (40): y runs past its allocation
    driver.conn.post(msg)
    with pytest.raises(CudaError) as err:
        driver.ctx_synchronize()
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert (np.frombuffer(bytes(driver.memcpy_dtoh(addrs[4], y.nbytes)), np.float64) == 7.0).all()
