"""Lockstep grid-stride loops (NOTE [lockstep grid-stride loops], jit/passes/lockstep_loops.py, and NOTE [lockstep
block groups], jit/emit/cpu/lockstep_run.py): which loops are recognised, and that every launch, run in lockstep, from
a group's stash or sent back to the usual path by the probe, gives bit for bit what each thread's own sequential
loop gives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from jit import GlobalRange, JitError, compile_module
from jit.pipeline import front_end
from tests.unit.jit.helpers import HEADER
from tests.unit.jit.test_numba import numba_args

cuda = pytest.importorskip("numba.cuda")
from numba import float32, float64, int32, int64, void  # noqa: E402


def k_sum(x, out):  # type: ignore[no-untyped-def]
    """Each thread's grid-stride sum, then a barrier (the kernel runs under the scheduler) and one store per thread."""
    acc = float32(0.0)
    i = cuda.grid(1)
    while i < x.size:
        acc += x[i]
        i += cuda.gridsize(1)
    cuda.syncthreads()
    out[cuda.grid(1)] = acc


def k_two(x, s, m, cnt):  # type: ignore[no-untyped-def]
    """Three carried registers of three types: a float64 sum, an int max, a count."""
    acc = float64(0.0)
    best = int32(-1)
    c = int64(0)
    i = cuda.grid(1)
    while i < x.size:
        v = x[i]
        acc += v * 0.5
        if v > best:
            best = v
        c += 1
        i += cuda.gridsize(1)
    cuda.syncthreads()
    g = cuda.grid(1)
    s[g] = acc
    m[g] = best
    cnt[g] = c


def k_uneven(x, s, m, cnt):  # type: ignore[no-untyped-def]
    """k_two where odd threads stop two elements early: the trip counts of a block are not those of one bound."""
    acc = float64(0.0)
    best = int32(-1)
    c = int64(0)
    i = cuda.grid(1)
    end = x.size - 2 * (cuda.threadIdx.x & 1)
    while i < end:
        v = x[i]
        acc += v * 0.5
        if v > best:
            best = v
        c += 1
        i += cuda.gridsize(1)
    cuda.syncthreads()
    g = cuda.grid(1)
    s[g] = acc
    m[g] = best
    cnt[g] = c


def k_tid(x, out):  # type: ignore[no-untyped-def]
    """The loop reads tid.x itself: lockstep but never grouped."""
    acc = float32(0.0)
    i = cuda.grid(1)
    while i < x.size:
        acc += x[i] + float32(cuda.threadIdx.x)
        i += cuda.gridsize(1)
    cuda.syncthreads()
    out[cuda.grid(1)] = acc


def k_skip(x, out, skip):  # type: ignore[no-untyped-def]
    """Block `skip` leaves before its loop: a group's lanes for it are computed but never used."""
    if cuda.blockIdx.x == skip:
        return
    acc = float32(0.0)
    i = cuda.grid(1)
    while i < x.size:
        acc += x[i]
        i += cuda.gridsize(1)
    cuda.syncthreads()
    out[cuda.grid(1)] = acc


def k_prestore(x, out):  # type: ignore[no-untyped-def]
    """Each thread doubles its first element, then sums its slice (which starts with that element): another block's
    loop must not run before that block's store (no groups)."""
    g = cuda.grid(1)
    if g < x.size:
        x[g] = x[g] * float32(2.0)
    acc = float32(0.0)
    i = g
    while i < x.size:
        acc += x[i]
        i += cuda.gridsize(1)
    cuda.syncthreads()
    out[g] = acc


def k_local(x, out):  # type: ignore[no-untyped-def]
    """A .local array alive across the loop (the probe resumes threads whose registers point into it)."""
    tmp = cuda.local.array(8, float32)
    for j in range(8):
        tmp[j] = float32(j)
    acc = float32(0.0)
    i = cuda.grid(1)
    while i < x.size:
        acc += x[i]
        i += cuda.gridsize(1)
    cuda.syncthreads()
    out[cuda.grid(1)] = acc + tmp[(cuda.threadIdx.x + out.size) % 8]


