"""JIT bugs found by numba-cuda's own test suite (tests/numba_suite/FAILURES.md)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from jit import JitError, compile_module
from tests.unit.jit.helpers import HEADER, launch

STORE_R = """
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r0, 4; add.s64 %rd1, %rd1, %rd2; st.global.u32 [%rd1], %r9;
  ret;
}
"""


def test_warp_sz_constant() -> None:
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<4>;
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, WARP_SZ;
  add.u32 %r9, %r1, %r0;
"""
        + STORE_R
    )
    out = np.zeros(4, np.uint32)
    launch(ptx, "k", 1, 4, out)
    assert [int(x) for x in out] == [32, 33, 34, 35]


@pytest.mark.parametrize("barrier", ["", "bar.sync 0;"])
def test_shared_and_local_alignment(barrier: str) -> None:
    ptx = (
        HEADER
        + f"""
.visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<12>; .reg .b64 %rd<12>;
  .local .align 4 .b8 small[4];
  .local .align 64 .b8 dep[200];
  .shared .align 4 .b8 s1[12];
  .shared .align 256 .b8 s2[100];
  mov.u32 %r0, %tid.x;
  mov.u64 %rd7, small; cvta.local.u64 %rd8, %rd7; st.u32 [%rd8], %r0;
  {barrier}
  mov.u64 %rd3, dep; cvta.local.u64 %rd4, %rd3;
  mov.u64 %rd5, s2; cvta.shared.u64 %rd6, %rd5;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r0, 16; add.s64 %rd1, %rd1, %rd2;
  st.global.u64 [%rd1], %rd4; st.global.u64 [%rd1+8], %rd6;
  ret;
}}
"""
    )
    out = np.zeros(2 * 5, np.uint64)
    launch(ptx, "k", 1, 5, out)
    assert [int(x) % 64 for x in out[0::2]] == [0] * 5
    assert [int(x) % 256 for x in out[1::2]] == [0] * 5
    if barrier:  # threads interleave: each has its own .local area (sequential threads may reuse one)
        assert len({int(x) for x in out[0::2]}) == 5


def test_alignment_with_bounds_check() -> None:
    from jit import compile_module
    from tests.unit.jit.helpers import pack

    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<12>;
  .local .align 4 .b8 small[4];
  .local .align 128 .b8 dep[200];
  mov.u32 %r0, %tid.x;
  mov.u64 %rd7, small; cvta.local.u64 %rd8, %rd7; st.u32 [%rd8], %r0;
  mov.u64 %rd3, dep; cvta.local.u64 %rd4, %rd3;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r0, 8; add.s64 %rd1, %rd1, %rd2;
  st.global.u64 [%rd1], %rd4;
  ret;
}
"""
    )
    out = np.zeros(3, np.uint64)
    k = compile_module(ptx, bounds_check=True).get_kernel("k")
    k.launch(1, 3, 0, pack(k, out), allowed_ranges=[(out.ctypes.data, out.nbytes)])
    assert [int(x) % 128 for x in out] == [0] * 3


def _bf16(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("t", ["f16", "bf16", "f16x2", "bf16x2"])
def test_fma_relu_half(t: str) -> None:
    x2 = t.endswith("x2")
    reg, w = ("b32", 4) if x2 else ("b16", 2)
    ptx = (
        HEADER
        + f"""
.visible .entry k(.param .u64 out, .param .u64 a, .param .u64 b, .param .u64 c)
{{
  .reg .b32 %r<4>; .reg .b64 %rd<12>; .reg .{reg} %h<5>;
  mov.u32 %r0, %tid.x; mul.wide.u32 %rd9, %r0, {w};
  ld.param.u64 %rd1, [a]; add.s64 %rd1, %rd1, %rd9; ld.global.{reg} %h1, [%rd1];
  ld.param.u64 %rd2, [b]; add.s64 %rd2, %rd2, %rd9; ld.global.{reg} %h2, [%rd2];
  ld.param.u64 %rd3, [c]; add.s64 %rd3, %rd3, %rd9; ld.global.{reg} %h3, [%rd3];
  fma.rn.relu.{t} %h4, %h1, %h2, %h3;
  ld.param.u64 %rd4, [out]; add.s64 %rd4, %rd4, %rd9; st.global.{reg} [%rd4], %h4;
  ret;
}}
"""
    )
    a = np.array([1.5, -2.0, 3.0, 0.5, np.nan, 2.0, -1.0, 0.0], np.float32)
    b = np.array([2.0, 3.0, -1.0, 0.5, 1.0, 2.0, 1.0, -1.0], np.float32)
    c = np.array([0.25, 1.0, 2.5, -1.0, 0.0, -4.0, 0.0, 0.0], np.float32)
    want = np.maximum(a * b + c, 0).astype(np.float32)
    conv = (lambda v: v.astype(np.float16).view(np.uint16)) if t.startswith("f16") else _bf16
    out = np.zeros(8, np.uint16)
    launch(ptx, "k", 1, 4 if x2 else 8, out, conv(a), conv(b), conv(c))
    exp = conv(want)
    exp[4] = 0x7FFF  # relu(NaN) is the canonical NaN
    assert [hex(x) for x in out] == [hex(x) for x in exp]


@pytest.mark.parametrize("barrier", ["", "bar.sync 0;"])
def test_indirect_call_through_callprototype(barrier: str) -> None:
    ptx = (
        HEADER
        + f"""
