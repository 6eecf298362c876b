"""bar.red, membermask-aware votes, f16/bf16 atomics, directed conversions, opcode validation, per-instance
module globals, engine reuse on cache hits and bounds-checked global memory."""

from __future__ import annotations

import numpy as np
import pytest

import jit
from jit import GlobalRange, JitError, compile_module
from tests.unit.jit.helpers import HEADER, launch, module, pack

STORE_R = """
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r0, 4; add.s64 %rd1, %rd1, %rd2; st.global.u32 [%rd1], %r9;
  ret;
}
"""


def test_bar_red_popc_and_or() -> None:
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<4>; .reg .pred %p<6>;
  mov.u32 %r0, %tid.x;
  and.b32 %r1, %r0, 3; setp.eq.u32 %p1, %r1, 0;
  bar.red.popc.u32 %r2, 0, %p1;
  setp.lt.u32 %p2, %r0, 1000;
  bar.red.and.pred %p3, 0, %p2;
  setp.eq.u32 %p4, %r0, 5;
  barrier.red.or.pred %p5, 0, %p4;
  selp.u32 %r3, 1, 0, %p3; selp.u32 %r4, 1, 0, %p5;
  mul.lo.u32 %r9, %r3, 10000; mad.lo.u32 %r9, %r4, 100000, %r9; add.u32 %r9, %r9, %r2;
