"""cuSPARSE, remoted at its API: the client half of NOTE [vendor libraries] (gpud/sparse.py).

Handles (stream, pointer mode), the legacy matrix descriptors (``cusparseMatDescr_t``: type, index base, fill
mode, diagonal type) and the generic API's descriptors (``cusparseSpMatDescr_t`` for CSR, CSC and COO;
``cusparseDnVecDescr_t``, ``cusparseDnMatDescr_t``) live here, on the client, as cuSPARSE keeps them on the host.
``cusparseSpMV`` and ``cusparseSpMM`` are queued on the handle's stream as one ``sparse_mv`` operation carrying the
descriptors' geometry and addresses (``cusparseSparseToDense`` too), ``cusparseXcsr2coo``/``Xcoo2csr`` as one
``sparse_indices``; ``cusparseSpSV_solve`` is a ``sparse_mv`` with ``solve``, ``cusparse<t>csrilu02`` one
``sparse_ilu0`` whose zero pivot is answered; gpud checks the index arrays before it follows them. Every other
cuSPARSE entry point returns CUSPARSE_STATUS_NOT_SUPPORTED and names itself once on stderr.
"""

from __future__ import annotations

import ctypes
import itertools
from ctypes import c_int, c_int64, c_size_t, c_uint64, c_void_p
from dataclasses import dataclass, field
from typing import Any, Literal

from proto import errors as codes
from proto.codec import ProtocolError, check
from proto.errors import CudaError
from proto.messages import (
    GeamType,
    IndexType,
    SparseCompress,
    SparseFormat,
    SparseFromDense,
    SparseGather,
    SparseGeam,
    SparseGemm,
    SparseIlu0,
    SparseIndices,
    SparseMv,
    SparseSort,
    SparseTranspose,
    Trans,
)
from proto.sparse import extents
from shim.native import cu_capture
from shim.native.cublas import _SCALAR
from shim.native.registry import StatusError, api, put_i32, put_u64
from shim.native.state import STATE

P = c_void_p
I = c_int  # noqa: E741 - the C signatures' int
I64 = c_int64
VERSION = 12510  # cuSPARSE 12.5.10 (CUDA 12.9)
VALUE: dict[int, GeamType] = {0: "f32", 1: "f64", 4: "c64", 5: "c128"}  # cudaDataType_t
INDEX: dict[int, IndexType] = {2: "i32", 3: "i64"}  # cusparseIndexType_t (16U is not supported)
FORMAT_CODE = {"csr": 1, "csc": 2, "coo": 3}  # cusparseFormat_t


@dataclass
class Handle:
    stream: int = 0
    pointer_mode: int = 0  # CUSPARSE_POINTER_MODE_HOST


@dataclass
class MatDescr:
    """cusparseMatDescr_t: what the legacy API describes a matrix with (kept and returned, as cuSPARSE does)."""

    type: int = 0  # CUSPARSE_MATRIX_TYPE_GENERAL
    base: int = 0
    fill: int = 0  # CUSPARSE_FILL_MODE_LOWER
    diag: int = 0  # CUSPARSE_DIAG_TYPE_NON_UNIT


@dataclass
class SpMat:
    format: SparseFormat
    rows: int
    cols: int
    nnz: int
    offsets: int  # CSR row / CSC column offsets; COO row indices
    indices: int
    values: int
    offset_type: IndexType
    index_type: IndexType
    base: int
    type: GeamType
    attributes: dict[int, int] = field(default_factory=dict)  # CUSPARSE_SPMAT_FILL_MODE (0), DIAG_TYPE (1)


@dataclass
class DnVec:
    size: int
    values: int
    type: GeamType


@dataclass
class SpVec:
    size: int
    nnz: int
    indices: int
    values: int
    index_type: IndexType
    base: int
    type: GeamType


@dataclass
class DnMat:
    rows: int
    cols: int
    ld: int
    values: int
    type: GeamType
    order: int  # CUSPARSE_ORDER_COL (1) or CUSPARSE_ORDER_ROW (2)


_handles: dict[int, Handle] = {}
_objects: dict[int, Any] = {}  # descriptors by the handle value given out
_ids = itertools.count(0x5BA5000)


def _new(out: int, obj: Any) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, "descriptor pointer is NULL")
    key = next(_ids)
    _objects[key] = obj
    put_u64(out, key)


def _get(key: int | None, kind: type) -> Any:
    obj = _objects.get(int(key or 0))
    if not isinstance(obj, kind):
        raise CudaError(codes.INVALID_VALUE, f"invalid {kind.__name__} descriptor 0x{int(key or 0):x}")
    return obj


def _drop(key: int | None, kind: type) -> None:
    if key:  # destroying NULL is a no-op
        _get(key, kind)
        del _objects[int(key)]


def mat_descr(key: int | None) -> MatDescr:
    """A cusparseMatDescr_t by its handle (cuSOLVER's sparse API describes its matrices with them)."""
    return _get(key, MatDescr)


def _h(h: int | None) -> Handle:
    handle = _handles.get(int(h or 0))
    if handle is None:
        raise CudaError(codes.NOT_INITIALIZED, f"invalid cuSPARSE handle 0x{int(h or 0):x}")
    return handle


# ---------------------------------------------------------------------------- handles
@api("cusparseCreate", 0, P, library="cusparse")
def cusparseCreate(out: int) -> None:
    if not STATE.initialized:  # cuSPARSE initialises CUDA itself
        STATE.init()
    key = next(_ids)
    _handles[key] = Handle()
    put_u64(out, key)


@api("cusparseDestroy", 0, P, library="cusparse")
def cusparseDestroy(h: int | None) -> None:
    _h(h)
    del _handles[int(h or 0)]


@api("cusparseSetStream", 0, P, P, library="cusparse")
def cusparseSetStream(h: int | None, stream: int | None) -> None:
    _h(h).stream = int(stream or 0)


@api("cusparseGetStream", 0, P, P, library="cusparse")
def cusparseGetStream(h: int | None, out: int) -> None:
    put_u64(out, _h(h).stream)


@api("cusparseSetPointerMode", 0, P, I, library="cusparse")
def cusparseSetPointerMode(h: int | None, mode: int) -> None:
    if mode not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"pointer mode {mode} (0 host, 1 device)")
    _h(h).pointer_mode = mode


@api("cusparseGetPointerMode", 0, P, P, library="cusparse")
def cusparseGetPointerMode(h: int | None, out: int) -> None:
    put_i32(out, _h(h).pointer_mode)


@api("cusparseGetVersion", 0, P, P, library="cusparse")
def cusparseGetVersion(h: int | None, out: int) -> None:
    _h(h)
    put_i32(out, VERSION)


