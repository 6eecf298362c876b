"""Comparisons and moves: setp (all integer/float forms, .and/.or/.xor, p|q), set, selp, slct, mov."""

from __future__ import annotations

from llvmlite import ir

from jit.errors import not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.ops_int import _ops  # noqa: F401
from jit.lower.types import I32, compute_type, convert_bits, is_float, is_signed
from jit.ptx import ast as A

_ICMP = {
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "lo": "<",
    "ls": "<=",
    "hi": ">",
    "hs": ">=",
}


def compare(fl: FuncLowering, ins: A.Instr, t: str, a: ir.Value, c: ir.Value) -> ir.Value:
    cmp = next((m for m in ins.mods if m in _ICMP or m in FCMP_NAMES), None)
    if cmp is None:
        raise not_supported(f"comparison in {'.'.join([ins.opcode, *ins.mods])}", ins.line)
    if is_float(t):
        from jit.lower.ops_float import float_compare

        return float_compare(fl, cmp, a, c, ins.has("ftz"))
    if cmp in ("lo", "ls", "hi", "hs") or not is_signed(t):
        return fl.b.icmp_unsigned(_ICMP[cmp], a, c)
    return fl.b.icmp_signed(_ICMP[cmp], a, c)


FCMP_NAMES = {"equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}


def _combine(fl: FuncLowering, ins: A.Instr, p: ir.Value, k: int) -> ir.Value:
    for m in ("and", "or", "xor"):
        if m in ins.mods and len(ins.operands) > k:
            q = fl.get(ins.operands[k], "pred")
            return {"and": fl.b.and_, "or": fl.b.or_, "xor": fl.b.xor}[m](p, q)
    return p


@op("setp")
def setp(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    if t in ("f16x2", "bf16x2"):
        from jit.lower.ops_float import setp_x2

        return setp_x2(fl, ins)
    a, c = fl.get(ins.operands[1], t), fl.get(ins.operands[2], t)
    if t == "bf16":
        from jit.lower.ops_float import bf16_to_f32

        a, c = bf16_to_f32(fl, a), bf16_to_f32(fl, c)
        t = "f32"
    p = compare(fl, ins, t, a, c)
    d = ins.operands[0]
    if isinstance(d, A.PredPair):
        fl.put(d.first, _combine(fl, ins, p, 3))
        fl.put(d.second, _combine(fl, ins, fl.b.not_(p), 3))
    else:
        fl.put(d, _combine(fl, ins, p, 3))


@op("set")
def set_(fl: FuncLowering, ins: A.Instr) -> None:
    dt, st = fl.itype(ins, 0), fl.itype(ins, -1)
    if st in ("f16", "bf16", "f16x2", "bf16x2"):
        _set_half(fl, ins, dt, st)
        return
    a, c = fl.get(ins.operands[1], st), fl.get(ins.operands[2], st)
    p = _combine(fl, ins, compare(fl, ins, st, a, c), 3)
    ty = compute_type(dt)
    if is_float(dt):
        r = fl.b.select(p, ir.Constant(ty, 1.0), ir.Constant(ty, 0.0))
    else:
        r = fl.b.select(p, ir.Constant(ty, -1), ir.Constant(ty, 0))
    fl.put(ins.operands[0], r, dt)


def _set_half(fl: FuncLowering, ins: A.Instr, dt: str, st: str) -> None:
    """set on f16/bf16 sources, each half of an x2 pair on its own: true is 1.0 in a float result (f16 or bf16 per
    half for an x2 result) and all ones in an integer one (0xFFFF per half for an x2 source)."""
    from jit.lower.ops_float import float_compare, unpack

    b = fl.b
    cmp = next((m for m in ins.mods if m in _ICMP or m in FCMP_NAMES), None)
    if cmp is None:
        raise not_supported(f"comparison in {'.'.join([ins.opcode, *ins.mods])}", ins.line)
    xs, ys = (unpack(fl, fl.get(o, st), st) for o in ins.operands[1:3])
    ps = [_combine(fl, ins, float_compare(fl, cmp, x, y, ins.has("ftz")), 3) for x, y in zip(xs, ys, strict=True)]
    if dt in ("f16x2", "bf16x2", "u32", "s32", "b32") and len(ps) == 2:
        one = {"f16x2": 0x3C00, "bf16x2": 0x3F80}.get(dt, 0xFFFF)
        halves = [b.select(p, ir.Constant(I32, one), ir.Constant(I32, 0)) for p in ps]
        fl.put(ins.operands[0], b.or_(halves[0], b.shl(halves[1], ir.Constant(I32, 16))), "b32")
        return
    ty = compute_type(dt)
    if dt == "bf16":
        r = b.select(ps[0], ir.Constant(ty, 0x3F80), ir.Constant(ty, 0))
    elif is_float(dt):
        r = b.select(ps[0], ir.Constant(ty, 1.0), ir.Constant(ty, 0.0))
    else:
        r = b.select(ps[0], ir.Constant(ty, -1), ir.Constant(ty, 0))
    fl.put(ins.operands[0], r, dt)


@op("selp")
def selp(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    a, c = fl.get(ins.operands[1], t), fl.get(ins.operands[2], t)
    p = fl.get(ins.operands[3], "pred")
    fl.put(ins.operands[0], fl.b.select(p, a, c), t)


@op("slct")
def slct(fl: FuncLowering, ins: A.Instr) -> None:
    dt, ct = fl.itype(ins, 0), fl.itype(ins, -1)
    a, c = fl.get(ins.operands[1], dt), fl.get(ins.operands[2], dt)
    s = fl.get(ins.operands[3], ct)
    if ct == "f32":
        if ins.has("ftz"):
            from jit.lower.ops_float import ftz

            s = ftz(fl, s)
        p = fl.b.fcmp_ordered(">=", s, ir.Constant(s.type, 0.0))
    else:
        p = fl.b.icmp_signed(">=", s, ir.Constant(s.type, 0))
    fl.put(ins.operands[0], fl.b.select(p, a, c), dt)


@op("mov")
def mov(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    d, s = ins.operands[0], ins.operands[1]
    ty = compute_type(t)
    if isinstance(d, A.Vec) and isinstance(s, A.Vec) and len(d.items) == len(s.items):  # mov.v4 (vector regs)
        vals = [fl.get(x, t) for x in s.items]
        for item, v in zip(d.items, vals, strict=True):
            fl.put(item, v, t)
        return
    if isinstance(d, A.Vec):  # unpack: mov.b64 {lo, hi}, x
        v = convert_bits(b, fl.get(s, t), ir.IntType(ty.width if isinstance(ty, ir.IntType) else 64))
        n = len(d.items)
        pw = v.type.width // n
        for i, item in enumerate(d.items):
            fl.put(item, b.trunc(b.lshr(v, ir.Constant(v.type, pw * i)), ir.IntType(pw)))
        return
    if isinstance(s, A.Vec):  # pack
        n = len(s.items)
        wt = ir.IntType(ty.width if isinstance(ty, ir.IntType) else {32: 32, 64: 64}[_fw(ty)])
        pw = wt.width // n
        acc: ir.Value = ir.Constant(wt, 0)
        for i, item in enumerate(s.items):
            part = fl.get(item, f"b{pw}")
            acc = b.or_(acc, b.shl(b.zext(part, wt), ir.Constant(wt, pw * i)))
        fl.put(d, acc, t)
        return
    fl.put(d, fl.get(s, t), t)


def _fw(ty: ir.Type) -> int:
    return 32 if str(ty) == "float" else 64
