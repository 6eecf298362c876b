"""Loading compiled CPU objects into MCJIT, and the host functions kernels call (printf, assert).

Used by jit/runtime.py; kept apart so that the launch path and the loader each stay one readable file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import re
import struct
import threading
from typing import Any

import llvmlite.binding as llvm

from jit.passes.optimize import host_target_machine
from proto import settings

RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)  # a kernel's entry: (launch context, worker context)

# printf/assert records of the launches in flight, by launch-context address (jit/runtime.py fills them)
LAUNCHES: dict[int, dict[str, Any]] = {}
LAUNCH_LOCK = threading.Lock()
_CONV = re.compile(rb"%([-+ #0]*)(\d+|\*)?(?:\.(\d+|\*))?(hh|h|ll|l|L|z|j|t|q)?([diouxXeEfFgGaAcspn%])")


# NOTE [checked host services]
# printf and assert read device memory the kernel points them at: the format, the argument buffer, every %s
# string, the assertion's message and file name. In a bounds-checked launch those pointers are a tenant's input
# like any address, so the host reads them only inside the launch's allowed ranges (the table the kernel's own
# checks use, NOTE [bounds checking]), strings up to the end of their range and at most MAX_STRING bytes: a wild
# one fails the launch with CUDA_ERROR_ILLEGAL_ADDRESS, as the kernel's own access would (a mutated format pointer
# made gpud's printf dereference 0x7f1c and die).
MAX_STRING = 4096


class WildPointer(Exception):
    def __init__(self, addr: int) -> None:
        self.addr = addr


class DeviceReader:
    """Reads of device memory on behalf of one launch (NOTE [checked host services])."""

    def __init__(self, lctx: int) -> None:
        from jit.emit.abi import L_NRANGES, L_RANGES, L_SLOTS

        slots = (ctypes.c_int64 * L_SLOTS).from_address(lctx) if lctx else None
        self.table = int(slots[L_RANGES]) if slots is not None else 0
        self.n = int(slots[L_NRANGES]) if slots is not None else 0

    def room(self, addr: int) -> int:
        """Bytes readable from ``addr`` on (to the end of its allowed range)."""
        if not self.table:
            return 1 << 62  # an unchecked launch: trusted code
        spans = (ctypes.c_uint64 * (2 * self.n)).from_address(self.table)
        lo, hi = 0, self.n
        while lo < hi:  # the last range starting at or below addr
            mid = (lo + hi) // 2
            if spans[2 * mid] <= addr:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0 or addr >= spans[2 * (lo - 1) + 1]:
            return 0
        return int(spans[2 * (lo - 1) + 1]) - addr

    def read(self, addr: int, n: int) -> bytes:
        if addr <= 0 or self.room(addr) < n:
            raise WildPointer(addr)
        return ctypes.string_at(addr, n)

    def cstr(self, addr: int) -> bytes:
        room = min(self.room(addr), MAX_STRING) if addr > 0 else 0
        if room <= 0:
            raise WildPointer(addr)
        raw = ctypes.string_at(addr, room)
        end = raw.find(b"\0")
        return raw if end < 0 else raw[:end]


def _fail_launch(lctx: int, addr: int) -> None:
    from jit.emit.abi import L_BADADDR, L_ERROR, L_SLOTS
    from jit.errors import CUDA_ERROR_ILLEGAL_ADDRESS

    slots = (ctypes.c_int64 * L_SLOTS).from_address(lctx)
    if not slots[L_ERROR]:
        slots[L_BADADDR] = addr & ((1 << 63) - 1)
        slots[L_ERROR] = CUDA_ERROR_ILLEGAL_ADDRESS


def format_printf(fmt: bytes, args: int, mem: DeviceReader | None = None) -> str:
    """Render a device printf: args points at the packed argument buffer (each value naturally aligned)."""
    out: list[str] = []
    pos, off = 0, 0
    for m in _CONV.finditer(fmt):
        out.append(fmt[pos : m.start()].decode("utf-8", "replace"))
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
        raw = (mem.read(args + off, size) if mem else ctypes.string_at(args + off, size)) if args else bytes(size)
        off += size
        (val,) = struct.unpack(code, raw)
        spec = "%" + flags + (width if width != "*" else "") + ("." + prec if prec and prec != "*" else "")
        try:
            if conv == "s":
                s = (mem.cstr(val) if mem else ctypes.string_at(val)).decode("utf-8", "replace") if val else "(null)"
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
        mem = DeviceReader(lctx or 0)
        text = format_printf(mem.cstr(fmt), args, mem) if fmt else ""
        with LAUNCH_LOCK:
            rec = LAUNCHES.get(lctx or 0)
            if rec is not None:
                rec["printf"].append(text)
        return len(text)
    except WildPointer as w:
        _fail_launch(lctx, w.addr)
        return -1
    except Exception:
        return -1


@ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32)
def _rt_assert(lctx: int, msg: int, file: int, line: int) -> int:
    try:
        mem = DeviceReader(lctx or 0)
        m = mem.cstr(msg).decode("utf-8", "replace") if msg else "?"
        f = mem.cstr(file).decode("utf-8", "replace") if file else "?"
        with LAUNCH_LOCK:
            rec = LAUNCHES.get(lctx or 0)
            if rec is not None and rec.get("assert") is None:
                rec["assert"] = f"{f}:{line}: Assertion `{m}` failed."
    except WildPointer:
        pass  # the assert still fails the launch; its message is not read from a wild pointer
    except Exception:
        pass
    return 0


def _device_launches(lctx: int) -> Any:
    """The running grid's DeviceLaunches, made at its first device-runtime call (NOTE [device launches])."""
    with LAUNCH_LOCK:
        rec = LAUNCHES.get(lctx or 0)
        if rec is None:
            return None
        dl = rec.get("launches")
        if dl is None:
            from jit.devlaunch import DeviceLaunches, Tree

            tree = rec.get("tree") or Tree(rec.get("t_end"))
            dl = rec["launches"] = DeviceLaunches(rec["kernel"], rec["depth"], tree, rec.get("device"))
        return dl