@api("cusparseGetProperty", 0, I, P, library="cusparse")
def cusparseGetProperty(which: int, out: int) -> None:
    put_i32(out, (VERSION // 1000, VERSION // 10 % 100, VERSION % 10)[which] if 0 <= which <= 2 else 0)


# ---------------------------------------------------------------------------- legacy matrix descriptors
@api("cusparseCreateMatDescr", 0, P, library="cusparse")
def cusparseCreateMatDescr(out: int) -> None:
    _new(out, MatDescr())


@api("cusparseDestroyMatDescr", 0, P, library="cusparse")
def cusparseDestroyMatDescr(d: int | None) -> None:
    _drop(d, MatDescr)


def _descr_field(name: str, attr: str, allowed: range) -> None:
    def setter(d: int | None, value: int) -> None:
        if value not in allowed:
            raise CudaError(codes.INVALID_VALUE, f"cusparseSet{name}: {value} is not one of {list(allowed)}")
        setattr(_get(d, MatDescr), attr, value)

    def getter(d: int | None) -> int:
        return getattr(_get(d, MatDescr), attr)

    api(f"cusparseSet{name}", 0, P, I, library="cusparse")(setter)
    api(f"cusparseGet{name}", 0, P, library="cusparse")(getter)  # returns the enum itself, not a status


_descr_field("MatType", "type", range(4))  # GENERAL, SYMMETRIC, HERMITIAN, TRIANGULAR
_descr_field("MatIndexBase", "base", range(2))
_descr_field("MatFillMode", "fill", range(2))
_descr_field("MatDiagType", "diag", range(2))


# ---------------------------------------------------------------------------- generic API descriptors
def _value_type(code: int) -> GeamType:
    typ = VALUE.get(code)
    if typ is None:
        raise CudaError(codes.NOT_SUPPORTED, f"value type {code} (cudaDataType) is not supported")
    return typ


def _index_type(code: int) -> IndexType:
    typ = INDEX.get(code)
    if typ is None:
        raise CudaError(codes.NOT_SUPPORTED, f"index type {code} (cusparseIndexType_t) is not supported")
    return typ


def _sp_mat(out: int, fmt: SparseFormat, rows: int, cols: int, nnz: int, offsets: Any, indices: Any, values: Any,
            offset_type: int, index_type: int, base: int, value_type: int) -> None:  # fmt: skip
    if min(rows, cols, nnz) < 0 or base not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"rows={rows} cols={cols} nnz={nnz} base={base}")
    mat = SpMat(fmt, rows, cols, nnz, int(offsets or 0), int(indices or 0), int(values or 0),
                _index_type(offset_type), _index_type(index_type), base, _value_type(value_type))  # fmt: skip
    _new(out, mat)


@api("cusparseCreateCsr", 0, P, I64, I64, I64, P, P, P, I, I, I, I, library="cusparse")
def cusparseCreateCsr(out, rows, cols, nnz, offsets, cols_idx, values, otype, itype, base, vtype) -> None:  # noqa: ANN001
    _sp_mat(out, "csr", rows, cols, nnz, offsets, cols_idx, values, otype, itype, base, vtype)


@api("cusparseCreateCsc", 0, P, I64, I64, I64, P, P, P, I, I, I, I, library="cusparse")
def cusparseCreateCsc(out, rows, cols, nnz, offsets, rows_idx, values, otype, itype, base, vtype) -> None:  # noqa: ANN001
    _sp_mat(out, "csc", rows, cols, nnz, offsets, rows_idx, values, otype, itype, base, vtype)


@api("cusparseCreateCoo", 0, P, I64, I64, I64, P, P, P, I, I, I, library="cusparse")
def cusparseCreateCoo(out, rows, cols, nnz, rows_idx, cols_idx, values, itype, base, vtype) -> None:  # noqa: ANN001
    _sp_mat(out, "coo", rows, cols, nnz, rows_idx, cols_idx, values, itype, itype, base, vtype)


for _const in ("Csr", "Csc", "Coo"):  # the cusparseCreateConst* forms take the same arguments
    _impl = globals()[f"cusparseCreate{_const}"]
    _args = (P, I64, I64, I64, P, P, P, I, I, I, I) if _const != "Coo" else (P, I64, I64, I64, P, P, P, I, I, I)
    api(f"cusparseCreateConst{_const}", 0, *_args, library="cusparse")(_impl)


@api("cusparseDestroySpMat", 0, P, library="cusparse")
def cusparseDestroySpMat(d: int | None) -> None:
    _drop(d, SpMat)


@api("cusparseSpMatGetSize", 0, P, P, P, P, library="cusparse")
def cusparseSpMatGetSize(d: int | None, rows: int, cols: int, nnz: int) -> None:
    mat = _get(d, SpMat)
    for ptr, value in ((rows, mat.rows), (cols, mat.cols), (nnz, mat.nnz)):
        if ptr:
            put_u64(ptr, value)


@api("cusparseSpMatGetFormat", 0, P, P, library="cusparse")
def cusparseSpMatGetFormat(d: int | None, out: int) -> None:
    put_i32(out, FORMAT_CODE[_get(d, SpMat).format])


@api("cusparseSpMatGetIndexBase", 0, P, P, library="cusparse")
def cusparseSpMatGetIndexBase(d: int | None, out: int) -> None:
    put_i32(out, _get(d, SpMat).base)


@api("cusparseSpMatGetValues", 0, P, P, library="cusparse")
def cusparseSpMatGetValues(d: int | None, out: int) -> None:
    put_u64(out, _get(d, SpMat).values)


@api("cusparseSpMatSetValues", 0, P, P, library="cusparse")
def cusparseSpMatSetValues(d: int | None, values: int | None) -> None:
    _get(d, SpMat).values = int(values or 0)


@api("cusparseCsrSetPointers", 0, P, P, P, P, library="cusparse")
def cusparseCsrSetPointers(d: int | None, offsets: int | None, cols_idx: int | None, values: int | None) -> None:
    mat = _get(d, SpMat)
    if mat.format != "csr":
        raise CudaError(codes.INVALID_VALUE, "cusparseCsrSetPointers: the descriptor is not CSR")
    mat.offsets, mat.indices, mat.values = int(offsets or 0), int(cols_idx or 0), int(values or 0)


@api("cusparseSpMatSetAttribute", 0, P, I, P, c_size_t, library="cusparse")
def cusparseSpMatSetAttribute(d: int | None, attribute: int, data: int | None, size: int) -> None:
    mat = _get(d, SpMat)
    if attribute not in (0, 1) or size != 4 or not data:
        raise CudaError(codes.INVALID_VALUE, f"attribute {attribute} with {size} bytes (FILL_MODE 0, DIAG_TYPE 1: 4)")
    mat.attributes[attribute] = ctypes.c_int.from_address(int(data)).value


@api("cusparseSpMatGetAttribute", 0, P, I, P, c_size_t, library="cusparse")
def cusparseSpMatGetAttribute(d: int | None, attribute: int, data: int | None, size: int) -> None:
    mat = _get(d, SpMat)
    if attribute not in (0, 1) or size != 4 or not data:
        raise CudaError(codes.INVALID_VALUE, f"attribute {attribute} with {size} bytes (FILL_MODE 0, DIAG_TYPE 1: 4)")
    put_i32(int(data), mat.attributes.get(attribute, 0))


@api("cusparseCreateDnVec", 0, P, I64, P, I, library="cusparse")
def cusparseCreateDnVec(out: int, size: int, values: int | None, vtype: int) -> None:
    if size < 0:
        raise CudaError(codes.INVALID_VALUE, f"dense vector size {size}")
    _new(out, DnVec(size, int(values or 0), _value_type(vtype)))


api("cusparseCreateConstDnVec", 0, P, I64, P, I, library="cusparse")(cusparseCreateDnVec)


@api("cusparseDestroyDnVec", 0, P, library="cusparse")
def cusparseDestroyDnVec(d: int | None) -> None:
    _drop(d, DnVec)


@api("cusparseDnVecGet", 0, P, P, P, P, library="cusparse")
def cusparseDnVecGet(d: int | None, size: int, values: int, vtype: int) -> None:
    vec = _get(d, DnVec)
    put_u64(size, vec.size)
    put_u64(values, vec.values)
    put_i32(vtype, next(k for k, v in VALUE.items() if v == vec.type))


api("cusparseConstDnVecGet", 0, P, P, P, P, library="cusparse")(cusparseDnVecGet)


@api("cusparseDnVecGetValues", 0, P, P, library="cusparse")
def cusparseDnVecGetValues(d: int | None, out: int) -> None:
    put_u64(out, _get(d, DnVec).values)


api("cusparseConstDnVecGetValues", 0, P, P, library="cusparse")(cusparseDnVecGetValues)


@api("cusparseDnVecSetValues", 0, P, P, library="cusparse")
def cusparseDnVecSetValues(d: int | None, values: int | None) -> None:
    _get(d, DnVec).values = int(values or 0)


# ---------------------------------------------------------------------------- SpMV
_OPS: dict[int, Trans] = {0: 0, 1: 1, 2: 2}


def _sparse_operand(a: SpMat) -> dict[str, Any]:
    """The sparse matrix's part of a ``sparse_mv`` operation (SpMV, SpMM, SparseToDense)."""
    return dict(
        format=a.format,
        rows=a.rows,
        cols=a.cols,
        nnz=a.nnz,
        offsets=a.offsets if a.format != "coo" else 0,
        rows_idx=a.offsets if a.format == "coo" else 0,
        indices=a.indices,
        values=a.values,
        offset_type=a.offset_type,
        index_type=a.index_type,
        base=1 if a.base else 0,
        type=a.type,
    )


def _spmv_message(h: int | None, op: int, alpha: Any, mat: Any, x: Any, beta: Any, y: Any, compute: int) -> SparseMv:
    handle = _h(h)
    a, vx, vy = _get(mat, SpMat), _get(x, DnVec), _get(y, DnVec)
    trans = _OPS.get(op)
    if trans is None:
        raise CudaError(codes.INVALID_VALUE, f"spmv: operation {op} (0 N, 1 T, 2 C)")
    if not (a.type == vx.type == vy.type == _value_type(compute)):
        raise CudaError(
            codes.NOT_SUPPORTED, f"spmv: A {a.type}, x {vx.type}, y {vy.type}, compute {compute}: only one type"
        )
    msg = SparseMv(
        **_sparse_operand(a),
        op=trans,
        x=vx.values,
        y=vy.values,
    )
    nx, ny = (a.cols, a.rows) if op == 0 else (a.rows, a.cols)
    if vx.size != nx or vy.size != ny:
        raise CudaError(codes.INVALID_VALUE, f"spmv: x has {vx.size} elements (want {nx}), y {vy.size} (want {ny})")
    return _finish(handle, msg, alpha, beta, "spmv")


def queue(handle: Any, msg: Any, what: str) -> Any:
    """``msg`` on the handle's stream, every operand's extent checked against the program's allocations first
    (gpud checks them again against the session's): the one place the client checks a cuSPARSE operation."""
    drv = STATE.driver()
    msg.stream = drv._stream(handle.stream)
    try:
        ranges = msg.extents() if hasattr(msg, "extents") else extents(check(msg))
    except ProtocolError as exc:
        raise CudaError(codes.INVALID_VALUE, f"{what}: {exc.message}") from None
    for operand, addr, size, _ in ranges:
        drv._check_range(addr, size, f"{what} ({operand})")
    return msg


def _scalar(handle: Handle, ptr: Any, typ: GeamType, what: str) -> list[float]:
    """A scalar argument's value ([real, imaginary]): read from the host, or from the device in device pointer
    mode (the operations that form their result on gpud from a value)."""
    import struct

    if not ptr:
        raise CudaError(codes.INVALID_VALUE, f"{what} is NULL")
    size, fmt = _SCALAR[typ]
    if handle.pointer_mode == 1:
        raw = bytes(STATE.driver().memcpy_dtoh(int(ptr), size))
    else:
        raw = ctypes.string_at(int(ptr), size)
    v = struct.unpack(fmt, raw)
    return [float(v[0]), float(v[1]) if len(v) > 1 else 0.0]


def _finish(handle: Handle, msg: SparseMv, alpha: Any, beta: Any, what: str) -> SparseMv:
    """The scalars (host values or device pointers, by the handle's pointer mode), the stream, the range checks."""
    if handle.pointer_mode == 1:  # gpud reads them in stream order
        msg.scalars_on_device, msg.alpha_ptr, msg.beta_ptr = True, int(alpha or 0), int(beta or 0)
    else:
        msg.alpha, msg.beta = (
            _scalar(handle, alpha, msg.type, f"{what}: alpha"),
            _scalar(handle, beta, msg.type, f"{what}: beta"),
        )
    return queue(handle, msg, what)


@api("cusparseSpMV_bufferSize", 0, P, I, P, P, P, P, P, I, I, P, library="cusparse")
def cusparseSpMV_bufferSize(h, op, alpha, mat, x, beta, y, compute, alg, out) -> None:  # noqa: ANN001
    _h(h)
    put_u64(out, 0)  # the node's SpMV needs no work area from the program


@api("cusparseSpMV_preprocess", 0, P, I, P, P, P, P, P, I, I, P, library="cusparse")
def cusparseSpMV_preprocess(h, op, alpha, mat, x, beta, y, compute, alg, buf) -> None:  # noqa: ANN001
    _spmv_message(h, op, alpha, mat, x, beta, y, compute)  # checked; nothing to prepare


@api("cusparseSpMV", 0, P, I, P, P, P, P, P, I, I, P, library="cusparse")
def cusparseSpMV(h, op, alpha, mat, x, beta, y, compute, alg, buf) -> None:  # noqa: ANN001
    cu_capture.post(_spmv_message(h, op, alpha, mat, x, beta, y, compute))


# ---------------------------------------------------------------------------- dense matrices, SpMM
_ORDERS = (1, 2)  # CUSPARSE_ORDER_COL, CUSPARSE_ORDER_ROW


@api("cusparseCreateDnMat", 0, P, I64, I64, I64, P, I, I, library="cusparse")
def cusparseCreateDnMat(out: int, rows: int, cols: int, ld: int, values: int | None, vtype: int, order: int) -> None:
    if rows < 0 or cols < 0:
        raise CudaError(codes.INVALID_VALUE, f"cusparseCreateDnMat: {rows} x {cols}")
    if order not in _ORDERS:
        raise CudaError(codes.INVALID_VALUE, f"cusparseCreateDnMat: order {order} (1 column, 2 row)")
    lead = rows if order == 1 else cols
    if ld < max(lead, 1):
        raise CudaError(codes.INVALID_VALUE, f"cusparseCreateDnMat: ld {ld} < {lead}")
    _new(out, DnMat(rows, cols, ld, int(values or 0), _value_type(vtype), order))


api("cusparseCreateConstDnMat", 0, P, I64, I64, I64, P, I, I, library="cusparse")(cusparseCreateDnMat)


@api("cusparseDestroyDnMat", 0, P, library="cusparse")
def cusparseDestroyDnMat(d: int | None) -> None:
    _drop(d, DnMat)


@api("cusparseDnMatGet", 0, P, P, P, P, P, P, P, library="cusparse")
def cusparseDnMatGet(d: int | None, rows: int, cols: int, ld: int, values: int, vtype: int, order: int) -> None:
    mat = _get(d, DnMat)
    for out, v in ((rows, mat.rows), (cols, mat.cols), (ld, mat.ld), (values, mat.values)):
        if out:
            put_u64(out, v)
    if vtype:
        put_i32(vtype, next(k for k, v in VALUE.items() if v == mat.type))
    if order:
        put_i32(order, mat.order)


api("cusparseConstDnMatGet", 0, P, P, P, P, P, P, P, library="cusparse")(cusparseDnMatGet)


@api("cusparseDnMatGetValues", 0, P, P, library="cusparse")
def cusparseDnMatGetValues(d: int | None, out: int) -> None:
    put_u64(out, _get(d, DnMat).values)


api("cusparseConstDnMatGetValues", 0, P, P, library="cusparse")(cusparseDnMatGetValues)


@api("cusparseDnMatSetValues", 0, P, P, library="cusparse")
def cusparseDnMatSetValues(d: int | None, values: int | None) -> None:
    _get(d, DnMat).values = int(values or 0)


def _spmm_message(
    h: int | None, op_a: int, op_b: int, alpha: Any, mat: Any, b: Any, beta: Any, c: Any, compute: int
) -> SparseMv:
    """SpMM as the ``sparse_mv`` operation with dense matrices (proto/sparse.py checks their shapes)."""
    handle = _h(h)
    a, mb, mc = _get(mat, SpMat), _get(b, DnMat), _get(c, DnMat)
    ta, tb = _OPS.get(op_a), _OPS.get(op_b)
    if ta is None or tb is None:
        raise CudaError(codes.INVALID_VALUE, f"spmm: operations {op_a}, {op_b} (0 N, 1 T, 2 C)")
    if not (a.type == mb.type == mc.type == _value_type(compute)):
        raise CudaError(
            codes.NOT_SUPPORTED, f"spmm: A {a.type}, B {mb.type}, C {mc.type}, compute {compute}: only one type"
        )
    m, k = (a.rows, a.cols) if ta == 0 else (a.cols, a.rows)
    bk, n = (mb.rows, mb.cols) if tb == 0 else (mb.cols, mb.rows)
    if bk != k or (mc.rows, mc.cols) != (m, n):
        raise CudaError(
            codes.INVALID_VALUE, f"spmm: op(A) {m} x {k}, op(B) {bk} x {n}, C {mc.rows} x {mc.cols} do not match"
        )
    msg = SparseMv(
        **_sparse_operand(a),
        op=ta,
        x=mb.values,
        y=mc.values,
        n=n,
        op_b=tb,
        ldb=mb.ld,
        ldc=mc.ld,
        b_row_major=mb.order == 2,
        c_row_major=mc.order == 2,
    )
    return _finish(handle, msg, alpha, beta, "spmm")


@api("cusparseSpMM_bufferSize", 0, P, I, I, P, P, P, P, P, I, I, P, library="cusparse")
def cusparseSpMM_bufferSize(h, op_a, op_b, alpha, mat, b, beta, c, compute, alg, out) -> None:  # noqa: ANN001
    _h(h)
    put_u64(out, 0)  # the node's SpMM needs no work area from the program


@api("cusparseSpMM_preprocess", 0, P, I, I, P, P, P, P, P, I, I, P, library="cusparse")
def cusparseSpMM_preprocess(h, op_a, op_b, alpha, mat, b, beta, c, compute, alg, buf) -> None:  # noqa: ANN001
    _spmm_message(h, op_a, op_b, alpha, mat, b, beta, c, compute)  # checked; nothing to prepare


@api("cusparseSpMM", 0, P, I, I, P, P, P, P, P, I, I, P, library="cusparse")
def cusparseSpMM(h, op_a, op_b, alpha, mat, b, beta, c, compute, alg, buf) -> None:  # noqa: ANN001
    cu_capture.post(_spmm_message(h, op_a, op_b, alpha, mat, b, beta, c, compute))


# ---------------------------------------------------------------------------- index conversions (legacy API)
def _indices_message(h: int | None, to_coo: bool, src: Any, nnz: int, m: int, dst: Any, base: int) -> SparseIndices:
    handle = _h(h)
    what = "cusparseXcsr2coo" if to_coo else "cusparseXcoo2csr"
    if nnz < 0 or m < 0 or base not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"{what}: nnz {nnz}, m {m}, base {base}")
    msg = SparseIndices(to_coo=to_coo, m=m, nnz=nnz, src=int(src or 0), dst=int(dst or 0), base=1 if base else 0)
    return queue(handle, msg, what)


