"""Uniform regions (NOTE [uniform regions], jit/emit/cpu/sched.py): a round that starts with every thread at the same
barrier runs that barrier's straight-line region in a loop of its own; any other round takes the generic loop."""

from __future__ import annotations

import re

import numpy as np
import pytest

from jit import GlobalRange, JitError, compile_module
from jit.pipeline import translate
from tests.unit.jit.helpers import HEADER, launch, pack

# s[t] = x[t]; barrier; v = 2 * s[(t + 1) % n] + s[t]; barrier; out[t] = v. EXIT: threads t >= lim return first
NEIGHBOUR = (
    HEADER
    + """
.visible .entry nb(.param .u64 x, .param .u64 out, .param .u32 lim)
{
  .shared .align 4 .b32 s[256];
  .reg .b32 %r<12>; .reg .b64 %rd<12>; .reg .pred %p<3>;
  mov.u32 %r1, %tid.x; ld.param.u32 %r2, [lim];
  EXIT
  mul.wide.u32 %rd1, %r1, 4; ld.param.u64 %rd2, [x]; add.s64 %rd3, %rd2, %rd1; ld.global.u32 %r3, [%rd3];
  mov.u64 %rd4, s; add.s64 %rd5, %rd4, %rd1; st.shared.u32 [%rd5], %r3;
  bar.sync 0;
  add.u32 %r4, %r1, 1; rem.u32 %r5, %r4, %r2; mul.wide.u32 %rd6, %r5, 4; add.s64 %rd7, %rd4, %rd6;
  ld.shared.u32 %r6, [%rd7]; ld.shared.u32 %r7, [%rd5]; mad.lo.u32 %r8, %r6, 2, %r7;
  bar.sync 0;
  ld.param.u64 %rd8, [out]; add.s64 %rd9, %rd8, %rd1; st.global.u32 [%rd9], %r8;
  ret;
}
"""
)
EARLY_EXIT = "setp.ge.u32 %p1, %r1, %r2; @%p1 ret;"


def neighbour(exits: bool = False) -> str:
    return NEIGHBOUR.replace("EXIT", EARLY_EXIT if exits else "")


def expect(x: np.ndarray, lim: int) -> np.ndarray:
    t = np.arange(lim)
    return 2 * x[(t + 1) % lim] + x[t]


def region_blocks(ptx: str) -> int:
    ir = str(translate(ptx).ir_module)
    return sum(1 for line in ir.splitlines() if line.startswith("uniform"))


def test_straight_region_between_barriers_gets_its_loop() -> None:
    assert region_blocks(neighbour()) == 1
    nt = 256
    x = np.arange(nt, dtype=np.uint32) * 7 + 3
    out = np.zeros(nt, np.uint32)
    launch(neighbour(), "nb", 1, nt, x, out, nt)
    assert (out == expect(x, nt)).all()


@pytest.mark.parametrize("block", [(64, 1, 1), (16, 4, 2), (5, 3, 1)])
def test_region_loop_over_multidimensional_blocks(block: tuple[int, int, int]) -> None:
    # %tid.x only: threads with the same tid.x in different rows read the same x and write the same out
    nt = block[0]
    x = np.arange(256, dtype=np.uint32) * 5 + 1
    out = np.zeros(256, np.uint32)
    launch(neighbour(), "nb", 1, block, x, out, nt)
    assert (out[:nt] == expect(x, nt)).all() and not out[nt:].any()


def test_exited_threads_take_the_generic_loop() -> None:
    """Threads t >= lim return before the first barrier: the rounds after it are not uniform (park = -1)."""
    x = np.arange(128, dtype=np.uint32) * 3 + 1
    out = np.zeros(128, np.uint32)
    launch(neighbour(exits=True), "nb", 1, 128, x, out, 100)
    assert (out[:100] == expect(x, 100)).all() and not out[100:].any()


# even threads wait at one pair of barriers, odd threads at another: after the first release half the block
# resumes at each, so no round is uniform and each thread must run its own region
DIVERGENT = (
    HEADER
    + """
.visible .entry dv(.param .u64 out)
{
  .shared .align 4 .b32 s[256];
  .reg .b32 %r<12>; .reg .b64 %rd<12>; .reg .pred %p<3>;
  mov.u32 %r1, %tid.x; mul.wide.u32 %rd1, %r1, 4; mov.u64 %rd2, s; add.s64 %rd3, %rd2, %rd1;
  xor.b32 %r2, %r1, 1; mul.wide.u32 %rd4, %r2, 4; add.s64 %rd5, %rd2, %rd4;
  and.b32 %r3, %r1, 1; setp.eq.u32 %p1, %r3, 1; @%p1 bra ODD;
  mul.lo.u32 %r4, %r1, 3; st.shared.u32 [%rd3], %r4;
  bar.sync 0;
  ld.shared.u32 %r5, [%rd5]; add.u32 %r6, %r5, 100;
  bar.sync 0;
  bra JOIN;
ODD:
  mul.lo.u32 %r4, %r1, 5; st.shared.u32 [%rd3], %r4;
  bar.sync 0;
  ld.shared.u32 %r5, [%rd5]; add.u32 %r6, %r5, 200;
  bar.sync 0;
JOIN:
  ld.param.u64 %rd6, [out]; add.s64 %rd7, %rd6, %rd1; st.global.u32 [%rd7], %r6;
  ret;
}
"""
)


def test_threads_at_different_barriers_run_their_own_regions() -> None:
    assert region_blocks(DIVERGENT) == 2
    out = np.zeros(64, np.uint32)
    launch(DIVERGENT, "dv", 1, 64, out)
    t = np.arange(64)
    partner = t ^ 1
    want = np.where(t % 2 == 0, partner * 5 + 100, partner * 3 + 200)
    assert out.tolist() == want.tolist()


