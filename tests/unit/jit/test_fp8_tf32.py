"""NOTE [fp8 and tf32]: cvt to and from E4M3/E5M2 pairs and to TF32, against models written from the formats'
definitions (every code decoded; the nearest value found by search, ties to the even code)."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from tests.unit.jit.helpers import HEADER, launch

FMT = {"e4m3x2": (7, 3, 0x7E), "e5m2x2": (15, 2, 0x7B)}


def decode(code: int, fmt: str) -> float:
    bias, m, _ = FMT[fmt]
    exp, man, neg = (code >> m) & ((1 << (7 - m)) - 1), code & ((1 << m) - 1), code & 0x80
    if fmt == "e4m3x2" and code & 0x7F == 0x7F or fmt == "e5m2x2" and exp == 31 and man:
        return math.nan
    if fmt == "e5m2x2" and exp == 31:
        v = math.inf
    else:
        v = man * 2.0 ** (1 - bias - m) if exp == 0 else (1 + man / 2**m) * 2.0 ** (exp - bias)
    return -v if neg else v


def encode(x: float, fmt: str, relu: bool = False) -> int:
    _, _, maxcode = FMT[fmt]
    if math.isnan(x):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    if relu and sign:
        return 0
    mag = abs(x)
    if mag >= decode(maxcode, fmt):  # .satfinite: infinities and everything beyond clamp to the largest finite
        return sign | maxcode
    best = min(range(maxcode + 1), key=lambda c: (abs(decode(c, fmt) - mag), c & 1))
    return sign | best


PACK = (
    HEADER
    + """
