"""Address forms in fused grid-stride loops (NOTE [fused loop address forms], jit/analysis/fused_access.py) and what
the CPU emitter does with them: dense reduction slots (NOTE [dense reduction slots], jit/emit/cpu/red.py), one
overlap test per block instead of one per access, and prefetching (jit/emit/cpu/fused.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from jit.analysis.fused_access import Aff, Idx, address_forms
from jit.pipeline import front_end, translate
from tests.unit.jit.helpers import HEADER, launch, pack

# i = ctaid*ntid + tid; while (i < n) { BODY; i += ntid*nctaid }; %rd1 = data, %rd2 = bins, %rd3 = out
KERNEL = (
    HEADER
    + """
.visible .entry h(.param .u64 data, .param .u64 bins, .param .u64 out, .param .u32 n)
{
  .reg .pred %p<3>; .reg .b32 %r<20>; .reg .b64 %rd<30>; .reg .b16 %rs<4>;
  ld.param.u64 %rd1, [data]; ld.param.u64 %rd2, [bins]; ld.param.u64 %rd3, [out]; ld.param.u32 %r10, [n];
  cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2; cvta.to.global.u64 %rd3, %rd3;
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %nctaid.x;
  mad.lo.s32 %r5, %r3, %r2, %r1;
  mul.lo.s32 %r6, %r2, %r4;
  PRE
  setp.ge.u32 %p1, %r5, %r10;
  @%p1 bra DONE;
LOOP:
  BODY
  add.u32 %r5, %r5, %r6;
  setp.lt.u32 %p2, %r5, %r10;
  @%p2 bra LOOP;
DONE:
  ret;
}
"""
)
LOAD = "mul.wide.u32 %rd4, %r5, 4; add.s64 %rd5, %rd1, %rd4; ld.global.u32 %r7, [%rd5];"
LOAD8 = "cvt.u64.u32 %rd4, %r5; add.s64 %rd5, %rd1, %rd4; ld.global.u8 %rs1, [%rd5]; cvt.u32.u16 %r7, %rs1;"


def kernel(body: str, pre: str = "") -> str:
    return KERNEL.replace("BODY", body).replace("PRE", pre)


def forms(body: str) -> list[Aff | Idx | None]:
    """The address form of each memory instruction of the loop body, in order."""
    fn = [f for f in front_end(kernel(body)).functions if f.is_entry][0]
    assert fn.fused is not None
    got = address_forms(fn.fused.body, fn.fused.iv, fn.fused.width, fn.fused.signed)
    return [got.get(id(ins)) for ins in fn.fused.body if ins.opcode in ("ld", "st", "atom", "red")]


BINS = Idx("%rd2", 4, 256, 0)
DATA = Aff("%rd1", 4, 0, 64)


@pytest.mark.parametrize(
    "why, body, want",
    [
        (
            "x[i] and bins[v & 255]",
            LOAD + "and.b32 %r8, %r7, 255; mul.wide.u32 %rd6, %r8, 4; add.s64 %rd6, %rd2, %rd6;"
            "red.global.add.u32 [%rd6], 1;",
            [DATA, BINS],
        ),
        (
            "numba's mask after the shift",
            LOAD + "shl.b32 %r8, %r7, 2; cvt.u64.u32 %rd6, %r8; and.b64 %rd6, %rd6, 1020;"
            "add.s64 %rd6, %rd2, %rd6; atom.global.add.u32 %r9, [%rd6], 1;",
            [DATA, BINS],
        ),
        (
            "a byte as the index",
            LOAD8 + "mul.wide.u32 %rd6, %r7, 4; add.s64 %rd6, %rd2, %rd6; red.global.add.u32 [%rd6], 1;",
            [Aff("%rd1", 1, 0, 64), BINS],
        ),
        (
            "rem.u by 100, offset 8",
            LOAD + "rem.u32 %r8, %r7, 100; mul.wide.u32 %rd6, %r8, 4; add.s64 %rd6, %rd2, %rd6;"
            "red.global.add.u32 [%rd6+8], 1;",
            [DATA, Idx("%rd2", 4, 100, 8)],
        ),
        (
            "a shift right of an index",
            LOAD + "and.b32 %r8, %r7, 1020; shr.u32 %r8, %r8, 2; mul.wide.u32 %rd6, %r8, 4;"
            "add.s64 %rd6, %rd2, %rd6; red.global.add.u32 [%rd6], 1;",
            [DATA, BINS],
        ),
        (
            "x[i + 3] in 64 bits",
            "cvt.u64.u32 %rd4, %r5; add.s64 %rd4, %rd4, 3; shl.b64 %rd4, %rd4, 2;"
            "add.s64 %rd5, %rd1, %rd4; ld.global.u32 %r7, [%rd5+-4];",
            [Aff("%rd1", 4, 8, 64)],
        ),
        (
            "i + 3 may wrap in 32 bits",
            "add.u32 %r11, %r5, 3; mul.wide.u32 %rd4, %r11, 4; add.s64 %rd5, %rd1, %rd4;ld.global.u32 %r7, [%rd5];",
            [None],
        ),
        (
            "4*i may wrap in 32 bits",
            "mul.lo.s32 %r11, %r5, 4; cvt.u64.u32 %rd4, %r11; add.s64 %rd5, %rd1, %rd4;ld.global.u32 %r7, [%rd5];",
            [None],
        ),
        (
            "a thread index is not i",
            "mov.u32 %r12, %tid.x; mul.wide.u32 %rd4, %r12, 4; add.s64 %rd5, %rd1, %rd4;ld.global.u32 %r7, [%rd5];",
            [None],
        ),
        (
            "a base loaded in the loop",
            "ld.global.u64 %rd8, [%rd2]; mul.wide.u32 %rd4, %r5, 4; add.s64 %rd5, %rd8, %rd4;"
            "ld.global.u32 %r7, [%rd5];",
            [Aff("%rd2", 0, 0, 64), None],
        ),
        (
            "a mask in a register",
            LOAD + "and.b32 %r8, %r7, %r10; mul.wide.u32 %rd6, %r8, 4; add.s64 %rd6, %rd2, %rd6;"
            "red.global.add.u32 [%rd6], 1;",
            [DATA, None],
        ),
        (
            "rem.s may be negative",
            LOAD + "rem.s32 %r8, %r7, 100; mul.wide.u32 %rd6, %r8, 4; add.s64 %rd6, %rd2, %rd6;"
            "red.global.add.u32 [%rd6], 1;",
            [DATA, None],
        ),
        (
            "two invariant bases",
            LOAD + "and.b32 %r8, %r7, 255; mul.wide.u32 %rd6, %r8, 4; add.s64 %rd6, %rd2, %rd6;"
            "add.s64 %rd6, %rd6, %rd1; red.global.add.u32 [%rd6], 1;",
            [DATA, None],
        ),
    ],
)
def test_address_forms(why: str, body: str, want: list[Aff | Idx | None]) -> None:
    assert forms(body) == want, why


def test_the_benchmark_histogram_has_an_affine_load_and_an_indexed_reduction() -> None:
    pytest.importorskip("numba.cuda")
    from numba import cuda, uint32, void

    from benchmarks.jit import k_hist

    ptx = cuda.compile_ptx(k_hist, void(uint32[::1], uint32[::1]), cc=(8, 0))[0]
    fn = [f for f in front_end(ptx).functions if f.is_entry][0]
    assert fn.fused is not None
    got = address_forms(fn.fused.body, fn.fused.iv, fn.fused.width, fn.fused.signed)
    assert sorted(map(str, got.values())) == sorted(map(str, [Aff("%rd4", 4, 0, 64), Idx("%rd5", 4, 256, 0)]))


# (body after the load, bins dtype, bins size, expected bins from the data d)
IDX = "mul.wide.u32 %rd6, %r8, 4; add.s64 %rd6, %rd2, %rd6;"
HISTS = {
    "and255": (
        "and.b32 %r8, %r7, 255;" + IDX + "red.global.add.u32 [%rd6], 1;",
        np.uint32,
        256,
        lambda d: np.bincount(d & 255, minlength=256),
    ),
    "numba": (
        "shl.b32 %r8, %r7, 2; cvt.u64.u32 %rd6, %r8; and.b64 %rd6, %rd6, 1020; add.s64 %rd6, %rd2, %rd6;"
        "atom.global.add.u32 %r9, [%rd6], 1;",
        np.uint32,
        256,
        lambda d: np.bincount(d & 255, minlength=256),
    ),
    "rem100": (
        "rem.u32 %r8, %r7, 100;" + IDX + "red.global.add.u32 [%rd6], 1;",
        np.uint32,
        100,
        lambda d: np.bincount(d % 100, minlength=100),
    ),
    "spaced": (
        "and.b32 %r8, %r7, 63; mul.wide.u32 %rd6, %r8, 8; add.s64 %rd6, %rd2, %rd6;red.global.add.u32 [%rd6], 1;",
        np.uint32,
        128,
        lambda d: np.stack([np.bincount(d & 63, minlength=64), np.zeros(64, np.int64)], 1).ravel(),
    ),
    "u64": (
        "and.b32 %r8, %r7, 255; mul.wide.u32 %rd6, %r8, 8; add.s64 %rd6, %rd2, %rd6; shr.u32 %r9, %r7, 8;"
        "cvt.u64.u32 %rd9, %r9; red.global.add.u64 [%rd6], %rd9;",
        np.uint64,
        256,
        lambda d: np.bincount(d & 255, weights=(d >> 8).astype(np.float64), minlength=256).astype(np.uint64),
    ),
    "minus3": (
        "and.b32 %r8, %r7, 255;" + IDX + "red.global.add.s32 [%rd6], -3;",
        np.int32,
        256,
        lambda d: -3 * np.bincount(d & 255, minlength=256),
    ),
    "sparse": (
        "and.b32 %r8, %r7, 4095;" + IDX + "red.global.add.u32 [%rd6], 1;",
        np.uint32,
        4096,
        lambda d: np.bincount(d & 4095, minlength=4096),
    ),
}


@pytest.mark.parametrize("name", sorted(HISTS))
@pytest.mark.parametrize("grid, block", [((7,), (64, 1)), ((3,), (32, 2))])  # fused; a 2-D block: the usual path
def test_histograms(name: str, grid: tuple[int], block: tuple[int, int]) -> None:
    body, dt, size, want = HISTS[name]
    d = np.random.default_rng(5).integers(0, 1 << 24, 100_003, dtype=np.uint32)
    bins = np.zeros(size, dt)
    launch(kernel(LOAD + body), "h", grid, (*block, 1), d, bins, d, d.size)
    assert (bins == block[1] * want(d)).all()  # (the threads of a row of a 2-D block do the same work)


def test_a_byte_histogram() -> None:
    d = np.random.default_rng(6).integers(0, 256, 50_001, dtype=np.uint8)
    bins = np.zeros(256, np.uint32)
    launch(
        kernel(LOAD8 + "mul.wide.u32 %rd6, %r7, 4; add.s64 %rd6, %rd2, %rd6; red.global.add.u32 [%rd6], 1;"),
        "h",
        (5,),
        (96, 1, 1),
        d,
        bins,
        d,
        d.size,
    )
    assert (bins == np.bincount(d, minlength=256)).all()


def test_per_block_histograms_claim_a_new_region_each_block() -> None:
    """bins + 1024*ctaid: the dense region of a worker moves with every block (the old one is flushed first)."""
    grid, nt, n = 9, 64, 70_001
    d = np.random.default_rng(7).integers(0, 1 << 24, n, dtype=np.uint32)
    bins = np.zeros((grid, 256), np.uint32)
    pre = "mul.wide.u32 %rd7, %r3, 1024; add.s64 %rd2, %rd2, %rd7;"
    launch(kernel(LOAD + HISTS["and255"][0], pre), "h", (grid,), (nt, 1, 1), d, bins, d, n)
    owner = (np.arange(n) % (grid * nt)) // nt
    for b in range(grid):
        assert (bins[b] == np.bincount(d[owner == b] & 255, minlength=256)).all()


def test_the_histogram_gets_a_dense_region_one_overlap_test_and_prefetches() -> None:
    text = str(translate(kernel(LOAD + HISTS["and255"][0])).ir_module)
    assert "wooly_red_claim" in text and "fused_unguarded" in text and "llvm.prefetch" in text
    # the usual path and the guarded copy of the loop test the load against the buffered range; the unguarded not
    assert len(re.findall(r'^"?red_guard_flush[.\d]*"?:', text, re.M)) == 2
    # a sparse reduction in the loop may widen the buffered range at any element: no unguarded copy
    text = str(translate(kernel(LOAD + HISTS["sparse"][0])).ir_module)
    assert "fused_unguarded" not in text and "wooly_red_claim" not in text


# counters bins[i & 3] += 1, then x = data[i] and out[i] = x (LOAD_AFTER), or data[i] = 7 (STORE_AFTER)
COUNT4 = "and.b32 %r8, %r5, 3;" + IDX + "red.global.add.u32 [%rd6], 1;"
LOAD_AFTER = LOAD + "add.s64 %rd7, %rd3, %rd4; st.global.u32 [%rd7], %r7;"
STORE_AFTER = "mul.wide.u32 %rd4, %r5, 4; add.s64 %rd5, %rd1, %rd4; st.global.u32 [%rd5], 7;"


@pytest.mark.parametrize("k", [4, 4096])  # dense counters; sparse ones (more than DENSE_SLOTS)
def test_a_load_that_overlaps_the_counters_sees_its_own_thread_s_add(k: int) -> None:
    """data is bins: the one-per-block overlap test fails (dense), or cannot be used because a sparse reduction may
    widen the buffered range during the loop; the per-access tests flush."""
    n, nt = 4096, 64
    bins = np.zeros(n, np.uint32)
    out = np.zeros(n, np.uint32)
    launch(kernel(COUNT4.replace(", 3;", f", {k - 1};") + LOAD_AFTER), "h", (1,), (nt, 1, 1), bins, bins, out, n)
    assert (bins[:k] == n // k).all() and (bins[k:] == 0).all()
    assert (out[:k] >= 1).all() and (out[k:] == 0).all()  # thread t < k added to bins[t] before it read bins[t]


def test_a_store_that_overlaps_the_counters_comes_after_its_own_thread_s_add() -> None:
    """Thread t < 4 adds to bins[t], then stores 7 there: the add is ordered before the store, so at most the other
    n/4 - 1 adds to bins[t] can land on top of the 7."""
    n, nt = 4096, 64
    bins = np.zeros(n, np.uint32)
    launch(kernel(COUNT4 + STORE_AFTER), "h", (1,), (nt, 1, 1), bins, bins, bins, n)
    assert (bins[4:] == 7).all()
    assert ((bins[:4] >= 7) & (bins[:4] <= 7 + n // 4 - 1)).all(), bins[:4]


def test_loads_apart_from_the_counters_give_the_same_results() -> None:
    n = 50_000
    d = np.arange(n, dtype=np.uint32) * 3
    bins = np.zeros(4, np.uint32)
    out = np.zeros(n, np.uint32)
    launch(kernel(COUNT4 + LOAD_AFTER), "h", (6,), (64, 1, 1), d, bins, out, n)
    assert (bins == n // 4).all() and (out == d).all()


def _checked(
    body: str, grid: int, nt: int, d: np.ndarray, bins: np.ndarray, n: int, ranges: list[tuple[int, int]]
) -> None:
    from jit import compile_module

    k = compile_module(kernel(LOAD + body), bounds_check=True).get_kernel("h")
    k.launch((grid,), (nt, 1, 1), 0, pack(k, d, bins, d, n), allowed_ranges=ranges)


def test_fused_loops_run_under_bounds_checks() -> None:
    """NOTE [fused loops under bounds checks]: gpud compiles with bounds checks; the fused path is used there too."""
    assert "fused_chunk" in str(translate(kernel(LOAD + HISTS["and255"][0]), bounds_check=True).ir_module)
    d = np.random.default_rng(8).integers(0, 1 << 24, 60_001, dtype=np.uint32)
    for name in ("and255", "sparse"):
        body, dt, size, want = HISTS[name]
        bins = np.zeros(size, dt)
        _checked(body, 7, 64, d, bins, d.size, [(d.ctypes.data, d.nbytes), (bins.ctypes.data, bins.nbytes)])
        assert (bins == want(d)).all(), name


def test_an_out_of_bounds_load_in_a_fused_loop_is_an_illegal_address() -> None:
    from jit.errors import JitError

    d = np.random.default_rng(8).integers(0, 1 << 24, 10_000, dtype=np.uint32)
    bins = np.zeros(256, np.uint32)
    allowed = 9_000  # the loop reads d[0..10000), only the first 9000 elements are the kernel's
    with pytest.raises(JitError) as ei:
        _checked(
            HISTS["and255"][0], 7, 64, d, bins, d.size, [(d.ctypes.data, 4 * allowed), (bins.ctypes.data, bins.nbytes)]
        )
    assert ei.value.code == 700
    bad = int(ei.value.message.split("illegal address 0x")[1].split()[0], 16)
    assert d.ctypes.data + 4 * allowed <= bad < d.ctypes.data + d.nbytes
