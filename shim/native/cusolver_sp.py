"""cuSOLVER's sparse API (cusolverSp, its low-level csrchol/csrqr/csrlu families) and refactorisation (cusolverRf) in
double precision (NOTE [sparse solves], proto/spsolve.py).

The ``*Host`` functions take host arrays and run on the client with proto/spsolve.py, as cuSOLVER runs them on the
CPU. The device functions become one ``sparse_solve`` operation on the handle's stream, run in gpud on the
tenant's arrays (which gpud checks before it follows them); the call returns when the stream reaches it, with the
singularity, as cuSOLVER's own calls do. The low-level API's analysis and factorisation keep their arrays in the
info object: its factorisation is a ``sparse_solve`` that only factorises (for the zero pivot), its solve one that
solves (refactorising: nothing is kept in gpud between calls, so a matrix changed between the two is solved as it
is then). The workspace sizes answered are what a program must allocate; neither side uses the buffers.
"""

from __future__ import annotations

import ctypes
import struct
from ctypes import c_int, c_uint64, c_void_p
from dataclasses import dataclass
from typing import Any

import numpy as np

from proto import errors as codes
from proto import spsolve
from proto.errors import CudaError
from proto.messages import SparseSolve
from shim.native import cusparse
from shim.native.cusolver import Handle, Handles
from shim.native.registry import StatusError, api, put_i32, put_u64
from shim.native.state import STATE

P = c_void_p
I = c_int  # noqa: E741 - the C signatures' int
D = c_uint64  # a double by value: its bits (wooly_native.c writes these entry points out)
INVALID_VALUE, MATRIX_TYPE_NOT_SUPPORTED = 3, 8  # cusolverStatus_t
GENERAL, SYMMETRIC = 0, 1  # cusparseMatrixType_t

_h = Handles("cusolverSp", 0x5B5E000)
api("cusolverSpCreate", 0, P, library="cusolver")(_h.create)
api("cusolverSpDestroy", 0, P, library="cusolver")(_h.destroy)
api("cusolverSpSetStream", 0, P, P, library="cusolver")(_h.set_stream)
api("cusolverSpGetStream", 0, P, P, library="cusolver")(_h.get_stream)


def _f64(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits & 0xFFFFFFFFFFFFFFFF))[0])


def _ints(addr: int | None, n: int, what: str) -> np.ndarray:
    if n and not addr:
        raise StatusError(INVALID_VALUE, f"{what} is NULL")
    return np.ctypeslib.as_array((ctypes.c_int32 * n).from_address(int(addr or 0))) if n else np.zeros(0, np.int32)


def _doubles(addr: int | None, n: int, what: str) -> np.ndarray:
    if n and not addr:
        raise StatusError(INVALID_VALUE, f"{what} is NULL")
    return np.ctypeslib.as_array((ctypes.c_double * n).from_address(int(addr or 0))) if n else np.zeros(0)


def _descr(descr: int | None, what: str, symmetric_ok: bool = True) -> int:
    """The base (0 or 1) of a cusparseMatDescr_t; GENERAL (or SYMMETRIC where allowed) matrices only."""
    d = cusparse.mat_descr(descr)
    if d.type != GENERAL and not (symmetric_ok and d.type == SYMMETRIC):
        raise StatusError(MATRIX_TYPE_NOT_SUPPORTED, f"{what}: matrix type {d.type} (GENERAL only)")
    return 1 if d.base else 0


def _host_matrix(m: int, n: int, nnz: int, base: int, values: Any, offsets: Any, indices: Any, what: str) -> Any:
    if m < 0 or n < 0 or nnz < 0:
        raise StatusError(INVALID_VALUE, f"{what}: m {m}, n {n}, nnz {nnz}")
    vals = None if values is None else _doubles(values, nnz, f"{what}: csrValA").copy()
    try:
        return spsolve.csr(m, n, _ints(offsets, m + 1, f"{what}: csrRowPtrA"), _ints(indices, nnz, what), vals, base)
    except ValueError as exc:
        raise StatusError(INVALID_VALUE, f"{what}: {exc}") from None


def _message(**fields: Any) -> SparseSolve:
    return SparseSolve(**fields)


def _device_solve(h: int | None, msg: SparseSolve, what: str, stream: int | None = None) -> int:
    """Queue ``msg`` on the handle's stream (or ``stream``) through cuSPARSE's checked queue (every operand's extent
    checked against the program's allocations first); the singularity, once the stream reaches it."""
    handle = _h(h) if stream is None else Handle(stream=stream)
    return int(STATE.driver().conn.call(cusparse.queue(handle, msg, what))[0])