def k_double(x, out):  # type: ignore[no-untyped-def]
    """Threads start at 2*grid: the probe finds i != c + t and every block runs the usual way."""
    acc = float32(0.0)
    i = 2 * cuda.grid(1)
    while i < x.size:
        acc += x[i]
        i += cuda.gridsize(1)
    cuda.syncthreads()
    out[cuda.grid(1)] = acc


def ptx_of(fn: Any, sig: Any) -> str:
    return cuda.compile_ptx(fn, sig, cc=(8, 0))[0]


def run(
    ptx: str,
    grid: int,
    block: int,
    *args: Any,
    bounds: list[np.ndarray] | None = None,
    checked: bool = False,
    workers: int | None = None,
) -> Any:
    """Launch; with ``workers`` = 1 a worker claims grid // 16 blocks at a time, which its lockstep loops run as
    groups (NOTE [lockstep block groups])."""
    m = compile_module(ptx, bounds_check=checked, tier="optimized")
    k = m.get_kernel(m.kernel_names[0])
    buf = bytearray(k.param_buffer_size)
    for p, v in zip(k.params, numba_args(*args), strict=False):
        buf[p.offset : p.offset + p.size] = int(v).to_bytes(p.size, "little", signed=int(v) < 0)
    kw = {"allowed_ranges": [GlobalRange(a.ctypes.data, a.nbytes) for a in bounds or []]} if checked else {}
    return k.launch((grid,), (block,), 0, bytes(buf), workers=workers, **kw)


def strided(x: np.ndarray, threads: int, start: np.ndarray | None = None) -> list[np.ndarray]:
    """x[g], x[g + S], ... for each thread g, as rows k = 0, 1, ... (masked past the end)."""
    start = np.arange(threads) if start is None else start
    rows = []
    k = 0
    while True:
        idx = start + k * threads
        ok = idx < x.size
        if not ok.any():
            return rows
        rows.append((np.where(ok, x[np.minimum(idx, x.size - 1)], 0), ok))
        k += 1


def seq_sum(x: np.ndarray, threads: int, start: np.ndarray | None = None, shift: np.ndarray | None = None) -> Any:
    """Each thread's float32 sum in its own order: the expected result, bit for bit."""
    acc = np.zeros(threads, np.float32)
    for v, ok in strided(x, threads, start):
        v = (v.astype(np.float32) + (np.float32(0) if shift is None else shift)).astype(np.float32)
        acc = np.where(ok, acc + v, acc).astype(np.float32)
    return acc


# -- which loops are recognised ------------------------------------------------------------------------------


def test_numba_reduction_is_the_unrolled_shape() -> None:
    fn = front_end(ptx_of(k_sum, void(float32[::1], float32[::1]))).functions[0]
    lp = fn.lockstep
    assert lp is not None and lp.unroll == 4 and lp.trip is not None
    assert len(lp.carried) == 1 and fn.regs[lp.carried[0]] == "f32"
    assert [ins.opcode for ins in lp.body].count("ld") == 1  # C is one element, not the four copies of M
    assert any(sp.instr is lp.enter for sp in fn.sync_points.values())
    assert any(sp.instr is lp.leave for sp in fn.sync_points.values())


def test_three_carried_registers() -> None:
    fn = front_end(ptx_of(k_two, void(int32[::1], float64[::1], int32[::1], int64[::1]))).functions[0]
    assert fn.lockstep is not None and len(fn.lockstep.carried) == 3


PLAIN = (
    HEADER
    + """
.visible .entry k(.param .u64 x, .param .u64 out, .param .u32 n)
{
  .reg .pred %p<4>; .reg .b32 %r<20>; .reg .b64 %rd<20>; .reg .f32 %f<8>;
  ld.param.u64 %rd1, [x]; ld.param.u64 %rd2, [out]; ld.param.u32 %r10, [n];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %nctaid.x;
  mad.lo.s32 %r5, %r3, %r2, %r1;
  mul.lo.s32 %r6, %r2, %r4;
  mov.f32 %f1, 0f00000000;
  setp.ge.u32 %p1, %r5, %r10;
  @%p1 bra DONE;
  mov.u32 %r7, %r5;
LOOP:
  mul.wide.u32 %rd3, %r7, 4; add.s64 %rd4, %rd1, %rd3; ld.global.f32 %f2, [%rd4];
  BODY
  add.s32 %r7, %r7, %r6;
  setp.lt.u32 %p2, %r7, %r10;
  @%p2 bra LOOP;
DONE:
  bar.sync 0;
  mul.wide.u32 %rd5, %r5, 4; add.s64 %rd6, %rd2, %rd5; st.global.f32 [%rd6], %f1;
  ret;
}
"""
)


