"""Barriers (in loops, branches, with early exits) and warp collectives with exact PTX semantics."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from tests.unit.jit.helpers import HEADER, PTX_DIR, launch, module, pack

NVRTC = (PTX_DIR / "nvrtc_mix.ptx").read_text()


def shfl_model(mode: str, vals: list[int], bval: int, c: int) -> tuple[list[int], list[int]]:
    out, preds = [], []
    for t in range(len(vals)):
        lane = t & 31
        seg = (c >> 8) & 31
        cval = c & 31
        maxl = (lane & seg) | (cval & ~seg)
        minl = lane & seg
        if mode == "up":
            j, p = lane - bval, lane - bval >= maxl
        elif mode == "down":
            j, p = lane + bval, lane + bval <= maxl
        elif mode == "bfly":
            j, p = lane ^ bval, (lane ^ bval) <= maxl
        else:
            j = minl | (bval & ~seg)
            p = j <= maxl
        if not p:
            j = lane
        out.append(vals[(t & ~31) + j])
        preds.append(int(p))
    return out, preds


def shfl_ptx(mode: str, b: int, c: int) -> str:
    return (
        HEADER
        + f"""
.visible .entry k(.param .u64 out, .param .u64 pred)
{{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  mov.u32 %r1, %tid.x;
  mul.lo.u32 %r2, %r1, 7; add.u32 %r2, %r2, 100;
  shfl.sync.{mode}.b32 %r3|%p1, %r2, {b}, {c}, -1;
  selp.u32 %r4, 1, 0, %p1;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [pred];
  mul.wide.u32 %rd3, %r1, 4; add.s64 %rd1, %rd1, %rd3; add.s64 %rd2, %rd2, %rd3;
  st.global.u32 [%rd1], %r3; st.global.u32 [%rd2], %r4;
  ret;
}}
"""
    )


@pytest.mark.parametrize(
    "mode,b,c",
    [
        ("up", 1, 0),
        ("up", 3, 0x1800),
        ("down", 1, 31),
        ("down", 5, 0x181F),
        ("bfly", 4, 31),
        ("bfly", 16, 0x101F),
        ("idx", 7, 31),
        ("idx", 2, 0x1C1F),
    ],
)
def test_shfl_modes(mode: str, b: int, c: int) -> None:
    n = 64
    out = np.zeros(n, np.uint32)
    pred = np.zeros(n, np.uint32)
    launch(shfl_ptx(mode, b, c), "k", (1,), (n,), out, pred)
    vals = [t * 7 + 100 for t in range(n)]
    ev, ep = shfl_model(mode, vals, b, c)
    assert out.tolist() == ev
    assert pred.tolist() == ep


def test_vote_ballot_match_redux_activemask() -> None:
    a = np.array([(i * 37) % 5 - 1 for i in range(64)], np.int32)
    out = np.zeros(4 * 64, np.uint32)
    launch(NVRTC, "votek", (1,), (64,), a, out)
    o = out.reshape(64, 4)
    for w in range(2):
        vals = a[32 * w : 32 * w + 32]
        ballot = sum(1 << i for i, v in enumerate(vals) if v > 0)
        allv, anyv = int(all(vals > 0)), int(any(vals > 0))
        for lane in range(32):
            t = 32 * w + lane
            assert o[t, 0] == ballot
            assert o[t, 1] == allv * 2 + anyv
            assert o[t, 2] == sum(1 << i for i, v in enumerate(vals) if v == vals[lane])
            assert o[t, 3] == (int(vals.astype(np.uint32).sum()) + 0xFFFFFFFF) & 0xFFFFFFFF


def test_barrier_tiled_matmul_nonmultiple() -> None:
    n = 40
    rng = np.random.default_rng(0)
    A = rng.random((n, n), dtype=np.float32)
    B = rng.random((n, n), dtype=np.float32)
    C = np.zeros((n, n), np.float32)
    launch(NVRTC, "matmul", (3, 3), (16, 16), A, B, C, n)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)


def test_block_reduction_shuffles_dynamic_shared() -> None:
    x = np.random.default_rng(1).random(50000, dtype=np.float32)
    out = np.zeros(1, np.float32)
    launch(NVRTC, "reduce", (7,), (128,), x, out, x.size, shared=4 * 4)
    assert abs(out[0] - x.sum(dtype=np.float64)) < 1e-2


def test_histogram_shared_and_global_atomics() -> None:
    d = np.random.default_rng(2).integers(0, 256, 30000).astype(np.uint8)
    h = np.zeros(256, np.uint32)
    launch(NVRTC, "hist", (5,), (96,), d, h, d.size)
    assert (h == np.bincount(d, minlength=256)).all()


BARRIER_EARLY_EXIT = (
    HEADER
    + """