# ---------------------------------------------------------------------------- host utilities
@api("cusolverSpXcsrissymHost", 0, P, I, I, P, P, P, P, P, library="cusolver")
def cusolverSpXcsrissymHost(h, m, nnz, descr, row_ptr, end_ptr, col_ind, out) -> None:  # noqa: ANN001
    """Whether A's pattern is symmetric (rows from csrRowPtrA to csrEndPtrA, the four-array form)."""
    what = "cusolverSpXcsrissymHost"
    _h(h)
    base = _descr(descr, what)
    starts = _ints(row_ptr, m, f"{what}: csrRowPtrA").astype(np.int64) - base
    ends = _ints(end_ptr, m, f"{what}: csrEndPtrA").astype(np.int64) - base
    cols = _ints(col_ind, nnz, f"{what}: csrColIndA").astype(np.int64) - base
    if (
        np.any(starts < 0)
        or np.any(ends < starts)
        or np.any(ends > nnz)
        or (nnz and (cols.min() < 0 or cols.max() >= m))
    ):
        raise StatusError(INVALID_VALUE, f"{what}: the row pointers or column indices reach outside the matrix")
    pairs = {(i, int(c)) for i in range(m) for c in cols[starts[i] : ends[i]]}
    put_i32(out, int(all((c, r) in pairs for r, c in pairs)))


def _ordering(name: str, fn: Any) -> None:
    what = f"cusolverSpXcsr{name}Host"

    def order(h, n, nnz, descr, row_ptr, col_ind, *rest) -> None:  # noqa: ANN001
        _h(h)
        a = _host_matrix(n, n, nnz, _descr(descr, what), None, row_ptr, col_ind, what)
        out = rest[-1]
        _ints(out, n, f"{what}: p")[...] = fn(a)

    extra = (P,) if name == "metisnd" else ()  # metisnd's options (METIS's; nothing here reads them)
    api(what, 0, P, I, I, P, P, P, *extra, P, library="cusolver")(order)


_ordering("symrcm", spsolve.reverse_cuthill_mckee)
_ordering("symamd", spsolve.minimum_degree)
_ordering("metisnd", spsolve.minimum_degree)


@api("cusolverSpXcsrperm_bufferSizeHost", 0, P, I, I, I, P, P, P, P, P, P, library="cusolver")
def cusolverSpXcsrperm_bufferSizeHost(h, m, n, nnz, descr, row_ptr, col_ind, p, q, out) -> None:  # noqa: ANN001
    _h(h)
    _descr(descr, "cusolverSpXcsrperm_bufferSizeHost")
    put_u64(out, max(8, 8 * (m + n + nnz)))


@api("cusolverSpXcsrpermHost", 0, P, I, I, I, P, P, P, P, P, P, P, library="cusolver")
def cusolverSpXcsrpermHost(h, m, n, nnz, descr, row_ptr, col_ind, p, q, mapping, buf) -> None:  # noqa: ANN001
    """B = A(p, q) in place in csrRowPtrA/csrColIndA; map = map(where B's entries were in A)."""
    what = "cusolverSpXcsrpermHost"
    _h(h)
    base = _descr(descr, what)
    offsets = _ints(row_ptr, m + 1, f"{what}: csrRowPtrA")
    indices = _ints(col_ind, nnz, f"{what}: csrColIndA")
    where_map = _ints(mapping, nnz, f"{what}: map")
    try:
        off, idx, where = spsolve.permute(
            m,
            n,
            offsets.copy(),
            indices.copy(),
            base,
            _ints(p, m, f"{what}: p").copy(),
            _ints(q, n, f"{what}: q").copy(),
        )
    except ValueError as exc:
        raise StatusError(INVALID_VALUE, f"{what}: {exc}") from None
    offsets[...] = off
    indices[...] = idx
    where_map[...] = where_map.copy()[where]


# ---------------------------------------------------------------------------- csrlsv{chol,lu,qr}
def _lsv(method: str, host: bool) -> None:
    what = f"cusolverSpDcsrlsv{method}{'Host' if host else ''}"

    def lsv(h, n, nnz, descr, values, offsets, indices, b, tol, reorder, x, singularity) -> None:  # noqa: ANN001
        _h(h)
        tol = _f64(tol)
        base = _descr(descr, what)
        if host:
            a = _host_matrix(n, n, nnz, base, values, offsets, indices, what)
            sol, s = spsolve.solve(method, a, _doubles(b, n, f"{what}: b").copy(), tol)
            if sol is not None:
                _doubles(x, n, f"{what}: x")[...] = sol
        else:
            if n < 0 or nnz < 0:
                raise StatusError(INVALID_VALUE, f"{what}: n {n}, nnz {nnz}")
            msg = _message(
                method=method, m=n, n=n, nnz=nnz, values=int(values or 0), offsets=int(offsets or 0),
                indices=int(indices or 0), b=int(b or 0), x=int(x or 0), tol=float(tol), base=base,
            )  # fmt: skip
            s = _device_solve(h, msg, what)
        put_i32(singularity, s)

    api(what, 0, P, I, I, P, P, P, P, P, D, I, P, P, library="cusolver")(lsv)


