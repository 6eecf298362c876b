"""Yield points (jit/passes/yield_points.py): which loops get them (NOTE [interleaved strided loops], NOTE [waiting
threads yield]), that threads really interleave there, and that barriers, warp collectives, combined atomics and
bounds checks still behave exactly as without them."""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np
import pytest

from jit import GlobalRange, JitError, compile_module
from jit.passes.sync_points import YIELD
from jit.passes.yield_points import LINES_PER_YIELD
from jit.pipeline import front_end
from jit.ptx import ast as A
from tests.unit.jit.helpers import HEADER, launch, module, pack

# acc += x[i] for i = ctaid*ntid + tid, stepping by STRIDE; out[global id] = acc
STRIDED = (
    HEADER
    + """
.visible .entry gs(.param .u64 x, .param .u64 out, .param .u32 n)
{
  .reg .b32 %r<12>; .reg .b64 %rd<12>; .reg .pred %p<4>;
  mov.u32 %r0, %tid.x; mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %nctaid.x;
  mad.lo.u32 %r4, %r1, %r2, %r0;
  STRIDE
  ld.param.u32 %r6, [n]; ld.param.u64 %rd1, [x]; ld.param.u64 %rd2, [out];
  mov.u32 %r7, 0;
  setp.ge.u32 %p1, %r4, %r6; @%p1 bra DONE;
LOOP:
  mul.wide.u32 %rd3, %r4, 4; add.s64 %rd4, %rd1, %rd3; ld.global.u32 %r8, [%rd4];
  add.u32 %r7, %r7, %r8;
  BODY
  add.u32 %r4, %r4, %r5;
  setp.lt.u32 %p2, %r4, %r6; @%p2 bra LOOP;
DONE:
  mad.lo.u32 %r9, %r1, %r2, %r0; mul.wide.u32 %rd5, %r9, 4; add.s64 %rd6, %rd2, %rd5; st.global.u32 [%rd6], %r7;
  ret;
}
"""
)
GRID = "mul.lo.u32 %r5, %r2, %r3;"


def strided(stride: str = GRID, body: str = "") -> str:
    return STRIDED.replace("STRIDE", stride).replace("BODY", body)


def yields(ptx: str) -> list[int]:
    """K of every yield point the front end put into the kernel (what its counter is reset to after a yield)."""
    fn = [f for f in front_end(ptx).functions if f.is_entry][0]
    body = fn.body or []
    ks = []
    brackets = [fn.lockstep.enter, fn.lockstep.leave] if fn.lockstep else []  # NOTE [lockstep grid-stride loops]
    for i, st in enumerate(body):
        if isinstance(st, A.Instr) and st.opcode == YIELD and not any(st is y for y in brackets):
            setp, reset = body[i - 2], body[i + 1]
            if isinstance(setp, A.Instr) and setp.opcode == "setp" and "wooly" in str(setp.operands[0]):
                assert isinstance(reset, A.Instr) and reset.opcode == "mov" and reset.operands[0] == setp.operands[1]
                ks.append(int(reset.operands[1].value))  # type: ignore[union-attr]
            else:  # a wait loop's yield on its back edge: no counter
                nxt = body[i + 1]
                assert isinstance(nxt, A.Instr) and nxt.opcode == "bra" and nxt.pred is None
                ks.append(0)
    kinds = [sp.kind for sp in fn.sync_points.values()]
    assert kinds.count("yield") == len(ks) + len(brackets)
    return ks