.visible .entry k(.param .u64 out, .param .u32 n)
{
  .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .pred %p<4>;
  .shared .align 4 .b8 buf[1024];
  mov.u32 %r1, %tid.x; ld.param.u32 %r9, [n];
  setp.ge.u32 %p1, %r1, %r9;
  @%p1 bra DONE;           // threads >= n leave before the barriers
  shl.b32 %r2, %r1, 2; mov.u32 %r3, buf; add.u32 %r3, %r3, %r2;
  mov.u32 %r5, 0;          // loop counter lives across barriers
LOOP:
  st.shared.u32 [%r3], %r1;
  bar.sync 0;
  add.u32 %r6, %r1, 1; rem.u32 %r6, %r6, %r9; shl.b32 %r6, %r6, 2; mov.u32 %r7, buf; add.u32 %r7, %r7, %r6;
  ld.shared.u32 %r8, [%r7];
  bar.sync 0;
  add.u32 %r1, %r8, 0;
  add.u32 %r5, %r5, 1;
  setp.lt.u32 %p2, %r5, 3;
  @%p2 bra LOOP;
  mov.u32 %r10, %tid.x; mul.wide.u32 %rd1, %r10, 4; ld.param.u64 %rd2, [out]; add.s64 %rd2, %rd2, %rd1;
  st.global.u32 [%rd2], %r1;
DONE:
  ret;
}
"""
)


def test_barrier_in_loop_with_early_exit() -> None:
    out = np.full(64, 7777, np.uint32)
    n = 40
    launch(BARRIER_EARLY_EXIT, "k", (2,), (64,), out, n)
    exp = [(t + 7) % n for t in range(n)] + [7777] * (64 - n)  # value chase: t+1, t+3, t+7
    assert out.tolist() == exp


def test_trap_is_launch_failure_and_module_survives() -> None:
    src = (
        HEADER + ".visible .entry k() { trap; ret; }\n.visible .entry ok(.param .u64 o) { .reg .b64 %rd1; "
        ".reg .b32 %r1; ld.param.u64 %rd1, [o]; mov.u32 %r1, 5; st.global.u32 [%rd1], %r1; ret; }"
    )
    from jit import JitError

    with pytest.raises(JitError) as ei:
        launch(src, "k", (4,), (32,))
    assert ei.value.code == 719
    o = np.zeros(1, np.uint32)
    launch(src, "ok", (1,), (1,), o)
    assert o[0] == 5


def test_printf_and_params_struct() -> None:
    m = module(NVRTC)
    k = m.get_kernel("printk")
    r = k.launch((2,), (32,), 0, struct.pack("<i", 42))
    assert r.printf == "hello 42 1.500000 x\n" * 2
    assert [p.offset for p in m.get_kernel("matmul").params] == [0, 8, 16, 24]
    assert pack(k, 42) == struct.pack("<i", 42)


REDUX_F32 = (
    HEADER.replace("sm_80", "sm_100a").replace("7.8", "8.6")
    + """