@api("cusparseXcsr2coo", 0, P, P, I, I, P, I, library="cusparse")
def cusparseXcsr2coo(h, offsets, nnz, m, rows, base) -> None:  # noqa: ANN001
    cu_capture.post(_indices_message(h, True, offsets, nnz, m, rows, base))


@api("cusparseXcoo2csr", 0, P, P, I, I, P, I, library="cusparse")
def cusparseXcoo2csr(h, rows, nnz, m, offsets, base) -> None:  # noqa: ANN001
    cu_capture.post(_indices_message(h, False, rows, nnz, m, offsets, base))


def _to_dense_message(h: int | None, mat: Any, c: Any, what: str) -> SparseMv:
    handle = _h(h)
    a, mc = _get(mat, SpMat), _get(c, DnMat)
    if a.type != mc.type or (mc.rows, mc.cols) != (a.rows, a.cols):
        raise CudaError(
            codes.INVALID_VALUE, f"{what}: A {a.rows} x {a.cols} {a.type}, C {mc.rows} x {mc.cols} {mc.type}"
        )
    msg = SparseMv(
        **_sparse_operand(a),
        x=0,
        y=mc.values,
        n=a.cols,
        to_dense=True,
        ldc=mc.ld,
        c_row_major=mc.order == 2,
    )
    return queue(handle, msg, what)


