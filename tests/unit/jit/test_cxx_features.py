"""C++ device code whose PTX puts function addresses in .global initializers (NOTE [function addresses in globals],
jit/emit/to_llvm.py): virtual calls through vtables, a table of device-function pointers, generic(var)
initializers; with recursion, a switch, device new/delete, malloc/free and printf in the same module."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import jit
import jit.compiler as jc
from jit import GlobalRange, JitError, compile_module
from tests.unit.jit.helpers import HEADER, PTX_DIR

PTX = (PTX_DIR / "cxx_features.ptx").read_text()  # from cxx_features.cu


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def run_virt(m) -> None:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(0).random(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    kw = {"allowed_ranges": [GlobalRange(a.ctypes.data, a.nbytes) for a in (x, out)]} if m.bounds_check else {}
    m.get_kernel("virt").launch((1,), (64,), 0, struct.pack("<QQ", x.ctypes.data, out.ctypes.data), **kw)
    # odd threads made a square (area s*s), even ones a circle (pi r^2), each called through its vtable
    np.testing.assert_allclose(out, np.where(np.arange(64) & 1, x * x, np.float32(3.14159) * x * x), rtol=1e-6)


def run_misc(m) -> str:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(1).integers(0, 100, 64).astype(np.int32)
    out = np.zeros(64, np.int32)
    kw = {"allowed_ranges": [GlobalRange(a.ctypes.data, a.nbytes) for a in (x, out)]} if m.bounds_check else {}
    res = m.get_kernel("misc").launch((1,), (64,), 0, struct.pack("<QQ", out.ctypes.data, x.ctypes.data), **kw)
    want = []
    for i in range(64):
        v = [int(x[(i + k) % 64]) * k for k in range(16)][x[i] & 15]
        v = {0: v + 1, 1: v * 3, 2: v - 8, 3: v ^ 5, 4: v << 2, 5: -v}.get(int(x[i] % 7), 0)
        # fib, table[i & 1](i) = twice or sq, *gptr (generic(gcounter) = 5), coef, the managed variable (7)
        want.append(v + fib(int(x[i]) & 7) + (i * i if i & 1 else 2 * i) + 5 + (1 + (i & 3)) + 7)
    assert out.tolist() == want
    return res.printf


@pytest.mark.parametrize("checked", [False, True])
def test_virtual_calls_and_function_tables(checked: bool) -> None:
    m = compile_module(PTX, bounds_check=checked, tier="optimized")
    run_virt(m)
    assert run_misc(m).startswith("misc ")


def test_each_instance_gets_its_own_patched_table() -> None:
    """Two instances of one PTX share code but not globals: each data block holds the function addresses."""
    a, b = compile_module(PTX, tier="optimized"), compile_module(PTX, tier="optimized")
    assert a.get_global("table").address != b.get_global("table").address
    ta = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint64 * 2).from_address(a.get_global("table").address))
    tb = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint64 * 2).from_address(b.get_global("table").address))
    assert ta.tolist() == tb.tolist() and all(ta) and ta[0] != ta[1]
    run_virt(a)
    run_virt(b)


def test_function_table_survives_the_tier_switch(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WOOLY_JIT_TIERS", "1")
    monkeypatch.setenv("WOOLY_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jc, "_MEM_CACHE", {})
    monkeypatch.setattr(jc, "_QUICK", {})
    m = jit.compile_module(PTX + f"// {np.random.default_rng().integers(1 << 62)}\n")
    assert m.tier == "quick"
    run_virt(m)
    assert m.wait_optimized(120)
    run_virt(m)  # the table still points into the quick code, which the module keeps loaded
    run_misc(m)


def test_initializer_naming_an_undefined_function() -> None:
    ptx = (
        HEADER
        + """
.extern .func (.param .b32 r) ext(.param .b32 a);
.global .align 8 .u64 tab[1] = {ext};
.visible .entry k() { ret; }
"""
    )
    with pytest.raises(JitError) as ei:
        compile_module(ptx, tier="quick")
    assert ei.value.code == 218 and "never defined" in ei.value.message