.visible .entry k(.param .u64 x, .param .u64 out, .param .u32 mask)
{
  .reg .b32 %r<12>; .reg .f32 %f<12>; .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [x]; ld.param.u64 %rd2, [out]; ld.param.u32 %r9, [mask];
  mov.u32 %r1, %tid.x; mul.wide.u32 %rd3, %r1, 4; add.s64 %rd4, %rd1, %rd3; ld.global.f32 %f1, [%rd4];
  and.b32 %r2, %r1, 31; shr.u32 %r3, %r9, %r2; and.b32 %r3, %r3, 1; setp.eq.u32 %p1, %r3, 0;
  @%p1 bra SKIP;
  redux.sync.min.f32 %f2, %f1, %r9;
  redux.sync.max.f32 %f3, %f1, %r9;
  redux.sync.min.abs.f32 %f4, %f1, %r9;
  redux.sync.max.abs.NaN.f32 %f5, %f1, %r9;
  redux.sync.min.NaN.f32 %f6, %f1, %r9;
  mul.wide.u32 %rd3, %r1, 20; add.s64 %rd5, %rd2, %rd3;
  st.global.v4.f32 [%rd5], {%f2, %f3, %f4, %f5}; st.global.f32 [%rd5+16], %f6;
SKIP:
  ret;
}
""".replace(".reg .b64 %rd<6>;", ".reg .b64 %rd<6>; .reg .pred %p<2>;")
)


def _redux_f32_model(vals: np.ndarray, op: str, absolute: bool, nan: bool) -> int:
    v = np.abs(vals) if absolute else vals
    if nan and np.isnan(v).any() or np.isnan(v).all():
        return 0x7FFFFFFF
    v = v[~np.isnan(v)]
    key = [(float(x), -1 if np.signbit(x) else 1) for x in v]  # +0.0 > -0.0
    pick = min(range(len(v)), key=lambda i: key[i]) if op == "min" else max(range(len(v)), key=lambda i: key[i])
    return int(v[pick : pick + 1].view(np.uint32)[0])


@pytest.mark.parametrize("case", ["mixed", "zeros", "all_nan", "partial"])
def test_redux_sync_f32(case: str) -> None:
    """NOTE [redux.f32]: min/max with .abs and .NaN over the lanes in the member mask."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(64) * 100).astype(np.float32)
    mask = 0xFFFFFFFF
    if case == "mixed":
        x[[3, 40]] = np.nan
        x[[5, 50]] = -np.inf
    elif case == "zeros":
        x[:] = 0.0
        x[[7, 33, 60]] = -0.0
    elif case == "all_nan":
        x[:32] = np.nan
    else:
        mask = 0x0F0F00F1
        x[[1, 34]] = np.nan  # outside the mask: ignored even with .NaN
    out = np.zeros(64 * 5, np.uint32)
    launch(REDUX_F32, "k", (1,), (64,), x, out, mask)
    o = out.reshape(64, 5)
    for w in range(2):
        lanes = [ln for ln in range(32) if mask >> ln & 1]
        vals = x[32 * w + np.array(lanes)]
        want = [
            _redux_f32_model(vals, "min", False, False),
            _redux_f32_model(vals, "max", False, False),
            _redux_f32_model(vals, "min", True, False),
            _redux_f32_model(vals, "max", True, True),
            _redux_f32_model(vals, "min", False, True),
        ]
        for ln in lanes:
            assert o[32 * w + ln].tolist() == want, (w, ln)


def test_redux_sync_add_f32_is_invalid_ptx() -> None:
    from jit import JitError, compile_module

    with pytest.raises(JitError) as ei:
        compile_module(REDUX_F32.replace("redux.sync.min.NaN.f32", "redux.sync.add.f32"))
    assert ei.value.code == 218 and "redux" in ei.value.message


@pytest.mark.parametrize("nwarps", [2, 8, 32])
def test_a_barrier_waits_for_lanes_in_a_partial_shuffle(nwarps: int) -> None:
    """tests/unit/jit/ptx/partial_shfl.cu (cuda-samples' shfl_scan): lanes 0..nwarps-1 of warp 0 shuffle with a
    membermask naming only them while the rest of the block waits at a barrier. shfl's membermask was read as
    'all lanes', the shuffle counted as blocked, and the barrier released before the scan was stored."""
    ptx = (PTX_DIR / "partial_shfl.ptx").read_text()
    out = np.zeros(nwarps, np.int32)
    launch(ptx, "partial_shfl", 1, 32 * nwarps, out, shared=4 * nwarps)
    assert out.tolist() == np.cumsum(32 * np.arange(1, nwarps + 1)).tolist()