@pytest.mark.parametrize(
    "body,found",
    [
        ("add.f32 %f1, %f1, %f2;", True),
        ("fma.rn.f32 %f1, %f2, %f2, %f1;", True),
        ("atom.global.add.f32 %f3, [%rd4], 0f3F800000; add.f32 %f1, %f1, %f3;", False),  # an atomic in the loop
        ("ld.volatile.global.f32 %f3, [%rd4]; add.f32 %f1, %f1, %f3;", False),  # a strong load
        ("add.f32 %f1, %f1, %f2; @%p3 bra DONE;", False),  # a second way out of the loop
        ("add.f32 %f1, %f1, %f2; bar.sync 0;", False),  # a barrier in the loop
    ],
)
def test_plain_loop_shapes(body: str, found: bool) -> None:
    fn = front_end(PLAIN.replace("BODY", body)).functions[0]
    assert (fn.lockstep is not None) is found
    if found:
        assert fn.lockstep.unroll == 1 and fn.lockstep.carried == ["%f1"] and fn.lockstep.trip is None


def test_plain_loop_bit_for_bit_and_a_bound_per_thread() -> None:
    """The plain shape run fused; then with odd threads stopping two elements early, which the probe must notice
    (the loop body never reads n, only the test does) and send every block the usual way."""
    g, bsz = 40, 64
    n = g * bsz * 5 + 3  # thread 1's last element, g*bsz*5 + 1, is past its own bound n - 2
    x = np.random.default_rng(13).random(n, dtype=np.float32)
    body = "add.f32 %f1, %f1, %f2;"
    uneven = "and.b32 %r12, %r1, 1; shl.b32 %r12, %r12, 1; sub.u32 %r10, %r10, %r12;"
    for ptx, ends in (
        (PLAIN.replace("BODY", body), np.full(g * bsz, n)),
        (
            PLAIN.replace("BODY", body).replace("mov.u32 %r1, %tid.x;", "mov.u32 %r1, %tid.x; " + uneven),
            n - 2 * (np.arange(g * bsz) % bsz & 1),
        ),
    ):
        assert front_end(ptx).functions[0].lockstep is not None
        out = np.zeros(g * bsz, np.float32)
        m = compile_module(ptx, tier="optimized")
        k = m.get_kernel("k")
        from tests.unit.jit.helpers import pack

        k.launch((g,), (bsz,), 0, pack(k, x, out, n), workers=1)
        acc = np.zeros(g * bsz, np.float32)
        for j, (v, ok) in enumerate(strided(x, g * bsz)):
            ok = ok & (np.arange(g * bsz) + j * g * bsz < ends)
            acc = np.where(ok, acc + v, acc).astype(np.float32)
        assert np.array_equal(out.view(np.uint32), acc.view(np.uint32))


def test_jump_into_the_loop_from_outside_is_not_recognised() -> None:
    ptx = PLAIN.replace("BODY", "add.f32 %f1, %f1, %f2;").replace("@%p1 bra DONE;", "@%p1 bra LOOP;")
    assert front_end(ptx).functions[0].lockstep is None


def _unrolled_ptx() -> str:
    return ptx_of(k_sum, void(float32[::1], float32[::1]))


@pytest.mark.parametrize(
    "change",
    [
        ("setp.lt.u64", "setp.lt.s64"),  # K tests tm1 signed: not the unroller's test
    ],
)
def test_unrolled_shape_checks(change: tuple[str, str]) -> None:
    ptx = _unrolled_ptx()
    assert change[0] in ptx
    assert front_end(ptx.replace(change[0], change[1], 1)).functions[0].lockstep is None


