"""cvt: every integer/float/half combination with rounding, .sat and .ftz (float->int always saturates)."""

from __future__ import annotations

from llvmlite import ir

from jit.errors import not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.narrow_floats import FP8, fp8_decode, fp8_encode, tf32_round
from jit.lower.ops_float import bf16_to_f32, directed, f32_to_bf16, ftz, sat
from jit.lower.types import F16, F32, F64, I16, I32, I64, compute_type, ins_types, is_float, is_signed, suffix
from jit.ptx import ast as A

_IROUND = {"rni": "roundeven", "rzi": "trunc", "rmi": "floor", "rpi": "ceil"}


def _to_float_src(fl: FuncLowering, v: ir.Value, t: str) -> ir.Value:
    if t == "bf16":
        return bf16_to_f32(fl, v)
    if t == "f16":
        return fl.b.fpext(v, F32)
    return v


def _narrow(fl: FuncLowering, x: ir.Value, to: ir.Type, mode: str) -> ir.Value:
    """Round float x (f32/f64) to a narrower float type with mode."""
    b = fl.b
    y = b.fptrunc(x, to)
    if mode in ("rz", "rm", "rp"):  # y is correctly rounded to nearest; step it when the exact x lies the other way
        back = b.fpext(y, x.type)
        y = directed(fl, y, b.fcmp_ordered(">", x, back), b.fcmp_ordered("<", x, back), mode)
    return y


def _cvt_narrow(fl: FuncLowering, ins: A.Instr, dt: str, st: str, mode: str) -> None:
    b = fl.b
    ops = ins.operands
    if dt == "tf32" and st == "f32":
        fl.put(ops[0], tf32_round(fl, fl.get(ops[1], "f32"), mode), "b32")
        return
    if dt in FP8 and mode == "rn" and ins.has("satfinite") and st in ("f32", "f16x2"):
        if st == "f32":  # a -> upper byte, b -> lower byte
            hi, lo = fl.get(ops[1], "f32"), fl.get(ops[2], "f32")
        else:
            h2 = fl.get(ops[1], "b32")
            lo, hi = (b.fpext(b.bitcast(b.trunc(b.lshr(h2, ir.Constant(I32, s)), I16), F16), F32) for s in (0, 16))
        parts = [b.zext(fp8_encode(fl, x, dt, ins.has("relu")), I16) for x in (lo, hi)]
        fl.put(ops[0], b.or_(parts[0], b.shl(parts[1], ir.Constant(I16, 8))), "b16")
        return
    if st in FP8 and dt == "f16x2" and not ins.has("relu"):
        v = b.zext(fl.get(ops[1], "b16"), I32)
        halves = [
            b.zext(
                b.bitcast(
                    b.fptrunc(fp8_decode(fl, b.and_(b.lshr(v, ir.Constant(I32, s)), ir.Constant(I32, 0xFF)), st), F16),
                    I16,
                ),
                I32,
            )
            for s in (0, 8)
        ]
        fl.put(ops[0], b.or_(halves[0], b.shl(halves[1], ir.Constant(I32, 16))), "b32")
        return
    raise not_supported(f"'cvt.{'.'.join(ins.mods)}'", ins.line)


def _cvt_pack(fl: FuncLowering, ins: A.Instr) -> None:
    """cvt.pack.sat.{u16,s16}.s32 d, a, b and cvt.pack.sat.{u2,s2,u4,s4,u8,s8}.s32.b32 d, a, b, c: a and b
    saturated to N bits, d = c << 2N | a << N | b (a above b; c's low bits shifted out)."""
    b = fl.b
    kind = next(m for m in ins.mods if m[0] in "us" and m[1:] in ("2", "4", "8", "16"))
    n, signed = int(kind[1:]), kind[0] == "s"
    lo, hi = (-(1 << (n - 1)), (1 << (n - 1)) - 1) if signed else (0, (1 << n) - 1)
    mask = ir.Constant(I32, (1 << n) - 1)

    def sat(o: A.Operand) -> ir.Value:
        v = fl.get(o, "s32")
        v = b.select(b.icmp_signed("<", v, ir.Constant(I32, lo)), ir.Constant(I32, lo), v)
        v = b.select(b.icmp_signed(">", v, ir.Constant(I32, hi)), ir.Constant(I32, hi), v)
        return b.and_(v, mask)

    ops = ins.operands
    d = b.or_(b.shl(sat(ops[1]), ir.Constant(I32, n)), sat(ops[2]))
    if len(ops) > 3:
        d = b.or_(b.shl(fl.get(ops[3], "b32"), ir.Constant(I32, 2 * n)), d)
    fl.put(ops[0], d, "b32")