@api("cusparseSparseToDense_bufferSize", 0, P, P, P, I, P, library="cusparse")
def cusparseSparseToDense_bufferSize(h, mat, c, alg, out) -> None:  # noqa: ANN001
    _to_dense_message(h, mat, c, "cusparseSparseToDense")
    put_u64(out, 0)


@api("cusparseSparseToDense", 0, P, P, P, I, P, library="cusparse")
def cusparseSparseToDense(h, mat, c, alg, buf) -> None:  # noqa: ANN001
    cu_capture.post(_to_dense_message(h, mat, c, "cusparseSparseToDense"))


def _transpose_message(
    h,
    m,
    n,
    nnz,
    values,
    offsets,
    indices,
    out_values,
    out_offsets,
    out_indices,
    vtype,
    action,
    base,  # noqa: ANN001
) -> SparseTranspose:
    handle = _h(h)
    what = "cusparseCsr2cscEx2"
    if nnz < 0 or m < 0 or n < 0 or base not in (0, 1) or action not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"{what}: m {m}, n {n}, nnz {nnz}, base {base}, action {action}")
    msg = SparseTranspose(
        m=m,
        n=n,
        nnz=nnz,
        offsets=int(offsets or 0),
        indices=int(indices or 0),
        values=int(values or 0),
        out_offsets=int(out_offsets or 0),
        out_indices=int(out_indices or 0),
        out_values=int(out_values or 0),
        type=_value_type(vtype),
        numeric=action == 1,
        base=1 if base else 0,
    )
    return queue(handle, msg, what)


