"""Loading compiled CPU objects into MCJIT, and the host functions kernels call (printf, assert).

Used by jit/runtime.py; kept apart so that the launch path and the loader each stay one readable file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import re
import struct
import threading
from typing import Any

import llvmlite.binding as llvm

from jit.passes.optimize import host_target_machine

RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)  # a kernel's entry: (launch context, worker context)

# printf/assert records of the launches in flight, by launch-context address (jit/runtime.py fills them)
LAUNCHES: dict[int, dict[str, Any]] = {}
LAUNCH_LOCK = threading.Lock()
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
        with LAUNCH_LOCK:
            rec = LAUNCHES.get(lctx or 0)
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
        with LAUNCH_LOCK:
            rec = LAUNCHES.get(lctx or 0)
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
_MAX_ENGINES = int(os.environ.get("WOOLY_JIT_MAX_ENGINES", "512"))


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
