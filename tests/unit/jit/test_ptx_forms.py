"""Valid PTX forms that nvcc does not emit but hand-written PTX (and test suites of other PTX implementations) use:
registers declared without `%`, vector registers, `.func`s with `.reg` parameters and results
(jit/passes/reg_params.py), calls passing registers, cvt.pack, set on half-precision pairs, and a shared-memory
layout where the program's static variables end at the dynamic area (NOTE [hidden shared areas first])."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from jit import compile_module
from tests.unit.jit.helpers import HEADER, run_elementwise

M32 = 0xFFFFFFFF


def run(ptx: str, name: str, out: np.ndarray, *ins: np.ndarray, threads: int = 1, shared: int = 0) -> np.ndarray:
    for tier in ("quick", "optimized"):
        out[...] = 0
        k = compile_module(ptx, tier=tier).get_kernel(name)
        raw = b"".join(struct.pack("<Q", a.ctypes.data) for a in (*ins, out))
        k.launch((1,), (threads,), shared, raw.ljust(k.param_buffer_size, b"\0"))
        if tier == "quick":
            first = out.copy()
    assert np.array_equal(first, out)
    return out


BARE_NAMES = (
    HEADER
    + """
.visible .entry k(.param .u64 inp, .param .u64 outp)
{
  .reg .u64 in_addr; .reg .u64 out_addr;
  .reg .v4 .u32 quad; .reg .v2 .u16 pair;
  .reg .u32 s; .reg .u32 t;
  .local .align 8 .b8 spill[16];
  ld.param.u64 in_addr, [inp]; ld.param.u64 out_addr, [outp];
  ld.global.v4.u32 quad, [in_addr];
  mov.u32 s, quad.w;
  add.u32 quad.x, quad.y, s;
  mov.v2.u16 pair, {quad.z, quad.z};
  st.local.v4.u32 [spill], quad;
  ld.local.u32 t, [spill+8];
  mov.b32 t, pair;
  st.global.v4.u32 [out_addr], quad;
  st.global.u32 [out_addr+16], t;
  ret;
}
"""
)


def test_registers_without_percent_and_vector_registers() -> None:
    src = np.array([10, 20, 0x12345, 40], np.uint32)
    out = run(BARE_NAMES, "k", np.zeros(5, np.uint32), src)
    z = 0x12345 & 0xFFFF
    assert out.tolist() == [60, 20, 0x12345, 40, z | z << 16]


REG_PARAMS = (
    HEADER
    + """
.func (.reg .u32 sum, .reg .pred odd, .reg .v2 .u32 swapped) f(.reg .u32 x, .reg .v2 .u32 v)
{
  .reg .u32 t;
  add.u32 sum, x, v.x;
  add.u32 sum, sum, v.y;
  and.b32 t, sum, 1;
  setp.ne.u32 odd, t, 0;
  mov.u32 swapped.x, v.y;
  mov.u32 swapped.y, v.x;
  setp.gt.u32 %p_big, sum, 1000;
  @%p_big ret;
  add.u32 sum, sum, 1;
}
.func (.param .b32 r) g(.param .b32 a)
{
  .reg .b32 %r<3>;
  ld.param.b32 %r1, [a]; mul.lo.u32 %r2, %r1, 3; st.param.b32 [r], %r2;
  ret;
}
.visible .entry k(.param .u64 inp, .param .u64 outp)
{
  .reg .u64 %rd<4>; .reg .u32 %r<12>; .reg .pred %q; .reg .v2 .u32 %v; .reg .v2 .u32 %w;
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [outp];
  ld.global.u32 %r1, [%rd1]; ld.global.v2.u32 %v, [%rd1+4];
  call (%r2, %q, %w), f, (%r1, %v);
  selp.u32 %r3, 1, 0, %q;
  call (%r4), g, (%r1);
  st.global.u32 [%rd2], %r2; st.global.u32 [%rd2+4], %r3; st.global.v2.u32 [%rd2+8], %w;
  st.global.u32 [%rd2+16], %r4;
  ret;
}
""".replace("{\n  .reg .u32 t;", "{\n  .reg .u32 t; .reg .pred %p_big;")
)


@pytest.mark.parametrize("x,a,b", [(1, 2, 3), (400, 500, 600), (7, 0, 0)])
def test_reg_parameters_results_and_register_call_operands(x: int, a: int, b: int) -> None:
    """.reg inputs (scalar and vector), .reg results (scalar, .pred and vector) with a predicated early ret and a
    body that falls off its end; and a register passed to and received from a .param function."""
    out = run(REG_PARAMS, "k", np.zeros(5, np.uint32), np.array([x, a, b], np.uint32))
    s = x + a + b
    s = s if s > 1000 else s + 1
    assert out.tolist() == [s, (x + a + b) & 1, b, a, 3 * x]


INLINED = (
    HEADER
    + """
