"""cuBLASXt, the host-memory BLAS of libcublas: its gemm family on top of the remoted cuBLAS gemm.

cuBLASXt takes matrices in host or device memory and returns when the result is in place. Here each call stages
its host operands into device memory on gpud, runs one remoted gemm (shim/native/cublas.py: NumPy's BLAS on the
CPU gpud, the node's cuBLAS on a GPU) and copies C back: one device, no tiling (the block dimension is kept and
reported, as it changes only how a GPU would split the work). Device-memory operands are used in place. A CPU
share of the work (cublasXtSetCpuRatio/SetCpuRoutine) is not offered: those answer CUBLAS_STATUS_NOT_SUPPORTED.
"""

from __future__ import annotations

import ctypes
import itertools
from ctypes import c_int, c_size_t, c_void_p
from dataclasses import dataclass, field

from proto import errors as codes
from proto.errors import CudaError
from proto.messages import BlasType
from shim.native import cublas
from shim.native.registry import api, put_i32, put_u64
from shim.native.state import STATE

P = c_void_p
_ELEM = {"f32": 4, "f64": 8, "c64": 8, "c128": 16}


@dataclass
class XtHandle:
    blas: int  # the cuBLAS handle the calls run on
    block_dim: int = 1024
    devices: list[int] = field(default_factory=lambda: [0])
    pinning: int = 0


_handles: dict[int, XtHandle] = {}
_ids = itertools.count(0xB1A5F00)


def _xt(h: int | None) -> XtHandle:
    x = _handles.get(int(h or 0))
    if x is None:
        raise CudaError(codes.NOT_INITIALIZED, f"invalid cuBLASXt handle 0x{int(h or 0):x}")
    return x


@api("cublasXtCreate", 0, P, library="cublas")
def cublasXtCreate(out: int) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cublasXtCreate: handle is NULL")
    inner = ctypes.c_uint64()
    cublas.cublasCreate_v2(ctypes.addressof(inner))
    h = next(_ids)
    _handles[h] = XtHandle(inner.value)
    put_u64(out, h)


@api("cublasXtDestroy", 0, P, library="cublas")
def cublasXtDestroy(h: int | None) -> None:
    x = _xt(h)
    cublas.cublasDestroy_v2(x.blas)
    del _handles[int(h or 0)]


@api("cublasXtDeviceSelect", 0, P, c_int, P, library="cublas")
def cublasXtDeviceSelect(h: int | None, n: int, ids: int | None) -> None:
    x = _xt(h)
    if n <= 0 or not ids:
        raise CudaError(codes.INVALID_VALUE, f"cublasXtDeviceSelect: {n} devices")
    chosen = [ctypes.c_int.from_address(int(ids) + 4 * i).value for i in range(n)]
    for d in chosen:
        STATE.check_device(d)
    x.devices = chosen


@api("cublasXtSetBlockDim", 0, P, c_int, library="cublas")
def cublasXtSetBlockDim(h: int | None, dim: int) -> None:
    x = _xt(h)
    if dim <= 0:
        raise CudaError(codes.INVALID_VALUE, f"cublasXtSetBlockDim: {dim}")
    x.block_dim = dim


@api("cublasXtGetBlockDim", 0, P, P, library="cublas")
def cublasXtGetBlockDim(h: int | None, out: int) -> None:
    put_i32(out, _xt(h).block_dim)


@api("cublasXtSetPinningMemMode", 0, P, c_int, library="cublas")
def cublasXtSetPinningMemMode(h: int | None, mode: int) -> None:
    if mode not in (0, 1):
        raise CudaError(codes.INVALID_VALUE, f"cublasXtSetPinningMemMode: mode {mode}")
    _xt(h).pinning = mode


@api("cublasXtGetPinningMemMode", 0, P, P, library="cublas")
def cublasXtGetPinningMemMode(h: int | None, out: int) -> None:
    put_i32(out, _xt(h).pinning)


def _extent(trans: int, rows: int, cols: int, ld: int) -> tuple[int, int]:
    """(elements spanned, the leading dimension's minimum) of an operand stored rows x cols before op()."""
    r, c = (rows, cols) if trans == 0 else (cols, rows)
    return ((c - 1) * ld + r if r and c else 0), r


def xt_gemm(h: int | None, ta: int, tb: int, m: int, n: int, k: int, alpha: int | None, a: int | None, lda: int,
            b: int | None, ldb: int, beta: int | None, c: int | None, ldc: int, typ: BlasType) -> None:  # fmt: skip
    """C = alpha op(A) op(B) + beta C with A, B, C in host or device memory; returns with C in place."""
    x = _xt(h)
    if m == 0 or n == 0:
        return
    drv = STATE.driver()
    elem = _ELEM[typ]
    lds = {"A": lda, "B": ldb, "C": ldc}
    spans = {"A": (a, *_extent(ta, m, k, lda)), "B": (b, *_extent(tb, k, n, ldb)), "C": (c, *_extent(0, m, n, ldc))}
    for name, (ptr, _count, rows) in spans.items():
        if not ptr:
            raise CudaError(codes.INVALID_VALUE, f"cublasXt gemm: {name} is NULL")
        if lds[name] < max(1, rows):
            raise CudaError(codes.INVALID_VALUE, f"cublasXt gemm: the leading dimension of {name} is below {rows}")
    staged: dict[str, int] = {}
    try:
        dev: dict[str, int] = {}
        for name, (ptr, count, _rows) in spans.items():
            if drv.is_device_pointer(int(ptr or 0)):
                dev[name] = int(ptr or 0)
                continue
            if name != "C" and k == 0:  # nothing of A or B is read
                dev[name] = 0
                continue
            dev[name] = staged[name] = drv.mem_alloc(max(1, count * elem))
            drv.memcpy_htod(dev[name], ctypes.string_at(int(ptr or 0), count * elem))
        cublas.gemm(x.blas, ta, tb, m, n, k, alpha, dev["A"], lda, dev["B"], ldb, beta, dev["C"], ldc,
                    types=(typ, typ, typ, typ))  # fmt: skip
        if "C" in staged:
            count = spans["C"][1] * elem
            drv.memcpy_dtoh(staged["C"], count, out=(ctypes.c_char * count).from_address(int(c or 0)))
        else:
            drv.stream_synchronize(0)
    finally:
        for addr in staged.values():
            drv.mem_free(addr)


for _prefix, _typ in (("S", "f32"), ("D", "f64"), ("C", "c64"), ("Z", "c128")):

    def _impl(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, typ=_typ) -> None:  # noqa: ANN001
        xt_gemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, typ)

    api(f"cublasXt{_prefix}gemm", 0, P, c_int, c_int, c_size_t, c_size_t, c_size_t, P, P, c_size_t, P, c_size_t, P,
        P, c_size_t, library="cublas")(_impl)  # fmt: skip