for _m in spsolve.KINDS:
    _lsv(_m, True)
    if _m != "lu":  # cuSOLVER has no device LU
        _lsv(_m, False)


# ---------------------------------------------------------------------------- csrchol* / csrqr* (low-level)
@dataclass
class Info:
    """csrcholInfo(Host)_t / csrqrInfo(Host)_t: the matrix as analysed and set up, and the last factorisation."""

    method: str
    host: bool
    m: int = -1
    n: int = -1
    nnz: int = -1
    base: int = 0
    offsets: Any = None  # host: a copy; device: the address
    indices: Any = None
    values: Any = None
    mu: float = 0.0
    factored: bool = False
    lu: Any = None  # host: SuperLU's factorisation
    singular: int = -1  # host: its first small pivot at tol 0


_infos: dict[int, Info] = {}
_info_ids = iter(range(0x5B5F000, 1 << 62))


def _info(key: int | None, method: str, host: bool, what: str) -> Info:
    info = _infos.get(int(key or 0))
    if info is None or info.method != method or info.host != host:
        raise StatusError(
            INVALID_VALUE, f"{what}: 0x{int(key or 0):x} is not a csr{method}Info{'Host' if host else ''}_t"
        )
    return info


def _info_lifecycle(method: str, host: bool) -> None:
    """cusolverSpCreateCsr<method>Info[Host] and its Destroy."""
    name = f"Csr{method}Info{'Host' if host else ''}"

    def create(out: int) -> None:
        if not out:
            raise StatusError(INVALID_VALUE, f"cusolverSpCreate{name}: info is NULL")
        key = next(_info_ids)
        _infos[key] = Info(method, host)
        put_u64(out, key)

    def destroy(key: int | None) -> None:
        _info(key, method, host, f"cusolverSpDestroy{name}")
        del _infos[int(key or 0)]

    api(f"cusolverSpCreate{name}", 0, P, library="cusolver")(create)
    api(f"cusolverSpDestroy{name}", 0, P, library="cusolver")(destroy)


