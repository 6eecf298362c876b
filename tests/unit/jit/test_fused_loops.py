"""Block-fused grid-stride loops (NOTE [fused grid-stride loops], jit/passes/fused_loops.py, jit/emit/cpu/fused.py):
which kernels are recognised, and that every launch (fused or sent to the usual path by the run-time probe) gives
what the sequential loops of the threads give."""

from __future__ import annotations

import numpy as np
import pytest

from jit.passes import fused_loops
from jit.pipeline import front_end, translate
from tests.unit.jit.helpers import HEADER, launch

_W = {"s32": 32, "u32": 32, "s64": 64, "u64": 64}

# every iteration: cnt[i & 1023] += 1 (relaxed red) and last[g] = i, g = the thread's global x index (read in L)
TEMPLATE = (
    HEADER
    + """
.visible .entry k(.param .u64 cnt, .param .u64 last, .param .TY n, .param .TY stride)
{
  .reg .pred %p<3>; .reg .b32 %r<20>; .reg .b64 %rd<20>; .reg .bW %i, %n, %s, %t;
  ld.param.u64 %rd1, [cnt]; ld.param.u64 %rd2, [last]; ld.param.TY %n, [n]; ld.param.TY %s, [stride];
  cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  cvt.TY.u32 %t, %r4;
  START
  GUARD
  PRE
LOOP:
  cvt.u32.TY %r5, %i;
  and.b32 %r6, %r5, 1023; mul.wide.u32 %rd3, %r6, 4; add.s64 %rd4, %rd1, %rd3;
  red.global.add.u32 [%rd4], 1;
  mov.u32 %r7, %tid.x; mov.u32 %r8, %ctaid.x; mov.u32 %r9, %ntid.x;
  mad.lo.s32 %r11, %r8, %r9, %r7;
  mul.wide.u32 %rd5, %r11, 8; add.s64 %rd6, %rd2, %rd5;
  cvt.s64.TY %rd7, %i; st.global.s64 [%rd6], %rd7;
  BODY
  add.TY %i, %i, %s;
  TEST
  @%p2 bra LOOP;
DONE:
  AFTER
  ret;
}
"""
)
STARTS = {"affine": "mov.bW %i, %t;", "double": "add.TY %i, %t, %t;", "shift": "sub.TY %i, %t, 5;"}
TESTS = {"lt": "setp.lt.TY %p2, %i, %n;", "le": "setp.le.TY %p2, %i, %n;", "gt": "setp.gt.TY %p2, %n, %i;"}
GUARDS = {
    "lt": "setp.ge.TY %p1, %i, %n; @%p1 bra DONE;",
    "le": "setp.gt.TY %p1, %i, %n; @%p1 bra DONE;",
    "gt": "setp.le.TY %p1, %n, %i; @%p1 bra DONE;",
}


def kernel(
    ty: str = "s32",
    test: str = "lt",
    start: str = "affine",
    guard: bool = True,
    body: str = "",
    after: str = "",
    pre: str = "",
) -> str:
    w = str(_W[ty])
    text = (
        TEMPLATE.replace("START", STARTS[start])
        .replace("PRE", pre)
        .replace("GUARD", GUARDS[test] if guard else "")
        .replace("TEST", TESTS[test])
        .replace("BODY", body)
        .replace("AFTER", after)
    )
    return text.replace("TY", ty).replace("bW", "b" + w)


