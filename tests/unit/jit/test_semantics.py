"""Exact PTX semantics where LLVM/x86 differ (hand-written PTX, one rule per test)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.jit.helpers import run_elementwise

I32MIN = -(2**31)


def test_int_div_rem_by_zero_and_overflow() -> None:
    a = np.array([7, -7, I32MIN, 5, -9, I32MIN], np.int32)
    b = np.array([0, 0, -1, 2, 4, 0], np.int32)
    q = run_elementwise("div.s32 %d, %a, %b;", "s32", "s32", a, b)
    r = run_elementwise("rem.s32 %d, %a, %b;", "s32", "s32", a, b)
    assert q.tolist() == [-1, 1, I32MIN, 2, -2, 1]
    assert r.tolist() == [7, -7, 0, 1, -1, I32MIN]
    ua = np.array([7, 9, 0xFFFFFFFF], np.uint32)
    ub = np.array([0, 2, 0], np.uint32)
    assert run_elementwise("div.u32 %d, %a, %b;", "u32", "u32", ua, ub).tolist() == [0xFFFFFFFF, 4, 0xFFFFFFFF]
    assert run_elementwise("rem.u32 %d, %a, %b;", "u32", "u32", ua, ub).tolist() == [7, 1, 0xFFFFFFFF]


def test_shift_clamps() -> None:
    a = np.array([0x80000001] * 5, np.uint32)
    s = np.array([1, 31, 32, 33, 0xFFFFFFFF], np.uint32)
    assert run_elementwise("shl.b32 %d, %a, %b;", "u32", "u32", a, s).tolist() == [2, 0x80000000, 0, 0, 0]
    assert run_elementwise("shr.u32 %d, %a, %b;", "u32", "u32", a, s).tolist() == [0x40000000, 1, 0, 0, 0]
    sh = run_elementwise("shr.s32 %d, %a, %b;", "s32", "s32", a.view(np.int32), s.view(np.int32))
    assert sh.tolist() == [-(2**30), -1, -1, -1, -1]


def test_cvt_float_to_int_saturates() -> None:
    x = np.array([1e10, -1e10, np.nan, np.inf, -np.inf, 2.5, -2.5, 3.5], np.float32)
    assert run_elementwise("cvt.rzi.s32.f32 %d, %a;", "f32", "s32", x).tolist() == [
        2**31 - 1,
        I32MIN,
        0,
        2**31 - 1,
        I32MIN,
        2,
        -2,
        3,
    ]
    assert run_elementwise("cvt.rni.s32.f32 %d, %a;", "f32", "s32", x).tolist()[5:] == [2, -2, 4]
    assert run_elementwise("cvt.rmi.s32.f32 %d, %a;", "f32", "s32", x).tolist()[5:] == [2, -3, 3]
    assert run_elementwise("cvt.rpi.s32.f32 %d, %a;", "f32", "s32", x).tolist()[5:] == [3, -2, 4]
    u = run_elementwise("cvt.rzi.u32.f32 %d, %a;", "f32", "u32", x)
    assert u.tolist() == [0xFFFFFFFF, 0, 0, 0xFFFFFFFF, 0, 2, 0, 3]


def test_float_round_to_integral() -> None:
    x = np.array([2.5, -2.5, 1.5, -0.4], np.float32)
    assert run_elementwise("cvt.rni.f32.f32 %d, %a;", "f32", "f32", x).tolist() == [2.0, -2.0, 2.0, -0.0]
    assert run_elementwise("cvt.rmi.f32.f32 %d, %a;", "f32", "f32", x).tolist() == [2.0, -3.0, 1.0, -1.0]


def test_minmax_nan_rules() -> None:
    a = np.array([np.nan, 1.0, np.nan, -0.0], np.float32)
    b = np.array([2.0, np.nan, np.nan, 0.0], np.float32)
    r = run_elementwise("min.f32 %d, %a, %b;", "f32", "f32", a, b)
    assert r[0] == 2.0 and r[1] == 1.0 and np.isnan(r[2])
    assert r.view(np.uint32)[2] == 0x7FFFFFFF
    assert np.signbit(r[3])
    r = run_elementwise("max.NaN.f32 %d, %a, %b;", "f32", "f32", a, b)
    assert np.isnan(r[0]) and np.isnan(r[1])


@pytest.mark.parametrize(
    "cmp,expect",
    [
        ("lt", [0, 1, 0]),
        ("ltu", [1, 1, 1]),
        ("ge", [0, 0, 0]),
        ("geu", [1, 0, 1]),
        ("ne", [0, 1, 0]),
        ("neu", [1, 1, 1]),
        ("nan", [1, 0, 1]),
        ("num", [0, 1, 0]),
    ],
)
def test_setp_unordered(cmp: str, expect: list[int]) -> None:
    a = np.array([np.nan, 1.0, 3.0], np.float32)
    b = np.array([1.0, 2.0, np.nan], np.float32)
    body = f"setp.{cmp}.f32 %p1, %a, %b; selp.u32 %d, 1, 0, %p1;"
    assert run_elementwise(body, "f32", "u32", a, b).tolist() == expect


def test_setp_combine_and_pair() -> None:
    a = np.array([1, 5, 3], np.int32)
    b = np.array([2, 2, 3], np.int32)
    body = (
        "setp.eq.s32 %p2, %a, 3; setp.lt.or.s32 %p1|%p3, %a, %b, %p2; "
        "selp.u32 %r1, 1, 0, %p1; selp.u32 %r2, 2, 0, %p3; add.u32 %d, %r1, %r2;"
    )
    # p1 = (a<b) | (a==3); p3 = !(a<b) | (a==3)
    assert run_elementwise(body, "s32", "u32", a, b).tolist() == [1, 2, 3]


def test_directed_rounding_cvt_and_add() -> None:
    x = np.array([1.0 + 2**-30, -(1.0 + 2**-30), 1.0 / 3.0], np.float64)
    one = np.float32(1.0)
    nxt = np.nextafter(one, np.float32(2))
    assert run_elementwise("cvt.rn.f32.f64 %d, %a;", "f64", "f32", x)[0] == one
    assert run_elementwise("cvt.rp.f32.f64 %d, %a;", "f64", "f32", x)[0] == nxt
    assert run_elementwise("cvt.rm.f32.f64 %d, %a;", "f64", "f32", x)[1] == -nxt
    assert run_elementwise("cvt.rz.f32.f64 %d, %a;", "f64", "f32", x)[1] == -one
    a = np.array([1.0], np.float32)
    b = np.array([2**-30], np.float32)
    assert run_elementwise("add.rp.f32 %d, %a, %b;", "f32", "f32", a, b)[0] == nxt
    assert run_elementwise("add.rn.f32 %d, %a, %b;", "f32", "f32", a, b)[0] == one
    assert run_elementwise("add.rm.f32 %d, %a, %b;", "f32", "f32", a, -b)[0] == np.nextafter(one, np.float32(0))
    assert run_elementwise("mul.rp.f32 %d, %a, %b;", "f32", "f32", np.float32([3.0]), np.float32([1 / 3]))[0] > 1.0
    r = run_elementwise("div.rz.f32 %d, %a, %b;", "f32", "f32", np.float32([1.0]), np.float32([3.0]))[0]
    assert r == np.float32(1 / 3) or r == np.nextafter(np.float32(1 / 3), np.float32(0))
    assert r <= 1 / 3


def test_ftz_and_sat() -> None:
    tiny = np.array([1e-40, -1e-40, 0.5], np.float32)
    r = run_elementwise("mul.ftz.f32 %d, %a, %b;", "f32", "f32", tiny, np.ones(3, np.float32))
    assert r[0] == 0.0 and r[1] == 0.0 and np.signbit(r[1]) and r[2] == 0.5
    r = run_elementwise("mul.sat.f32 %d, %a, %b;", "f32", "f32", np.float32([3, -1, np.nan]), np.float32([1, 1, 1]))
    assert r.tolist() == [1.0, 0.0, 0.0]


def test_int_sat_and_cvt_sat() -> None:
    a = np.array([2**31 - 1, I32MIN], np.int32)
    b = np.array([1, -1], np.int32)
    assert run_elementwise("add.sat.s32 %d, %a, %b;", "s32", "s32", a, b).tolist() == [2**31 - 1, I32MIN]
    x = np.array([300, -5, 100], np.int32)
    r = run_elementwise("cvt.sat.u8.s32 %d, %a;", "s32", "u32", x)
    assert r.tolist() == [255, 0, 100]


@pytest.mark.parametrize("t", ["f32", "f16"])
def test_min_max_xorsign_abs(t: str) -> None:
    """min/max.xorsign.abs: the min/max of |a| and |b|, with the sign bit sign(a) xor sign(b) (PTX 7.2)."""
    dt = np.float32 if t == "f32" else np.float16
    a = np.array([1.5, -2.0, -3.0, 0.5, -0.0, 4.0, -7.0], dt)
    b = np.array([-1.0, -1.0, 2.5, 0.25, 1.0, -np.inf, -7.5], dt)
    for op, fn in (("min", np.minimum), ("max", np.maximum)):
        got = run_elementwise(f"{op}.xorsign.abs.{t} %d, %a, %b;", t, t, a, b)
        want = np.copysign(fn(np.abs(a), np.abs(b)), np.where(np.signbit(a) ^ np.signbit(b), -1.0, 1.0)).astype(dt)
        assert got.tobytes() == want.tobytes(), (op, got, want)
