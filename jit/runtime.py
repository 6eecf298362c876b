"""Loading compiled objects (MCJIT) and launching kernels on all cores, GIL released."""

from __future__ import annotations

import ctypes
import os
import re
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm

from jit.emit.cpu import (
    L_ASSERT,
    L_BLOCK,
    L_DYN,
    L_ERROR,
    L_GRID,
    L_NBLOCKS,
    L_NEXT,
    L_NTHREADS,
    L_PARAMS,
    L_SLOTS,
)
from jit.errors import (
    CUDA_ERROR_ASSERT,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_LAUNCH_FAILED,
    CUDA_ERROR_NOT_FOUND,
    JitError,
)
from jit.passes.optimize import host_target_machine


@dataclass(frozen=True)
class ParamInfo:
    name: str
    size: int
    align: int
    offset: int


@dataclass(frozen=True)
class GlobalInfo:
    name: str
    size: int
    address: int


@dataclass
class LaunchResult:
    printf: str = ""


# -- host services called from kernel code -------------------------------------------------------
_LAUNCHES: dict[int, dict[str, Any]] = {}
_LAUNCH_LOCK = threading.Lock()
_CONV = re.compile(rb"%([-+ #0]*)(\d+|\*)?(?:\.(\d+|\*))?(hh|h|ll|l|L|z|j|t|q)?([diouxXeEfFgGaAcspn%])")


def format_printf(fmt: bytes, args: int) -> str:
    """Render a device printf: args points at the packed argument buffer (each value naturally aligned)."""
    out: list[str] = []
    pos, off = 0, 0
    for m in _CONV.finditer(fmt):
        out.append(fmt[pos:m.start()].decode("utf-8", "replace"))
        pos = m.end()
        flags, width, prec, length, conv = (x.decode() if x else "" for x in m.groups())
        if conv == "%":
            out.append("%")
            continue
        if conv in "eEfFgGaA":
            size, code = 8, "<d"
        elif conv in "sp" or length in ("l", "ll", "z", "j", "t", "q", "L"):
            size, code = 8, "<q" if conv in "di" else "<Q"
        else:
            size, code = 4, "<i" if conv in "di" else "<I"
        off = (off + size - 1) // size * size
        raw = ctypes.string_at(args + off, size) if args else bytes(size)
        off += size
        (val,) = struct.unpack(code, raw)
        spec = "%" + flags + (width if width != "*" else "") + ("." + prec if prec and prec != "*" else "")
        try:
            if conv == "s":
                s = ctypes.string_at(val).decode("utf-8", "replace") if val else "(null)"
                out.append((spec + "s") % s)
            elif conv == "p":
                out.append(hex(val))
            elif conv == "c":
                out.append((spec + "c") % chr(val & 0xFF))
            elif conv in "aA":
                out.append(float(val).hex())
            elif conv in "iu":
                out.append((spec + "d") % val)
            else:
                out.append((spec + conv) % val)
        except (TypeError, ValueError, OverflowError):
            out.append(m.group().decode("utf-8", "replace"))
    out.append(fmt[pos:].decode("utf-8", "replace"))
    return "".join(out)


@ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64)
def _rt_printf(lctx: int, fmt: int, args: int) -> int:
    try:
        text = format_printf(ctypes.string_at(fmt), args) if fmt else ""
        with _LAUNCH_LOCK:
            rec = _LAUNCHES.get(lctx or 0)
            if rec is not None:
                rec["printf"].append(text)
        return len(text)
    except Exception:
        return -1


@ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32)
def _rt_assert(lctx: int, msg: int, file: int, line: int) -> int:
    try:
        m = ctypes.string_at(msg).decode("utf-8", "replace") if msg else "?"
        f = ctypes.string_at(file).decode("utf-8", "replace") if file else "?"
        with _LAUNCH_LOCK:
            rec = _LAUNCHES.get(lctx or 0)
            if rec is not None and rec.get("assert") is None:
                rec["assert"] = f"{f}:{line}: Assertion `{m}` failed."
    except Exception:
        pass
    return 0


_SYMBOLS_DONE = False


def _bind_host_symbols() -> None:
    global _SYMBOLS_DONE
    if not _SYMBOLS_DONE:
        llvm.add_symbol("wooly_rt_printf", ctypes.cast(_rt_printf, ctypes.c_void_p).value)
        llvm.add_symbol("wooly_rt_assert", ctypes.cast(_rt_assert, ctypes.c_void_p).value)
        _SYMBOLS_DONE = True


_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = os.cpu_count() or 1
_RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=_POOL_SIZE, thread_name_prefix="wooly-jit")
    return _POOL


def _buffer(n: int) -> tuple[Any, int]:
    buf = ctypes.create_string_buffer(max(n, 16) + 64)
    addr = ctypes.addressof(buf)
    return buf, (addr + 63) // 64 * 64