@api("cusparseCsr2cscEx2_bufferSize", 0, P, I, I, I, P, P, P, P, P, P, I, I, I, I, P, library="cusparse")
def cusparseCsr2cscEx2_bufferSize(h, m, n, nnz, v, o, i, cv, co, ci, vtype, action, base, alg, out) -> None:  # noqa: ANN001
    _transpose_message(h, m, n, nnz, v, o, i, cv, co, ci, vtype, action, base)
    put_u64(out, 0)


@api("cusparseCsr2cscEx2", 0, P, I, I, I, P, P, P, P, P, P, I, I, I, I, P, library="cusparse")
def cusparseCsr2cscEx2(h, m, n, nnz, v, o, i, cv, co, ci, vtype, action, base, alg, buf) -> None:  # noqa: ANN001
    cu_capture.post(_transpose_message(h, m, n, nnz, v, o, i, cv, co, ci, vtype, action, base))


# ---------------------------------------------------------------------------- sorts, permutations, gather
def _sort(h: int | None, what: str, **fields: Any) -> SparseSort:
    handle = _h(h)
    if min(int(fields.get(k, 0)) for k in ("m", "n", "nnz")) < 0:
        raise CudaError(codes.INVALID_VALUE, f"{what}: a negative size")
    return queue(handle, SparseSort(**fields), what)


@api("cusparseCreateIdentityPermutation", 0, P, I, P, library="cusparse")
def cusparseCreateIdentityPermutation(h: int | None, n: int, p: int | None) -> None:
    cu_capture.post(_sort(h, "cusparseCreateIdentityPermutation", mode="identity", nnz=n, perm=int(p or 0)))


@api("cusparseXcoosort_bufferSizeExt", 0, P, I, I, I, P, P, P, library="cusparse")
def cusparseXcoosort_bufferSizeExt(h, m, n, nnz, rows, cols, out) -> None:  # noqa: ANN001
    _h(h)
    put_u64(out, 0)  # the node's sort needs no work area from the program


api("cusparseXcsrsort_bufferSizeExt", 0, P, I, I, I, P, P, P, library="cusparse")(cusparseXcoosort_bufferSizeExt)


@api("cusparseXcoosortByRow", 0, P, I, I, I, P, P, P, P, library="cusparse")
def cusparseXcoosortByRow(h, m, n, nnz, rows, cols, p, buf) -> None:  # noqa: ANN001
    fields = dict(m=m, n=n, nnz=nnz, rows=int(rows or 0), cols=int(cols or 0), perm=int(p or 0))
    cu_capture.post(_sort(h, "cusparseXcoosortByRow", mode="coo_row", **fields))


@api("cusparseXcoosortByColumn", 0, P, I, I, I, P, P, P, P, library="cusparse")
def cusparseXcoosortByColumn(h, m, n, nnz, rows, cols, p, buf) -> None:  # noqa: ANN001
    fields = dict(m=m, n=n, nnz=nnz, rows=int(rows or 0), cols=int(cols or 0), perm=int(p or 0))
    cu_capture.post(_sort(h, "cusparseXcoosortByColumn", mode="coo_col", **fields))


@api("cusparseXcsrsort", 0, P, I, I, I, P, P, P, P, P, library="cusparse")
def cusparseXcsrsort(h, m, n, nnz, descr, offsets, cols, p, buf) -> None:  # noqa: ANN001
    base = 1 if _get(descr, MatDescr).base else 0
    fields = dict(m=m, n=n, nnz=nnz, rows=int(offsets or 0), cols=int(cols or 0), perm=int(p or 0), base=base)
    cu_capture.post(_sort(h, "cusparseXcsrsort", mode="csr", **fields))


api("cusparseXcscsort_bufferSizeExt", 0, P, I, I, I, P, P, P, library="cusparse")(cusparseXcoosort_bufferSizeExt)


@api("cusparseXcscsort", 0, P, I, I, I, P, P, P, P, P, library="cusparse")
def cusparseXcscsort(h, m, n, nnz, descr, offsets, rows, p, buf) -> None:  # noqa: ANN001
    """Row indices sorted within each column: csrsort's operation with the columns as its rows."""
    base = 1 if _get(descr, MatDescr).base else 0
    fields = dict(m=n, n=m, nnz=nnz, rows=int(offsets or 0), cols=int(rows or 0), perm=int(p or 0), base=base)
    cu_capture.post(_sort(h, "cusparseXcscsort", mode="csr", **fields))


@api("cusparseCreateSpVec", 0, P, I64, I64, P, P, I, I, I, library="cusparse")
def cusparseCreateSpVec(out, size, nnz, indices, values, itype, base, vtype) -> None:  # noqa: ANN001
    if size < 0 or nnz < 0 or nnz > size or base not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"cusparseCreateSpVec: size {size}, nnz {nnz}, base {base}")
    _new(out, SpVec(size, nnz, int(indices or 0), int(values or 0), _index_type(itype), base, _value_type(vtype)))


api("cusparseCreateConstSpVec", 0, P, I64, I64, P, P, I, I, I, library="cusparse")(cusparseCreateSpVec)


@api("cusparseDestroySpVec", 0, P, library="cusparse")
def cusparseDestroySpVec(d: int | None) -> None:
    _drop(d, SpVec)


def _gather(h: int | None, y: int | None, x: int | None, scatter: bool, what: str) -> None:
    handle = _h(h)
    dy, sx = _get(y, DnVec), _get(x, SpVec)
    if dy.type != sx.type or dy.size != sx.size:
        raise CudaError(codes.INVALID_VALUE, f"{what}: y {dy.size} {dy.type}, x {sx.size} {sx.type}")
    msg = SparseGather(
        size=sx.size,
        nnz=sx.nnz,
        indices=sx.indices,
        values=sx.values,
        y=dy.values,
        index_type=sx.index_type,
        type=sx.type,
        base=1 if sx.base else 0,
        scatter=scatter,
    )
    cu_capture.post(queue(handle, msg, what))


@api("cusparseGather", 0, P, P, P, library="cusparse")
def cusparseGather(h: int | None, y: int | None, x: int | None) -> None:
    _gather(h, y, x, False, "cusparseGather")


@api("cusparseScatter", 0, P, P, P, library="cusparse")
def cusparseScatter(h: int | None, x: int | None, y: int | None) -> None:
    _gather(h, y, x, True, "cusparseScatter")