"""
        + STORE_R
    )
    out = np.zeros(96, np.uint32)
    launch(ptx, "k", 1, 96, out)
    assert (out == 10000 + 100000 + 24).all(), out[:4]


def test_ballot_honours_member_mask() -> None:
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<4>; .reg .pred %p<3>;
  mov.u32 %r0, %tid.x;
  and.b32 %r1, %r0, -8; mov.u32 %r2, 255; shl.b32 %r3, %r2, %r1;
  setp.ne.u32 %p1, %r0, 99;
  vote.sync.ballot.b32 %r9, %p1, %r3;
"""
        + STORE_R
    )
    out = np.zeros(32, np.uint32)
    launch(ptx, "k", 1, 32, out)
    assert [int(x) for x in out] == [0xFF << (8 * (t // 8)) for t in range(32)]


@pytest.mark.parametrize("t,dtype", [("f16", np.float16), ("f16x2", np.float16), ("bf16", np.uint16)])
def test_half_atomic_add(t: str, dtype: type) -> None:
    reg = "b32" if t.endswith("x2") else "b16"
    ptx = (
        HEADER
        + f"""
.visible .entry k(.param .u64 acc, .param .u64 val)
{{
  .reg .b32 %r<4>; .reg .b64 %rd<4>; .reg .{reg} %h<3>;
  ld.param.u64 %rd1, [acc]; ld.param.u64 %rd2, [val];
  ld.global.{reg} %h1, [%rd2];
  atom.global.add.noftz.{t} %h2, [%rd1], %h1;
  ret;
}}
"""
    )
    if t == "bf16":
        val = np.array([0x3F80], np.uint16)  # 1.0
        acc = np.zeros(1, np.uint16)
        launch(ptx, "k", 1, 64, acc, val)
        assert acc[0] == 0x4280  # 64.0
        return
    n = 2 if t.endswith("x2") else 1
    val = np.array([1.0, 0.5][:n], np.float16)
    acc = np.zeros(n, np.float16)
    launch(ptx, "k", 2, 64, acc, val)
    assert acc.tolist() == [128.0, 64.0][:n]


def test_directed_narrowing_f16_bf16_and_s64() -> None:
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out, .param .u64 in, .param .u64 in64)
{
  .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .f32 %f<4>; .reg .b16 %h<6>;
  mov.u32 %r0, %tid.x;
  ld.param.u64 %rd1, [in]; mul.wide.u32 %rd2, %r0, 4; add.s64 %rd1, %rd1, %rd2; ld.global.f32 %f1, [%rd1];
  cvt.rz.f16.f32 %h1, %f1; cvt.rm.f16.f32 %h2, %f1; cvt.rp.f16.f32 %h3, %f1; cvt.rz.bf16.f32 %h4, %f1;
  ld.param.u64 %rd5, [in64]; mul.wide.u32 %rd6, %r0, 8; add.s64 %rd5, %rd5, %rd6; ld.global.u64 %rd7, [%rd5];
  cvt.rz.f32.s64 %f2, %rd7;
  ld.param.u64 %rd3, [out]; mul.wide.u32 %rd4, %r0, 16; add.s64 %rd3, %rd3, %rd4;
  st.global.b16 [%rd3], %h1; st.global.b16 [%rd3+2], %h2; st.global.b16 [%rd3+4], %h3; st.global.b16 [%rd3+6], %h4;
  st.global.f32 [%rd3+8], %f2;
  ret;
}
"""
    )
    x = np.array([1.0001, -1.0001, 70000.0, -3.14159], np.float32)
    big = np.array([2**62 + 1, -(2**62) - 1, 2**63 - 1, 12345], np.int64)
    out = np.zeros((4, 4), np.uint32)
    launch(ptx, "k", 1, 4, out, x, big)
    h = out[:, :2].copy().view(np.uint16).reshape(4, 4)
    f16 = h[:, :3].view(np.float16).astype(np.float64)
    xd = x.astype(np.float64)
    assert (np.abs(f16[:, 0]) <= np.abs(np.minimum(np.abs(xd), 65504))).all()  # rz: toward zero
    assert (f16[:, 1] <= xd).all() and (f16[:, 2] >= xd).all()  # rm below, rp above
    assert h[:, 3].tolist() == (x.view(np.uint32) >> 16).astype(np.uint16).tolist()  # rz bf16 = truncation
    f = out[:, 2].view(np.float32).astype(np.float64)
    assert (np.abs(f) <= np.abs(big.astype(object)).astype(np.float64)).all()
    assert f[2] == np.float32(2**63 - 2**39).item()  # rz of 2^63-1 stays below 2^63


def test_unknown_opcode_is_invalid_ptx() -> None:
    ptx = HEADER + ".visible .entry k()\n{\n  .reg .b32 %r<2>;\n  frobnicate.b32 %r1, %r0;\n  ret;\n}\n"
    with pytest.raises(JitError) as ei:
        compile_module(ptx)
    assert ei.value.code == 218 and "7:3" in ei.value.message


GLOBAL_PTX = (
    HEADER
    + """
.global .align 4 .u32 counter = 7;
.global .align 8 .u64 ptr_to_counter = counter;
.visible .entry bump()
{
  .reg .b32 %r<3>; .reg .b64 %rd<2>;
  ld.global.u64 %rd1, [ptr_to_counter];
  ld.u32 %r1, [%rd1]; add.u32 %r1, %r1, 1; st.u32 [%rd1], %r1;
  ret;
}
"""
)


def test_module_instances_have_their_own_globals() -> None:
    import ctypes

    a, b = compile_module(GLOBAL_PTX), compile_module(GLOBAL_PTX)
    assert a.get_kernel("bump")._code.fn is b.get_kernel("bump")._code.fn or not jit.compiler.cache_enabled()
    a.get_kernel("bump").launch(1, 1)
    a.get_kernel("bump").launch(1, 1)
    b.get_kernel("bump").launch(1, 1)
    get = lambda m: ctypes.c_uint32.from_address(m.get_global("counter").address).value  # noqa: E731
    assert (get(a), get(b)) == (9, 8)
    p = ctypes.c_uint64.from_address(a.get_global("ptr_to_counter").address).value
    assert p == a.get_global("counter").address


SAXPY = (
    HEADER
    + """
.visible .entry saxpy(.param .u64 x, .param .u64 y, .param .u32 n, .param .u32 extra)
{
  .reg .b32 %r<6>; .reg .b64 %rd<8>; .reg .f32 %f<4>; .reg .pred %p<2>;
  mov.u32 %r0, %tid.x; mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mad.lo.u32 %r0, %r1, %r2, %r0;
  ld.param.u32 %r3, [n]; ld.param.u32 %r4, [extra]; add.u32 %r3, %r3, %r4;
  setp.ge.u32 %p1, %r0, %r3; @%p1 bra DONE;
  ld.param.u64 %rd1, [x]; ld.param.u64 %rd2, [y]; cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2;
  mul.wide.u32 %rd3, %r0, 4; add.s64 %rd4, %rd1, %rd3; add.s64 %rd5, %rd2, %rd3;
  ld.global.f32 %f1, [%rd4]; ld.global.f32 %f2, [%rd5]; fma.rn.f32 %f3, %f1, 0f40000000, %f2;
  st.global.f32 [%rd5], %f3;
DONE:
  ret;
}
"""
)


def test_bounds_check_allows_and_traps() -> None:
    m = compile_module(SAXPY, bounds_check=True)
    k = m.get_kernel("saxpy")
    x, y = np.arange(1000, dtype=np.float32), np.ones(1000, np.float32)
    rng = [GlobalRange(x.ctypes.data, x.nbytes), (y.ctypes.data, y.nbytes)]
    k.launch(4, 256, 0, pack(k, x, y, 1000, 0), allowed_ranges=rng)
    assert np.array_equal(y, 2 * np.arange(1000, dtype=np.float32) + 1)
    with pytest.raises(JitError) as ei:  # one element past the end of x
        k.launch(4, 256, 0, pack(k, x, y, 1000, 1), allowed_ranges=rng)
    assert ei.value.code == 700 and hex(x.ctypes.data + x.nbytes) in ei.value.message
    with pytest.raises(JitError) as ei:  # y not granted
        k.launch(4, 256, 0, pack(k, x, y, 1000, 0), allowed_ranges=rng[:1])
    assert ei.value.code == 700


def test_bounds_check_needs_a_checked_module() -> None:
    k = module(SAXPY).get_kernel("saxpy")
    with pytest.raises(JitError) as ei:
        k.launch(1, 32, 0, pack(k, np.zeros(1, np.float32), np.zeros(1, np.float32), 0, 0), allowed_ranges=[])
    assert ei.value.code == 1


def test_bounds_check_generic_shared_pointer_is_allowed() -> None:
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<10>; .reg .b64 %rd<6>;
  .shared .align 4 .b32 sm[64];
  mov.u32 %r0, %tid.x; mov.u64 %rd1, sm; cvta.shared.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r0, 4; add.s64 %rd4, %rd2, %rd3; st.u32 [%rd4], %r0;
  bar.sync 0;
  xor.b32 %r1, %r0, 1; mul.wide.u32 %rd3, %r1, 4; add.s64 %rd4, %rd2, %rd3; ld.u32 %r9, [%rd4];
"""
        + STORE_R
    )
    m = compile_module(ptx, bounds_check=True)
    k = m.get_kernel("k")
    out = np.zeros(64, np.uint32)
    k.launch(1, 64, 0, pack(k, out), allowed_ranges=[GlobalRange(out.ctypes.data, out.nbytes)])
    assert out.tolist() == [t ^ 1 for t in range(64)]


def test_vector_registers() -> None:
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 inp, .param .u64 out)
{
  .reg .b32 %r<4>; .reg .b64 %rd<6>; .reg .v4 .f32 %v, %w; .reg .v2 .u32 %q;
  mov.u32 %r0, %tid.x;
  ld.param.u64 %rd1, [inp]; mul.wide.u32 %rd2, %r0, 16; add.s64 %rd3, %rd1, %rd2;
  ld.global.nc.v4.f32 %v, [%rd3];
  add.f32 %w.x, %v.w, %v.z; mov.f32 %w.g, %v.r; mov.v4.f32 {%w.z, %w.w}, {%v.y, %v.y};
  mov.v2.u32 %q, {%r0, %r0};
  ld.param.u64 %rd4, [out]; add.s64 %rd5, %rd4, %rd2;
  st.global.v4.f32 [%rd5], %w;
  ret;
}
"""
    )
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    out = np.zeros((8, 4), np.float32)
    launch(ptx, "k", 1, 8, x, out)
    assert out.tolist() == [[r[3] + r[2], r[0], r[1], r[1]] for r in x.tolist()]


def test_brx_idx_branch_table() -> None:
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<4>; .reg .pred %p<2>;
  mov.u32 %r0, %tid.x; and.b32 %r1, %r0, 3; mov.u32 %r9, 0;
  ts: .branchtargets L0, L1, L2, L3;
  setp.ne.u32 %p1, %r0, 7;
  @%p1 brx.idx %r1, ts;
  mov.u32 %r9, 77; bra.uni END;
L0: mov.u32 %r9, 10; bra.uni END;
L1: mov.u32 %r9, 11; bra.uni END;
L2: mov.u32 %r9, 12; bra.uni END;
L3: mov.u32 %r9, 13;
END:
"""
        + STORE_R
    )
    out = np.zeros(16, np.uint32)
    launch(ptx, "k", 1, 16, out)
    assert out.tolist() == [77 if t == 7 else 10 + (t & 3) for t in range(16)]


