"""Lowerings that exist for speed must keep exact semantics: shared-memory atomics without a lock prefix, addresses
formed from pointer roots (NOTE [pointer roots]), chunked block claiming, launch-limit masks on special registers."""

from __future__ import annotations

import numpy as np
import pytest

from jit.passes.pointer_roots import roots
from jit.pipeline import front_end
from tests.unit.jit.helpers import HEADER, launch, module, pack

# Every thread of a 128-thread block applies one atomic of each kind to a shared word; thread 0 publishes the words.
# Only results that do not depend on the order threads reach the atomics are checked.
SHARED_ATOMICS = (
    HEADER
    + """
.visible .entry k(.param .u64 out, .param .u64 fout)
{
  .reg .b32 %r<40>; .reg .f32 %f<8>; .reg .b64 %rd<8>; .reg .pred %p<4>;
  .shared .align 4 .b32 w[12];
  .shared .align 4 .f32 fw[3];
  mov.u32 %r0, %tid.x;
  setp.ne.u32 %p1, %r0, 0;
  @%p1 bra INIT_DONE;
  st.shared.u32 [w], 0; st.shared.u32 [w+4], 1000; st.shared.u32 [w+8], 0; st.shared.u32 [w+12], 0;
  st.shared.u32 [w+16], 50; st.shared.u32 [w+20], 0; st.shared.u32 [w+24], -1; st.shared.u32 [w+28], 0;
  st.shared.u32 [w+32], 0; st.shared.u32 [w+36], 7; st.shared.s32 [w+40], 0; st.shared.u32 [w+44], 0;
  st.shared.f32 [fw], 0f00000000; st.shared.f32 [fw+4], 0f42C80000; st.shared.f32 [fw+8], 0fC2C80000;
INIT_DONE:
  bar.sync 0;
  atom.shared.add.u32 %r1, [w], %r0;
  atom.shared.min.u32 %r2, [w+4], %r0;
  atom.shared.max.u32 %r3, [w+8], %r0;
  atom.shared.inc.u32 %r4, [w+12], 9;
  atom.shared.dec.u32 %r5, [w+16], 100;
  red.shared.or.b32 [w+20], %r0;
  atom.shared.and.b32 %r6, [w+24], 0xFFFFFFF0;
  atom.shared.xor.b32 %r7, [w+28], %r0;
  atom.shared.exch.b32 %r8, [w+32], %r0;
  add.u32 %r9, %r0, 100;
  atom.shared.cas.b32 %r10, [w+36], 7, %r9;
  sub.s32 %r11, 0, %r0;
  atom.shared.min.s32 %r12, [w+40], %r11;
  atom.shared.add.u32 %r13, [w+44], 1;
  cvt.rn.f32.u32 %f1, %r0;
  atom.shared.add.f32 %f2, [fw], %f1;
  atom.shared.min.f32 %f3, [fw+4], %f1;
  atom.shared.max.f32 %f4, [fw+8], %f1;
  bar.sync 0;
  @%p1 bra DONE;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [fout];
  ld.shared.u32 %r20, [w]; st.global.u32 [%rd1], %r20;
  ld.shared.u32 %r20, [w+4]; st.global.u32 [%rd1+4], %r20;
  ld.shared.u32 %r20, [w+8]; st.global.u32 [%rd1+8], %r20;
  ld.shared.u32 %r20, [w+12]; st.global.u32 [%rd1+12], %r20;
  ld.shared.u32 %r20, [w+16]; st.global.u32 [%rd1+16], %r20;
  ld.shared.u32 %r20, [w+20]; st.global.u32 [%rd1+20], %r20;
  ld.shared.u32 %r20, [w+24]; st.global.u32 [%rd1+24], %r20;
  ld.shared.u32 %r20, [w+28]; st.global.u32 [%rd1+28], %r20;
  ld.shared.u32 %r20, [w+36]; st.global.u32 [%rd1+36], %r20;
  ld.shared.u32 %r20, [w+40]; st.global.u32 [%rd1+40], %r20;
  ld.shared.u32 %r20, [w+44]; st.global.u32 [%rd1+44], %r20;
  st.global.u32 [%rd1+48], %r1;
  ld.shared.f32 %f5, [fw]; st.global.f32 [%rd2], %f5;
  ld.shared.f32 %f5, [fw+4]; st.global.f32 [%rd2+4], %f5;
  ld.shared.f32 %f5, [fw+8]; st.global.f32 [%rd2+8], %f5;
DONE:
  ret;
}
"""
)