def model(
    ty: str, test: str, start: str, guard: bool, n: int, stride: int, grid: int, block: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Each thread's loop run on its own, with the register width's wrap-around."""
    w, signed = _W[ty], ty[0] == "s"

    def wrap(v: int) -> int:
        v %= 1 << w
        return v - (1 << w) if signed and v >= 1 << (w - 1) else v

    def cont(i: int) -> bool:
        return i < n if test in ("lt", "gt") else i <= n

    cnt = np.zeros(1024, np.uint32)
    last = np.full(grid * block[0], -1, np.int64)
    for b in range(grid):
        for _ty in range(block[1]):
            for tx in range(block[0]):
                g = b * block[0] + tx
                t = wrap(g)
                i = wrap({"affine": t, "double": 2 * t, "shift": t - 5}[start])
                if guard and not cont(i):
                    continue
                while True:
                    cnt[i & 1023] += 1
                    last[g] = i
                    i = wrap(i + stride)
                    if not cont(i):
                        break
    return cnt, last


def run(ptx: str, n: int, stride: int, grid: int, block: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    cnt = np.zeros(1024, np.uint32)
    last = np.full(grid * block[0], -1, np.int64)
    launch(ptx, "k", (grid,), (*block, 1), cnt, last, n, stride)
    return cnt, last


def test_the_template_and_numbas_histogram_are_recognised() -> None:
    p = [f for f in front_end(kernel()).functions if f.is_entry][0].fused
    assert isinstance(p, fused_loops.FusedLoop)
    assert p is not None and p.iv == "%i" and p.width == 32 and p.signed and not p.inclusive
    assert sorted(p.invariants) == ["%n", "%rd1", "%rd2", "%s"] and p.exits == [("%p1", False)]
    assert "fused_chunk" in str(translate(kernel()).ir_module)
    pytest.importorskip("numba.cuda")
    from numba import cuda, uint32, void

    from benchmarks.jit import k_hist

    ptx = cuda.compile_ptx(k_hist, void(uint32[::1], uint32[::1]), cc=(8, 0))[0]
    assert [f for f in front_end(ptx).functions if f.is_entry][0].fused is not None


@pytest.mark.parametrize(
    "why, kw",
    [
        ("a value carried between iterations", {"body": "add.s32 %r12, %r12, 1;"}),
        ("a store before the loop", {"pre": "st.global.u32 [%rd1], %r4;"}),
        ("a global load before the loop", {"pre": "ld.global.u32 %r13, [%rd1];"}),
        ("a barrier in the loop", {"body": "bar.sync 0;"}),
        ("a warp collective in the loop", {"body": "shfl.sync.bfly.b32 %r14, %r5, 1, 31, -1;"}),
        ("an effect after the loop", {"after": "st.global.u32 [%rd1], %r4;"}),
        ("a branch in the loop", {"body": "@%p1 bra DONE;"}),
        ("a second write of the index", {"body": "add.s32 %i, %i, 1;"}),
        ("a bound written in the loop", {"body": "add.s32 %n, %n, 0;"}),
    ],
)
def test_other_shapes_are_not_recognised(why: str, kw: dict[str, str]) -> None:
    fn = [f for f in front_end(kernel(**kw)).functions if f.is_entry][0]
    assert fn.fused is None, why


def test_local_memory_is_not_recognised() -> None:
    ptx = kernel().replace(".reg .pred", ".local .align 4 .b8 buf[16];\n  .reg .pred")
    assert [f for f in front_end(ptx).functions if f.is_entry][0].fused is None


CASES = [
    # (type, test, start, guard, n, stride, grid, block): fused unless noted
    ("s32", "lt", "affine", True, 3001, 256, 4, (64, 1)),
    ("s32", "lt", "affine", True, 3001, 100, 4, (64, 1)),  # stride < ntid: the chunks of a block overlap
    ("s32", "lt", "affine", True, 3001, 1000, 4, (64, 1)),  # the chunks of a block do not meet
    ("s32", "lt", "affine", True, 150, 256, 4, (64, 1)),  # some threads and blocks never enter
    ("s32", "lt", "affine", True, 0, 256, 4, (64, 1)),
    ("u32", "le", "affine", True, 2999, 256, 4, (64, 1)),
    ("s64", "gt", "affine", True, 3001, 256, 4, (64, 1)),
    ("u64", "lt", "affine", True, 3001, 77, 3, (96, 1)),
    ("s32", "lt", "double", True, 3001, 256, 4, (64, 1)),  # i = 2g: not c + t, the probe says no
    ("s32", "lt", "shift", True, 3001, 256, 4, (64, 1)),  # block 0 starts at -5: the range guard says no
    ("s32", "lt", "shift", True, 3, 256, 4, (64, 1)),  # ... and its last i is negative
    ("s32", "lt", "affine", False, 2, 256, 4, (1, 1)),  # do-while, one thread a block: its own check
    ("s32", "lt", "affine", False, 150, 256, 4, (64, 1)),  # do-while: threads past n still run once
    ("s32", "lt", "affine", True, 3001, 256, 4, (32, 2)),  # 2-D block
    ("s32", "lt", "affine", True, 3001, 0x7FFFFF9C, 4, (64, 1)),  # i + stride wraps below n: guard says no
    ("u64", "lt", "affine", True, 3001, -256, 3, (96, 1)),  # the same with a 64-bit step
    ("u32", "lt", "affine", True, 3001, -256, 4, (64, 1)),  # huge unsigned step: i wraps, guard says no
]


@pytest.mark.parametrize("ty, test, start, guard, n, stride, grid, block", CASES)
def test_results_match_the_threads_run_one_by_one(
    ty: str, test: str, start: str, guard: bool, n: int, stride: int, grid: int, block: tuple[int, int]
) -> None:
    ptx = kernel(ty, test, start, guard)
    w = _W[ty]
    s = stride % (1 << w)
    if ty[0] == "s" and s >= 1 << (w - 1):
        s -= 1 << w
    cnt, last = run(ptx, n, s, grid, block)
    want_cnt, want_last = model(ty, test, start, guard, n, s, grid, block)
    assert (cnt == want_cnt).all()
    assert (last == want_last).all()


def test_a_thread_that_does_not_enter_leaves_no_values_behind() -> None:
    """%r15 is 0 in every thread that enters the loop and its tid in those that do not; the loop adds it to cnt[0].
    The probe runs P for every thread, the last one (which does not enter here) included."""
    ptx = kernel(pre="selp.b32 %r15, %r1, 0, %p1;", body="red.global.add.u32 [%rd1], %r15;")
    assert [f for f in front_end(ptx).functions if f.is_entry][0].fused is not None
    cnt, last = run(ptx, 150, 256, 4, (64, 1))
    want_cnt, want_last = model("s32", "lt", "affine", True, 150, 256, 4, (64, 1))
    assert (cnt == want_cnt).all() and (last == want_last).all()


def test_numbas_histogram_keeps_its_result() -> None:
    """(numba's loops without an atomic come unrolled by NVVM, trip count computed up front: not this shape.)"""
    pytest.importorskip("numba.cuda")
    from numba import cuda, uint32, void

    from benchmarks.jit import k_hist, numba_params
    from tests.unit.jit.helpers import module

    ptx = cuda.compile_ptx(k_hist, void(uint32[::1], uint32[::1]), cc=(8, 0))[0]
    k = module(ptx).get_kernel(module(ptx).kernel_names[0])
    d = np.random.default_rng(3).integers(0, 1 << 30, 200_001, dtype=np.uint32)
    for grid, block, ny in (((9,), (96,), 1), ((5,), (32, 3), 3)):  # fused; a 2-D block takes the usual path
        bins = np.zeros(256, np.uint32)
        k.launch(grid, block, 0, numba_params(k, d, bins))
        assert (bins == ny * np.bincount(d & 255, minlength=256)).all()  # (the threads of a row do the same)