@pytest.mark.parametrize(
    "stride,body,expect",
    [
        (GRID, "", [LINES_PER_YIELD]),  # i += ntid*nctaid, one global load per iteration
        ("mov.u32 %r10, %nctaid.x; shl.b32 %r5, %r10, 8;", "", [LINES_PER_YIELD]),  # derived through other ops
        (
            GRID,
            "ld.global.u32 %r10, [%rd4+4]; ld.global.u32 %r11, [%rd4+8]; st.global.u32 [%rd4], %r7;",
            [LINES_PER_YIELD // 4],
        ),  # four global accesses per iteration
        ("mov.u32 %r5, %r2;", "", []),  # block-stride: lines stay in L2, no yield
        ("mov.u32 %r5, 1;", "", []),  # sequential walk per thread
        (GRID, "bar.sync 0;", []),  # a barrier already keeps the block in lockstep
    ],
)
def test_which_loops_yield(stride: str, body: str, expect: list[int]) -> None:
    assert yields(strided(stride, body)) == expect


def test_no_global_memory_no_yield() -> None:
    ptx = strided().replace("ld.global.u32 %r8, [%rd4];", "mov.u32 %r8, %r4;")
    assert yields(ptx) == []


def test_unrolled_chain_yields() -> None:
    """numba/NVVM unroll grid-stride loops: i1 = i + s; i2 = i1 + s; i = i2 + s. The chain is followed."""
    ptx = strided(body="ld.global.u32 %r10, [%rd4+4];").replace(
        "add.u32 %r4, %r4, %r5;", "add.u32 %r11, %r4, %r5; mov.u32 %r9, %r11; add.u32 %r4, %r9, %r5;"
    )
    assert yields(ptx) == [LINES_PER_YIELD // 2]


@pytest.mark.parametrize("stride", [GRID, "mov.u32 %r5, %r2;"])
def test_results_unchanged(stride: str) -> None:
    rng = np.random.default_rng(1)
    n = 3 * 64 * 29 + 17  # uneven trip counts; some threads run one iteration more than others
    x = rng.integers(0, 1000, n, dtype=np.uint32)
    out = np.zeros(3 * 64, np.uint32)
    launch(strided(stride), "gs", (3,), (64,), x, out, n)
    step = 3 * 64 if stride == GRID else 64
    assert out.tolist() == [int(x[g:n:step].sum(dtype=np.uint32)) for g in range(3 * 64)]


def test_threads_interleave() -> None:
    """Each iteration takes a ticket from a global counter: with yields, thread 1 starts before thread 0 has walked
    its whole range, and no thread runs more than K iterations in a row."""
    ptx = strided(body="ld.param.u64 %rd7, [out]; atom.global.add.u32 %r10, [%rd7+256], 1; st.global.u32 [%rd4], %r10;")
    k = yields(ptx)[0]
    n = 64 * 40
    x = np.zeros(n, np.uint32)  # becomes the ticket of each element
    out = np.zeros(65, np.uint32)
    launch(ptx, "gs", (1,), (64,), x, out, n)
    tickets = x.reshape(40, 64)  # [iteration, thread]
    assert sorted(x.tolist()) == list(range(n))
    assert tickets[0, 1] < tickets[39, 0]
    for t in range(64):
        runs = np.diff(tickets[:, t])
        longest = max(len(s) for s in "".join("1" if d == 1 else "0" for d in runs).split("0")) + 1
        assert longest <= k
    # thread 0 runs its first K - 1 iterations before any other thread (the counter starts at K and is checked at
    # the top of every iteration), then yields
    assert (np.diff(tickets[: k - 1, 0]) == 1).all() and tickets[k - 1, 0] != tickets[k - 2, 0] + 1


def test_loop_shorter_than_k_never_yields() -> None:
    """Threads that walk K - 1 iterations run them in one go each (ticket order is thread order)."""
    ptx = strided(body="ld.param.u64 %rd7, [out]; atom.global.add.u32 %r10, [%rd7+256], 1; st.global.u32 [%rd4], %r10;")
    k = yields(ptx)[0]
    n = 64 * (k - 1)
    x = np.zeros(n, np.uint32)
    out = np.zeros(65, np.uint32)
    launch(ptx, "gs", (1,), (64,), x, out, n)
    assert x.reshape(k - 1, 64).T.ravel().tolist() == list(range(n))


def test_barrier_waits_for_yielding_threads() -> None:
    """After a grid-stride loop, thread 0 sums every thread's partial from shared memory behind a barrier. Were the
    barrier released while threads still sat at yield points, it would read partials not yet written."""
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 x, .param .u64 out, .param .u32 n)
{
  .reg .b32 %r<16>; .reg .b64 %rd<12>; .reg .pred %p<4>;
  .shared .align 4 .u32 part[128];
  mov.u32 %r0, %tid.x; mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %nctaid.x;
  mad.lo.u32 %r4, %r1, %r2, %r0; mul.lo.u32 %r5, %r2, %r3;
  ld.param.u32 %r6, [n]; ld.param.u64 %rd1, [x];
  mov.u32 %r7, 0;
  setp.ge.u32 %p1, %r4, %r6; @%p1 bra STORE;
LOOP:
  mul.wide.u32 %rd3, %r4, 4; add.s64 %rd4, %rd1, %rd3; ld.global.u32 %r8, [%rd4];
  add.u32 %r7, %r7, %r8; add.u32 %r4, %r4, %r5;
  setp.lt.u32 %p2, %r4, %r6; @%p2 bra LOOP;
STORE:
  mul.wide.u32 %rd5, %r0, 4; mov.u64 %rd6, part; add.s64 %rd6, %rd6, %rd5; st.shared.u32 [%rd6], %r7;
  bar.sync 0;
  setp.ne.u32 %p3, %r0, 0; @%p3 bra DONE;
  mov.u32 %r9, 0; mov.u32 %r10, 0;
SUM:
  mul.wide.u32 %rd7, %r10, 4; mov.u64 %rd8, part; add.s64 %rd8, %rd8, %rd7; ld.shared.u32 %r11, [%rd8];
  add.u32 %r9, %r9, %r11; add.u32 %r10, %r10, 1;
  setp.lt.u32 %p2, %r10, %r2; @%p2 bra SUM;
  ld.param.u64 %rd9, [out]; mul.wide.u32 %rd10, %r1, 4; add.s64 %rd9, %rd9, %rd10; st.global.u32 [%rd9], %r9;
DONE:
  ret;
}
"""
    )
    assert yields(ptx) == [LINES_PER_YIELD]
    rng = np.random.default_rng(2)
    n = 4 * 128 * 33 + 77
    x = rng.integers(0, 1 << 20, n, dtype=np.uint32)
    out = np.zeros(4, np.uint32)
    launch(ptx, "k", (4,), (128,), x, out, n)
    owner = (np.arange(n) % (4 * 128)) // 128  # block whose threads read element i
    assert out.tolist() == [int(x[owner == b].sum(dtype=np.uint32)) for b in range(4)]


def test_bounds_checked() -> None:
    """A grid-stride loop under bounds checks: exact results within the allocation, a launch error past it."""
    m = compile_module(strided(), bounds_check=True)
    k = m.get_kernel("gs")
    n = 2 * 32 * 20
    x = np.arange(n, dtype=np.uint32)
    out = np.zeros(64, np.uint32)
    ok = [GlobalRange(x.ctypes.data, x.nbytes), GlobalRange(out.ctypes.data, out.nbytes)]
    k.launch((2,), (32,), 0, pack(k, x, out, n), allowed_ranges=ok)
    assert out.tolist() == [int(x[g::64].sum()) for g in range(64)]
    short = [GlobalRange(x.ctypes.data, x.nbytes - 4 * 64 * 5), ok[1]]  # the last five strides are not granted
    with pytest.raises(JitError) as ei:
        k.launch((2,), (32,), 0, pack(k, x, out, n), allowed_ranges=short)
    assert ei.value.code == 700


cuda = pytest.importorskip("numba.cuda")
from numba import float32, int32, uint32, void  # noqa: E402

from tests.unit.jit.test_numba import compile_numba, run  # noqa: E402


def _reduce(x: Any, out: Any) -> None:  # a warp shuffle tree after a range-style grid-stride loop
    acc = float32(0.0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        acc += x[i]
    off = 16
    while off > 0:
        acc += cuda.shfl_xor_sync(0xFFFFFFFF, acc, off)
        off //= 2
    if cuda.laneid == 0:
        cuda.atomic.add(out, cuda.blockIdx.x, acc)


def _hist(data: Any, bins: Any) -> None:  # combined global atomics inside the loop
    i = cuda.grid(1)
    while i < data.size:
        cuda.atomic.add(bins, data[i] & 255, 1)
        i += cuda.gridsize(1)


def test_numba_reduction_with_shuffles() -> None:
    ptx = cuda.compile_ptx(_reduce, void(float32[::1], float32[::1]), cc=(8, 0))[0]
    assert yields(ptx)
    m = module(ptx)
    rng = np.random.default_rng(3)
    n = 16 * 256 * 21 + 1000  # small integers: float sums are exact
    x = rng.integers(0, 64, n).astype(np.float32)
    out = np.zeros(16, np.float32)
    run(m, (16,), (256,), x, out)
    owner = (np.arange(n) % (16 * 256)) // 256
    assert out.tolist() == [float(x[owner == b].sum()) for b in range(16)]


def test_numba_histogram() -> None:
    ptx = cuda.compile_ptx(_hist, void(uint32[::1], uint32[::1]), cc=(8, 0))[0]
    assert yields(ptx)
    m = module(ptx)
    rng = np.random.default_rng(4)
    d = rng.integers(0, 1 << 30, 8 * 128 * 50 + 3, dtype=np.uint32)
    bins = np.zeros(256, np.uint32)
    run(m, (8,), (128,), d, bins)
    assert (bins == np.bincount(d & 255, minlength=256)).all()


def test_numba_early_return_in_loop() -> None:
    """Threads leave the loop (and the kernel) at different iterations; the rest still meet at the barrier."""

    def k(x: Any, out: Any) -> None:
        sm = cuda.shared.array(64, int32)
        t = cuda.threadIdx.x
        sm[t] = 0
        cuda.syncthreads()
        i = cuda.grid(1)
        c = 0
        while i < x.size:
            if x[i] < 0:
                return
            c += x[i]
            i += cuda.gridsize(1)
        sm[t] = c
        cuda.syncthreads()
        if t == 0:
            s = 0
            for j in range(64):
                s += sm[j]
            out[cuda.blockIdx.x] = s

    m = compile_numba(k, void(int32[::1], int32[::1]))
    rng = np.random.default_rng(5)
    n = 2 * 64 * 30
    x = rng.integers(0, 100, n).astype(np.int32)
    x[rng.choice(n, 40, replace=False)] = -1
    out = np.zeros(2, np.int32)
    run(m, (2,), (64,), x, out)
    want = []
    for b in range(2):
        s = 0
        for t in range(64):
            vals = x[b * 64 + t :: 128]
            if not (vals < 0).any():
                s += int(vals.sum())
        want.append(s)
    assert out.tolist() == want


@pytest.mark.skipif(shutil.which("ld.lld") is None, reason="ld.lld not installed (Debian package lld)")
def test_amdgpu_ignores_yields() -> None:
    m = compile_module(strided(), target="gfx90a")
    assert m.kernel_names == ["gs"] and m.code_object[:4] == b"\x7fELF"


# ---------------------------------------------------------------- NOTE [waiting threads yield]
# Threads take turns through a shared counter in reverse order: thread t waits until turn == N-1-t. Run one after
# another without yielding, thread 0 would wait forever for the last thread.
TURNS = (
    HEADER
    + """
.visible .entry turns(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<6>; .reg .pred %p<4>;
  .shared .align 4 .u32 turn;
  .shared .align 4 .u32 order;
  mov.u32 %r0, %tid.x; mov.u32 %r1, %ntid.x;
  setp.ne.u32 %p1, %r0, 0; @%p1 bra INIT_DONE;
  st.shared.u32 [turn], 0; st.shared.u32 [order], 0;
INIT_DONE:
  bar.sync 0;
  sub.u32 %r2, %r1, 1; sub.u32 %r2, %r2, %r0;
WAIT:
  LOAD
  setp.ne.u32 %p2, %r3, %r2; @%p2 bra WAIT;
  ld.shared.u32 %r4, [order]; add.u32 %r5, %r4, 1; st.shared.u32 [order], %r5;
  add.u32 %r6, %r3, 1; st.volatile.shared.u32 [turn], %r6;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r0, 4; add.s64 %rd1, %rd1, %rd2; st.global.u32 [%rd1], %r4;
  ret;
}
"""
)


@pytest.mark.parametrize(
    "load",
    [
        "ld.volatile.shared.u32 %r3, [turn];",
        "ld.acquire.cta.shared.u32 %r3, [turn];",
        "atom.shared.or.b32 %r3, [turn], 0;",
    ],
)
def test_waiting_threads_yield(load: str) -> None:
    ptx = TURNS.replace("LOAD", load)
    assert yields(ptx) == [0]
    out = np.zeros(64, np.uint32)
    launch(ptx, "turns", (2,), (64,), out)
    assert out.tolist() == list(range(63, -1, -1))  # thread 63 went first, thread 0 last


def test_no_yield_in_loops_that_do_not_wait() -> None:
    """A volatile load inside a counted loop does not make it a wait loop: the exit does not depend on it."""
    ptx = strided("mov.u32 %r5, 1;", "ld.volatile.global.u32 %r10, [%rd4];")
    assert yields(ptx) == []
    backoff = TURNS.replace("LOAD", "ld.shared.u32 %r3, [turn]; nanosleep.u32 100;")
    assert yields(backoff) == [0]