.func (.param .b32 r) twice(.param .b32 x)
{{
  .reg .b32 %r<3>;
  ld.param.b32 %r1, [x]; shl.b32 %r2, %r1, 1; st.param.b32 [r], %r2;
  ret;
}}
.func (.param .b32 r) plus7(.param .b32 x)
{{
  .reg .b32 %r<3>;
  ld.param.b32 %r1, [x]; add.s32 %r2, %r1, 7; st.param.b32 [r], %r2;
  ret;
}}
.visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  mov.u32 %r0, %tid.x;
  {barrier}
  and.b32 %r1, %r0, 1; setp.eq.u32 %p1, %r1, 0;
  mov.u64 %rd3, twice; mov.u64 %rd4, plus7;
  selp.b64 %rd5, %rd3, %rd4, %p1;
  {{
  .reg .b32 temp_param_reg;
  .param .b32 param0;
  st.param.b32 [param0], %r0;
  .param .b32 retval0;
  prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);
  call (retval0), %rd5, (param0), prototype_0;
  ld.param.b32 %r9, [retval0];
  }}
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r0, 4; add.s64 %rd1, %rd1, %rd2; st.global.u32 [%rd1], %r9;
  ret;
}}
"""
    )
    out = np.zeros(6, np.uint32)
    launch(ptx, "k", 1, 6, out)
    assert [int(x) for x in out] == [t * 2 if t % 2 == 0 else t + 7 for t in range(6)]


def _many_sites_ptx(n: int) -> str:
    """numba PTX with 2*n+1 checked global accesses, each behind a branch (numba's NRT kernels in
    test_array_reductions have ~140 such sites: meminfo refcount atomics, stats counters, array loads)."""
    cuda = pytest.importorskip("numba.cuda")
    from numba import types

    src = "def k(out, a, b):\n    for i in range(out.size):\n        s = 0.0\n"
    for j in range(n):
        src += f"        if a[i + {j}] > 0:\n            s += b[i + {j}]\n"
    src += "        out[i] = s\n"
    ns: dict = {}
    exec(src, ns)  # noqa: S102 - generated test kernel
    arr = types.float64[::1]
    ptx, _ = cuda.compile_ptx(ns["k"], (arr, arr, arr), cc=(8, 0))
    return ptx


def test_bounds_check_many_sites_compile_time() -> None:
    """Per-site bounds-check hints kept as SSA values made 2 values per site live across the whole kernel: ~2*S phis
    at every join, on which LLVM 22's SLP vectoriser is superlinear (142 sites: 58 s to optimise instead of 0.2 s;
    numba's test_array_reductions took 96 s instead of 12 s). Hints now live in memory (NOTE [bounds checking])."""
    import time

    from jit import compile_module
    from jit.passes import optimize
    from jit.pipeline import translate

    n = 60
    ptx = _many_sites_ptx(n)
    tm = optimize.host_target_machine(2)
    phis = {}
    t0 = time.perf_counter()
    for bc in (False, True):
        low = translate(ptx, "cpu", bc, "t")
        if bc:
            text = str(
                low.ir_module
            )  # every load is checked: a table search or a rooted check, each with a fault block
            assert len(re.findall(r'^"?oob', text, re.M)) > 2 * n
        phis[bc] = str(optimize.run(str(low.ir_module), tm, 2)).count(" = phi ")
    assert phis[True] <= phis[False] + 16, phis  # was ~30 per site
    assert time.perf_counter() - t0 < 20  # was ~15 s for n=60 on a 2-core machine; now ~1 s
    # and the checks still hold: all three arrays granted -> runs; b missing -> illegal address
    m = compile_module(ptx, bounds_check=True)
    k = m.get_kernel(m.kernel_names[0])
    size = 64
    rng = np.random.default_rng(0)
    a, b, out = rng.random(size + n) - 0.5, rng.random(size + n), np.zeros(size)
    vals: list[int] = []
    for x in (out, a, b):
        vals += [0, 0, x.size, x.itemsize, x.ctypes.data, x.shape[0], x.strides[0]]
    buf = bytearray(k.param_buffer_size)
    for p, v in zip(k.params, vals, strict=False):
        buf[p.offset : p.offset + p.size] = int(v).to_bytes(p.size, "little", signed=True)
    ranges = [(x.ctypes.data, x.nbytes) for x in (out, a, b)]
    k.launch(1, 1, 0, bytes(buf), allowed_ranges=ranges)
    want = [sum(b[i + j] for j in range(n) if a[i + j] > 0) for i in range(size)]
    assert np.allclose(out, want)
    from jit.errors import JitError

    with pytest.raises(JitError) as ei:
        k.launch(1, 1, 0, bytes(buf), allowed_ranges=ranges[:2])
    assert ei.value.code == 700