def _low_level(method: str, host: bool) -> None:
    suffix = "Host" if host else ""
    _info_lifecycle(method, host)

    def analyse(h: Any, m: int, n: int, nnz: int, descr: Any, offsets: Any, indices: Any, key: Any, what: str) -> None:
        _h(h)
        info = _info(key, method, host, what)
        base = _descr(descr, what)
        if method == "chol" and m != n or m < n or nnz < 0:
            raise StatusError(INVALID_VALUE, f"{what}: {m} x {n}, nnz {nnz}")
        if host:
            a = _host_matrix(m, n, nnz, base, None, offsets, indices, what)
            info.offsets, info.indices = a.indptr.copy(), a.indices.copy()  # checked, from 0
        else:
            info.offsets, info.indices = int(offsets or 0), int(indices or 0)
        info.m, info.n, info.nnz, info.base, info.factored = m, n, nnz, base, False

    def set_values(info: Info, values: Any, what: str) -> None:
        if info.m < 0:
            raise StatusError(INVALID_VALUE, f"{what}: the info has not been analysed")
        info.values = _doubles(values, info.nnz, f"{what}: csrValA").copy() if host else int(values or 0)

    def buffer_info(info: Info, internal: Any, workspace: Any) -> None:
        put_u64(internal, 8 * (info.nnz + info.n + 1))
        put_u64(workspace, 8 * max(info.m, 1) + 64)

    def matrix(info: Info) -> Any:
        import scipy.sparse as sp

        return sp.csr_matrix((info.values, info.indices, info.offsets), shape=(info.m, info.n))

    def factor(info: Info, what: str) -> None:
        if info.values is None:
            raise StatusError(INVALID_VALUE, f"{what}: no values (call the BufferInfo or Setup function first)")
        if host:
            info.lu, info.singular = spsolve.factor(method, matrix(info), 0.0, info.mu)
        info.factored = True

    def device_message(info: Info, tol: float, b: int = 0, x: int = 0) -> SparseSolve:
        return _message(
            method=method, m=info.m, n=info.n, nnz=info.nnz, values=info.values, offsets=info.offsets,
            indices=info.indices, b=b, x=x, tol=float(tol), mu=info.mu, base=info.base,
        )  # fmt: skip

    def zero_pivot(h: Any, key: Any, tol_bits: int, out: Any) -> None:
        what = f"cusolverSpDcsr{method}ZeroPivot{suffix}"
        _h(h)
        tol = _f64(tol_bits)
        info = _info(key, method, host, what)
        if not info.factored:
            raise StatusError(INVALID_VALUE, f"{what}: the matrix has not been factorised")
        if host:
            s = spsolve.factor(method, matrix(info), tol, info.mu)[1] if tol > 0 else info.singular
        else:
            s = _device_solve(h, device_message(info, tol), what)
        put_i32(out, s)

    def solve(h: Any, m: int, n: int, b: Any, x: Any, key: Any, what: str) -> None:
        _h(h)
        info = _info(key, method, host, what)
        if not info.factored:
            raise StatusError(INVALID_VALUE, f"{what}: the matrix has not been factorised")
        if (m, n) != (info.m, info.n):
            raise StatusError(INVALID_VALUE, f"{what}: {m} x {n}, but the matrix analysed is {info.m} x {info.n}")
        if host:
            rhs = _doubles(b, m, f"{what}: b").copy()
            if info.lu is not None and info.singular < 0:
                sol = info.lu.solve(rhs)
            else:
                sol = spsolve.solve(method, matrix(info), rhs, 0.0, info.mu)[0]
            if sol is not None:
                _doubles(x, n, f"{what}: x")[...] = sol
        else:
            _device_solve(h, device_message(info, 0.0, int(b or 0), int(x or 0)), what)

    name = f"cusolverSpXcsr{method}Analysis{suffix}"
    if method == "chol":
        api(name, 0, P, I, I, P, P, P, P, library="cusolver")(
            lambda h, n, nnz, descr, offsets, indices, key: analyse(h, n, n, nnz, descr, offsets, indices, key, name)
        )

        def chol_buffer_info(h, n, nnz, descr, values, offsets, indices, key, internal, workspace) -> None:  # noqa: ANN001
            what = f"cusolverSpDcsrcholBufferInfo{suffix}"
            _h(h)
            info = _info(key, method, host, what)
            set_values(info, values, what)
            buffer_info(info, internal, workspace)

        def chol_factor(h, n, nnz, descr, values, offsets, indices, key, buf) -> None:  # noqa: ANN001
            what = f"cusolverSpDcsrcholFactor{suffix}"
            _h(h)
            info = _info(key, method, host, what)
            set_values(info, values, what)
            factor(info, what)

        api(f"cusolverSpDcsrcholBufferInfo{suffix}", 0, P, I, I, P, P, P, P, P, P, P, library="cusolver")(
            chol_buffer_info
        )
        api(f"cusolverSpDcsrcholFactor{suffix}", 0, P, I, I, P, P, P, P, P, P, library="cusolver")(chol_factor)
        api(f"cusolverSpDcsrcholSolve{suffix}", 0, P, I, P, P, P, P, library="cusolver")(
            lambda h, n, b, x, key, buf: solve(h, n, n, b, x, key, f"cusolverSpDcsrcholSolve{suffix}")
        )
    else:
        api(name, 0, P, I, I, I, P, P, P, P, library="cusolver")(
            lambda h, m, n, nnz, descr, offsets, indices, key: analyse(h, m, n, nnz, descr, offsets, indices, key, name)
        )

        def qr_buffer_info(h, m, n, nnz, descr, values, offsets, indices, key, internal, workspace) -> None:  # noqa: ANN001
            what = f"cusolverSpDcsrqrBufferInfo{suffix}"
            _h(h)
            info = _info(key, method, host, what)
            set_values(info, values, what)
            buffer_info(info, internal, workspace)

        def qr_setup(h, m, n, nnz, descr, values, offsets, indices, mu, key) -> None:  # noqa: ANN001
            what = f"cusolverSpDcsrqrSetup{suffix}"
            _h(h)
            info = _info(key, method, host, what)
            set_values(info, values, what)
            info.mu = _f64(mu)

        def qr_factor(h, m, n, nnz, b, x, key, buf) -> None:  # noqa: ANN001
            what = f"cusolverSpDcsrqrFactor{suffix}"
            _h(h)
            info = _info(key, method, host, what)
            factor(info, what)
            if b and x:  # the factorisation solves too when it is given b and x
                solve(h, m, n, b, x, key, what)

        api(f"cusolverSpDcsrqrBufferInfo{suffix}", 0, P, I, I, I, P, P, P, P, P, P, P, library="cusolver")(
            qr_buffer_info
        )
        api(f"cusolverSpDcsrqrSetup{suffix}", 0, P, I, I, I, P, P, P, P, D, P, library="cusolver")(qr_setup)
        api(f"cusolverSpDcsrqrFactor{suffix}", 0, P, I, I, I, P, P, P, P, library="cusolver")(qr_factor)
        api(f"cusolverSpDcsrqrSolve{suffix}", 0, P, I, I, P, P, P, P, library="cusolver")(
            lambda h, m, n, b, x, key, buf: solve(h, m, n, b, x, key, f"cusolverSpDcsrqrSolve{suffix}")
        )
    api(f"cusolverSpDcsr{method}ZeroPivot{suffix}", 0, P, P, D, P, library="cusolver")(zero_pivot)