# ---------------------------------------------------------------------------- SpGEMM
@dataclass
class SpGEMMDescr:
    """cusparseSpGEMMDescr_t: nothing is kept on gpud between the phases (each computes the product afresh)."""

    nnz: int = -1


@api("cusparseSpGEMM_createDescr", 0, P, library="cusparse")
def cusparseSpGEMM_createDescr(out: int) -> None:
    _new(out, SpGEMMDescr())


@api("cusparseSpGEMM_destroyDescr", 0, P, library="cusparse")
def cusparseSpGEMM_destroyDescr(d: int | None) -> None:
    _drop(d, SpGEMMDescr)


def _spgemm_message(h, op_a, op_b, alpha, mat_a, mat_b, mat_c, compute, count) -> tuple[Handle, SparseGemm]:  # noqa: ANN001
    handle = _h(h)
    a, b, c = _get(mat_a, SpMat), _get(mat_b, SpMat), _get(mat_c, SpMat)
    if op_a != 0 or op_b != 0:
        raise CudaError(codes.NOT_SUPPORTED, "spgemm: cuSPARSE's SpGEMM takes A and B untransposed")
    if not (a.format == b.format == c.format == "csr"):
        raise CudaError(codes.NOT_SUPPORTED, "spgemm: A, B and C must be CSR")
    if not (a.type == b.type == c.type == _value_type(compute)) or not (
        a.index_type == b.index_type == c.index_type == a.offset_type == b.offset_type == c.offset_type
    ):
        raise CudaError(codes.NOT_SUPPORTED, "spgemm: A, B, C and the compute type must share one value and index type")
    if a.cols != b.rows or (c.rows, c.cols) != (a.rows, b.cols):
        raise CudaError(
            codes.INVALID_VALUE, f"spgemm: A {a.rows} x {a.cols}, B {b.rows} x {b.cols}, C {c.rows} x {c.cols}"
        )
    msg = SparseGemm(
        count=count,
        m=a.rows,
        k=a.cols,
        n=b.cols,
        a_nnz=a.nnz,
        a_offsets=a.offsets,
        a_indices=a.indices,
        a_values=a.values,
        b_nnz=b.nnz,
        b_offsets=b.offsets,
        b_indices=b.indices,
        b_values=b.values,
        c_nnz=max(c.nnz, 0) if not count else 0,
        c_offsets=c.offsets if not count else 0,
        c_indices=c.indices if not count else 0,
        c_values=c.values if not count else 0,
        index_type=a.index_type,
        base=1 if a.base else 0,
        type=a.type,
    )
    msg.alpha = _scalar(handle, alpha, a.type, "spgemm: alpha")
    return handle, queue(handle, msg, "spgemm")


@api("cusparseSpGEMM_workEstimation", 0, P, I, I, P, P, P, P, P, I, I, P, P, P, library="cusparse")
def cusparseSpGEMM_workEstimation(h, op_a, op_b, alpha, a, b, beta, c, compute, alg, descr, size, buf) -> None:  # noqa: ANN001
    _get(descr, SpGEMMDescr)
    _spgemm_message(h, op_a, op_b, alpha, a, b, c, compute, True)  # checked; the work is done at compute
    if size:
        put_u64(size, 0)


@api("cusparseSpGEMM_compute", 0, P, I, I, P, P, P, P, P, I, I, P, P, P, library="cusparse")
def cusparseSpGEMM_compute(h, op_a, op_b, alpha, a, b, beta, c, compute, alg, descr, size, buf) -> None:  # noqa: ANN001
    """C's nnz, from gpud (one round trip in stream order); C's descriptor reports it (cusparseSpMatGetSize)."""
    d = _get(descr, SpGEMMDescr)
    _, msg = _spgemm_message(h, op_a, op_b, alpha, a, b, c, compute, True)
    nnz = int(STATE.driver().conn.call(msg)[0] or 0)
    d.nnz = _get(c, SpMat).nnz = nnz
    if size:
        put_u64(size, 0)


@api("cusparseSpGEMM_copy", 0, P, I, I, P, P, P, P, P, I, I, P, library="cusparse")
def cusparseSpGEMM_copy(h, op_a, op_b, alpha, a, b, beta, c, compute, alg, descr) -> None:  # noqa: ANN001
    if _get(descr, SpGEMMDescr).nnz < 0:
        raise CudaError(codes.INVALID_VALUE, "cusparseSpGEMM_copy: cusparseSpGEMM_compute was not called")
    cu_capture.post(_spgemm_message(h, op_a, op_b, alpha, a, b, c, compute, False)[1])


# ---------------------------------------------------------------------------- DenseToSparse
def _from_dense_message(h: int | None, dense: Any, mat: Any, count: bool) -> SparseFromDense:
    handle = _h(h)
    a, b = _get(dense, DnMat), _get(mat, SpMat)
    if a.type != b.type or (a.rows, a.cols) != (b.rows, b.cols):
        raise CudaError(
            codes.INVALID_VALUE,
            f"cusparseDenseToSparse: A {a.rows} x {a.cols} {a.type}, B {b.rows} x {b.cols} {b.type}",
        )
    msg = SparseFromDense(
        count=count,
        rows=a.rows,
        cols=a.cols,
        ld=a.ld,
        row_major=a.order == 2,
        values=a.values,
        type=a.type,
        format=b.format,
        nnz=0 if count else b.nnz,
        offsets=0 if count else b.offsets,
        indices=0 if count else b.indices,
        out_values=0 if count else b.values,
        offset_type=b.offset_type,
        index_type=b.index_type,
        base=1 if b.base else 0,
    )
    return queue(handle, msg, "cusparseDenseToSparse")


@api("cusparseDenseToSparse_bufferSize", 0, P, P, P, I, P, library="cusparse")
def cusparseDenseToSparse_bufferSize(h, dense, mat, alg, out) -> None:  # noqa: ANN001
    _from_dense_message(h, dense, mat, True)
    put_u64(out, 0)


@api("cusparseDenseToSparse_analysis", 0, P, P, P, I, P, library="cusparse")
def cusparseDenseToSparse_analysis(h, dense, mat, alg, buf) -> None:  # noqa: ANN001
    """B's nnz, from gpud (one round trip in stream order); B's descriptor reports it (cusparseSpMatGetSize)."""
    msg = _from_dense_message(h, dense, mat, True)
    _get(mat, SpMat).nnz = int(STATE.driver().conn.call(msg)[0] or 0)


@api("cusparseDenseToSparse_convert", 0, P, P, P, I, P, library="cusparse")
def cusparseDenseToSparse_convert(h, dense, mat, alg, buf) -> None:  # noqa: ANN001
    cu_capture.post(_from_dense_message(h, dense, mat, False))


# ---------------------------------------------------------------------------- csrgeam2 (legacy API)
_GEAM_TYPES: dict[str, GeamType] = {"S": "f32", "D": "f64", "C": "c64", "Z": "c128"}