.func (.reg .u32 r) blocksum(.reg .u32 v)
{
  .reg .u32 t; .reg .u32 i; .reg .u32 a;
  .shared .align 4 .u32 buf[64];
  mov.u32 i, %tid.x; shl.b32 a, i, 2; mov.u32 t, buf; add.u32 a, a, t;
  st.shared.u32 [a], v;
  bar.sync 0;
  ld.shared.u32 r, [buf];
  ld.shared.u32 t, [buf+4];
  add.u32 r, r, t;
}
.visible .entry k(.param .u64 inp, .param .u64 outp)
{
  .reg .u64 %rd<4>; .reg .u32 %r<4>;
  ld.param.u64 %rd2, [outp];
  mov.u32 %r1, %tid.x; add.u32 %r1, %r1, 100;
  call (%r2), blocksum, (%r1);
  mov.u32 %r3, %tid.x; mul.wide.u32 %rd3, %r3, 4; add.s64 %rd2, %rd2, %rd3;
  st.global.u32 [%rd2], %r2;
  ret;
}
"""
)


def test_reg_parameters_of_a_function_with_a_barrier() -> None:
    """A .func holding a barrier is inlined (jit/passes/inline_sync.py): its .reg parameter and result still
    travel through .param buffers of their own."""
    out = run(INLINED, "k", np.zeros(64, np.uint32), np.zeros(1, np.uint32), threads=64)
    assert out.tolist() == [201] * 64


def test_cvt_pack() -> None:
    def sat(v: int, n: int, signed: bool) -> int:
        lo, hi = (-(1 << (n - 1)), (1 << (n - 1)) - 1) if signed else (0, (1 << n) - 1)
        return min(max(v, lo), hi) & ((1 << n) - 1)

    rng = np.random.default_rng(5)
    a, b, c = (rng.integers(-300, 300, 32).astype(np.int32) for _ in range(3))
    c = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32).view(np.int32)
    for t in ("u8", "s8", "u4", "s4", "u2", "s2"):
        n = int(t[1:])
        got = run_elementwise(f"cvt.pack.sat.{t}.s32.b32 %d, %a, %b, %c;", "s32", "u32", a, b, c)
        want = [
            (int(z) << 2 * n | sat(int(x), n, t[0] == "s") << n | sat(int(y), n, t[0] == "s")) & M32
            for x, y, z in zip(a, b, c.view(np.uint32), strict=True)
        ]
        assert got.tolist() == want, t
    for t in ("u16", "s16"):
        a16 = (a * 300).astype(np.int32)
        got = run_elementwise(f"cvt.pack.sat.{t}.s32 %d, %a, %b;", "s32", "u32", a16, b)
        want = [
            (sat(int(x), 16, t == "s16") << 16 | sat(int(y), 16, t == "s16")) & M32 for x, y in zip(a16, b, strict=True)
        ]
        assert got.tolist() == want, t


def test_set_on_half_pairs() -> None:
    """set compares each half of an f16x2 on its own: 1.0 per half for an f16x2 result, 0xFFFF for a u32 one."""
    x = np.array([[1.0, -2.0], [np.nan, 3.0], [0.5, 0.5], [-0.0, 0.0]], np.float16)
    y = np.array([[0.5, 2.0], [1.0, np.nan], [0.5, 0.25], [0.0, -0.0]], np.float16)
    a, b = x.view(np.uint32).ravel(), y.view(np.uint32).ravel()
    cases = {
        "gt.f16x2.f16x2": (np.greater, 0x3C00, False),
        "gtu.u32.f16x2": (np.greater, 0xFFFF, True),
        "eq.u32.f16x2": (np.equal, 0xFFFF, False),
        "ne.f16x2.f16x2": (np.not_equal, 0x3C00, False),
    }
    for form, (fn, one, unordered) in cases.items():
        got = run_elementwise(f"set.{form} %d, %a, %b;", "u32", "u32", a, b)
        nan = np.isnan(x) | np.isnan(y)
        hit = fn(x, y) | nan if unordered else fn(x, y) & ~nan  # ordered forms are false on NaN
        want = (np.where(hit, one, 0).astype(np.uint32) << np.array([0, 16], np.uint32)).sum(axis=1)
        assert got.tolist() == want.tolist(), form


# Every thread stores its value at stat[tid]: for 64 threads the second half lies past the 128-byte static array,
# in the dynamic area the launch asks for (as a GPU lays them out). An ldmatrix (whose emulation keeps a hidden
# per-warp area in shared memory) then reads the static array, and every thread reads its own word back.
PAST_STATIC = (
    HEADER
    + """