for _m in ("chol", "qr"):
    _low_level(_m, True)
    _low_level(_m, False)


# ---------------------------------------------------------------------------- csrlu* (host): P B Q^T = L U
def _lu_info(key: int | None, what: str) -> Info:
    return _info(key, "lu", True, what)


_info_lifecycle("lu", True)


@api("cusolverSpXcsrluAnalysisHost", 0, P, I, I, P, P, P, P, library="cusolver")
def cusolverSpXcsrluAnalysisHost(h, n, nnz, descr, offsets, indices, key) -> None:  # noqa: ANN001
    what = "cusolverSpXcsrluAnalysisHost"
    _h(h)
    info = _lu_info(key, what)
    a = _host_matrix(n, n, nnz, _descr(descr, what), None, offsets, indices, what)
    info.offsets, info.indices = a.indptr.copy(), a.indices.copy()
    info.m = info.n = n
    info.nnz, info.factored = nnz, False


@api("cusolverSpDcsrluBufferInfoHost", 0, P, I, I, P, P, P, P, P, P, P, library="cusolver")
def cusolverSpDcsrluBufferInfoHost(h, n, nnz, descr, values, offsets, indices, key, internal, workspace) -> None:  # noqa: ANN001
    what = "cusolverSpDcsrluBufferInfoHost"
    _h(h)
    info = _lu_info(key, what)
    if info.m < 0:
        raise StatusError(INVALID_VALUE, f"{what}: the info has not been analysed")
    info.values = _doubles(values, info.nnz, f"{what}: csrValA").copy()
    put_u64(internal, 8 * (info.nnz + info.n + 1))
    put_u64(workspace, 8 * info.n + 64)