def test_barrier_and_shuffle_inside_noinline_func() -> None:
    ptx = (
        HEADER
        + """
.func (.param .b32 ret) warp_sum(.param .b32 v)
{
  .reg .b32 %r<4>; .reg .pred %p<2>;
  ld.param.b32 %r1, [v];
  shfl.sync.bfly.b32 %r2|%p1, %r1, 1, 31, -1; add.s32 %r1, %r1, %r2;
  shfl.sync.bfly.b32 %r2|%p1, %r1, 2, 31, -1; add.s32 %r1, %r1, %r2;
  bar.sync 0;
  st.param.b32 [ret], %r1;
  ret;
}
.func (.param .b32 ret) twice(.param .b32 v)
{
  .reg .b32 %r<4>;
  ld.param.b32 %r1, [v];
  { .param .b32 a; st.param.b32 [a], %r1; .param .b32 r; call.uni (r), warp_sum, (a); ld.param.b32 %r2, [r]; }
  shl.b32 %r2, %r2, 1;
  st.param.b32 [ret], %r2;
  ret;
}
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<4>;
  mov.u32 %r0, %tid.x;
  { .param .b32 a; st.param.b32 [a], %r0; .param .b32 r; call.uni (r), twice, (a); ld.param.b32 %r9, [r]; }
"""
        + STORE_R
    )
    out = np.zeros(64, np.uint32)
    launch(ptx, "k", 1, 64, out)
    assert out.tolist() == [2 * sum(range(t & ~3, (t & ~3) + 4)) for t in range(64)]