def test_shared_atomics_every_kind() -> None:
    n = 128
    out = np.zeros(13, np.uint32)
    fout = np.zeros(3, np.float32)
    launch(SHARED_ATOMICS, "k", 3, n, out, fout)  # three blocks: each has its own shared window
    t = np.arange(n)
    inc = 0
    dec = 50
    for _ in range(n):
        inc = 0 if inc >= 9 else inc + 1
        dec = 100 if dec == 0 or dec > 100 else dec - 1
    xor = 0
    for v in t:
        xor ^= int(v)
    assert out[0] == t.sum()
    assert out[1] == 0 and out[2] == n - 1
    assert out[3] == inc and out[4] == dec
    assert out[5] == np.bitwise_or.reduce(t) and out[6] == 0xFFFFFFF0 and out[7] == xor
    assert 100 <= out[9] < 100 + n  # cas: exactly one thread finds 7 and swaps in 100 + its tid
    assert out[10] == np.uint32(-(n - 1) & 0xFFFFFFFF)
    assert out[11] == n
    assert fout[0] == t.sum() and fout[1] == 0.0 and fout[2] == n - 1


def test_shared_atomics_in_parallel_blocks_do_not_interfere() -> None:
    """Many blocks on all workers, each counting into its own shared word, then one global atomic per block."""
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<2>;
  .shared .align 4 .b32 c;
  mov.u32 %r0, %tid.x;
  setp.ne.u32 %p1, %r0, 0;
  @!%p1 st.shared.u32 [c], 0;
  bar.sync 0;
  red.shared.add.u32 [c], 1;
  bar.sync 0;
  @%p1 bra DONE;
  ld.shared.u32 %r1, [c];
  ld.param.u64 %rd1, [out];
  red.global.add.u32 [%rd1], %r1;
DONE:
  ret;
}
"""
    )
    out = np.zeros(1, np.uint32)
    launch(ptx, "k", 512, 64, out)
    assert out[0] == 512 * 64


def test_pointer_roots_of_numba_style_indexing() -> None:
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 a, .param .u64 b, .param .u64 n)
{
  .reg .b32 %r<4>; .reg .b64 %rd<20>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [a]; ld.param.u64 %rd2, [b]; ld.param.u64 %rd3, [n];
  cvta.to.global.u64 %rd4, %rd1;
  mov.u32 %r1, %tid.x; cvt.s64.s32 %rd5, %r1;
  shl.b64 %rd6, %rd5, 2;
  add.s64 %rd7, %rd4, %rd6;
  mov.u64 %rd8, %rd7;
LOOP:
  add.s64 %rd8, %rd8, 4;
  setp.lt.u64 %p1, %rd8, %rd3;
  @%p1 bra LOOP;
  add.s64 %rd9, %rd1, %rd2;
  sub.s64 %rd10, %rd2, %rd1;
  selp.b64 %rd11, %rd1, %rd2, %p1;
  selp.b64 %rd12, %rd7, %rd4, %p1;
  mov.u64 %rd13, %rd5;
  mov.u64 %rd13, %rd1;
  ld.global.u64 %rd14, [%rd7];
  add.s64 %rd15, %rd14, %rd6;
  ret;
}
"""
    )
    fn = front_end(ptx).functions[0]
    r = roots(fn)
    assert r["%rd1"] == ("a", 0) and r["%rd4"] == ("a", 0) and r["%rd7"] == ("a", 0)
    assert r["%rd8"] == ("a", 0)  # loop-carried increment keeps the root
    assert r["%rd12"] == ("a", 0)  # both selp arms rooted in a
    for reg in ("%rd9", "%rd10", "%rd11", "%rd13", "%rd15", "%rd5", "%rd6"):
        assert reg not in r, reg  # p+q, p-q, mixed roots, sometimes-integer, loaded pointers: no root