@api("cusolverSpDcsrluFactorHost", 0, P, I, I, P, P, P, P, P, D, P, library="cusolver")
def cusolverSpDcsrluFactorHost(h, n, nnz, descr, values, offsets, indices, key, threshold, buf) -> None:  # noqa: ANN001
    """SuperLU with partial pivoting (``pivot_threshold`` its diagonal preference) on a COLAMD ordering."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    what = "cusolverSpDcsrluFactorHost"
    _h(h)
    info = _lu_info(key, what)
    if info.m < 0:
        raise StatusError(INVALID_VALUE, f"{what}: the info has not been analysed")
    info.values = _doubles(values, info.nnz, f"{what}: csrValA").copy()
    a = sp.csr_matrix((info.values, info.indices, info.offsets), shape=(info.n, info.n))
    try:
        info.lu = splu(a.tocsc(), permc_spec="COLAMD", diag_pivot_thresh=min(max(_f64(threshold), 0.0), 1.0))
        d = np.abs(info.lu.U.diagonal())
        small = np.flatnonzero(d == 0)
        info.singular = int(np.flatnonzero(info.lu.perm_c == small[0])[0]) if len(small) else -1
    except RuntimeError:
        info.lu, info.singular = None, 0
    info.factored = True


@api("cusolverSpDcsrluZeroPivotHost", 0, P, P, D, P, library="cusolver")
def cusolverSpDcsrluZeroPivotHost(h, key, tol, out) -> None:  # noqa: ANN001
    what = "cusolverSpDcsrluZeroPivotHost"
    _h(h)
    info = _lu_info(key, what)
    if not info.factored:
        raise StatusError(INVALID_VALUE, f"{what}: the matrix has not been factorised")
    s = info.singular
    if info.lu is not None:
        small = np.flatnonzero(np.abs(info.lu.U.diagonal()) <= _f64(tol))
        s = int(np.flatnonzero(info.lu.perm_c == small[0])[0]) if len(small) else -1
    put_i32(out, s)


@api("cusolverSpDcsrluSolveHost", 0, P, I, P, P, P, P, library="cusolver")
def cusolverSpDcsrluSolveHost(h, n, b, x, key, buf) -> None:  # noqa: ANN001
    what = "cusolverSpDcsrluSolveHost"
    _h(h)
    info = _lu_info(key, what)
    if not info.factored or info.lu is None or n != info.n:
        raise StatusError(INVALID_VALUE, f"{what}: no factorisation of an {n} x {n} matrix to solve with")
    _doubles(x, n, f"{what}: x")[...] = info.lu.solve(_doubles(b, n, f"{what}: b").copy())


def _lu_factors(info: Info, what: str) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    """(L strictly below its unit diagonal, U, p, q) in CSR with P B Q^T = L U, (P B)(i, :) = B(p[i], :) and
    (B Q^T)(:, j) = B(:, q[j])."""
    import scipy.sparse as sp

    if not info.factored or info.lu is None:
        raise StatusError(INVALID_VALUE, f"{what}: the matrix has not been factorised (or is singular)")
    lower = sp.tril(info.lu.L, -1, format="csr")
    upper = sp.csr_matrix(info.lu.U)
    lower.sort_indices()
    upper.sort_indices()
    return lower, upper, np.argsort(info.lu.perm_r), np.argsort(info.lu.perm_c)


@api("cusolverSpXcsrluNnzHost", 0, P, P, P, P, library="cusolver")
def cusolverSpXcsrluNnzHost(h, nnz_l, nnz_u, key) -> None:  # noqa: ANN001
    what = "cusolverSpXcsrluNnzHost"
    _h(h)
    lower, upper, _, _ = _lu_factors(_lu_info(key, what), what)
    put_i32(nnz_l, lower.nnz)
    put_i32(nnz_u, upper.nnz)


@api("cusolverSpDcsrluExtractHost", 0, P, P, P, P, P, P, P, P, P, P, P, P, P, library="cusolver")
def cusolverSpDcsrluExtractHost(h, p, q, d_l, v_l, rp_l, ci_l, d_u, v_u, rp_u, ci_u, key, buf) -> None:  # noqa: ANN001
    """L (implicit unit diagonal) and U in CSR with each descriptor's base, and P, Q (from 0)."""
    what = "cusolverSpDcsrluExtractHost"
    _h(h)
    info = _lu_info(key, what)
    lower, upper, perm_p, perm_q = _lu_factors(info, what)
    n = info.n
    _ints(p, n, f"{what}: P")[...] = perm_p
    _ints(q, n, f"{what}: Q")[...] = perm_q
    for mat, descr, vals, rows, cols, name in ((lower, d_l, v_l, rp_l, ci_l, "L"), (upper, d_u, v_u, rp_u, ci_u, "U")):
        base = _descr(descr, f"{what} ({name})")
        _ints(rows, n + 1, f"{what}: csrRowPtr{name}")[...] = mat.indptr + base
        _ints(cols, mat.nnz, f"{what}: csrColInd{name}")[...] = mat.indices + base
        _doubles(vals, mat.nnz, f"{what}: csrVal{name}")[...] = mat.data


# ---------------------------------------------------------------------------- cusolverRf
@dataclass
class Rf:
    """cusolverRfHandle_t: A's pattern and values in device memory of its own (refactorised from the values
    ResetValues copies in; solved by a ``sparse_solve`` with LU, which equals solving with the L U of P A Q^T)."""

    zero: float = 0.0
    boost: float = 0.0
    algs: tuple[int, int] = (0, 0)
    matrix_format: tuple[int, int] = (0, 0)
    fast_mode: int = 0
    n: int = -1
    nnz: int = 0
    arrays: tuple[int, int, int] = (0, 0, 0)  # device: offsets, indices, values
    singular: int = -1
    analysed: bool = False


_rf: dict[int, Rf] = {}
_rf_ids = iter(range(0x5B60000, 1 << 62))


def _rf_handle(h: int | None, what: str) -> Rf:
    rf = _rf.get(int(h or 0))
    if rf is None:
        raise CudaError(codes.NOT_INITIALIZED, f"{what}: invalid cusolverRf handle 0x{int(h or 0):x}")
    return rf


@api("cusolverRfCreate", 0, P, library="cusolver")
def cusolverRfCreate(out: int) -> None:
    if not STATE.initialized:
        STATE.init()
    key = next(_rf_ids)
    _rf[key] = Rf()
    put_u64(out, key)


def _free_arrays(rf: Rf) -> None:
    for addr in rf.arrays:
        if addr:
            STATE.driver().mem_free(addr)
    rf.arrays = (0, 0, 0)