def _geam_message(h, t, m, n, alpha, da, nnz_a, va, oa, ia, beta, db, nnz_b, vb, ob, ib, dc, vc, oc, ic, count):  # noqa: ANN001
    handle = _h(h)
    typ = _GEAM_TYPES[t]
    if min(m, n, nnz_a, nnz_b) < 0:
        raise CudaError(codes.INVALID_VALUE, f"csrgeam2: m {m}, n {n}, nnz {nnz_a}, {nnz_b}")
    bases = [1 if _get(d, MatDescr).base else 0 for d in (da, db, dc)]
    msg = SparseGeam(
        count=count,
        m=m,
        n=n,
        a_nnz=nnz_a,
        a_offsets=int(oa or 0),
        a_indices=int(ia or 0),
        a_values=0 if count else int(va or 0),
        a_base=bases[0],
        b_nnz=nnz_b,
        b_offsets=int(ob or 0),
        b_indices=int(ib or 0),
        b_values=0 if count else int(vb or 0),
        b_base=bases[1],
        c_offsets=int(oc or 0),
        c_indices=0 if count else int(ic or 0),
        c_values=0 if count else int(vc or 0),
        c_base=bases[2],
        type=typ,
    )
    if not count:
        msg.alpha, msg.beta = (
            _scalar(handle, alpha, typ, "csrgeam2: alpha"),
            _scalar(handle, beta, typ, "csrgeam2: beta"),
        )
    return msg


def _geam_api(t: str) -> None:
    def buffer_size(h, m, n, alpha, da, nnz_a, va, oa, ia, beta, db, nnz_b, vb, ob, ib, dc, vc, oc, ic, out) -> None:  # noqa: ANN001
        _h(h)
        put_u64(out, 0)

    def geam(h, m, n, alpha, da, nnz_a, va, oa, ia, beta, db, nnz_b, vb, ob, ib, dc, vc, oc, ic, buf) -> None:  # noqa: ANN001
        msg = _geam_message(
            h, t, m, n, alpha, da, nnz_a, va, oa, ia, beta, db, nnz_b, vb, ob, ib, dc, vc, oc, ic, False
        )
        offsets = (ctypes.c_int32 * (m + 1)).from_buffer_copy(
            bytes(STATE.driver().memcpy_dtoh(msg.c_offsets, 4 * (m + 1)))
        )
        msg.c_nnz = max(int(offsets[m]) - msg.c_base, 0)  # C's nnz, as csrgeam2Nnz wrote C's offsets
        cu_capture.post(queue(_h(h), msg, "csrgeam2"))

    args = (P, I, I, P, P, I, P, P, P, P, P, I, P, P, P, P, P, P, P, P)
    api(f"cusparse{t}csrgeam2_bufferSizeExt", 0, *args, library="cusparse")(buffer_size)
    api(f"cusparse{t}csrgeam2", 0, *args, library="cusparse")(geam)


for _t in _GEAM_TYPES:
    _geam_api(_t)


@api("cusparseXcsrgeam2Nnz", 0, P, I, I, P, I, P, P, P, I, P, P, P, P, P, P, library="cusparse")
def cusparseXcsrgeam2Nnz(h, m, n, da, nnz_a, oa, ia, db, nnz_b, ob, ib, dc, oc, nnz_out, buf) -> None:  # noqa: ANN001
    """C's row offsets (written on the device) and nnz (to the host, or the device in device pointer mode)."""
    msg = _geam_message(h, "S", m, n, 0, da, nnz_a, 0, oa, ia, 0, db, nnz_b, 0, ob, ib, dc, 0, oc, 0, True)
    nnz = int(STATE.driver().conn.call(queue(_h(h), msg, "csrgeam2"))[0] or 0)
    if nnz_out:
        if _h(h).pointer_mode == 1:
            STATE.driver().memcpy_htod(int(nnz_out), int(nnz).to_bytes(4, "little", signed=True))
        else:
            put_i32(nnz_out, nnz)


# ---------------------------------------------------------------------------- nnz_compress, csr2csr_compress
# Their tolerance is a float by value: wooly_native.c writes these entry points out and hands it on as an
# IEEE-754 double bit pattern (the trampolines forward integer-class arguments only: NOTE [trampolines]).
def _tolerance(bits: int) -> float:
    import struct

    return float(struct.unpack("<d", int(bits).to_bytes(8, "little"))[0])


def _read_i32(addr: int | None, n: int, what: str) -> list[int]:
    if n <= 0:
        return []
    if not addr:
        raise CudaError(codes.INVALID_VALUE, f"{what} is NULL")
    return list((ctypes.c_int32 * n).from_buffer_copy(bytes(STATE.driver().memcpy_dtoh(int(addr), 4 * n))))


def _compress_api(t: str) -> None:
    typ = _GEAM_TYPES[t]

    def nnz_compress(h, m, descr, values, offsets, per_row, nnz_out, tol) -> None:  # noqa: ANN001
        """Each row's surviving entries (device) and their total (host, or device in device pointer mode)."""
        what = f"cusparse{t}nnz_compress"
        if m < 0:
            raise CudaError(codes.INVALID_VALUE, f"{what}: m {m}")
        base: Literal[0, 1] = 1 if _get(descr, MatDescr).base else 0
        rows = _read_i32(offsets, m + 1, f"{what}: the row offsets")
        msg = SparseCompress(
            count=True, m=m, nnz=max(rows[m] - base, 0), values=int(values or 0), offsets=int(offsets or 0),
            per_row=int(per_row or 0), tol=_tolerance(tol), type=typ, base=base,
        )  # fmt: skip
        total = int(STATE.driver().conn.call(queue(_h(h), msg, what))[0] or 0)
        if nnz_out:
            if _h(h).pointer_mode == 1:
                STATE.driver().memcpy_htod(int(nnz_out), total.to_bytes(4, "little", signed=True))
            else:
                put_i32(nnz_out, total)

    def csr2csr(h, m, n, descr, values, indices, offsets, nnz, per_row, c_values, c_indices, c_offsets, tol) -> None:  # noqa: ANN001
        what = f"cusparse{t}csr2csr_compress"
        if m < 0 or n < 0 or nnz < 0:
            raise CudaError(codes.INVALID_VALUE, f"{what}: m {m}, n {n}, nnz {nnz}")
        base: Literal[0, 1] = 1 if _get(descr, MatDescr).base else 0
        counts = _read_i32(per_row, m, f"{what}: nnzPerRow")
        msg = SparseCompress(
            m=m, n=n, nnz=nnz, values=int(values or 0), offsets=int(offsets or 0), indices=int(indices or 0),
            c_nnz=max(sum(counts), 0), c_values=int(c_values or 0), c_indices=int(c_indices or 0),
            c_offsets=int(c_offsets or 0), tol=_tolerance(tol), type=typ, base=base,
        )  # fmt: skip
        cu_capture.post(queue(_h(h), msg, what))

    api(f"cusparse{t}nnz_compress", 0, P, I, P, P, P, P, P, c_uint64, library="cusparse")(nnz_compress)
    args = (P, I, I, P, P, P, P, I, P, P, P, P, c_uint64)
    api(f"cusparse{t}csr2csr_compress", 0, *args, library="cusparse")(csr2csr)


for _t in _GEAM_TYPES:
    _compress_api(_t)