_U32 = ctypes.c_uint32


@ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64, _U32, _U32, _U32, _U32, _U32, _U32, _U32)
def _rt_cdp_buffer(lctx: int, handle: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int) -> int:
    try:
        dl = _device_launches(lctx)
        return dl.buffer(handle, (gx, gy, gz), (bx, by, bz), smem) if dl is not None else 0
    except Exception:  # an exception must not cross into the kernel's frames: the launch sees NULL
        return 0


@ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64)
def _rt_cdp_launch(lctx: int, buf: int, stream: int) -> int:
    try:
        dl = _device_launches(lctx)
        return dl.launch(buf, stream) if dl is not None else 999
    except Exception:
        return 999  # cudaErrorUnknown


_U64 = ctypes.c_uint64


@ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, *([_U64] * 9), ctypes.c_int32)
def _rt_cdp_copy(
    lctx: int, dst: int, src: int, w: int, h: int, d: int, dp: int, sp: int, ds: int, ss: int, is_set: int
) -> int:
    try:
        from jit.devlaunch import Copy

        dl = _device_launches(lctx)
        return dl.copy(Copy(dst, src, w, h, d, dp, sp, ds, ss, bool(is_set))) if dl is not None else 999
    except Exception:
        return 999


@ctypes.CFUNCTYPE(_U64, ctypes.c_void_p, ctypes.c_int32, _U64, _U64, _U64)
def _rt_cdp_query(lctx: int, what: int, a: int, b: int, c: int) -> int:
    try:
        from jit.devlaunch import INVALID_VALUE, QUERY_ERROR

        dl = _device_launches(lctx)
        return dl.query(what, a, b, c) if dl is not None else QUERY_ERROR | INVALID_VALUE
    except Exception:
        return (1 << 32) | 999


@ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)
def _rt_cdp_error(lctx: int, clear: int) -> int:
    try:
        dl = _device_launches(lctx)
        return dl.error(bool(clear)) if dl is not None else 0
    except Exception:
        return 999


_SYMBOLS_DONE = False


def _bind_host_symbols() -> None:
    global _SYMBOLS_DONE
    if not _SYMBOLS_DONE:
        llvm.add_symbol("wooly_rt_printf", ctypes.cast(_rt_printf, ctypes.c_void_p).value)
        llvm.add_symbol("wooly_rt_assert", ctypes.cast(_rt_assert, ctypes.c_void_p).value)
        for name, cb in (
            ("wooly_rt_cdp_buffer", _rt_cdp_buffer),
            ("wooly_rt_cdp_launch", _rt_cdp_launch),
            ("wooly_rt_cdp_error", _rt_cdp_error),
            ("wooly_rt_cdp_copy", _rt_cdp_copy),
            ("wooly_rt_cdp_query", _rt_cdp_query),
        ):
            llvm.add_symbol(name, ctypes.cast(cb, ctypes.c_void_p).value)
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


# NOTE [one shared engine]
# Creating an MCJIT engine and finalising its first object costs ~1.5 ms (target machine, memory manager, process
# symbol lookup); adding another object to a live engine costs ~0.1 ms. So every compiled object whose exported
# symbols are unique (kernels are named wooly_run_<hash of PTX+target>_<i>; everything else in the object is
# internal, see jit/emit/to_llvm.py) goes into one process-wide engine and stays there: a disk cache hit in a
# restarted daemon pays only the object load. An object whose symbols are already in the shared engine (the same PTX
# compiled again with the cache off, or reloaded after eviction), an old-style object (wooly_run_<i>), or any object
# once the shared engine holds _SHARED_MAX of them, gets a private engine as before (freed with its modules).
_SHARED: Any = None
_SHARED_SYMS: set[str] = set()
_SHARED_OBJS: dict[bytes, dict[str, int]] = {}  # sha256 of an object already in the shared engine -> symbol addrs
_SHARED_LOCK = threading.Lock()
# quick and optimised code of a PTX are two objects (NOTE [compile tiers]); objects are 3-30 KB
_SHARED_MAX = settings.jit().jit_shared_objects


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


class Loaded:
    """A compiled object's kernels, loaded with MCJIT; shared by every CpuModule instance of the same PTX."""

    def __init__(self, obj: bytes, meta: dict) -> None:
        _bind_host_symbols()
        syms = [k["symbol"] for k in meta["kernels"]] + ([meta["ftab"]] if meta.get("ftab") else [])
        addrs = _shared_addrs(obj, syms)
        if addrs is not None:
            self.engine = _SHARED
        else:
            self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_target_machine())
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()
            addrs = {s: self.engine.get_function_address(s) for s in syms}
        self.fns = {k["name"]: RUN(addrs[k["symbol"]]) for k in meta["kernels"]}
        # writes the addresses of the functions module initializers name (NOTE [function addresses in globals])
        self.ftab = RUN(addrs[meta["ftab"]]) if meta.get("ftab") else None


_ENGINES: dict[str, Loaded] = {}
_ENGINES_LOCK = threading.Lock()
_MAX_ENGINES = settings.jit().jit_max_engines


def loaded(obj: bytes, meta: dict, key: str | None) -> Loaded:
    if key is None:
        return Loaded(obj, meta)
    with _ENGINES_LOCK:
        hit = _ENGINES.get(key)
        if hit is None:
            if len(_ENGINES) >= _MAX_ENGINES:  # drop the oldest; live modules keep their engine alive
                _ENGINES.pop(next(iter(_ENGINES)))
            hit = _ENGINES[key] = Loaded(obj, meta)
    return hit