@pytest.mark.parametrize("grid", [1, 7, 1000, 4099])
def test_every_block_runs_exactly_once(grid: int) -> None:
    """Blocks are claimed in chunks: every block id must run once, including the ragged last chunk."""
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<4>; .reg .b64 %rd<4>;
  mov.u32 %r1, %ctaid.x;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd1, %rd1, %rd2;
  red.global.add.u32 [%rd1], 1;
  ret;
}
"""
    )
    out = np.zeros(grid + 8, np.uint32)
    launch(ptx, "k", grid, 1, out)
    assert (out[:grid] == 1).all() and (out[grid:] == 0).all()


def test_vectorised_guarded_elementwise_matches_numpy() -> None:
    """The guarded saxpy shape vectorises with masked loads/stores: ragged tails and odd block sizes must be exact,
    and no element outside the guard may be written."""
    ptx = (
        HEADER
        + """
.visible .entry k(.param .f32 a, .param .u64 x, .param .u64 y, .param .u64 out, .param .u64 n)
{
  .reg .b32 %r<4>; .reg .f32 %f<5>; .reg .b64 %rd<16>; .reg .pred %p<2>;
  ld.param.f32 %f1, [a]; ld.param.u64 %rd1, [x]; ld.param.u64 %rd2, [y]; ld.param.u64 %rd3, [out];
  ld.param.u64 %rd4, [n];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mul.wide.s32 %rd5, %r2, %r3; cvt.s64.s32 %rd6, %r1; add.s64 %rd7, %rd5, %rd6;
  setp.ge.s64 %p1, %rd7, %rd4;
  @%p1 bra DONE;
  shl.b64 %rd8, %rd7, 2;
  add.s64 %rd9, %rd1, %rd8; add.s64 %rd10, %rd2, %rd8; add.s64 %rd11, %rd3, %rd8;
  ld.global.f32 %f2, [%rd9]; ld.global.f32 %f3, [%rd10];
  fma.rn.f32 %f4, %f2, %f1, %f3;
  st.global.f32 [%rd11], %f4;
DONE:
  ret;
}
"""
    )
    rng = np.random.default_rng(1)
    for n, bs in ((1, 32), (1000, 96), (4097, 256), (100_003, 1000)):
        x = rng.random(n + 64, dtype=np.float32)
        y = rng.random(n + 64, dtype=np.float32)
        out = np.full(n + 64, -7.0, np.float32)
        launch(ptx, "k", (n + bs - 1) // bs, bs, np.float32(1.5), x, y, out, n)
        want = (1.5 * x[:n].astype(np.float64) + y[:n]).astype(np.float32)  # fma: one rounding
        assert np.array_equal(out[:n], want)
        assert (out[n:] == -7.0).all()


# NOTE [combined global reductions]: relaxed integer adds to global memory are combined per worker; these kernels
# check the cases where a buffered value must be visible.


def test_buffered_reductions_histogram_u32_and_u64() -> None:
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 data, .param .u64 bins, .param .u64 bins64, .param .u32 n)
{
  .reg .b32 %r<12>; .reg .b64 %rd<12>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [data]; ld.param.u64 %rd2, [bins]; ld.param.u64 %rd3, [bins64]; ld.param.u32 %r9, [n];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %nctaid.x;
  mad.lo.s32 %r5, %r3, %r2, %r1; mul.lo.s32 %r6, %r2, %r4;
LOOP:
  setp.ge.u32 %p1, %r5, %r9;
  @%p1 bra DONE;
  mul.wide.u32 %rd4, %r5, 4; add.s64 %rd5, %rd1, %rd4; ld.global.u32 %r7, [%rd5];
  and.b32 %r8, %r7, 1023;
  mul.wide.u32 %rd6, %r8, 4; add.s64 %rd7, %rd2, %rd6;
  atom.global.add.u32 %r10, [%rd7], 1;
  mul.wide.u32 %rd8, %r8, 8; add.s64 %rd9, %rd3, %rd8;
  cvt.u64.u32 %rd10, %r7;
  red.global.add.u64 [%rd9], %rd10;
  add.s32 %r5, %r5, %r6;
  bra LOOP;
DONE:
  ret;
}
"""
    )
    rng = np.random.default_rng(2)
    data = rng.integers(0, 1 << 30, 200_003, dtype=np.uint32)
    bins = np.zeros(1024, np.uint32)
    bins64 = np.zeros(1024, np.uint64)
    assert module(ptx).get_kernel("k")._code.red_bytes > 0  # the adds take the combining path
    launch(ptx, "k", 37, 128, data, bins, bins64, data.size)
    assert (bins == np.bincount(data & 1023, minlength=1024)).all()
    want64 = np.zeros(1024, np.uint64)
    np.add.at(want64, data & 1023, data.astype(np.uint64))
    assert (bins64 == want64).all()