def test_main_loop_copies_must_match_the_remainder_loop() -> None:
    ptx = _unrolled_ptx()
    lines = ptx.splitlines()
    adds = [k for k, ln in enumerate(lines) if "add.f32" in ln]
    assert len(adds) >= 5  # one in the remainder loop, four in the main loop (then the shuffle adds)
    lines[adds[2]] = lines[adds[2]].replace("add.f32", "sub.f32")  # the second copy of M subtracts
    assert front_end("\n".join(lines)).functions[0].lockstep is None


def test_remainder_count_must_come_from_the_trip_count() -> None:
    ptx = _unrolled_ptx()
    import re

    m = re.search(r"and\.b64 \s*(%rd\d+), (%rd\d+), 3;", ptx)
    assert m is not None
    bad = ptx.replace(m.group(0), f"and.b64 \t{m.group(1)}, {m.group(2)}, 1;")  # r = (tm1 + 1) & 1
    assert front_end(bad).functions[0].lockstep is None


# -- launches: bit for bit the threads' own loops --------------------------------------------------------------

# (grid, block, n): trip counts of every residue mod 4 within a block, blocks whose threads do not all enter
# (the probe sends them the usual way), groups of 16, 8, 2 and 1 blocks with one worker
SIZES = [
    (512, 256, 375_000),
    (37, 128, 1_000_003),
    (64, 256, 64 * 256 * 7),
    (5, 64, 5 * 64 * 4 + 3),
    (40, 256, 40 * 256 - 100),
    (33, 96, 100_000),
    (128, 32, 128 * 32 * 9 + 1000),
]


@pytest.mark.parametrize("grid,block,n", SIZES)
@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("workers", [1, None])
def test_sum_bit_for_bit(grid: int, block: int, n: int, checked: bool, workers: int | None) -> None:
    rng = np.random.default_rng(n)
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(grid * block, np.float32)
    run(
        ptx_of(k_sum, void(float32[::1], float32[::1])),
        grid,
        block,
        x,
        out,
        bounds=[x, out],
        checked=checked,
        workers=workers,
    )
    assert np.array_equal(out.view(np.uint32), seq_sum(x, grid * block).view(np.uint32))


@pytest.mark.parametrize("kernel", [k_two, k_uneven])
def test_three_carried_registers_bit_for_bit(kernel: Any) -> None:
    """The epilogue shape (numba unrolls this loop with the remainder after the main loop)."""
    rng = np.random.default_rng(3)
    g, bsz = 48, 128
    n = g * bsz * 7 + 3  # threads 0, 1, 2 run 8, 8, 8 iterations; with k_uneven 8, 7, 8
    x = rng.integers(-1000, 1 << 30, n, dtype=np.int32)
    s, m, c = np.zeros(g * bsz, np.float64), np.zeros(g * bsz, np.int32), np.zeros(g * bsz, np.int64)
    ptx = ptx_of(kernel, void(int32[::1], float64[::1], int32[::1], int64[::1]))
    assert front_end(ptx).functions[0].lockstep.bound is None
    run(ptx, g, bsz, x, s, m, c)
    acc = np.zeros(g * bsz, np.float64)
    best = np.full(g * bsz, -1, np.int32)
    cnt = np.zeros(g * bsz, np.int64)
    ends = x.size - 2 * (np.arange(g * bsz) % bsz & 1) * (kernel is k_uneven)
    for k, (v, ok) in enumerate(strided(x, g * bsz)):
        ok = ok & (np.arange(g * bsz) + k * g * bsz < ends)
        acc = np.where(ok, acc + v.astype(np.float64) * 0.5, acc)
        best = np.where(ok & (v > best), v, best)
        cnt += ok
    assert np.array_equal(s.view(np.uint64), acc.view(np.uint64))
    assert np.array_equal(m, best) and np.array_equal(c, cnt)


def test_loop_reading_tid() -> None:
    x = np.random.default_rng(5).random(200_000, dtype=np.float32)
    g, bsz = 24, 128
    out = np.zeros(g * bsz, np.float32)
    run(ptx_of(k_tid, void(float32[::1], float32[::1])), g, bsz, x, out)
    shift = (np.arange(g * bsz) % bsz).astype(np.float32)
    assert np.array_equal(out.view(np.uint32), seq_sum(x, g * bsz, shift=shift).view(np.uint32))