.visible .entry k(.param .u64 src, .param .u64 out, .param .u64 back, .param .u64 tf)
{
  .reg .b32 %r<8>; .reg .b64 %rd<12>; .reg .f32 %f<4>; .reg .b16 %h<4>;
  mov.u32 %r1, %tid.x;
  ld.param.u64 %rd1, [src]; mul.wide.u32 %rd2, %r1, 8; add.s64 %rd3, %rd1, %rd2;
  ld.global.f32 %f1, [%rd3]; ld.global.f32 %f2, [%rd3+4];
  cvt.rn.satfinite.FMT.f32 %h1, %f1, %f2;
  cvt.rn.satfinite.relu.FMT.f32 %h2, %f1, %f2;
  ld.param.u64 %rd4, [out]; mul.wide.u32 %rd5, %r1, 4; add.s64 %rd6, %rd4, %rd5;
  st.global.b16 [%rd6], %h1; st.global.b16 [%rd6+2], %h2;
  cvt.rn.f16x2.FMT %r2, %h1;
  ld.param.u64 %rd7, [back]; add.s64 %rd8, %rd7, %rd5; st.global.b32 [%rd8], %r2;
  cvt.rna.tf32.f32 %r3, %f1; cvt.rn.tf32.f32 %r4, %f1; cvt.rz.tf32.f32 %r5, %f1;
  ld.param.u64 %rd9, [tf]; mul.wide.u32 %rd10, %r1, 12; add.s64 %rd11, %rd9, %rd10;
  st.global.b32 [%rd11], %r3; st.global.b32 [%rd11+4], %r4; st.global.b32 [%rd11+8], %r5;
  ret;
}
"""
)


def _inputs() -> np.ndarray:
    special = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        448.0,
        449.0,
        464.0,
        480.0,
        1e6,
        -1e6,
        math.inf,
        -math.inf,
        math.nan,
        2.0**-9,
        2.0**-10,
        3 * 2.0**-10,
        57344.0,
        61439.0,
        61440.0,
        0.3,
        -0.7,
        2.0**-16,
        2.0**-17,
        1.5 * 2.0**-16,
        0.0625,
        0.0703125,
        240.0,
        248.0,
        256.0,
        1.0625,
        1.1875,
        -1.0625,
        2.0**-10 * 1.5,
    ]
    rng = np.random.default_rng(7)
    vals = np.concatenate(
        [np.array(special), rng.normal(0, 30, 100), rng.uniform(-1, 1, 60) * 2.0**-6, rng.uniform(-60000, 60000, 37)]
    ).astype(np.float32)
    return vals[: len(vals) // 2 * 2]


@pytest.mark.parametrize("fmt", ["e4m3x2", "e5m2x2"])
def test_fp8_pack_unpack_and_tf32(fmt: str) -> None:
    x = _inputs()
    n = len(x) // 2
    out = np.zeros((n, 2), np.uint16)
    back = np.zeros((n, 2), np.float16)
    tf = np.zeros((n, 3), np.uint32)
    launch(PACK.replace("FMT", fmt), "k", (1,), (n,), x, out, back, tf)
    for i in range(n):
        a, b = float(x[2 * i]), float(x[2 * i + 1])
        want = encode(a, fmt) << 8 | encode(b, fmt)  # a in the upper byte
        assert out[i, 0] == want, (fmt, a, b, hex(int(out[i, 0])), hex(want))
        assert out[i, 1] == encode(a, fmt, True) << 8 | encode(b, fmt, True), (fmt, a, b)
        for k, code in ((1, want >> 8), (0, want & 0xFF)):  # decoding the pair: upper byte -> upper half
            got, ref = float(back[i, k]), decode(code, fmt)
            assert got == ref or (math.isnan(got) and math.isnan(ref)), (fmt, code, got, ref)
        bits = struct.unpack("<I", struct.pack("<f", a))[0]
        if math.isnan(a):
            assert list(tf[i]) == [0x7FFFFFFF] * 3
            continue
        even = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
        assert list(tf[i]) == [(bits + 0x1000) & 0xFFFFE000, even, bits & 0xFFFFE000], a


def test_fp8_model_is_the_formats() -> None:
    """The reference itself: E4M3 max 448 and no infinity, E5M2 max 57344 and an infinity."""
    assert decode(0x7E, "e4m3x2") == 448 and math.isnan(decode(0x7F, "e4m3x2"))
    assert decode(0x01, "e4m3x2") == 2.0**-9 and decode(0x08, "e4m3x2") == 2.0**-6
    assert decode(0x7B, "e5m2x2") == 57344 and decode(0x7C, "e5m2x2") == math.inf
    assert decode(0x01, "e5m2x2") == 2.0**-16
    assert encode(0.0703125, "e4m3x2") == 0x19  # 1.125 * 2^-4
    assert encode(1.0625, "e4m3x2") == 0x38 and encode(1.1875, "e4m3x2") == 0x3A  # ties go to the even code
    assert encode(500.0, "e4m3x2") == 0x7E and encode(-math.inf, "e5m2x2") == 0xFB  # saturated


def test_unknown_narrow_formats_are_not_supported() -> None:
    """sm_100's FP4/UE8M0 conversions are valid PTX we do not implement: NOT_SUPPORTED naming them."""
    from jit.errors import JitError

    ptx = (
        HEADER
        + """
.visible .entry k()
{
  .reg .b8 %c<2>; .reg .f32 %f<2>;
  mov.f32 %f0, 0f3F800000;
  cvt.rn.satfinite.e2m1x2.f32 %c0, %f0, %f0;
  ret;
}
"""
    )
    with pytest.raises(JitError) as ei:
        launch(ptx, "k", (1,), (1,))
    assert ei.value.code == 801 and "e2m1x2" in ei.value.message
    # stochastic rounding (sm_100a cvt.rs ... d, a, b, rbits) would otherwise round to nearest: refused
    rs = ptx.replace(".reg .b8 %c<2>;", ".reg .b32 %r<2>;").replace(
        "cvt.rn.satfinite.e2m1x2.f32 %c0, %f0, %f0;", "mov.b32 %r0, 7; cvt.rs.f16x2.f32 %r1, %f0, %f0, %r0;"
    )
    with pytest.raises(JitError) as ei:
        launch(rs, "k", (1,), (1,))
    assert ei.value.code == 801 and "cvt.rs" in ei.value.message