def test_device_malloc_is_legal_under_bounds_check() -> None:
    """NRT kernels (numba CUDA_ENABLE_NRT) allocate with device-side malloc; in a bounds-checked module that memory
    comes from the module's device heap, which every launch's range table holds (NOTE [device heap])."""
    from jit import compile_module
    from tests.unit.jit.helpers import pack

    ptx = (
        HEADER
        + """
.extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_param_0);
.extern .func free(.param .b64 free_param_0);
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<12>;
  mov.u32 %r0, %tid.x;
  {
  .param .b64 param0; st.param.b64 [param0], 64;
  .param .b64 retval0;
  call.uni (retval0), malloc, (param0);
  ld.param.b64 %rd5, [retval0];
  }
  add.u32 %r1, %r0, 100; st.u32 [%rd5+60], %r1; ld.u32 %r9, [%rd5+60];
  {
  .param .b64 param0; st.param.b64 [param0], %rd5;
  call.uni free, (param0);
  }
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r0, 4; add.s64 %rd1, %rd1, %rd2; st.global.u32 [%rd1], %r9;
  ret;
}
"""
    )
    out = np.zeros(40, np.uint32)
    k = compile_module(ptx, bounds_check=True).get_kernel("k")
    for _ in range(3):  # freed blocks are reused
        k.launch(1, 40, 0, pack(k, out), allowed_ranges=[(out.ctypes.data, out.nbytes)])
        assert out.tolist() == [t + 100 for t in range(40)]


# #6: numba's debug=True kernels link one PTX module per device function, and each module defines the device
# functions it calls (`.weak`) and numba's environment pointer (`.common`): the same names are defined twice.
def _linked(first: str, second: str) -> str:
    def fn(linkage: str, value: int) -> str:
        return f"""
{linkage} .func (.param .b32 r) f(.param .b32 a)
{{
  .reg .b32 %r<3>;
  ld.param.b32 %r1, [a]; add.s32 %r2, %r1, {value}; st.param.b32 [r], %r2; ret;
}}
"""

    return (
        HEADER
        + f"""
.common .global .align 8 .u64 env;
{fn(first, 1)}
.common .global .align 8 .u64 env;
{fn(second, 100)}
.visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<3>; .reg .b64 %rd<2>;
  mov.u32 %r1, 5;
  {{
    .param .b32 pa; .param .b32 pr;
    st.param.b32 [pa], %r1;
    call (pr), f, (pa);
    ld.param.b32 %r2, [pr];
  }}
  ld.param.u64 %rd1, [out]; st.global.u32 [%rd1], %r2;
  ret;
}}
"""
    )


@pytest.mark.parametrize(
    "first,second,want",
    [
        (".weak", ".weak", 6),  # the first weak definition is kept
        (".weak", ".visible", 105),  # a strong definition replaces a weak one
        (".visible", ".weak", 6),  # and is not replaced by a later weak one
    ],
)
def test_duplicate_weak_definitions(first: str, second: str, want: int) -> None:
    out = np.zeros(1, np.uint32)
    launch(_linked(first, second), "k", 1, 1, out)
    assert out[0] == want


def test_duplicate_strong_definitions_are_invalid_ptx() -> None:
    with pytest.raises(JitError) as ei:
        compile_module(_linked(".visible", ".visible"))
    assert ei.value.code == 218 and "f is defined twice" in ei.value.message and ":" in ei.value.message