def test_sync_collective_waits_for_divergent_lanes() -> None:
    # odd lanes stop at an activemask first; the full-mask ballot must still see every lane
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<4>; .reg .pred %p<3>;
  mov.u32 %r0, %tid.x; and.b32 %r1, %r0, 1; mov.u32 %r5, 0;
  setp.eq.u32 %p1, %r1, 0; @%p1 bra EVEN;
  activemask.b32 %r5;
EVEN:
  setp.ne.u32 %p2, %r0, 1000;
  vote.sync.ballot.b32 %r6, %p2, -1;
  xor.b32 %r9, %r6, %r5;
"""
        + STORE_R
    )
    out = np.zeros(32, np.uint32)
    launch(ptx, "k", 1, 32, out)
    assert out.tolist() == [0xFFFFFFFF ^ (0xAAAAAAAA if t & 1 else 0) for t in range(32)]


def test_recursive_sync_func_is_refused() -> None:
    ptx = (
        HEADER
        + """
.func (.param .b32 ret) rec(.param .b32 v)
{
  .reg .b32 %r<4>;
  ld.param.b32 %r1, [v]; bar.sync 0;
  { .param .b32 a; st.param.b32 [a], %r1; .param .b32 r; call.uni (r), rec, (a); ld.param.b32 %r2, [r]; }
  st.param.b32 [ret], %r2;
  ret;
}
.visible .entry k()
{
  .reg .b32 %r<2>;
  { .param .b32 a; st.param.b32 [a], %r0; .param .b32 r; call.uni (r), rec, (a); }
  ret;
}
"""
    )
    with pytest.raises(JitError) as ei:
        compile_module(ptx)
    assert ei.value.code == 801 and "recursive" in ei.value.message


VECTOR_ATOMICS = (
    HEADER.replace("sm_80", "sm_90")
    + """