@api("cusolverRfDestroy", 0, P, library="cusolver")
def cusolverRfDestroy(h: int | None) -> None:
    _free_arrays(_rf_handle(h, "cusolverRfDestroy"))
    del _rf[int(h or 0)]


@api("cusolverRfSetNumericProperties", 0, P, D, D, library="cusolver")
def cusolverRfSetNumericProperties(h: int | None, zero: int, boost: int) -> None:
    rf = _rf_handle(h, "cusolverRfSetNumericProperties")
    rf.zero, rf.boost = _f64(zero), _f64(boost)


@api("cusolverRfGetNumericProperties", 0, P, P, P, library="cusolver")
def cusolverRfGetNumericProperties(h: int | None, zero: int, boost: int) -> None:
    rf = _rf_handle(h, "cusolverRfGetNumericProperties")
    for addr, value in ((zero, rf.zero), (boost, rf.boost)):
        if not addr:
            raise StatusError(INVALID_VALUE, "cusolverRfGetNumericProperties: output is NULL")
        ctypes.c_double.from_address(addr).value = value


def _rf_pair(name: str, attr: str, allowed: tuple[range, range]) -> None:
    def set_pair(h: int | None, a: int, b: int) -> None:
        rf = _rf_handle(h, f"cusolverRfSet{name}")
        if a not in allowed[0] or b not in allowed[1]:
            raise StatusError(INVALID_VALUE, f"cusolverRfSet{name}: ({a}, {b}) is not a valid choice")
        setattr(rf, attr, (a, b))

    def get_pair(h: int | None, a: int, b: int) -> None:
        first, second = getattr(_rf_handle(h, f"cusolverRfGet{name}"), attr)
        put_i32(a, first)
        put_i32(b, second)

    api(f"cusolverRfSet{name}", 0, P, I, I, library="cusolver")(set_pair)
    api(f"cusolverRfGet{name}", 0, P, P, P, library="cusolver")(get_pair)


_rf_pair("Algs", "algs", (range(0, 3), range(0, 3)))
_rf_pair("MatrixFormat", "matrix_format", (range(0, 2), range(0, 4)))


@api("cusolverRfSetResetValuesFastMode", 0, P, I, library="cusolver")
def cusolverRfSetResetValuesFastMode(h: int | None, mode: int) -> None:
    if mode not in (0, 1):
        raise StatusError(INVALID_VALUE, f"cusolverRfSetResetValuesFastMode: mode {mode}")
    _rf_handle(h, "cusolverRfSetResetValuesFastMode").fast_mode = mode


@api("cusolverRfGetResetValuesFastMode", 0, P, P, library="cusolver")
def cusolverRfGetResetValuesFastMode(h: int | None, out: int) -> None:
    put_i32(out, _rf_handle(h, "cusolverRfGetResetValuesFastMode").fast_mode)


def _rf_setup(rf: Rf, n: int, offsets: np.ndarray, indices: np.ndarray, values: np.ndarray, what: str) -> None:
    try:
        spsolve.csr(n, n, offsets, indices, values, 0)
    except ValueError as exc:
        raise StatusError(INVALID_VALUE, f"{what}: A: {exc}") from None
    drv = STATE.driver()
    _free_arrays(rf)
    arrays = []
    for arr in (offsets.astype(np.int32), indices.astype(np.int32), values.astype(np.float64)):
        addr = drv.mem_alloc(max(arr.nbytes, 8))
        drv.memcpy_htod(addr, arr.tobytes())
        arrays.append(addr)
    rf.arrays = (arrays[0], arrays[1], arrays[2])
    rf.n, rf.nnz, rf.analysed = n, len(indices), False


_SETUP_ARGS = (I, I, P, P, P, I, P, P, P, I, P, P, P, P, P, P)


@api("cusolverRfSetupHost", 0, *_SETUP_ARGS, library="cusolver")
def cusolverRfSetupHost(n, nnz, rp, ci, vals, nnz_l, rp_l, ci_l, v_l, nnz_u, rp_u, ci_u, v_u, p, q, h) -> None:  # noqa: ANN001
    """A (base 0), and L, U, P, Q with P A Q^T = L U: A is kept in device memory of the handle's own; the factors
    are checked for their extent only (every solve refactorises A)."""
    what = "cusolverRfSetupHost"
    rf = _rf_handle(h, what)
    if n < 0 or nnz < 0 or nnz_l < 0 or nnz_u < 0:
        raise StatusError(INVALID_VALUE, f"{what}: n {n}, nnzA {nnz}, nnzL {nnz_l}, nnzU {nnz_u}")
    for perm, name in ((p, "P"), (q, "Q")):
        if not np.array_equal(np.sort(_ints(perm, n, f"{what}: {name}")), np.arange(n)):
            raise StatusError(INVALID_VALUE, f"{what}: {name} is not a permutation of 0..{n - 1}")
    _rf_setup(
        rf, n, _ints(rp, n + 1, f"{what}: csrRowPtrA").copy(), _ints(ci, nnz, f"{what}: csrColIndA").copy(),
        _doubles(vals, nnz, f"{what}: csrValA").copy(), what,
    )  # fmt: skip


