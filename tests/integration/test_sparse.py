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


@pytest.mark.parametrize("order", ["col", "row"])
@pytest.mark.parametrize("ops", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_spmm_matches_scipy(driver, order: str, ops: tuple[int, int]) -> None:
    """SpMM (sparse_mv with n > 0): C = alpha op(A) op(B) + beta C, B and C with padded leading dimensions."""
    op_a, op_b = ops
    a = sps.random(30, 20, density=0.25, format="csr", random_state=7, dtype=np.float64)
    m, k = (30, 20) if op_a == 0 else (20, 30)
    n = 5
    b_full = np.random.RandomState(1).rand(*((k, n) if op_b == 0 else (n, k)))
    c_full = np.random.RandomState(2).rand(m, n)
    row = order == "row"

    def padded(x: np.ndarray) -> tuple[np.ndarray, int]:  # leading dimension 3 more than needed
        lead, other = (x.shape[1], x.shape[0]) if row else x.shape
        buf = np.full((other, lead + 3), np.nan)
        buf[:, :lead] = x if row else x.T
        return buf, lead + 3

    bbuf, ldb = padded(b_full)
    cbuf, ldc = padded(c_full)
    addrs = _upload(driver, a.indptr.astype(np.int32), a.indices.astype(np.int32), a.data, bbuf, cbuf)
    msg = _msg(a, "csr", addrs, op=op_a, x=addrs[3], y=addrs[4], alpha=[2.0, 0.0], beta=[0.5, 0.0])
    msg.update(n=n, op_b=op_b, ldb=ldb, ldc=ldc, b_row_major=row, c_row_major=row)
    driver.conn.post(msg)
    got = np.frombuffer(bytes(driver.memcpy_dtoh(addrs[4], cbuf.nbytes)), np.float64).reshape(cbuf.shape)
    lead = n if row else m
    got_c = got[:, :lead] if row else got[:, :lead].T
    opa = a if op_a == 0 else a.T
    opb = b_full if op_b == 0 else b_full.T
    assert np.allclose(got_c, 2.0 * (opa @ opb) + 0.5 * c_full)
    assert np.isnan(got[:, lead:]).all()  # the padding is not written


def test_spmm_extents_and_to_dense(driver) -> None:
    """C's leading dimension smaller than its rows, or C past its allocation: refused; SparseToDense writes A."""
    a = sps.random(12, 9, density=0.3, format="csr", random_state=9, dtype=np.float64)
    c = np.zeros((12, 9))
    addrs = _upload(driver, a.indptr.astype(np.int32), a.indices.astype(np.int32), a.data, c)
    msg = _msg(a, "csr", addrs, x=0, y=addrs[3], n=9, to_dense=True, ldc=12)
    driver.conn.post(msg)
    got = np.frombuffer(bytes(driver.memcpy_dtoh(addrs[3], c.nbytes)), np.float64).reshape(9, 12).T
    assert np.array_equal(got, a.toarray())
    for bad in ({"ldc": 11}, {"ldc": 200}):
        driver.conn.post({**msg, **bad})
        with pytest.raises(CudaError) as err:
            driver.ctx_synchronize()
        assert err.value.name == "CUDA_ERROR_INVALID_VALUE"


@pytest.mark.parametrize("base", [0, 1])
def test_index_conversions(driver, base: int) -> None:
    """cusparseXcsr2coo / Xcoo2csr (sparse_indices), and hostile sources refused before anything is written."""
    a = sps.random(10, 8, density=0.3, format="csr", random_state=4, dtype=np.float64)
    offsets, rows = (a.indptr + base).astype(np.int32), (a.tocoo().row + base).astype(np.int32)
    src_off, src_rows, dst_rows, dst_off = _upload(
        driver, offsets, rows, np.full(a.nnz, -9, np.int32), np.full(11, -9, np.int32)
    )
    common = dict(kind="sparse_indices", m=10, nnz=a.nnz, base=base)
    driver.conn.post({**common, "to_coo": True, "src": src_off, "dst": dst_rows})
    driver.conn.post({**common, "to_coo": False, "src": src_rows, "dst": dst_off})
    assert np.array_equal(np.frombuffer(bytes(driver.memcpy_dtoh(dst_rows, rows.nbytes)), np.int32), rows)
    assert np.array_equal(np.frombuffer(bytes(driver.memcpy_dtoh(dst_off, offsets.nbytes)), np.int32), offsets)
    bad_off, bad_rows = offsets.copy(), rows.copy()
    bad_off[5], bad_rows[0] = 1 << 30, 10 + base
    src_off2, src_rows2, out2 = _upload(driver, bad_off, bad_rows, np.full(64, -9, np.int32))
    for to_coo, src in ((True, src_off2), (False, src_rows2)):
        driver.conn.post({**common, "to_coo": to_coo, "src": src, "dst": out2})
        with pytest.raises(CudaError) as err:
            driver.ctx_synchronize()
        assert err.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert (np.frombuffer(bytes(driver.memcpy_dtoh(out2, 256)), np.int32) == -9).all()
    driver.conn.post({**common, "to_coo": True, "src": src_off, "dst": dst_rows, "nnz": 1 << 40})  # past dst
    with pytest.raises(CudaError):
        driver.ctx_synchronize()


@pytest.mark.parametrize("numeric", [True, False])
def test_csr_to_csc(driver, numeric: bool) -> None:
    """cusparseCsr2cscEx2 (sparse_transpose), with duplicates and empty rows, and a hostile column index refused."""
    a = sps.random(9, 7, density=0.35, format="csr", random_state=11, dtype=np.float64)
    a.indices[a.indptr[2] : a.indptr[3]] = a.indices[a.indptr[2]]  # duplicates in row 2
    offsets, indices = a.indptr.astype(np.int32), a.indices.astype(np.int32)
    out = _upload(
        driver, offsets, indices, a.data, np.full(8, -9, np.int32), np.full(a.nnz, -9, np.int32), np.zeros(a.nnz)
    )
    msg = dict(kind="sparse_transpose", m=9, n=7, nnz=a.nnz, offsets=out[0], indices=out[1], values=out[2])
    msg.update(out_offsets=out[3], out_indices=out[4], out_values=out[5], type="f64", numeric=numeric)
    driver.conn.post(msg)
    want = sps.csr_matrix((a.data, a.indices, a.indptr), shape=(9, 7)).tocsc()
    want.sort_indices()
    got_off = np.frombuffer(bytes(driver.memcpy_dtoh(out[3], 32)), np.int32)
    got_idx = np.frombuffer(bytes(driver.memcpy_dtoh(out[4], 4 * a.nnz)), np.int32)
    got_val = np.frombuffer(bytes(driver.memcpy_dtoh(out[5], 8 * a.nnz)), np.float64)
    assert np.array_equal(got_off, want.indptr) and np.array_equal(got_idx, want.indices)
    assert (
        np.array_equal(sps.csc_matrix((got_val, got_idx, got_off), shape=(9, 7)).toarray(), a.toarray())
        if numeric
        else not got_val.any()
    )
    bad = indices.copy()
    bad[0] = 1 << 20
    src = _upload(driver, bad)[0]
    driver.conn.post({**msg, "indices": src, "out_indices": out[4]})
    with pytest.raises(CudaError) as err:
        driver.ctx_synchronize()
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"


def test_sorts_and_gather(driver) -> None:
    """cusparseCreateIdentityPermutation, Xcoosort by row and by column, Xcsrsort (sparse_sort) and cusparseGather
    (sparse_gather): the same orders as NumPy's lexsort; gather's indices checked before any is followed."""
    rng = np.random.RandomState(3)
    nnz = 40
    rows, cols = rng.randint(0, 6, nnz).astype(np.int32), rng.randint(0, 5, nnz).astype(np.int32)
    r, c, p = _upload(driver, rows, cols, np.full(nnz, -1, np.int32))
    driver.conn.post(dict(kind="sparse_sort", mode="identity", nnz=nnz, perm=p))
    driver.conn.post(dict(kind="sparse_sort", mode="coo_col", m=6, n=5, nnz=nnz, rows=r, cols=c, perm=p))

    def get(addr: int) -> np.ndarray:
        return np.frombuffer(bytes(driver.memcpy_dtoh(addr, 4 * nnz)), np.int32)

    order = np.lexsort((rows, cols))
    assert np.array_equal(get(p), order) and np.array_equal(get(r), rows[order]) and np.array_equal(get(c), cols[order])
    driver.conn.post(dict(kind="sparse_sort", mode="coo_row", m=6, n=5, nnz=nnz, rows=r, cols=c, perm=p))
    back = np.lexsort((cols, rows))
    assert np.array_equal(get(r), rows[back]) and np.array_equal(get(p), back)
    # CSR: columns sorted within each row
    a = sps.random(8, 9, density=0.4, format="csr", random_state=2)
    shuffled = a.indices.copy()
    for i in range(8):
        rng.shuffle(shuffled[a.indptr[i] : a.indptr[i + 1]])
    off, ci, pp = _upload(
        driver, a.indptr.astype(np.int32), shuffled.astype(np.int32), np.arange(a.nnz, dtype=np.int32)
    )
    driver.conn.post(dict(kind="sparse_sort", mode="csr", m=8, n=9, nnz=a.nnz, rows=off, cols=ci, perm=pp))
    got = np.frombuffer(bytes(driver.memcpy_dtoh(ci, 4 * a.nnz)), np.int32)
    perm = np.frombuffer(bytes(driver.memcpy_dtoh(pp, 4 * a.nnz)), np.int32)
    assert all((np.diff(got[a.indptr[i] : a.indptr[i + 1]]) >= 0).all() for i in range(8))
    assert np.array_equal(shuffled[perm], got)
    # gather: values[i] = y[idx[i]], and an index past y refused with values untouched
    y = np.arange(10, dtype=np.float64) * 1.5
    idx = np.array([9, 0, 4, 4], np.int32)
    iy, iv, yy, bad = _upload(driver, idx, np.zeros(4), y, np.array([0, 1, 10, 2], np.int32))
    g = dict(kind="sparse_gather", size=10, nnz=4, indices=iy, values=iv, y=yy, type="f64")
    driver.conn.post(g)
    assert np.array_equal(np.frombuffer(bytes(driver.memcpy_dtoh(iv, 32)), np.float64), y[idx])
    driver.conn.post({**g, "indices": bad})
    with pytest.raises(CudaError) as err:
        driver.ctx_synchronize()
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert np.array_equal(np.frombuffer(bytes(driver.memcpy_dtoh(iv, 32)), np.float64), y[idx])


def test_spgemm(driver) -> None:
    """sparse_gemm (cusparseSpGEMM): count gives C's nnz, copy writes C sorted, equal to SciPy's A @ B; a
    column index past B's rows, a C whose arrays hold another nnz, and a product too large to form are refused."""
    from gpud import sparse as gs

    a = sps.random(15, 12, density=0.3, format="csr", random_state=21, dtype=np.float64)
    b = sps.random(12, 10, density=0.3, format="csr", random_state=22, dtype=np.float64)
    want = (a @ b).tocsr() * 2.0
    want.sort_indices()
    addrs = _upload(driver, a.indptr.astype(np.int32), a.indices.astype(np.int32), a.data)
    addrs += _upload(driver, b.indptr.astype(np.int32), b.indices.astype(np.int32), b.data)
    msg = dict(kind="sparse_gemm", m=15, k=12, n=10, type="f64", alpha=[2.0, 0.0])
    msg.update(a_nnz=a.nnz, a_offsets=addrs[0], a_indices=addrs[1], a_values=addrs[2])
    msg.update(b_nnz=b.nnz, b_offsets=addrs[3], b_indices=addrs[4], b_values=addrs[5])
    nnz = driver.conn.call({**msg, "count": True})[0]
    assert nnz == want.nnz
    c = _upload(driver, np.zeros(16, np.int32), np.zeros(nnz, np.int32), np.zeros(nnz))
    driver.conn.post({**msg, "c_nnz": nnz, "c_offsets": c[0], "c_indices": c[1], "c_values": c[2]})
    got = [
        np.frombuffer(bytes(driver.memcpy_dtoh(p, n * w)), t)
        for p, n, w, t in ((c[0], 16, 4, np.int32), (c[1], nnz, 4, np.int32), (c[2], nnz, 8, np.float64))
    ]
    assert np.array_equal(got[0], want.indptr) and np.array_equal(got[1], want.indices)
    assert np.allclose(got[2], want.data)
    driver.conn.post({**msg, "c_nnz": nnz - 1, "c_offsets": c[0], "c_indices": c[1], "c_values": c[2]})
    with pytest.raises(CudaError) as err:
        driver.ctx_synchronize()
    assert "not the" in err.value.message
    bad = a.indices.astype(np.int32)
    bad[0] = 12  # B has 12 rows: index 12 would read past B's offsets
    src = _upload(driver, bad)[0]
    with pytest.raises(CudaError) as err:
        driver.conn.call({**msg, "count": True, "a_indices": src})
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"
    # the bound on partial products, checked in this process against the same function gpud runs
    from proto.messages import SparseGemm

    keep = [a.indptr.astype(np.int32), a.indices.astype(np.int32), a.data, b.indptr.astype(np.int32)]
    keep += [b.indices.astype(np.int32), b.data]
    ptrs = [x.ctypes.data for x in keep]
    local = SparseGemm(
        count=True,
        m=15,
        k=12,
        n=10,
        type="f64",
        a_nnz=a.nnz,
        a_offsets=ptrs[0],
        a_indices=ptrs[1],
        a_values=ptrs[2],
        b_nnz=b.nnz,
        b_offsets=ptrs[3],
        b_indices=ptrs[4],
        b_values=ptrs[5],
    )
    assert gs.spgemm_numpy(local) == want.nnz
    old, gs.SPGEMM_MAX_PRODUCTS = gs.SPGEMM_MAX_PRODUCTS, 10
    try:
        with pytest.raises(CudaError) as err:
            gs.spgemm_numpy(local)
        assert err.value.name == "CUDA_ERROR_OUT_OF_MEMORY" and "partial products" in err.value.message
    finally:
        gs.SPGEMM_MAX_PRODUCTS = old


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_dense_to_sparse(driver, fmt: str) -> None:
    """sparse_from_dense (cusparseDenseToSparse): count answers nnz, conversion writes the sorted nonzeros of a
    column-major matrix with a padded leading dimension; a dense extent past its allocation is refused."""
    rng = np.random.RandomState(5)
    a = rng.rand(7, 6) * (rng.rand(7, 6) < 0.4)
    buf = np.full((6, 9), 99.0)  # column-major, ld 9: rows 7..8 of each column are padding
    buf[:, :7] = a.T
    dense = _upload(driver, buf)[0]
    msg = dict(kind="sparse_from_dense", rows=7, cols=6, ld=9, values=dense, type="f64", format=fmt)
    nnz = driver.conn.call({**msg, "count": True})[0]
    assert nnz == np.count_nonzero(a)
    first = {"csr": 8, "csc": 7}.get(fmt, nnz)
    off, ind, val = _upload(driver, np.zeros(first, np.int32), np.zeros(nnz, np.int32), np.zeros(nnz))
    driver.conn.post({**msg, "nnz": nnz, "offsets": off, "indices": ind, "out_values": val})
    o = np.frombuffer(bytes(driver.memcpy_dtoh(off, 4 * first)), np.int32)
    i = np.frombuffer(bytes(driver.memcpy_dtoh(ind, 4 * nnz)), np.int32)
    v = np.frombuffer(bytes(driver.memcpy_dtoh(val, 8 * nnz)), np.float64)
    build = {"csr": lambda: sps.csr_matrix((v, i, o), (7, 6)), "csc": lambda: sps.csc_matrix((v, i, o), (7, 6))}
    got = build.get(fmt, lambda: sps.coo_matrix((v, (o, i)), (7, 6)))()
    assert np.array_equal(got.toarray(), a)
    with pytest.raises(CudaError) as err:
        driver.conn.call({**msg, "count": True, "ld": 4000})
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"


def test_csrgeam2(driver) -> None:
    """sparse_geam (csrgeam2): the count writes C's offsets and answers nnz (the union of the patterns, entries
    that cancel kept); the second phase writes C = alpha A + beta B; B's offsets claiming more entries than B
    holds are refused before any index is followed."""
    a = sps.random(10, 7, density=0.3, format="csr", random_state=31, dtype=np.float64)
    b = a.copy()
    b.data = -b.data  # A + B cancels everywhere A has an entry
    b = (b + sps.random(10, 7, density=0.2, format="csr", random_state=32)).tocsr()
    b.sort_indices()
    arrs = [a.indptr.astype(np.int32), a.indices.astype(np.int32), a.data]
    arrs += [b.indptr.astype(np.int32), b.indices.astype(np.int32), b.data, np.zeros(11, np.int32)]
    ao, ai, av, bo, bi, bv, co = _upload(driver, *arrs)
    msg = dict(kind="sparse_geam", m=10, n=7, type="f64", a_nnz=a.nnz, a_offsets=ao, a_indices=ai, a_values=av)
    msg.update(b_nnz=b.nnz, b_offsets=bo, b_indices=bi, b_values=bv, c_offsets=co)
    nnz = driver.conn.call({**msg, "count": True, "a_values": 0, "b_values": 0})[0]
    union = (abs(a).astype(bool).astype(int) + abs(b).astype(bool).astype(int)).tocsr()
    assert nnz == union.nnz
    ci, cv = _upload(driver, np.zeros(nnz, np.int32), np.zeros(nnz))
    driver.conn.post({**msg, "c_nnz": nnz, "c_indices": ci, "c_values": cv, "alpha": [1.0, 0.0], "beta": [1.0, 0.0]})
    off = np.frombuffer(bytes(driver.memcpy_dtoh(co, 44)), np.int32)
    ind = np.frombuffer(bytes(driver.memcpy_dtoh(ci, 4 * nnz)), np.int32)
    val = np.frombuffer(bytes(driver.memcpy_dtoh(cv, 8 * nnz)), np.float64)
    union.sort_indices()
    assert np.array_equal(off, union.indptr) and np.array_equal(ind, union.indices)
    assert np.allclose(sps.csr_matrix((val, ind, off), (10, 7)).toarray(), (a + b).toarray())
    bad = b.indptr.astype(np.int32)
    bad[-1] += 1000
    src = _upload(driver, bad)[0]
    with pytest.raises(CudaError) as err:
        driver.conn.call({**msg, "count": True, "a_values": 0, "b_values": 0, "b_offsets": src})
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"


def test_compress(driver) -> None:
    """sparse_compress (nnz_compress, csr2csr_compress): per-row counts of |value| > tol and their total, then the
    surviving entries; row offsets that fall are refused before rows are sliced by them."""
    a = sps.csr_matrix(np.array([[0.5, 2.0, 0.0], [0.1, 0.0, -3.0], [0.0, 0.0, 0.0]]))
    a.data[0] = 0.05  # stored, under tol
    vals, off, ind, per_row = _upload(
        driver, a.data, a.indptr.astype(np.int32), a.indices.astype(np.int32), np.zeros(3, np.int32)
    )
    msg = dict(kind="sparse_compress", m=3, n=3, nnz=a.nnz, values=vals, offsets=off, type="f64", tol=0.2)
    total = driver.conn.call({**msg, "count": True, "per_row": per_row})[0]
    assert total == 2 and np.frombuffer(bytes(driver.memcpy_dtoh(per_row, 12)), np.int32).tolist() == [1, 1, 0]
    cv, ci, co = _upload(driver, np.zeros(2), np.zeros(2, np.int32), np.zeros(4, np.int32))
    driver.conn.post({**msg, "indices": ind, "c_nnz": 2, "c_values": cv, "c_indices": ci, "c_offsets": co})
    got = sps.csr_matrix(
        (
            np.frombuffer(bytes(driver.memcpy_dtoh(cv, 16)), np.float64),
            np.frombuffer(bytes(driver.memcpy_dtoh(ci, 8)), np.int32),
            np.frombuffer(bytes(driver.memcpy_dtoh(co, 16)), np.int32),
        ),
        (3, 3),
    )
    assert np.array_equal(got.toarray(), [[0, 2.0, 0], [0, 0, -3.0], [0, 0, 0]])
    bad = a.indptr.astype(np.int32)
    bad[1] = 1 << 20
    with pytest.raises(CudaError) as err:
        driver.conn.call({**msg, "count": True, "per_row": per_row, "offsets": _upload(driver, bad)[0]})
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"


def _laplace(n: int) -> sps.csr_matrix:
    """The 2-D five-point Laplacian on an n x n grid (cuda-samples conjugateGradientPrecond's matrix)."""
    t = sps.diags([-1.0, 4.0, -1.0], [-1, 0, 1], (n, n))
    return (sps.kron(sps.identity(n), t) + sps.kron(sps.diags([-1.0, -1.0], [-1, 1], (n, n)), sps.identity(n))).tocsr()


@pytest.mark.parametrize(
    ("lower", "unit", "op"), [(True, False, 0), (True, True, 0), (False, False, 0), (False, True, 1)]
)
def test_spsv_solves_the_triangle(driver, lower: bool, unit: bool, op: int) -> None:
    """sparse_mv with ``solve`` (cusparseSpSV_solve): y = alpha op(T)^-1 x, T the triangle of a general matrix
    (the other triangle's entries ignored), its diagonal taken as ones when ``unit``."""
    a = sps.random(30, 30, density=0.2, format="csr", random_state=7, dtype=np.float64) + sps.identity(30) * 3
    a = a.tocsr()
    dense = a.toarray()
    t = np.tril(dense) if lower else np.triu(dense)
    if unit:
        np.fill_diagonal(t, 1.0)
    x, y = np.linspace(1, 2, 30), np.zeros(30)
    addrs = _upload(driver, a.indptr.astype(np.int32), a.indices.astype(np.int32), a.data, x, y)
    msg = _msg(a, "csr", addrs, x=addrs[3], y=addrs[4], solve=True, lower=lower, unit=unit, op=op, alpha=[2.0, 0.0])
    driver.conn.post(msg)
    got = np.frombuffer(bytes(driver.memcpy_dtoh(addrs[4], y.nbytes)), np.float64)
    assert np.allclose(got, np.linalg.solve(t if op == 0 else t.T, 2.0 * x))
    with pytest.raises(CudaError, match="square"):  # a solve needs a square matrix
        driver.conn.call({**msg, "cols": 29})


def test_ilu0(driver) -> None:
    """sparse_ilu0 (cusparse<t>csrilu02): L U equals A on A's pattern (the definition of ILU(0)), in place; a
    zero pivot is answered; index arrays reaching outside the matrix are refused before they are followed."""
    a = _laplace(6)
    a.data[:] += np.linspace(0, 0.5, a.nnz)  # not symmetric
    vals, off, ind = _upload(driver, a.data.copy(), a.indptr.astype(np.int32), a.indices.astype(np.int32))
    msg = dict(kind="sparse_ilu0", m=36, nnz=a.nnz, values=vals, offsets=off, indices=ind, type="f64")
    assert driver.conn.call(msg)[0] == -1
    f = sps.csr_matrix((np.frombuffer(bytes(driver.memcpy_dtoh(vals, a.data.nbytes)), np.float64), a.indices, a.indptr))
    lu = np.tril(f.toarray(), -1) + np.eye(36)
    product = lu @ np.triu(f.toarray())
    pattern = a.toarray() != 0
    assert np.allclose(product[pattern], a.toarray()[pattern])
    assert not np.allclose(product, a.toarray())  # fill-in was dropped: an exact LU would match everywhere
    z = a.copy()
    z.data[list(z.indices[: z.indptr[1]]).index(0)] = 0.0  # A(0,0) = 0: no update reaches row 0
    zv = _upload(driver, z.data.copy())[0]
    assert driver.conn.call({**msg, "values": zv})[0] == 0
    assert (
        driver.conn.call(
            {
                **msg,
                "values": _upload(driver, z.data.copy())[0],
                "base": 1,
                "offsets": _upload(driver, (a.indptr + 1).astype(np.int32))[0],
                "indices": _upload(driver, (a.indices + 1).astype(np.int32))[0],
            }
        )[0]
        == 1
    )
    bad = a.indices.astype(np.int32)
    bad[5] = 1 << 20
    with pytest.raises(CudaError) as err:
        driver.conn.call({**msg, "indices": _upload(driver, bad)[0]})
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"