def test_regions_end_at_barriers_only() -> None:
    """Code after the last barrier ends in `ret`, code before the first is not after a barrier: one region."""
    assert region_blocks(neighbour(exits=True)) == 1
    branchy = neighbour().replace(
        "mad.lo.u32 %r8, %r6, 2, %r7;", "mad.lo.u32 %r8, %r6, 2, %r7; @%p2 add.u32 %r8, %r8, 1;"
    )
    assert region_blocks(branchy.replace(".reg .pred %p<3>;", ".reg .pred %p<3>; setp.eq.u32 %p2, 1, 0;")) == 0


def test_bounds_checked_region() -> None:
    m = compile_module(neighbour(), bounds_check=True)
    k = m.get_kernel("nb")
    x = np.arange(64, dtype=np.uint32) + 9
    out = np.zeros(64, np.uint32)
    ok = [GlobalRange(x.ctypes.data, x.nbytes), GlobalRange(out.ctypes.data, out.nbytes)]
    k.launch((2,), (64,), 0, pack(k, x, out, 64), allowed_ranges=ok)
    assert (out == expect(x, 64)).all()
    with pytest.raises(JitError) as ei:
        k.launch((2,), (64,), 0, pack(k, x, out, 64), allowed_ranges=[ok[0]])
    assert ei.value.code == 700


def test_numba_tiled_matmul_is_vectorised_across_threads() -> None:
    """The matmul of benchmarks/jit.py: its inner product between the barriers becomes vector FMAs."""
    pytest.importorskip("numba.cuda")
    from numba import cuda, float32, void

    from benchmarks.jit import TILE, k_matmul, numba_params

    ptx = cuda.compile_ptx(k_matmul, void(float32[:, ::1], float32[:, ::1], float32[:, ::1]), cc=(8, 0))[0]
    from jit.passes import optimize

    tm = optimize.host_target_machine(2)
    asm = tm.emit_assembly(optimize.run(str(translate(ptx).ir_module), tm, 2))
    assert re.search(r"\bv(fmadd\d+|mul)ps\b", asm)  # packed: one instruction for several threads
    m = compile_module(ptx)
    k = m.get_kernel(m.kernel_names[0])
    rng = np.random.default_rng(3)
    n = 64
    A, B, C = (rng.random((n, n), dtype=np.float32) for _ in range(3))
    k.launch((n // TILE, n // TILE), (TILE, TILE), 0, numba_params(k, A, B, C))
    assert np.allclose(C, A @ B, rtol=1e-4)


# v = 7t + 100; three rounds of v += shfl.down(v, d) (a warp reduction's shape): every shuffle is resolved for the
# whole block at once when all threads wait at it
SHUFFLES = (
    HEADER
    + """
.visible .entry sh(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<4>; .reg .pred %p<4>;
  mov.u32 %r1, %tid.x; mad.lo.u32 %r2, %r1, 7, 100;
  shfl.sync.down.b32 %r3|%p1, %r2, 4, 31, -1; add.u32 %r4, %r2, %r3;
  shfl.sync.down.b32 %r5|%p2, %r4, 2, 31, -1; add.u32 %r6, %r4, %r5;
  shfl.sync.down.b32 %r7|%p3, %r6, 1, 31, -1; add.u32 %r8, %r6, %r7;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r8;
  ret;
}
"""
)


def shuffle_model(nt: int) -> list[int]:
    v = [7 * t + 100 for t in range(nt)]
    for d in (4, 2, 1):
        # a source lane past the warp's end, or past the block's last thread, gives the lane its own value
        v = [x + (v[t + d] if (t & 31) + d <= 31 and t + d < nt else x) for t, x in enumerate(v)]
    return v


@pytest.mark.parametrize("nt", [64, 48, 7])
def test_shuffle_chain(nt: int) -> None:
    assert region_blocks(SHUFFLES) == 0  # regions are for barrier kernels only
    ir = str(translate(SHUFFLES).ir_module)  # one resolution loop for the three alike shuffles
    assert [line for line in ir.splitlines() if line.startswith("wall") and line[4:-1].isdigit()] == ["wall1:"]
    out = np.zeros(nt, np.uint32)
    launch(SHUFFLES, "sh", 1, nt, out)
    assert out.tolist() == shuffle_model(nt)


# warp 0 shuffles down, warp 1 shuffles up: two collectives waited at in the same round, each warp its own
TWO_COLLECTIVES = (
    HEADER
    + """
.visible .entry tc(.param .u64 out)
{
  .reg .b32 %r<12>; .reg .b64 %rd<4>; .reg .pred %p<4>;
  mov.u32 %r1, %tid.x; mad.lo.u32 %r2, %r1, 7, 100;
  setp.ge.u32 %p1, %r1, 32; @%p1 bra UP;
  shfl.sync.down.b32 %r3, %r2, 1, 31, -1;
  bra.uni DONE;
UP:
  shfl.sync.up.b32 %r3, %r2, 1, 0, -1;
DONE:
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r3;
  ret;
}
"""
)


def test_threads_at_different_collectives_resolve_their_own() -> None:
    out = np.zeros(64, np.uint32)
    launch(TWO_COLLECTIVES, "tc", 1, 64, out)
    v = [7 * t + 100 for t in range(64)]
    want = [v[t + 1] if t < 31 else v[t] for t in range(32)] + [v[t - 1] if t > 32 else v[t] for t in range(32, 64)]
    assert out.tolist() == want
