"""Helpers for JIT unit tests: compile PTX, pack params, run kernels on numpy buffers."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

from jit import compile_module

PTX_DIR = Path(__file__).parent / "ptx"
_CACHE: dict[str, Any] = {}


def module(ptx: str) -> Any:
    m = _CACHE.get(ptx)
    if m is None:
        m = _CACHE[ptx] = compile_module(ptx)
    return m


def pack(kernel: Any, *args: Any) -> bytes:
    """Pack args into the kernel's param layout: numpy arrays become pointers, ints/floats use the param size."""
    buf = bytearray(kernel.param_buffer_size)
    for p, a in zip(kernel.params, args, strict=False):
        if isinstance(a, np.ndarray):
            raw = struct.pack("<Q", a.ctypes.data)
        elif isinstance(a, (bytes, bytearray)):
            raw = bytes(a)
        elif isinstance(a, float):
            raw = struct.pack("<f" if p.size == 4 else "<d", a)
        elif isinstance(a, np.generic):
            raw = a.tobytes()
        else:
            raw = int(a).to_bytes(p.size, "little", signed=int(a) < 0)
        buf[p.offset : p.offset + len(raw)] = raw
    return bytes(buf)


def launch(ptx: str, name: str, grid: Any, block: Any, *args: Any, shared: int = 0) -> Any:
    k = module(ptx).get_kernel(name)
    return k.launch(grid, block, shared, pack(k, *args))


HEADER = ".version 7.8\n.target sm_80\n.address_size 64\n"


def elementwise(body: str, tin: str, tout: str, nin: int = 2, extra_regs: str = "") -> str:
    """A kernel k(out, a, b, c) where thread i computes %d from %a, %b, %c loaded at index i."""

    def sz(t: str) -> int:
        return 1 if t == "pred" else max(1, int("".join(ch for ch in t if ch.isdigit())) // 8)

    ins = "".join(
        f"ld.param.u64 %rd{10 + j}, [p{j + 1}]; mul.wide.u32 %rd{20 + j}, %r0, {sz(tin)}; "
        f"add.s64 %rd{10 + j}, %rd{10 + j}, %rd{20 + j}; ld.global.{tin} %{'abc'[j]}, [%rd{10 + j}];\n"
        for j in range(nin)
    )
    return (
        HEADER
        + f"""
.visible .entry k(.param .u64 p0, .param .u64 p1, .param .u64 p2, .param .u64 p3)
{{
  .reg .b32 %r<4>; .reg .b64 %rd<40>; .reg .pred %p<4>;
  .reg .{_reg(tin)} %a, %b, %c; .reg .{_reg(tout)} %d;
  {extra_regs}
  mov.u32 %r0, %tid.x;
  {ins}
  {body}
  ld.param.u64 %rd1, [p0]; mul.wide.u32 %rd2, %r0, {sz(tout)}; add.s64 %rd1, %rd1, %rd2;
  st.global.{tout} [%rd1], %d;
  ret;
}}
"""
    )


def _reg(t: str) -> str:
    if t.startswith("f") and t != "f16":
        return t
    if t == "f16":
        return "b16"
    return "b" + "".join(ch for ch in t if ch.isdigit())


def run_elementwise(body: str, tin: str, tout: str, *inputs: np.ndarray, extra_regs: str = "") -> np.ndarray:
    n = len(inputs[0])
    out = np.zeros(n, dtype=_np(tout))
    src = elementwise(body, tin, tout, len(inputs), extra_regs)
    ins = [np.ascontiguousarray(x, dtype=_np(tin)) for x in inputs]
    launch(src, "k", (1,), (n,), out, *ins, *([ins[0]] * (3 - len(ins))))
    return out


def _np(t: str) -> Any:
    return {
        "u8": np.uint8,
        "s8": np.int8,
        "u16": np.uint16,
        "s16": np.int16,
        "b16": np.uint16,
        "f16": np.float16,
        "u32": np.uint32,
        "s32": np.int32,
        "b32": np.uint32,
        "f32": np.float32,
        "u64": np.uint64,
        "s64": np.int64,
        "b64": np.uint64,
        "f64": np.float64,
    }[t]
