"""Floating-point instructions: f32/f64 with rounding modes, .ftz and .sat; f16/bf16 scalar and x2 lanes."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from jit.lower.core import FuncLowering, op
from jit.lower.types import F16, F32, F64, I1, I16, I32, I64, float_bits_const, suffix
from jit.ptx import ast as A

ROUND = ("rn", "rz", "rm", "rp")
HALF_TYPES = ("f16", "bf16", "f16x2", "bf16x2")


def rmode(ins: A.Instr) -> str:
    return next((m for m in ins.mods if m in ROUND), "rn")


def _ity(ty: ir.Type) -> ir.IntType:
    return {F16: I16, F32: I32}.get(ty, I64)


def ftz(fl: FuncLowering, x: ir.Value) -> ir.Value:
    """Flush an f32 subnormal to a zero of the same sign."""
    if x.type != F32:
        return x
    b = fl.b
    bits = b.bitcast(x, I32)
    sub = b.icmp_unsigned("==", b.and_(bits, ir.Constant(I32, 0x7F800000)), ir.Constant(I32, 0))
    return b.bitcast(b.select(sub, b.and_(bits, ir.Constant(I32, 0x80000000)), bits), F32)


def sat(fl: FuncLowering, x: ir.Value) -> ir.Value:
    """Clamp to [0, 1]; NaN becomes 0."""
    b = fl.b
    lo = b.select(b.fcmp_ordered(">", x, ir.Constant(x.type, 0.0)), x, ir.Constant(x.type, 0.0))
    return b.select(b.fcmp_ordered(">", lo, ir.Constant(x.type, 1.0)), ir.Constant(x.type, 1.0), lo)


def relu(fl: FuncLowering, x: ir.Value) -> ir.Value:
    """.relu (fma/min/max on f16/bf16): negative results (and -0) become +0; NaN becomes the canonical NaN (all-ones
    mantissa, which pack() narrows to 0x7FFF for f16 and bf16)."""
    b = fl.b
    zero = ir.Constant(x.type, 0.0)
    y = b.select(b.fcmp_ordered("<=", x, zero), zero, x)
    return b.select(
        b.fcmp_unordered("uno", x, x), float_bits_const(x.type, (1 << (63 if x.type == F64 else 31)) - 1), y
    )


def step(fl: FuncLowering, y: ir.Value, up: bool) -> ir.Value:
    """Next representable value above (up) or below y."""
    b = fl.b
    it = _ity(y.type)
    bits = b.bitcast(y, it)
    one = ir.Constant(it, 1)
    neg = b.icmp_signed("<", bits, ir.Constant(it, 0))
    zero = b.fcmp_ordered("==", y, ir.Constant(y.type, 0.0))
    if up:
        nb = b.select(neg, b.sub(bits, one), b.add(bits, one))
        nb = b.select(zero, one, nb)
    else:
        nb = b.select(neg, b.add(bits, one), b.sub(bits, one))
        nb = b.select(zero, ir.Constant(it, (1 << (it.width - 1)) | 1), nb)
    isnan = b.fcmp_unordered("uno", y, y)
    return b.select(isnan, y, b.bitcast(nb, y.type))


def directed(fl: FuncLowering, y: ir.Value, above: ir.Value, below: ir.Value, mode: str) -> ir.Value:
    """Adjust a round-to-nearest result y given whether the exact value lies above/below it."""
    b = fl.b
    if mode == "rn":
        return y
    if mode == "rp":
        return b.select(above, step(fl, y, True), y)
    if mode == "rm":
        return b.select(below, step(fl, y, False), y)
    pos = b.fcmp_ordered(">", y, ir.Constant(y.type, 0.0))
    negv = b.fcmp_ordered("<", y, ir.Constant(y.type, 0.0))
    return b.select(b.and_(pos, below), step(fl, y, False), b.select(b.and_(negv, above), step(fl, y, True), y))


def _sign(fl: FuncLowering, e: ir.Value) -> tuple[ir.Value, ir.Value]:
    z = ir.Constant(e.type, 0.0)
    return fl.b.fcmp_ordered(">", e, z), fl.b.fcmp_ordered("<", e, z)


def fma_intr(fl: FuncLowering, a: ir.Value, c: ir.Value, d: ir.Value) -> ir.Value:
    return fl.call_intr(f"llvm.fma.{suffix(a.type)}", a.type, [a, c, d])


def two_sum_err(fl: FuncLowering, a: ir.Value, c: ir.Value, s: ir.Value) -> ir.Value:
    b = fl.b
    bb = b.fsub(s, a)
    return b.fadd(b.fsub(a, b.fsub(s, bb)), b.fsub(c, bb))


def _post(fl: FuncLowering, ins: A.Instr, r: ir.Value) -> ir.Value:
    if ins.has("ftz"):
        r = ftz(fl, r)
    if ins.has("sat"):
        r = sat(fl, r)
    return r


def _srcs(fl: FuncLowering, ins: A.Instr, t: str, n: int) -> list[ir.Value]:
    vals = [fl.get(o, t) for o in ins.operands[1 : 1 + n]]
    return [ftz(fl, v) for v in vals] if ins.has("ftz") else vals


# -- f16 / bf16 lanes ----------------------------------------------------------------------------
def bf16_to_f32(fl: FuncLowering, v: ir.Value) -> ir.Value:
    b = fl.b
    return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32)


def f32_to_bf16(fl: FuncLowering, x: ir.Value, mode: str = "rn") -> ir.Value:
    b = fl.b
    bits = b.bitcast(x, I32)
    hi = b.lshr(bits, ir.Constant(I32, 16))
    if mode == "rn":
        lsb = b.and_(hi, ir.Constant(I32, 1))
        r = b.lshr(b.add(b.add(bits, ir.Constant(I32, 0x7FFF)), lsb), ir.Constant(I32, 16))
    else:  # rz truncates; rm/rp move the magnitude up when the dropped bits point away from zero
        inexact = b.icmp_unsigned("!=", b.and_(bits, ir.Constant(I32, 0xFFFF)), ir.Constant(I32, 0))
        neg = b.icmp_signed("<", bits, ir.Constant(I32, 0))
        up = {"rz": ir.Constant(I1, 0), "rm": neg, "rp": b.not_(neg)}.get(mode, ir.Constant(I1, 0))
        r = b.add(hi, b.zext(b.and_(inexact, up), I32))
    nan = b.fcmp_unordered("uno", x, x)
    qn = b.or_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 0x40))
    return b.trunc(b.select(nan, qn, r), I16)


def unpack(fl: FuncLowering, v: ir.Value, t: str) -> list[ir.Value]:
    """Lanes of a half-precision value as f64."""
    b = fl.b
    if t in ("f16x2", "bf16x2"):
        parts = [b.trunc(v, I16), b.trunc(b.lshr(v, ir.Constant(I32, 16)), I16)]
        t = t[:-2]
    else:
        parts = [v]
    out = []
    for p in parts:
        if t == "f16":
            h = p if p.type == F16 else b.bitcast(p, F16)
            out.append(b.fpext(h, F64))
        else:
            out.append(b.fpext(bf16_to_f32(fl, p), F64))
    return out


def pack(fl: FuncLowering, vals: list[ir.Value], t: str) -> ir.Value:
    b = fl.b
    base = t[:-2] if t.endswith("x2") else t
    hs = []
    for x in vals:
        if base == "f16":
            hs.append(b.bitcast(b.fptrunc(x, F16), I16) if t.endswith("x2") else b.fptrunc(x, F16))
        else:
            hs.append(f32_to_bf16(fl, b.fptrunc(x, F32)))
    if len(hs) == 1:
        return hs[0]
    return b.or_(b.zext(hs[0], I32), b.shl(b.zext(hs[1], I32), ir.Constant(I32, 16)))


def lanes(fl: FuncLowering, ins: A.Instr, t: str, n: int, f: Callable[..., ir.Value]) -> None:
    srcs = [unpack(fl, fl.get(o, t), t) for o in ins.operands[1 : 1 + n]]
    res = []
    for k in range(len(srcs[0])):
        r = f(*[s[k] for s in srcs])
        if ins.has("sat"):
            r = sat(fl, r)
        if ins.has("relu"):
            r = relu(fl, r)
        res.append(r)
    fl.put(ins.operands[0], pack(fl, res, t), t)


# -- arithmetic ----------------------------------------------------------------------------------
def float_binop(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    opn = ins.opcode
    f = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul}[opn]
    if t in HALF_TYPES:
        lanes(fl, ins, t, 2, lambda x, y: f(x, y))
        return
    a, c = _srcs(fl, ins, t, 2)
    y = f(a, c)
    mode = rmode(ins)
    if mode != "rn":
        if opn == "mul":
            e = fma_intr(fl, a, c, b.fneg(y))
        else:
            c2 = b.fneg(c) if opn == "sub" else c
            e = two_sum_err(fl, a, c2, y)
        y = directed(fl, y, *_sign(fl, e), mode)
    fl.put(ins.operands[0], _post(fl, ins, y), t)


@op("fma")
def fma(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    if t in HALF_TYPES:
        lanes(fl, ins, t, 3, lambda x, y, z: b.fadd(b.fmul(x, y), z) if t.startswith("bf") else fma_intr(fl, x, y, z))
        return
    a, c, d = _srcs(fl, ins, t, 3)
    if ins.opcode == "mad" and not any(m in ins.mods for m in ROUND) and t == "f32":
        y = b.fadd(b.fmul(a, c), d)  # mad.f32 without rounding: mul+add, as sm_1x did
    else:
        y = fma_intr(fl, a, c, d)
    mode = rmode(ins)
    if mode != "rn":
        if t == "f32":
            p = b.fmul(b.fpext(a, F64), b.fpext(c, F64))
            dd = b.fpext(d, F64)
            s = b.fadd(p, dd)
            e = b.fadd(b.fsub(s, b.fpext(y, F64)), two_sum_err(fl, p, dd, s))
        else:
            e = fma_intr(fl, a, c, b.fsub(d, y))
        y = directed(fl, y, *_sign(fl, e), mode)
    fl.put(ins.operands[0], _post(fl, ins, y), t)


def float_div(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    a, c = _srcs(fl, ins, t, 2)
    y = b.fdiv(a, c)
    mode = rmode(ins)
    if mode != "rn" and not ins.has("approx", "full"):
        r = fma_intr(fl, b.fneg(y), c, a)
        rp, rn = _sign(fl, r)
        cpos = b.fcmp_ordered(">", c, ir.Constant(c.type, 0.0))
        above = b.select(cpos, rp, rn)
        below = b.select(cpos, rn, rp)
        y = directed(fl, y, above, below, mode)
    fl.put(ins.operands[0], _post(fl, ins, y), t)


def float_unop(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    if t in HALF_TYPES:
        # abs/neg on halves are bit operations (NaN payload kept)
        v = fl.get(ins.operands[1], t)
        iv = v if isinstance(v.type, ir.IntType) else b.bitcast(v, I16)
        w = iv.type.width
        m = 0x80008000 if w == 32 else 0x8000
        r = (
            b.xor(iv, ir.Constant(iv.type, m))
            if ins.opcode == "neg"
            else b.and_(iv, ir.Constant(iv.type, ~m & ((1 << w) - 1)))
        )
        fl.put(ins.operands[0], r, "b32" if w == 32 else "b16")
        return
    (a,) = _srcs(fl, ins, t, 1)
    r = b.fneg(a) if ins.opcode == "neg" else fl.call_intr(f"llvm.fabs.{suffix(a.type)}", a.type, [a])
    fl.put(ins.operands[0], _post(fl, ins, r), t)


def float_minmax(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    name = ins.opcode + ("imum" if ins.has("NaN") else "imumnum")

    def f(x: ir.Value, y: ir.Value) -> ir.Value:
        x0, y0 = x, y
        if ins.has("xorsign"):  # .xorsign.abs: min/max of |a| and |b|, with the sign sign(a) ^ sign(b)
            x, y = (fl.call_intr(f"llvm.fabs.{suffix(v.type)}", v.type, [v]) for v in (x, y))
        r = fl.call_intr(f"llvm.{name}.{suffix(x.type)}", x.type, [x, y])
        isnan = b.fcmp_unordered("uno", r, r)
        if not ins.has("NaN"):  # both NaN -> canonical NaN
            r = b.select(isnan, ir.Constant(x.type, float("nan")), r)
        if ins.has("xorsign"):
            it = ir.IntType({F16: 16, F32: 32, F64: 64}[x.type])
            sign = b.and_(b.xor(b.bitcast(x0, it), b.bitcast(y0, it)), ir.Constant(it, 1 << (it.width - 1)))
            r = b.select(isnan, r, b.bitcast(b.or_(b.bitcast(r, it), sign), x.type))
        return r

    if t in HALF_TYPES:
        lanes(fl, ins, t, 2, f)
        return
    a, c = _srcs(fl, ins, t, 2)
    r = f(a, c)
    if t == "f32":
        r = b.select(b.fcmp_unordered("uno", r, r), ir.Constant(I32, 0x7FFFFFFF).bitcast(F32), r)
    fl.put(ins.operands[0], _post(fl, ins, r), t)


_FCMP = {
    "eq": ("==", True),
    "ne": ("!=", True),
    "lt": ("<", True),
    "le": ("<=", True),
    "gt": (">", True),
    "ge": (">=", True),
    "equ": ("==", False),
    "neu": ("!=", False),
    "ltu": ("<", False),
    "leu": ("<=", False),
    "gtu": (">", False),
    "geu": (">=", False),
    "num": ("ord", True),
    "nan": ("uno", False),
}


def float_compare(fl: FuncLowering, cmp: str, a: ir.Value, c: ir.Value, flush: bool) -> ir.Value:
    if flush:
        a, c = ftz(fl, a), ftz(fl, c)
    if a.type == F16:
        a, c = fl.b.fpext(a, F32), fl.b.fpext(c, F32)
    o, ordered = _FCMP[cmp]
    return fl.b.fcmp_ordered(o, a, c) if ordered else fl.b.fcmp_unordered(o, a, c)


def setp_x2(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    a = unpack(fl, fl.get(ins.operands[1], t), t)
    c = unpack(fl, fl.get(ins.operands[2], t), t)
    cmp = next(m for m in ins.mods if m in _FCMP)
    ps = [float_compare(fl, cmp, a[k], c[k], False) for k in range(2)]
    d = ins.operands[0]
    if isinstance(d, A.PredPair):
        fl.put(d.first, ps[0])
        fl.put(d.second, ps[1])
    else:
        fl.put(d, fl.b.and_(ps[0], ps[1]))


# -- transcendental and friends ------------------------------------------------------------------
def _unary(fl: FuncLowering, ins: A.Instr, f: Callable[[ir.Value], ir.Value]) -> None:
    t = fl.itype(ins)
    if t in HALF_TYPES:
        lanes(fl, ins, t, 1, lambda x: fl.b.fpext(f(fl.b.fptrunc(x, F32)), F64))
        return
    (a,) = _srcs(fl, ins, t, 1)
    fl.put(ins.operands[0], _post(fl, ins, f(a)), t)


def _libm(fl: FuncLowering, name: str, x: ir.Value) -> ir.Value:
    n = name + ("f" if x.type == F32 else "")
    return fl.call_intr(n, x.type, [x])


@op("rcp")
def rcp(fl: FuncLowering, ins: A.Instr) -> None:
    mode = rmode(ins)

    def f(x: ir.Value) -> ir.Value:
        y = fl.b.fdiv(ir.Constant(x.type, 1.0), x)
        if mode != "rn" and not ins.has("approx"):
            r = fma_intr(fl, fl.b.fneg(y), x, ir.Constant(x.type, 1.0))
            rp, rn = _sign(fl, r)
            xpos = fl.b.fcmp_ordered(">", x, ir.Constant(x.type, 0.0))
            y = directed(fl, y, fl.b.select(xpos, rp, rn), fl.b.select(xpos, rn, rp), mode)
        return y

    _unary(fl, ins, f)


@op("sqrt")
def sqrt(fl: FuncLowering, ins: A.Instr) -> None:
    mode = rmode(ins)

    def f(x: ir.Value) -> ir.Value:
        y = fl.call_intr(f"llvm.sqrt.{suffix(x.type)}", x.type, [x])
        if mode != "rn" and not ins.has("approx"):
            r = fma_intr(fl, fl.b.fneg(y), y, x)
            y = directed(fl, y, *_sign(fl, r), mode)
        return y

    _unary(fl, ins, f)


@op("rsqrt")
def rsqrt(fl: FuncLowering, ins: A.Instr) -> None:
    _unary(
        fl, ins, lambda x: fl.b.fdiv(ir.Constant(x.type, 1.0), fl.call_intr(f"llvm.sqrt.{suffix(x.type)}", x.type, [x]))
    )


@op("ex2")
def ex2(fl: FuncLowering, ins: A.Instr) -> None:
    _unary(fl, ins, lambda x: fl.call_intr(f"llvm.exp2.{suffix(x.type)}", x.type, [x]))


@op("lg2")
def lg2(fl: FuncLowering, ins: A.Instr) -> None:
    _unary(fl, ins, lambda x: fl.call_intr(f"llvm.log2.{suffix(x.type)}", x.type, [x]))


@op("sin", "cos")
def sincos(fl: FuncLowering, ins: A.Instr) -> None:
    _unary(fl, ins, lambda x: fl.call_intr(f"llvm.{ins.opcode}.{suffix(x.type)}", x.type, [x]))


@op("tanh")
def tanh(fl: FuncLowering, ins: A.Instr) -> None:
    _unary(fl, ins, lambda x: _libm(fl, "tanh", x))


@op("copysign")
def copysign(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    a, c = fl.get(ins.operands[1], t), fl.get(ins.operands[2], t)
    fl.put(ins.operands[0], fl.call_intr(f"llvm.copysign.{suffix(a.type)}", a.type, [c, a]), t)


@op("testp")
def testp(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    a = fl.get(ins.operands[1], t)
    it = _ity(a.type)
    bits = b.bitcast(a, it)
    ew = 8 if a.type == F32 else 11
    mw = it.width - 1 - ew
    emask = ((1 << ew) - 1) << mw
    exp = b.and_(bits, ir.Constant(it, emask))
    mant = b.and_(bits, ir.Constant(it, (1 << mw) - 1))
    e_all = b.icmp_unsigned("==", exp, ir.Constant(it, emask))
    e_zero = b.icmp_unsigned("==", exp, ir.Constant(it, 0))
    m_zero = b.icmp_unsigned("==", mant, ir.Constant(it, 0))
    kind = next(m for m in ins.mods if m in ("finite", "infinite", "number", "notanumber", "normal", "subnormal"))
    r = {
        "finite": b.not_(e_all),
        "infinite": b.and_(e_all, m_zero),
        "number": b.not_(b.and_(e_all, b.not_(m_zero))),
        "notanumber": b.and_(e_all, b.not_(m_zero)),
        "normal": b.and_(b.not_(e_all), b.not_(e_zero)),
        "subnormal": b.and_(e_zero, b.not_(m_zero)),
    }[kind]
    fl.put(ins.operands[0], r)


__all__ = ["ftz", "sat", "directed", "bf16_to_f32", "f32_to_bf16", "I1", "I64"]
