"""8-bit floats (E4M3, E5M2) and TF32 for `cvt`: exact decoding, and encoding with one rounding.

NOTE [fp8 and tf32]
* `cvt.rn.satfinite{.relu}.e4m3x2|e5m2x2.f32 d, a, b` packs a into the upper byte of the b16 d and b into the lower;
  `.f16x2` sources take the upper and lower half. Rounding is to nearest even, done once on the exact f32 value: the
  magnitude is scaled by the format's ulp at its exponent (a power of two, so exact), rounded with `rint`, and the
  rounded value is encoded from its f32 bits (E4M3: bias 7, 3 mantissa bits, no infinities, max 448; E5M2: bias 15,
  2 mantissa bits, max finite 57344). `.satfinite` clamps everything beyond the largest finite value (infinities
  included) to it; NaN becomes 0x7F; `.relu` turns negatives into +0.
* `cvt.rn.f16x2.e4m3x2|e5m2x2 d, a` decodes both bytes exactly (every value is an f16).
* `cvt.rna|rn|rz{.satfinite}.tf32.f32 d, a`: the f32 bit pattern rounded to 10 mantissa bits (ties away from zero,
  to even, or truncated); NaN stays a canonical NaN.
"""

from __future__ import annotations

from llvmlite import ir

from jit.errors import not_supported
from jit.lower.core import FuncLowering
from jit.lower.types import F32, I8, I32

# (exponent bias, mantissa bits, largest finite code without sign, largest finite value)
FP8 = {"e4m3x2": (7, 3, 0x7E, 448.0), "e5m2x2": (15, 2, 0x7B, 57344.0)}


def _c(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def fp8_encode(fl: FuncLowering, x: ir.Value, fmt: str, relu: bool) -> ir.Value:
    """One f32 -> one 8-bit code (i8), round to nearest even, saturating to the largest finite value."""
    b = fl.b
    bias, m, maxcode, maxv = FP8[fmt]
    bits = b.bitcast(x, I32)
    sign = b.and_(b.lshr(bits, _c(24)), _c(0x80))
    mag = b.and_(bits, _c(0x7FFFFFFF))
    is_nan = b.icmp_unsigned(">", mag, _c(0x7F800000))
    # clamp the magnitude first (an infinity would make the scaling below meaningless); 2 * max rounds to max
    absx = b.bitcast(mag, F32)
    absx = b.select(b.fcmp_ordered(">", absx, ir.Constant(F32, 2 * maxv)), ir.Constant(F32, 2 * maxv), absx)
    # ulp at x's exponent, or the subnormal ulp: 2^(max(e, 1 - bias) - m), as f32 bits
    e = b.sub(b.lshr(b.bitcast(absx, I32), _c(23)), _c(127))
    e = b.select(b.icmp_signed("<", e, _c(1 - bias)), _c(1 - bias), e)
    ulp = b.bitcast(b.shl(b.add(b.sub(e, _c(m)), _c(127)), _c(23)), F32)
    q = fl.call_intr("llvm.rint.f32", F32, [b.fdiv(absx, ulp)])  # exact division by a power of two
    val = b.fmul(q, ulp)
    vb = b.bitcast(val, I32)
    normal = b.or_(
        b.shl(b.sub(b.lshr(vb, _c(23)), _c(127 - bias)), _c(m)), b.and_(b.lshr(vb, _c(23 - m)), _c((1 << m) - 1))
    )
    small = b.fcmp_ordered("<", val, ir.Constant(F32, 2.0 ** (1 - bias)))
    code = b.select(small, b.fptoui(q, I32), normal)  # a subnormal is its count of ulps (2^m: the smallest normal)
    code = b.select(b.icmp_unsigned(">", code, _c(maxcode)), _c(maxcode), code)
    code = b.or_(code, sign)
    if relu:
        code = b.select(b.icmp_unsigned("!=", sign, _c(0)), _c(0), code)
    code = b.select(is_nan, _c(0x7F), code)
    return b.trunc(code, I8)


def fp8_decode(fl: FuncLowering, code: ir.Value, fmt: str) -> ir.Value:
    """One 8-bit code (i32 0..255) -> its exact f32 value (NaN codes -> NaN; E5M2 infinities -> infinity)."""
    b = fl.b
    bias, m, _, _ = FP8[fmt]
    ebits = 7 - m
    exp = b.and_(b.lshr(code, _c(m)), _c((1 << ebits) - 1))
    man = b.and_(code, _c((1 << m) - 1))
    neg = b.icmp_unsigned("!=", b.and_(code, _c(0x80)), _c(0))
    sub_v = b.fmul(b.uitofp(man, F32), ir.Constant(F32, 2.0 ** (1 - bias - m)))
    norm_bits = b.or_(b.shl(b.add(exp, _c(127 - bias)), _c(23)), b.shl(man, _c(23 - m)))
    v = b.select(b.icmp_unsigned("==", exp, _c(0)), sub_v, b.bitcast(norm_bits, F32))
    top = (1 << ebits) - 1
    if fmt == "e4m3x2":  # S.1111.111 is NaN, no infinities
        special = b.icmp_unsigned("==", b.and_(code, _c(0x7F)), _c(0x7F))
        v = b.select(special, ir.Constant(F32, float("nan")), v)
    else:  # IEEE-like: exponent all ones is infinity (mantissa 0) or NaN
        is_top = b.icmp_unsigned("==", exp, _c(top))
        v = b.select(
            is_top,
            b.select(b.icmp_unsigned("==", man, _c(0)), ir.Constant(F32, float("inf")), ir.Constant(F32, float("nan"))),
            v,
        )
    return b.select(neg, b.fneg(v), v)


def tf32_round(fl: FuncLowering, x: ir.Value, mode: str) -> ir.Value:
    """The f32 bit pattern of x rounded to TF32's 10 mantissa bits (as i32)."""
    b = fl.b
    bits = b.bitcast(x, I32)
    if mode == "rna":
        r = b.add(bits, _c(0x1000))
    elif mode == "rn":
        r = b.add(bits, b.add(_c(0xFFF), b.and_(b.lshr(bits, _c(13)), _c(1))))
    elif mode == "rz":
        r = bits
    else:
        raise not_supported(f"cvt.{mode}.tf32.f32")
    r = b.and_(r, _c(~0x1FFF & 0xFFFFFFFF))
    is_nan = b.fcmp_unordered("uno", x, x)
    return b.select(is_nan, _c(0x7FFFFFFF), r)


__all__ = ["FP8", "fp8_decode", "fp8_encode", "tf32_round"]