.visible .entry k(.param .u64 p, .param .u64 q, .param .u64 h)
{
  .reg .f32 %f<12>; .reg .b64 %rd<8>; .reg .b32 %r<4>; .reg .b16 %rs<4>;
  ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [q]; ld.param.u64 %rd5, [h];
  mov.u32 %r1, %tid.x; cvt.rn.f32.u32 %f1, %r1; add.f32 %f2, %f1, 1.0; add.f32 %f3, %f1, 2.0; add.f32 %f4, %f1, 3.0;
  red.global.add.v4.f32 [%rd1], {%f1, %f2, %f3, %f4};
  atom.global.add.v2.f32 {%f5, %f6}, [%rd1+16], {%f2, %f3};
  mul.wide.u32 %rd3, %r1, 8; add.s64 %rd4, %rd2, %rd3;
  st.global.v2.f32 [%rd4], {%f5, %f6};
  mov.b16 %rs1, 0x3C00;
  red.global.add.noftz.v8.f16 [%rd5], {%rs1, %rs1, %rs1, %rs1, %rs1, %rs1, %rs1, %rs1};
  ret;
}
"""
)


def test_vector_atomics_are_one_atomic_per_element() -> None:
    """sm_90 `red/atom .v2/.v4/.v8`: element k at a + k*size; `atom` returns every element's old value, and the old
    values of one element, taken in order, are the running sums of the increments."""
    p, q, h = np.zeros(6, np.float32), np.zeros(64, np.float32), np.zeros(8, np.float16)
    launch(VECTOR_ATOMICS, "k", (1,), (32, 1, 1), p, q, h)
    t = np.arange(32, dtype=np.float32)
    assert (p == [t.sum(), (t + 1).sum(), (t + 2).sum(), (t + 3).sum(), (t + 1).sum(), (t + 2).sum()]).all()
    assert (h == 32).all()
    olds = q.reshape(32, 2)
    for k, inc in ((0, t + 1), (1, t + 2)):
        order = np.argsort(olds[:, k])
        assert olds[order[0], k] == 0 and (np.diff(olds[order, k]) == inc[order][:-1]).all()


@pytest.mark.parametrize(
    "bad",
    [
        "atom.global.add.v2.f32 {%f5}, [%rd1+16], {%f2, %f3};",  # one destination for two elements
        "red.global.add.v4.f32 [%rd1], {%f1, %f2};",  # two sources for four elements
    ],
)
def test_vector_atomics_with_wrong_element_counts_are_invalid_ptx(bad: str) -> None:
    ptx = VECTOR_ATOMICS.replace("red.global.add.v4.f32 [%rd1], {%f1, %f2, %f3, %f4};", bad)
    with pytest.raises(JitError) as ei:
        compile_module(ptx)
    assert ei.value.code == 218 and "vector" in ei.value.message


def test_globaltimer_is_nanoseconds_of_the_host_clock() -> None:
    """%globaltimer is a nanosecond clock (NOTE [time registers]): read in a kernel it lies between two host readings
    of time.time_ns(), and its halves agree with it; the cycle counter that served it before ran ~2.5x fast."""
    import time

    ptx = (
        HEADER
        + """
.visible .entry t(.param .u64 out)
{
  .reg .b64 %rd<4>; .reg .b32 %r<3>;
  ld.param.u64 %rd1, [out];
  mov.u64 %rd2, %globaltimer; mov.u32 %r1, %globaltimer_lo; mov.u32 %r2, %globaltimer_hi;
  st.global.u64 [%rd1], %rd2; st.global.u32 [%rd1+8], %r1; st.global.u32 [%rd1+12], %r2;
  ret;
}
"""
    )
    out = np.zeros(2, dtype=np.uint64)
    launch(ptx, "t", 1, 1, out)  # compiled and warmed
    before = time.time_ns()
    launch(ptx, "t", 1, 1, out)
    after = time.time_ns()
    assert before <= int(out[0]) <= after
    lo, hi = int(out[1]) & 0xFFFFFFFF, int(out[1]) >> 32
    assert hi == int(out[0]) >> 32 and abs(lo - (int(out[0]) & 0xFFFFFFFF)) < 10**9