@op("cvt")
def cvt(fl: FuncLowering, ins: A.Instr) -> None:
    b = fl.b
    if ins.has("pack"):
        _cvt_pack(fl, ins)
        return
    if len(ins_types(ins.mods)) < 2 or ins.has("rs"):  # sm_100's e2m1x2/ue8m0x2 types; stochastic rounding
        raise not_supported(f"'cvt.{'.'.join(ins.mods)}'", ins.line)
    dt, st = fl.itype(ins, -2), fl.itype(ins, -1)
    mode = next((m for m in ins.mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi", "rna", "rs")), "")
    d = ins.operands[0]
    if dt in FP8 or st in FP8 or dt == "tf32":  # NOTE [fp8 and tf32] (jit/lower/narrow_floats.py)
        _cvt_narrow(fl, ins, dt, st, mode)
        return
    if dt in ("f16x2", "bf16x2"):  # cvt.rn.f16x2.f32 d, a, b: a -> upper half, b -> lower half
        hi, lo = fl.get(ins.operands[1], st), fl.get(ins.operands[2], st)
        parts = []
        for x in (lo, hi):
            if ins.has("relu"):
                x = b.select(b.fcmp_ordered("<", x, ir.Constant(x.type, 0.0)), ir.Constant(x.type, 0.0), x)
            parts.append(b.bitcast(b.fptrunc(x, F16), I16) if dt == "f16x2" else f32_to_bf16(fl, x))
        fl.put(d, b.or_(b.zext(parts[0], I32), b.shl(b.zext(parts[1], I32), ir.Constant(I32, 16))), "b32")
        return
    v = fl.get(ins.operands[1], st)
    if ins.has("ftz") and st == "f32":
        v = ftz(fl, v)
    dty = compute_type(dt)
    sf, df = is_float(st), is_float(dt)
    if sf and df:
        x = _to_float_src(fl, v, st)
        if mode in _IROUND:
            x = fl.call_intr(f"llvm.{_IROUND[mode]}.{suffix(x.type)}", x.type, [x])
        if dt == "bf16":
            r = f32_to_bf16(
                fl,
                x if x.type == F32 else _narrow(fl, x, F32, "rz" if mode == "rz" else "rn"),
                mode if mode in ("rz", "rm", "rp") else "rn",
            )
        elif dt == "f16":
            r = _narrow(fl, x, F16, mode or "rn") if x.type != F16 else x
        elif x.type == dty:
            r = x
        elif _fbits(x.type) < _fbits(dty):
            r = b.fpext(x, dty)
        else:
            r = _narrow(fl, x, dty, mode or "rn")
        if ins.has("sat"):
            r = sat(fl, r) if r.type in (F32, F64) else b.fptrunc(sat(fl, b.fpext(r, F32)), F16)
        if ins.has("ftz") and r.type == F32:
            r = ftz(fl, r)
        fl.put(d, r, dt)
        return
    if sf:  # float -> int, saturating
        x = _to_float_src(fl, v, st)
        fn = _IROUND.get(mode, "trunc")
        x = fl.call_intr(f"llvm.{fn}.{suffix(x.type)}", x.type, [x])
        kind = "fptosi" if is_signed(dt) else "fptoui"
        r = fl.call_intr(f"llvm.{kind}.sat.{suffix(dty)}.{suffix(x.type)}", dty, [x])
        fl.put(d, r, dt)
        return
    if df:  # int -> float
        tgt = F32 if dt in ("f16", "bf16") else dty
        conv = b.sitofp if is_signed(st) else b.uitofp
        y = conv(v, tgt)
        if mode in ("rz", "rm", "rp") and tgt in (F32, F64):
            above, below = _int_vs_float(fl, v, y, is_signed(st))
            y = directed(fl, y, above, below, mode)
        if dt == "f16":
            y = _narrow(fl, conv(v, F64), F16, mode or "rn")
        elif dt == "bf16":
            y = f32_to_bf16(fl, y)
        if ins.has("sat") and dt in ("f32", "f64"):
            y = sat(fl, y)
        fl.put(d, y, dt)
        return
    # int -> int
    dw, sw = dty.width, v.type.width
    if ins.has("sat"):
        lo, hi = _range(dt)
        slo, shi = _range(st)
        wide = ir.IntType(max(dw, sw) + 1)
        ext = b.sext if is_signed(st) else b.zext
        x = ext(v, wide)
        if lo > slo:
            x = b.select(b.icmp_signed("<", x, ir.Constant(wide, lo)), ir.Constant(wide, lo), x)
        if hi < shi:
            x = b.select(b.icmp_signed(">", x, ir.Constant(wide, hi)), ir.Constant(wide, hi), x)
        r = b.trunc(x, dty)
    elif dw < sw:
        r = b.trunc(v, dty)
    elif dw > sw:
        r = b.sext(v, dty) if is_signed(st) else b.zext(v, dty)
    else:
        r = v
    fl.put(d, r, dt)


def _int_vs_float(fl: FuncLowering, v: ir.Value, y: ir.Value, signed: bool) -> tuple[ir.Value, ir.Value]:
    """(exact > y, exact < y) for an integer v and its round-to-nearest float y, without i128 conversions
    (those call compiler-rt helpers that a JIT'd object cannot resolve)."""
    b = fl.b
    if v.type.width <= 32:  # exact in f64
        d = (b.sitofp if signed else b.uitofp)(v, F64)
        yy = b.fpext(y, F64) if y.type != F64 else y
        return b.fcmp_ordered(">", d, yy), b.fcmp_ordered("<", d, yy)
    x = b.sext(v, I64) if signed else b.zext(v, I64)
    kind = "fptosi" if signed else "fptoui"
    back = fl.call_intr(f"llvm.{kind}.sat.i64.{suffix(y.type)}", I64, [y])
    big = b.fcmp_ordered(">=", y, ir.Constant(y.type, 2.0 ** (63 if signed else 64)))  # y rounded past the range
    cmp = b.icmp_signed if signed else b.icmp_unsigned
    above = b.and_(b.not_(big), cmp(">", x, back))
    below = b.or_(big, cmp("<", x, back))
    return above, below


def _fbits(t: ir.Type) -> int:
    return {F16: 16, F32: 32, F64: 64}[t]


def _range(t: str) -> tuple[int, int]:
    n = int(t[1:])
    if is_signed(t):
        return -(1 << (n - 1)), (1 << (n - 1)) - 1
    return 0, (1 << n) - 1