def test_buffered_reduction_is_seen_by_own_load_and_overwritten_by_own_store() -> None:
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 c, .param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [c]; ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mad.lo.s32 %r4, %r2, %r3, %r1;
  mul.wide.u32 %rd3, %r4, 8; add.s64 %rd4, %rd1, %rd3; add.s64 %rd5, %rd2, %rd3;
  red.global.add.u32 [%rd4], 5;
  ld.global.u32 %r5, [%rd4];
  st.global.u32 [%rd5], %r5;
  red.global.add.u32 [%rd4+4], 3;
  st.global.u32 [%rd4+4], 100;
  ret;
}
"""
    )
    n = 64 * 128
    c = np.zeros(2 * n, np.uint32)
    c[0::2] = np.arange(n)
    out = np.zeros(2 * n, np.uint32)
    assert module(ptx).get_kernel("k")._code.red_bytes > 0
    launch(ptx, "k", 64, 128, c, out)
    assert (out[0::2] == np.arange(n) + 5).all()  # each thread's load sees its own add
    assert (c[1::2] == 100).all()  # the store comes after the add in coherence order


def test_buffered_reductions_are_published_by_threadfence() -> None:
    """The threadfence-reduction pattern: counts via relaxed adds, __threadfence(), a ticket atomic whose result is
    used; the last block to take a ticket reads every count, which must be complete."""
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 counts, .param .u64 ticket, .param .u64 out)
{
  .reg .b32 %r<16>; .reg .b64 %rd<12>; .reg .pred %p<4>;
  ld.param.u64 %rd1, [counts]; ld.param.u64 %rd2, [ticket]; ld.param.u64 %rd3, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %nctaid.x;
  and.b32 %r4, %r1, 15; mul.wide.u32 %rd4, %r4, 4; add.s64 %rd5, %rd1, %rd4;
  atom.global.add.u32 %r5, [%rd5], 1;
  membar.gl;
  bar.sync 0;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  atom.global.inc.u32 %r6, [%rd2], 1000000;
  add.u32 %r7, %r6, 1;
  setp.ne.u32 %p2, %r7, %r3;
  @%p2 bra DONE;
  mov.u32 %r8, 0; mov.u32 %r9, 0;
SUM:
  mul.wide.u32 %rd6, %r9, 4; add.s64 %rd7, %rd1, %rd6; ld.volatile.global.u32 %r10, [%rd7];
  add.u32 %r8, %r8, %r10; add.u32 %r9, %r9, 1;
  setp.lt.u32 %p3, %r9, 16;
  @%p3 bra SUM;
  st.global.u32 [%rd3], %r8;
DONE:
  ret;
}
"""
    )
    assert module(ptx).get_kernel("k")._code.red_bytes > 0
    for grid in (1, 3, 200):
        counts = np.zeros(16, np.uint32)
        ticket = np.zeros(1, np.uint32)
        out = np.zeros(1, np.uint32)
        launch(ptx, "k", grid, 64, counts, ticket, out)
        assert out[0] == grid * 64 and counts.sum() == grid * 64, grid


def test_buffered_reduction_is_published_by_membar_before_a_flag() -> None:
    """Message passing between two blocks on two workers: block 1 adds to x, fences, raises a flag and waits for an
    acknowledgement (so its worker cannot finish and flush first); block 0 waits for the flag and reads x with a
    plain load. The flag store is an ordinary one and the producer spins on arithmetic before its first strong load
    (which would flush too), so only the flush at `membar` makes the add visible in time."""
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 x, .param .u64 flags, .param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<4>;
  ld.param.u64 %rd1, [x]; ld.param.u64 %rd2, [flags]; ld.param.u64 %rd3, [out];
  mov.u32 %r1, %ctaid.x; mov.u32 %r6, 0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 bra CONSUMER;
  red.global.add.u32 [%rd1], 7;
  membar.gl;
  st.global.u32 [%rd2], 1;
  mov.u32 %r7, 0;