@dataclass
class CpuKernel:
    name: str
    params: list[ParamInfo]
    param_buffer_size: int
    static_shared_bytes: int
    local_bytes_per_thread: int
    max_threads_per_block: int
    num_regs: int
    _fn: Any = field(repr=False, default=None)
    _rec_bytes: int = 0
    _dyn_offset: int = 0
    _module: Any = field(repr=False, default=None)

    def launch(self, grid: tuple[int, ...] | int = (1, 1, 1), block: tuple[int, ...] | int = (1, 1, 1),
               shared_mem: int = 0, params: bytes | bytearray | memoryview | Any = b"",
               workers: int | None = None) -> LaunchResult:
        g, bl = _dims(grid, "grid"), _dims(block, "block")
        nt = bl[0] * bl[1] * bl[2]
        if nt > self.max_threads_per_block or nt > 1024 or bl[2] > 64:
            raise JitError(CUDA_ERROR_INVALID_VALUE, f"block {bl} exceeds {self.max_threads_per_block} threads")
        if g[1] > 65535 or g[2] > 65535 or g[0] > 2**31 - 1:
            raise JitError(CUDA_ERROR_INVALID_VALUE, f"grid {g} out of range")
        if shared_mem < 0 or shared_mem > 227 * 1024:
            raise JitError(CUDA_ERROR_INVALID_VALUE, f"dynamic shared memory {shared_mem} out of range")
        raw = bytes(params) if not isinstance(params, (bytes, bytearray)) else params
        pbuf, paddr = _buffer(max(len(raw), self.param_buffer_size))
        ctypes.memmove(paddr, raw, len(raw))
        lctx = (ctypes.c_int64 * L_SLOTS)()
        nblocks = g[0] * g[1] * g[2]
        lctx[L_PARAMS] = paddr
        for k in range(3):
            lctx[L_GRID + k], lctx[L_BLOCK + k] = g[k], bl[k]
        lctx[L_NBLOCKS], lctx[L_NEXT], lctx[L_ERROR] = nblocks, 0, 0
        lctx[L_DYN], lctx[L_NTHREADS], lctx[L_ASSERT] = shared_mem, nt, 0
        nw = max(1, min(workers or _POOL_SIZE, nblocks, _POOL_SIZE))
        keep: list[Any] = [pbuf]
        wctxs = []
        for _ in range(nw):
            sb, sa = _buffer(self._dyn_offset + shared_mem)
            lb, la = _buffer(nt * self.local_bytes_per_thread)
            rb, ra = _buffer(nt * self._rec_bytes)
            w = (ctypes.c_int64 * 4)(sa, la, ra, 0)
            keep += [sb, lb, rb, w]
            wctxs.append(w)
        key = ctypes.addressof(lctx)
        rec: dict[str, Any] = {"printf": [], "assert": None}
        with _LAUNCH_LOCK:
            _LAUNCHES[key] = rec
        try:
            if nw == 1:
                self._fn(key, ctypes.addressof(wctxs[0]))
            else:
                futs = [_pool().submit(self._fn, key, ctypes.addressof(w)) for w in wctxs]
                for f in futs:
                    f.result()
        finally:
            with _LAUNCH_LOCK:
                _LAUNCHES.pop(key, None)
        text = "".join(rec["printf"])
        err = int(lctx[L_ERROR])
        if err:
            if err == CUDA_ERROR_ASSERT:
                e = JitError(err, f"device-side assert triggered in {self.name}: {rec['assert'] or ''}".strip())
            elif err == CUDA_ERROR_LAUNCH_FAILED:
                e = JitError(err, f"trap executed in kernel {self.name}")
            else:
                e = JitError(err, f"kernel {self.name} failed")
            e.printf = text  # type: ignore[attr-defined]
            raise e
        return LaunchResult(printf=text)


def _dims(d: tuple[int, ...] | int, what: str) -> tuple[int, int, int]:
    if isinstance(d, int):
        d = (d,)
    t = tuple(int(x) for x in d) + (1,) * (3 - len(d))
    if len(t) != 3 or any(x < 1 for x in t):
        raise JitError(CUDA_ERROR_INVALID_VALUE, f"invalid {what} dimensions {d}")
    return t  # type: ignore[return-value]


class CpuModule:
    """A loaded PTX module: kernels and module-scope globals, backed by one MCJIT engine."""

    def __init__(self, obj: bytes, meta: dict) -> None:
        _bind_host_symbols()
        self._tm = host_target_machine()
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._tm)
        self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self._engine.finalize_object()
        self.globals: dict[str, GlobalInfo] = {}
        for name, size in meta["globals"].items():
            addr = self._engine.get_global_value_address(name)
            self.globals[name] = GlobalInfo(name, int(size), int(addr))
        self._kernels: dict[str, CpuKernel] = {}
        for k in meta["kernels"]:
            addr = self._engine.get_function_address(k["symbol"])
            kern = CpuKernel(
                name=k["name"], params=[ParamInfo(**p) for p in k["params"]], param_buffer_size=k["param_size"],
                static_shared_bytes=k["static_shared"], local_bytes_per_thread=k["local_bytes"],
                max_threads_per_block=k["max_threads"], num_regs=k["num_regs"], _fn=_RUN(addr),
                _rec_bytes=k["rec_bytes"], _dyn_offset=int(meta["dyn_offset"]), _module=self)
            self._kernels[k["name"]] = kern

    @property
    def kernel_names(self) -> list[str]:
        return list(self._kernels)

    def get_kernel(self, name: str) -> CpuKernel:
        k = self._kernels.get(name)
        if k is None:
            raise JitError(CUDA_ERROR_NOT_FOUND, f"no kernel named '{name}' in module")
        return k

    def get_global(self, name: str) -> GlobalInfo:
        g = self.globals.get(name)
        if g is None:
            raise JitError(CUDA_ERROR_NOT_FOUND, f"no global named '{name}' in module")
        return g
