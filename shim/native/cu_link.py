"""Driver API: the JIT linker (cuLinkCreate, cuLinkAddData/File, cuLinkComplete, cuLinkDestroy).

NOTE [linking PTX]: a wooly device compiles PTX itself, so "linking" gathers the PTX of every input (PTX text, or
the PTX a fatbin carries) and merges it into one module (shim/native/numba_ptx.merge_ptx: one header, extern
declarations dropped where another input defines the function). cuLinkComplete hands back that PTX as the
"cubin", and cuModuleLoadData takes it as it takes any PTX image. The cudadevrt library is accepted and left
out (the JIT supplies its functions, jit/devrt.py); machine code (cubin, object files, other libraries) cannot
run here and is CUDA_ERROR_NO_BINARY_FOR_GPU. The info log gets a line per input; the wall time is that of the
gathering (compilation happens at module load, on gpud).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import struct
import time
from ctypes import c_char_p, c_size_t, c_uint, c_void_p
from dataclasses import dataclass, field

from proto import errors as codes
from proto.errors import CudaError
from shim.native import images
from shim.native.numba_ptx import merge_ptx
from shim.native.registry import api, put_u64

P = c_void_p
# CUjitInputType
CUBIN, PTX, FATBINARY, OBJECT, LIBRARY, NVVM = range(6)
_TYPES = ("cubin", "PTX", "fatbin", "object", "library", "NVVM IR")
# CUjit_option
WALL_TIME, INFO_LOG, INFO_LOG_SIZE, ERROR_LOG, ERROR_LOG_SIZE = 2, 3, 4, 5, 6


@dataclass(eq=False)
class LinkState:
    options: dict[int, int] = field(default_factory=dict)  # option -> its value (a pointer or a number)
    slots: dict[int, int] = field(default_factory=dict)  # option -> the address of its optionValues slot
    ptx: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    image: ctypes.Array | None = None


_states: dict[int, LinkState] = {}
_ids = itertools.count(0x11C0000)


def _options(n: int, opts: int | None, vals: int | None) -> tuple[dict[int, int], dict[int, int]]:
    if n and (not opts or not vals):
        raise CudaError(codes.INVALID_VALUE, f"{n} JIT options but a NULL options or values array")
    out, slots = {}, {}
    for i in range(n):
        opt = ctypes.c_int.from_address(int(opts or 0) + 4 * i).value
        slot = int(vals or 0) + 8 * i
        out[opt], slots[opt] = ctypes.c_uint64.from_address(slot).value, slot
    return out, slots


def _state(h: int | None) -> LinkState:
    st = _states.get(int(h or 0))
    if st is None:
        raise CudaError(codes.INVALID_HANDLE, f"invalid link state 0x{int(h or 0):x}")
    return st


def _write_log(st: LinkState, buf_opt: int, size_opt: int, text: str) -> None:
    buf, size = st.options.get(buf_opt), st.options.get(size_opt, 0)
    if not buf or not size:
        return
    data = text.encode()[: size - 1] + b"\0"
    ctypes.memmove(buf, data, len(data))
    put_u64(st.slots[size_opt], len(data))


def _add(st: LinkState, kind: int, data: bytes, name: str) -> None:
    if kind == PTX:
        st.ptx.append(data.split(b"\0", 1)[0].decode(errors="replace"))
    elif kind == FATBINARY:
        st.ptx.append(images.ptx_from_fatbin(data).decode(errors="replace"))
    elif kind == LIBRARY and "cudadevrt" in name:
        st.log.append(f"{name}: cudadevrt is supplied by the JIT")
        return
    elif 0 <= kind < len(_TYPES):
        error = f"{name or 'input'}: a {_TYPES[kind]} input cannot run on a wooly device (it loads PTX)"
        _write_log(st, ERROR_LOG, ERROR_LOG_SIZE, error)
        raise CudaError(codes.NO_BINARY_FOR_GPU, error)
    else:
        raise CudaError(codes.INVALID_VALUE, f"cuLinkAddData: input type {kind}")
    st.log.append(f"{name or 'input'}: {_TYPES[kind]}, {len(data)} bytes")


@api("cuLinkCreate", (5050, 6050), c_uint, P, P, P)
def cuLinkCreate(n: int, opts: int | None, vals: int | None, out: int) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuLinkCreate: stateOut is NULL")
    options, slots = _options(n, opts, vals)
    h = next(_ids)
    _states[h] = LinkState(options, slots)
    put_u64(out, h)


@api("cuLinkAddData", (5050, 6050), P, c_uint, P, c_size_t, c_char_p, c_uint, P, P)
def cuLinkAddData(h: int | None, kind: int, data: int | None, size: int, name: bytes | None, *_opts: object) -> None:
    st = _state(h)
    if not data or not size:
        raise CudaError(codes.INVALID_VALUE, "cuLinkAddData: data is NULL or empty")
    _add(st, kind, ctypes.string_at(int(data), size), (name or b"").decode(errors="replace"))


@api("cuLinkAddFile", (5050, 6050), P, c_uint, c_char_p, c_uint, P, P)
def cuLinkAddFile(h: int | None, kind: int, path: bytes | None, *_opts: object) -> None:
    st = _state(h)
    if not path:
        raise CudaError(codes.INVALID_VALUE, "cuLinkAddFile: path is NULL")
    name = os.fsdecode(path)
    if kind == LIBRARY and "cudadevrt" in os.path.basename(name):
        _add(st, kind, b"", name)
        return
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CudaError(codes.FILE_NOT_FOUND, f"cuLinkAddFile: {name}: {exc.strerror}") from None
    _add(st, kind, data, name)


@api("cuLinkComplete", 5050, P, P, P)
def cuLinkComplete(h: int | None, out: int, size_out: int) -> None:
    st = _state(h)
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuLinkComplete: cubinOut is NULL")
    if not st.ptx:
        raise CudaError(codes.INVALID_VALUE, "cuLinkComplete: nothing to link")
    text = merge_ptx(st.ptx).encode() + b"\0"
    st.image = ctypes.create_string_buffer(text, len(text))  # owned by the state, as CUDA's output is
    put_u64(out, ctypes.addressof(st.image))
    if size_out:
        put_u64(size_out, len(text))
    if WALL_TIME in st.slots:  # CU_JIT_WALL_TIME: a float in the option's own slot, in milliseconds
        ms = (time.perf_counter() - st.started) * 1e3
        ctypes.memmove(st.slots[WALL_TIME], struct.pack("<fI", ms, 0), 8)
    _write_log(st, INFO_LOG, INFO_LOG_SIZE, "\n".join([*st.log, f"linked {len(st.ptx)} PTX module(s)"]))


@api("cuLinkDestroy", 5050, P)
def cuLinkDestroy(h: int | None) -> None:
    _state(h)
    del _states[int(h or 0)]