.shared .align 16 .u32 stat[32];
.extern .shared .align 16 .u32 dyn[];
.visible .entry k(.param .u64 outp)
{
  .reg .u64 %rd<6>; .reg .u32 %r<12>;
  ld.param.u64 %rd1, [outp];
  mov.u32 %r1, %tid.x; mov.u32 %r2, stat; shl.b32 %r3, %r1, 2; add.u32 %r4, %r2, %r3;
  add.u32 %r5, %r1, 1000; st.shared.u32 [%r4], %r5;
  bar.sync 0;
  mov.u32 %r6, dyn; sub.u32 %r7, %r6, %r2;
  and.b32 %r8, %r1, 31; shl.b32 %r8, %r8, 4; add.u32 %r8, %r2, %r8;
  ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r9}, [%r8];
  ld.shared.u32 %r10, [%r4];
  mul.wide.u32 %rd2, %r1, 12; add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r7; st.global.u32 [%rd3+4], %r9; st.global.u32 [%rd3+8], %r10;
  ret;
}
"""
)


def test_static_shared_ends_where_the_dynamic_area_begins() -> None:
    out = run(PAST_STATIC, "k", np.zeros((64, 3), np.uint32), threads=64, shared=256)
    assert (out[:, 0] == 128).all()  # dyn follows stat directly, not our hidden area
    assert out[:, 2].tolist() == [1000 + t for t in range(64)]
    words = [1000 + t for t in range(32)]
    # ldmatrix x1: thread t gets row t // 4, 16-bit columns 2(t % 4), 2(t % 4) + 1 of the 8x8 matrix whose rows
    # start at the addresses of threads 0-7 (stat + 16 r); a column is a half of a word
    halves = np.array(words, np.uint32).view(np.uint16)
    want = [
        int(halves[8 * (t // 4) + 2 * (t % 4)]) | int(halves[8 * (t // 4) + 2 * (t % 4) + 1]) << 16 for t in range(32)
    ]
    assert out[:32, 1].tolist() == want and out[32:, 1].tolist() == want


REG_PLUS = (
    HEADER
    + """
.visible .entry k(.param .u64 inp, .param .u64 outp)
{
  .reg .u64 in_addr; .reg .u64 out_addr; .reg .u32 v; .reg .u64 w;
  ld.param.u64 in_addr, [inp]; ld.param.u64 out_addr, [outp];
  ld.global.u32 v, [in_addr]; cvt.u64.u32 w, v;
  st.global.u32 [out_addr], v + 7;
  st.global.u64 [out_addr+8], w + 3;
  ret;
}
"""
)


def test_register_plus_constant_value_operand() -> None:
    """`st.u32 [p], r + 7;`: outside PTX's grammar, but ptxas accepts it (ZLUDA's reg_local test)."""
    out = run(REG_PLUS, "k", np.zeros(4, np.uint32), np.array([40], np.uint32))
    assert out.tolist() == [47, 0, 43, 0]


INDIRECT = (
    HEADER
    + """
.func (.param .b32 r) twice(.param .b32 a)
{
  .reg .b32 %r<3>;
  ld.param.b32 %r1, [a]; add.u32 %r2, %r1, %r1; st.param.b32 [r], %r2;
  ret;
}
.visible .entry k(.param .u64 inp, .param .u64 outp)
{
  .reg .u64 %rd<4>; .reg .u32 %r<4>;
  proto : .callprototype (.param .b32 _) _ (.param .b32 _);
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [outp];
  ld.global.u32 %r1, [%rd1];
  mov.u64 %rd3, twice;
  call (%r2), %rd3, (%r1), proto;
  st.global.u32 [%rd2], %r2;
  ret;
}
"""
)


def test_indirect_call_with_register_operands() -> None:
    """A register result of a call through a function pointer is written back (it was left unchanged)."""
    out = run(INDIRECT, "k", np.zeros(1, np.uint32), np.array([21], np.uint32))
    assert out.tolist() == [42]


def test_generic_initializer_offset_must_be_a_number() -> None:
    from jit import JitError

    good = (
        HEADER + ".global .align 4 .u32 g[4];\n.global .align 8 .u64 p = generic(g)+8;\n.visible .entry k() { ret; }\n"
    )
    compile_module(good, tier="quick")
    with pytest.raises(JitError) as ei:
        compile_module(good.replace("generic(g)+8", "generic(g)+x"), tier="quick")
    assert ei.value.code == 218 and "generic" in ei.value.message