def test_block_that_leaves_before_the_loop() -> None:
    """Its lanes are computed with its group's, unused; under bounds checks they even read past the end of the
    array (the parameters claim more elements than the range allows), which must not fail the launch."""
    g, bsz = 128, 64  # one worker: groups of 8 blocks; the last block (the last of its group) is skipped
    n = g * bsz * 6
    x = np.random.default_rng(7).random(n, dtype=np.float32)
    out = np.zeros(g * bsz, np.float32)
    ptx = ptx_of(k_skip, void(float32[::1], float32[::1], int32))
    run(ptx, g, bsz, x, out, g - 1, checked=True, bounds=[x[: n - bsz // 2], out], workers=1)
    want = seq_sum(x, g * bsz)
    want[(g - 1) * bsz :] = 0
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))


def test_out_of_bounds_lane_of_a_running_block_is_reported() -> None:
    g, bsz = 128, 64
    n = g * bsz * 6
    x = np.random.default_rng(8).random(n, dtype=np.float32)
    out = np.zeros(g * bsz, np.float32)
    ptx = ptx_of(k_sum, void(float32[::1], float32[::1]))
    with pytest.raises(JitError) as e:
        run(ptx, g, bsz, x, out, checked=True, bounds=[x[: n - 3], out], workers=1)
    assert e.value.code == 700


def test_store_before_the_loop_forbids_groups() -> None:
    ptx = ptx_of(k_prestore, void(float32[::1], float32[::1]))
    lp = front_end(ptx).functions[0].lockstep
    assert lp is not None and not lp.early
    g, bsz = 128, 64
    x = np.random.default_rng(14).random(g * bsz * 5 + 7, dtype=np.float32)
    want_x = x.copy()
    want_x[: g * bsz] *= np.float32(2.0)
    out = np.zeros(g * bsz, np.float32)
    run(ptx, g, bsz, x, out, workers=1)
    assert np.array_equal(x, want_x)
    assert np.array_equal(out.view(np.uint32), seq_sum(want_x, g * bsz).view(np.uint32))


def test_kernel_with_local_memory() -> None:
    """numba's test_count_nonzero_basic failed to compile: the probe's resume rematerialises the .local depot."""
    ptx = ptx_of(k_local, void(float32[::1], float32[::1]))
    assert "__local_depot" in ptx and front_end(ptx).functions[0].lockstep is not None
    g, bsz = 64, 64
    x = np.random.default_rng(15).random(g * bsz * 3 + 5, dtype=np.float32)
    out = np.zeros(g * bsz, np.float32)
    for checked in (False, True):
        run(ptx, g, bsz, x, out, checked=checked, bounds=[x, out], workers=1)
        want = seq_sum(x, g * bsz) + ((np.arange(g * bsz) % bsz + out.size) % 8).astype(np.float32)
        assert np.array_equal(out.view(np.uint32), want.astype(np.float32).view(np.uint32))


def test_probe_failure_runs_the_usual_way() -> None:
    x = np.random.default_rng(9).random(100_000, dtype=np.float32)
    g, bsz = 16, 128
    out = np.zeros(g * bsz, np.float32)
    run(ptx_of(k_double, void(float32[::1], float32[::1])), g, bsz, x, out)
    want = seq_sum(x, g * bsz, start=2 * np.arange(g * bsz))
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))


def test_second_launch_does_not_reuse_the_first_launchs_stash() -> None:
    """Same kernel, same pointers and sizes, new data: a stash kept in the worker's scratch must not be taken."""
    ptx = ptx_of(k_sum, void(float32[::1], float32[::1]))
    x = np.random.default_rng(10).random(64 * 128 * 5, dtype=np.float32)
    out = np.zeros(64 * 128, np.float32)
    for seed in (11, 12):
        x[:] = np.random.default_rng(seed).random(x.size, dtype=np.float32)
        run(ptx, 64, 128, x, out, workers=1)
        assert np.array_equal(out.view(np.uint32), seq_sum(x, 64 * 128).view(np.uint32))