@api("cusolverRfSetupDevice", 0, *_SETUP_ARGS, library="cusolver")
def cusolverRfSetupDevice(n, nnz, rp, ci, vals, nnz_l, rp_l, ci_l, v_l, nnz_u, rp_u, ci_u, v_u, p, q, h) -> None:  # noqa: ANN001
    what = "cusolverRfSetupDevice"
    rf = _rf_handle(h, what)
    if n < 0 or nnz < 0:
        raise StatusError(INVALID_VALUE, f"{what}: n {n}, nnzA {nnz}")
    drv = STATE.driver()

    def fetch(addr: int | None, count: int, dtype: Any, name: str) -> np.ndarray:
        size = count * np.dtype(dtype).itemsize
        drv._check_range(int(addr or 0), size, f"{what} ({name})")
        return np.frombuffer(bytes(drv.memcpy_dtoh(int(addr or 0), size)), dtype).copy()

    _rf_setup(
        rf, n, fetch(rp, n + 1, np.int32, "csrRowPtrA"), fetch(ci, nnz, np.int32, "csrColIndA"),
        fetch(vals, nnz, np.float64, "csrValA"), what,
    )  # fmt: skip


def _rf_ready(h: int | None, what: str) -> Rf:
    rf = _rf_handle(h, what)
    if rf.n < 0:
        raise StatusError(INVALID_VALUE, f"{what}: call cusolverRfSetupHost or cusolverRfSetupDevice first")
    return rf


@api("cusolverRfAnalyze", 0, P, library="cusolver")
def cusolverRfAnalyze(h: int | None) -> None:
    _rf_ready(h, "cusolverRfAnalyze").analysed = True


@api("cusolverRfResetValues", 0, I, I, P, P, P, P, P, P, library="cusolver")
def cusolverRfResetValues(n, nnz, rp, ci, vals, p, q, h) -> None:  # noqa: ANN001
    """A's new values (same pattern), copied in stream order into the handle's own array."""
    from shim.native import cu_memory

    what = "cusolverRfResetValues"
    rf = _rf_ready(h, what)
    if (n, nnz) != (rf.n, rf.nnz):
        raise StatusError(INVALID_VALUE, f"{what}: n {n}, nnzA {nnz}, but the handle was set up with {rf.n}, {rf.nnz}")
    cu_memory.dtod(rf.arrays[2], int(vals or 0), nnz * 8, 0, what)


def _rf_message(rf: Rf, b: int = 0, x: int = 0) -> SparseSolve:
    offsets, indices, values = rf.arrays
    return _message(
        method="lu", m=rf.n, n=rf.n, nnz=rf.nnz, values=values, offsets=offsets, indices=indices, b=b, x=x,
        tol=rf.zero, base=0,
    )  # fmt: skip


@api("cusolverRfRefactor", 0, P, library="cusolver")
def cusolverRfRefactor(h: int | None) -> None:
    what = "cusolverRfRefactor"
    rf = _rf_ready(h, what)
    if not rf.analysed:
        raise StatusError(INVALID_VALUE, f"{what}: call cusolverRfAnalyze first")
    rf.singular = _device_solve(None, _rf_message(rf), what, stream=0)  # cusolverRf has no stream
    if rf.singular >= 0:
        raise StatusError(6, f"{what}: a zero pivot at column {rf.singular}")  # CUSOLVER_STATUS_EXECUTION_FAILED


@api("cusolverRfSolve", 0, P, P, P, I, P, I, P, I, library="cusolver")
def cusolverRfSolve(h, p, q, nrhs, temp, ldt, xf, ldxf) -> None:  # noqa: ANN001
    """x = A^-1 f in place in XF for each of ``nrhs`` columns."""
    what = "cusolverRfSolve"
    rf = _rf_ready(h, what)
    if nrhs < 1 or ldxf < rf.n or ldt < rf.n:
        raise StatusError(INVALID_VALUE, f"{what}: nrhs {nrhs}, ldt {ldt}, ldxf {ldxf} for n {rf.n}")
    for k in range(nrhs):
        column = int(xf or 0) + 8 * k * ldxf
        _device_solve(None, _rf_message(rf, column, column), what, stream=0)