# ---------------------------------------------------------------------------- SpSV, ILU(0)
@dataclass
class SpSVDescr:
    """cusparseSpSVDescr_t: nothing to keep (gpud solves at cusparseSpSV_solve; the analysis is a check)."""


@api("cusparseSpSV_createDescr", 0, P, library="cusparse")
def cusparseSpSV_createDescr(out: int) -> None:
    _new(out, SpSVDescr())


@api("cusparseSpSV_destroyDescr", 0, P, library="cusparse")
def cusparseSpSV_destroyDescr(d: int | None) -> None:
    _drop(d, SpSVDescr)


def _spsv_message(h: int | None, op: int, alpha: Any, mat: Any, x: Any, y: Any, compute: int, d: Any) -> SparseMv:
    """y = alpha op(T)^-1 x as a ``sparse_mv`` with ``solve``: T is A's triangle by its FILL_MODE and DIAG_TYPE
    attributes (cuSPARSE's defaults: lower, non-unit)."""
    handle = _h(h)
    _get(d, SpSVDescr)
    a, vx, vy = _get(mat, SpMat), _get(x, DnVec), _get(y, DnVec)
    trans = _OPS.get(op)
    if trans is None:
        raise CudaError(codes.INVALID_VALUE, f"spsv: operation {op} (0 N, 1 T, 2 C)")
    if not (a.type == vx.type == vy.type == _value_type(compute)):
        raise CudaError(codes.NOT_SUPPORTED, f"spsv: A {a.type}, x {vx.type}, y {vy.type}: only one type")
    if a.rows != a.cols or a.format == "csc":
        raise CudaError(codes.INVALID_VALUE, f"spsv: A must be a square CSR or COO matrix ({a.rows} x {a.cols})")
    if vx.size != a.rows or vy.size != a.rows:
        raise CudaError(codes.INVALID_VALUE, f"spsv: x has {vx.size} elements, y {vy.size} (want {a.rows})")
    msg = SparseMv(
        **_sparse_operand(a),
        op=trans,
        x=vx.values,
        y=vy.values,
        solve=True,
        lower=a.attributes.get(0, 0) == 0,  # CUSPARSE_FILL_MODE_LOWER
        unit=a.attributes.get(1, 0) == 1,  # CUSPARSE_DIAG_TYPE_UNIT
    )
    if handle.pointer_mode == 1:
        msg.scalars_on_device, msg.alpha_ptr = True, int(alpha or 0)
    else:
        msg.alpha = _scalar(handle, alpha, msg.type, "spsv: alpha")
    return queue(handle, msg, "spsv")


@api("cusparseSpSV_bufferSize", 0, P, I, P, P, P, P, I, I, P, P, library="cusparse")
def cusparseSpSV_bufferSize(h, op, alpha, mat, x, y, compute, alg, d, out) -> None:  # noqa: ANN001
    _h(h)
    put_u64(out, 0)  # the node's solve needs no work area from the program


@api("cusparseSpSV_analysis", 0, P, I, P, P, P, P, I, I, P, P, library="cusparse")
def cusparseSpSV_analysis(h, op, alpha, mat, x, y, compute, alg, d, buf) -> None:  # noqa: ANN001
    _spsv_message(h, op, alpha, mat, x, y, compute, d)  # checked; nothing to prepare


@api("cusparseSpSV_solve", 0, P, I, P, P, P, P, I, I, P, library="cusparse")
def cusparseSpSV_solve(h, op, alpha, mat, x, y, compute, alg, d) -> None:  # noqa: ANN001
    cu_capture.post(_spsv_message(h, op, alpha, mat, x, y, compute, d))


@dataclass
class Ilu02Info:
    """csrilu02Info_t: the zero pivot of the last factorisation (-1: none)."""

    zero_pivot: int = -1


@api("cusparseCreateCsrilu02Info", 0, P, library="cusparse")
def cusparseCreateCsrilu02Info(out: int) -> None:
    _new(out, Ilu02Info())


@api("cusparseDestroyCsrilu02Info", 0, P, library="cusparse")
def cusparseDestroyCsrilu02Info(d: int | None) -> None:
    _drop(d, Ilu02Info)


ZERO_PIVOT = 9  # CUSPARSE_STATUS_ZERO_PIVOT


@api("cusparseXcsrilu02_zeroPivot", 0, P, P, P, library="cusparse")
def cusparseXcsrilu02_zeroPivot(h: int | None, info: int | None, out: int | None) -> None:
    _h(h)
    pivot = _get(info, Ilu02Info).zero_pivot
    if out:
        if _h(h).pointer_mode == 1:
            STATE.driver().memcpy_htod(int(out), pivot.to_bytes(4, "little", signed=True))
        else:
            put_i32(out, pivot)
    if pivot >= 0:
        raise StatusError(ZERO_PIVOT, f"cusparseXcsrilu02_zeroPivot: A({pivot},{pivot}) is zero")


def _ilu02_api(t: str) -> None:
    typ = _GEAM_TYPES[t]

    def check(h: Any, m: int, nnz: int, descr: Any, info: Any, what: str) -> MatDescr:
        _h(h)
        _get(info, Ilu02Info)
        d = _get(descr, MatDescr)
        if m < 0 or nnz < 0:
            raise CudaError(codes.INVALID_VALUE, f"{what}: m {m}, nnz {nnz}")
        if d.type != 0:
            raise CudaError(codes.INVALID_VALUE, f"{what}: the matrix type must be GENERAL, not {d.type}")
        return d

    def buffer_size(h, m, nnz, descr, values, offsets, indices, info, out) -> None:  # noqa: ANN001
        check(h, m, nnz, descr, info, f"cusparse{t}csrilu02_bufferSize")
        put_i32(out, 128)  # cuSPARSE wants a non-empty buffer; the node's factorisation uses none of it

    def analysis(h, m, nnz, descr, values, offsets, indices, info, policy, buf) -> None:  # noqa: ANN001
        check(h, m, nnz, descr, info, f"cusparse{t}csrilu02_analysis")

    def factor(h, m, nnz, descr, values, offsets, indices, info, policy, buf) -> None:  # noqa: ANN001
        """In place, in stream order; its zero pivot is answered when the stream reaches it (kept for
        cusparseXcsrilu02_zeroPivot)."""
        what = f"cusparse{t}csrilu02"
        d = check(h, m, nnz, descr, info, what)
        msg = SparseIlu0(
            m=m, nnz=nnz, values=int(values or 0), offsets=int(offsets or 0), indices=int(indices or 0),
            type=typ, base=1 if d.base else 0,
        )  # fmt: skip
        _get(info, Ilu02Info).zero_pivot = int(STATE.driver().conn.call(queue(_h(h), msg, what))[0])

    args = (P, I, I, P, P, P, P, P)
    api(f"cusparse{t}csrilu02_bufferSize", 0, *args, P, library="cusparse")(buffer_size)
    api(f"cusparse{t}csrilu02_analysis", 0, *args, I, P, library="cusparse")(analysis)
    api(f"cusparse{t}csrilu02", 0, *args, I, P, library="cusparse")(factor)


for _t in _GEAM_TYPES:
    _ilu02_api(_t)