DELAY:
  mad.lo.u32 %r7, %r7, 1664525, 1013904223; add.u32 %r6, %r6, 1;
  setp.lt.u32 %p3, %r6, 60000000;
  @%p3 bra DELAY;
  st.global.u32 [%rd3+4], %r7;
  mov.u32 %r6, 0;
WAIT_ACK:
  add.u32 %r6, %r6, 1; setp.gt.u32 %p3, %r6, 400000000; @%p3 bra DONE;
  ld.volatile.global.u32 %r2, [%rd2+4];
  setp.eq.u32 %p2, %r2, 0;
  @%p2 bra WAIT_ACK;
  bra DONE;
CONSUMER:
  add.u32 %r6, %r6, 1; setp.gt.u32 %p3, %r6, 400000000; @%p3 bra TIMEOUT;
  ld.volatile.global.u32 %r3, [%rd2];
  setp.eq.u32 %p2, %r3, 0;
  @%p2 bra CONSUMER;
  ld.global.u32 %r4, [%rd1];
  st.global.u32 [%rd3], %r4;
  st.volatile.global.u32 [%rd2+4], 1;
  bra DONE;
TIMEOUT:
  st.global.u32 [%rd3], 0xDEAD;
DONE:
  ret;
}
"""
    )
    k = module(ptx).get_kernel("k")
    assert k._code.red_bytes > 0
    x, flags, out = np.zeros(1, np.uint32), np.zeros(2, np.uint32), np.zeros(2, np.uint32)
    k.launch(2, 1, 0, pack(k, x, flags, out), workers=2)
    assert out[0] == 7 and x[0] == 7


@pytest.mark.parametrize(
    "order,buffered", [("", True), (".relaxed.gpu", True), (".release.gpu", False), (".relaxed.sys", False)]
)
def test_which_reductions_are_combined(order: str, buffered: bool) -> None:
    """Relaxed integer reductions (the PTX default, or spelled out) take the combining buffer; ordered ones and
    system-scope ones stay real atomics. The result is the same either way."""
    scope = order.split(".")[-1] if order else ""
    sem = order.split(".")[1] if order else ""
    mods = f".{sem}" if sem else ""
    mods += f".{scope}" if scope else ""
    ptx = (
        HEADER
        + f"""
.visible .entry k(.param .u64 c)
{{
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [c];
  red{mods}.global.add.u32 [%rd1], 1;
  ret;
}}
"""
    )
    k = module(ptx).get_kernel("k")
    assert (k._code.red_bytes > 0) == buffered
    c = np.zeros(1, np.uint32)
    k.launch(40, 128, 0, pack(k, c))
    assert c[0] == 40 * 128


def test_slow_paths_are_cold() -> None:
    """NOTE [cold slow paths]: the combining buffer's evict/flush and the bounds-check table search are `cold`
    functions, so LLVM keeps a hot loop's registers and puts the spills around those calls on the cold path."""
    import re

    from jit.pipeline import translate

    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 data, .param .u64 bins)
{
  .reg .b32 %r<4>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [data]; ld.param.u64 %rd2, [bins];
  mov.u32 %r1, %tid.x; mul.wide.u32 %rd3, %r1, 4; add.s64 %rd4, %rd1, %rd3;
  ld.global.u32 %r2, [%rd4]; and.b32 %r3, %r2, 255;
  mul.wide.u32 %rd5, %r3, 4; add.s64 %rd6, %rd2, %rd5;
  red.global.add.u32 [%rd6], 1;
  ld.global.u64 %rd7, [%rd1]; ld.global.u32 %r2, [%rd7];  // not rooted: a table-searched check
  ret;
}
"""
    )
    text = str(translate(ptx, "cpu", bounds_check=True).ir_module)
    for name in ("wooly_red_flush", "wooly_red_insert"):
        m = re.search(rf'define internal void @"?{name}"?\([^)]*\)([^{{]*)', text)
        assert m and "cold" in m.group(1), name
    bc = re.search(r'define internal i1 @"?wooly\.bc"?\([^)]*\)([^{]*)', text)
    assert bc and "cold" in bc.group(1)
