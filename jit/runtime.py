"""Loading compiled objects (MCJIT) and launching kernels on all cores, GIL released."""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import re
import struct
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm

from jit.checked import (  # noqa: F401 (GlobalRange: part of this module's API)
    HEAP_ALLOC_ADDR,
    HEAP_FREE_ADDR,
    HEAP_SIZE,
    HEAPS,
    DeviceHeap,
    GlobalRange,
    for_ranges,
)
from jit.emit import (
    L_ASSERT,
    L_BADADDR,
    L_BLOCK,
    L_CHUNK,
    L_DYN,
    L_ERROR,
    L_GLOBALS,
    L_GRID,
    L_HEAP,
    L_HEAP_ALLOC,
    L_HEAP_FREE,
    L_NBLOCKS,
    L_NEXT,
    L_NRANGES,
    L_NTHREADS,
    L_PARAMS,
    L_RANGES,
    L_ROOTS,
    L_SLOTS,
    RB_LO,
)
from jit.errors import (
    CUDA_ERROR_ASSERT,
    CUDA_ERROR_ILLEGAL_ADDRESS,
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
        # compiler-rt style helpers the x86 backend may call (__fixsfti, __udivti3, ...): MCJIT only searches
        # libraries loaded "permanently", and an unresolved one becomes a null call at run time.
        # The soname first: ctypes.util.find_library runs ldconfig/gcc in a subprocess (~40 ms), only a fallback.
        for lib in ("libgcc_s.so.1", "libm.so.6"):
            try:
                llvm.load_library_permanently(lib)
            except RuntimeError:
                try:
                    llvm.load_library_permanently(ctypes.util.find_library(lib.split(".so")[0][3:]) or lib)
                except RuntimeError:
                    pass
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
    # page-aligned: .shared/.local variables may declare any .align up to that (offsets inside are aligned)
    buf = ctypes.create_string_buffer(max(n, 16) + 4096)
    addr = ctypes.addressof(buf)
    return buf, (addr + 4095) // 4096 * 4096


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
    _red_bytes: int = 0
    _bc_roots: list[int] = field(default_factory=list)
    _func_stack: int = 0
    _dyn_offset: int = 0
    _module: Any = field(repr=False, default=None)

    def launch(self, grid: tuple[int, ...] | int = (1, 1, 1), block: tuple[int, ...] | int = (1, 1, 1),
               shared_mem: int = 0, params: bytes | bytearray | memoryview | Any = b"",
               workers: int | None = None,
               allowed_ranges: Sequence[GlobalRange] | Sequence[tuple[int, int]] | None = None) -> LaunchResult:
        """Run the kernel. ``allowed_ranges`` (modules compiled with bounds_check=True only): the allocations this
        launch may access through global/generic pointers, besides the module's own globals and the block's
        shared/local memory; an access outside them fails the launch with CUDA_ERROR_ILLEGAL_ADDRESS (700). Pass
        the same tuple to many launches and its sorted table is built once (jit.checked.for_ranges)."""
        checked = self._module is not None and self._module.bounds_check
        if allowed_ranges is not None and not checked:
            raise JitError(CUDA_ERROR_INVALID_VALUE,
                           f"allowed_ranges given for {self.name}, but its module was compiled without bounds_check")
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
        lctx[L_GLOBALS] = self._module._data_addr if self._module is not None else 0
        for k in range(3):
            lctx[L_GRID + k], lctx[L_BLOCK + k] = g[k], bl[k]
        lctx[L_NBLOCKS], lctx[L_NEXT], lctx[L_ERROR] = nblocks, 0, 0
        nw = max(1, min(workers or _POOL_SIZE, nblocks, _POOL_SIZE))
        lctx[L_CHUNK] = max(1, min(64, nblocks // (nw * 16)))  # ~16 claims per worker keeps the load balanced
        lctx[L_DYN], lctx[L_NTHREADS], lctx[L_ASSERT] = shared_mem, nt, 0
        keep: list[Any] = [pbuf]
        wctxs = []
        extra_ranges: list[tuple[int, int]] = []
        for _ in range(nw):
            sb, sa = _buffer(self._dyn_offset + shared_mem)
            area = self.local_bytes_per_thread + self._func_stack  # .local, then .func frames (bounds checks)
            lb, la = _buffer(nt * area)
            rb, ra = _buffer((nt + 15) // 16 * 16 * self._rec_bytes)  # NOTE [thread records] (jit/emit/cpu.py)
            extra_ranges += [(sa, self._dyn_offset + shared_mem), (la, nt * area)]
            red = 0
            if self._red_bytes:  # NOTE [combined global reductions]: empty slots, lo = UINT64_MAX, hi = 0
                rbuf = (ctypes.c_int64 * (self._red_bytes // 8))()
                rbuf[RB_LO // 8] = -1
                red = ctypes.addressof(rbuf)
                keep.append(rbuf)
            w = (ctypes.c_int64 * 4)(sa, la, ra, red)
            keep += [sb, lb, rb, w]
            wctxs.append(w)
        if checked:
            heap = self._module.heap()
            lctx[L_HEAP_ALLOC], lctx[L_HEAP_FREE], lctx[L_HEAP] = HEAP_ALLOC_ADDR, HEAP_FREE_ADDR, id(heap)
            own = [(self._module._data_addr, max(1, self._module._data_size)), (heap.base, heap.size)]
            own += [(a, n) for a, n in extra_ranges]
            rt = for_ranges(allowed_ranges).with_spans(own)
            table, buf = rt.as_array()
            keep += [table, buf]
            lctx[L_RANGES], lctx[L_NRANGES] = ctypes.addressof(table), len(table) // 2
            if self._bc_roots:
                roots = rt.root_table(raw, self._bc_roots)
                keep.append(roots)
                lctx[L_ROOTS] = ctypes.addressof(roots)
        key = ctypes.addressof(lctx)
        rec: dict[str, Any] = {"printf": [], "assert": None}
        with _LAUNCH_LOCK:
            _LAUNCHES[key] = rec
        try:
            fn = self._fn  # once: NOTE [compile tiers] may switch it between launches
            if nw == 1:
                fn(key, ctypes.addressof(wctxs[0]))
            else:
                futs = [_pool().submit(fn, key, ctypes.addressof(w)) for w in wctxs]
                for f in futs:
                    f.result()
        finally:
            with _LAUNCH_LOCK:
                _LAUNCHES.pop(key, None)
        text = "".join(rec["printf"])
        err = int(lctx[L_ERROR])
        if err:
            if err == CUDA_ERROR_ILLEGAL_ADDRESS:
                e = JitError(err, f"kernel {self.name}: illegal address 0x{int(lctx[L_BADADDR]) & (2**64 - 1):x} "
                                  "outside the launch's allowed ranges")
            elif err == CUDA_ERROR_ASSERT:
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


# NOTE [one shared engine]
# Creating an MCJIT engine and finalising its first object costs ~1.5 ms (target machine, memory manager, process
# symbol lookup); adding another object to a live engine costs ~0.1 ms. So every compiled object whose exported
# symbols are unique (kernels are named wooly_run_<hash of PTX+target>_<i>; everything else in the object is
# internal, see jit/passes/to_llvm.py) goes into one process-wide engine and stays there: a disk cache hit in a
# restarted daemon pays only the object load. An object whose symbols are already in the shared engine (the same PTX
# compiled again with the cache off, or reloaded after eviction), an old-style object (wooly_run_<i>), or any object
# once the shared engine holds _SHARED_MAX of them, gets a private engine as before (freed with its modules).
_SHARED: Any = None
_SHARED_SYMS: set[str] = set()
_SHARED_OBJS: dict[bytes, dict[str, int]] = {}  # sha256 of an object already in the shared engine -> symbol addrs
_SHARED_LOCK = threading.Lock()
# quick and optimised code of a PTX are two objects (NOTE [compile tiers]); objects are 3-30 KB
_SHARED_MAX = int(os.environ.get("WOOLY_JIT_SHARED_OBJECTS", "1024"))


def _shared_addrs(obj: bytes, syms: list[str]) -> dict[str, int] | None:
    """Symbol addresses of ``obj`` loaded into the shared engine, or None when it must get a private engine."""
    global _SHARED
    if not all(s.startswith("wooly_run_") and s.count("_") >= 3 for s in syms):
        return None  # an object from before unique symbols
    digest = hashlib.sha256(obj).digest()
    with _SHARED_LOCK:
        hit = _SHARED_OBJS.get(digest)
        if hit is not None:  # the very same code is loaded already (e.g. after _ENGINES eviction)
            return hit
        if len(_SHARED_OBJS) >= _SHARED_MAX or _SHARED_SYMS & set(syms):
            return None
        if _SHARED is None:
            _SHARED = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_target_machine())
        _SHARED.add_object_file(llvm.ObjectFileRef.from_data(obj))
        _SHARED.finalize_object()
        addrs = {s: _SHARED.get_function_address(s) for s in syms}
        _SHARED_SYMS.update(syms)
        _SHARED_OBJS[digest] = addrs
        return addrs


def warm_loader() -> None:
    """Pay the loader's one-time costs now (~20 ms in a fresh process, mostly LLVM's first object load: target
    machine, memory manager, host symbols) instead of in the first kernel load: creates the shared engine and
    loads a trivial object into it. Called by jit.warm_up()."""
    global _SHARED
    _bind_host_symbols()
    with _SHARED_LOCK:
        if _SHARED is not None:
            return
        tm = host_target_machine()
        m = llvm.parse_assembly("define void @wooly_warm() {\n  ret void\n}\n")
        m.triple = tm.triple
        m.data_layout = str(tm.target_data)
        obj = tm.emit_object(m)
        _SHARED = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_target_machine())
        _SHARED.add_object_file(llvm.ObjectFileRef.from_data(obj))
        _SHARED.finalize_object()
        _SHARED.get_function_address("wooly_warm")


class _Loaded:
    """A compiled object's kernels, loaded with MCJIT; shared by every CpuModule instance of the same PTX."""

    def __init__(self, obj: bytes, meta: dict) -> None:
        _bind_host_symbols()
        syms = [k["symbol"] for k in meta["kernels"]]
        addrs = _shared_addrs(obj, syms)
        if addrs is not None:
            self.engine = _SHARED
        else:
            self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_target_machine())
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()
            addrs = {s: self.engine.get_function_address(s) for s in syms}
        self.fns = {k["name"]: _RUN(addrs[k["symbol"]]) for k in meta["kernels"]}


_ENGINES: dict[str, _Loaded] = {}
_ENGINES_LOCK = threading.Lock()
_MAX_ENGINES = int(os.environ.get("WOOLY_JIT_MAX_ENGINES", "512"))


def _loaded(obj: bytes, meta: dict, key: str | None) -> _Loaded:
    if key is None:
        return _Loaded(obj, meta)
    with _ENGINES_LOCK:
        hit = _ENGINES.get(key)
        if hit is None:
            if len(_ENGINES) >= _MAX_ENGINES:  # drop the oldest; live modules keep their engine alive
                _ENGINES.pop(next(iter(_ENGINES)))
            hit = _ENGINES[key] = _Loaded(obj, meta)
    return hit


class CpuModule:
    """A loaded PTX module: kernels (code shared per PTX hash) and this instance's own module-scope globals."""

    def __init__(self, obj: bytes, meta: dict, key: str | None = None, quick: bool = False) -> None:
        self._code = _loaded(obj, meta, key)
        self._meta = meta
        self._pending: Any = None
        #: "quick" (NOTE [compile tiers], jit/compiler.py: switched to "optimized" when the background compile lands)
        self.tier = "quick" if quick else "optimized"
        # see NOTE [module globals live in a data block] (jit/lower/module.py)
        self.bounds_check = bool(meta.get("bounds_check", False))
        image = bytes.fromhex(meta.get("gdata", ""))
        self._data_size = len(image)
        self._data, self._data_addr = _buffer(len(image))
        ctypes.memmove(self._data_addr, image, len(image))
        for where, target, size in meta.get("grelocs", []):
            v = (self._data_addr + target) & ((1 << (8 * size)) - 1)
            ctypes.memmove(self._data_addr + where, v.to_bytes(size, "little"), size)
        self.globals: dict[str, GlobalInfo] = {}
        for name, (off, size) in meta["globals"].items():
            self.globals[name] = GlobalInfo(name, int(size), self._data_addr + int(off))
        self._kernels: dict[str, CpuKernel] = {}
        for k in meta["kernels"]:
            kern = CpuKernel(
                name=k["name"], params=[ParamInfo(**p) for p in k["params"]], param_buffer_size=k["param_size"],
                static_shared_bytes=k["static_shared"], local_bytes_per_thread=k["local_bytes"],
                max_threads_per_block=k["max_threads"], num_regs=k["num_regs"], _fn=self._code.fns[k["name"]],
                _rec_bytes=k["rec_bytes"], _red_bytes=k.get("red_bytes", 0),
                _bc_roots=list(k.get("bc_roots", [])), _func_stack=k.get("func_stack", 0), _dyn_offset=int(meta["dyn_offset"]), _module=self)
            self._kernels[k["name"]] = kern

    def tier_up(self, obj: bytes, meta: dict, key: str | None) -> None:
        """Switch every kernel to the optimised code of the same PTX (called by the background compile)."""
        from jit.compiler import same_layout
        if self.tier == "optimized" or not same_layout(self._meta, meta):
            return  # different metadata would mean a different translation: keep the code we have
        code = _loaded(obj, meta, key)
        for name, kern in self._kernels.items():
            kern._fn = code.fns[name]
        self._code, self._meta, self.tier = code, meta, "optimized"

    def wait_optimized(self, timeout: float | None = None) -> bool:
        """Wait until this module runs optimised code (NOTE [compile tiers]). False: still quick after ``timeout``
        seconds, or for good (tier="quick", or its optimised compile failed)."""
        if self.tier != "optimized" and self._pending is not None:
            self._pending.done.wait(timeout)
        return self.tier == "optimized"

    def heap(self) -> DeviceHeap:
        """This instance's device-malloc arena (bounds-checked modules), mapped at the first launch."""
        h = self.__dict__.get("_heap")
        if h is None:
            with _ENGINES_LOCK:
                h = self.__dict__.get("_heap")
                if h is None:
                    h = self._heap = DeviceHeap(HEAP_SIZE)
                    HEAPS[id(h)] = h
        return h

    def __del__(self) -> None:
        h = self.__dict__.get("_heap")
        if h is not None:
            HEAPS.pop(id(h), None)

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
