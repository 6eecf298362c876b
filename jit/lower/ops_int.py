"""Integer, bitwise, comparison and move instructions."""

from __future__ import annotations

from llvmlite import ir

from jit.errors import not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.types import I1, I8, I32, I64, compute_type, convert_bits, is_float, is_signed
from jit.ptx import ast as A


def _ops(fl: FuncLowering, ins: A.Instr, t: str, n: int) -> list[ir.Value]:
    return [fl.get(o, t) for o in ins.operands[1:1 + n]]


def _carry(fl: FuncLowering) -> ir.AllocaInstr:
    c = fl.regs.get("%%cc")
    if c is None:
        c = fl.ab.alloca(I1, name="cc")
        fl.ab.store(ir.Constant(I1, 0), c)
        fl.regs["%%cc"] = c
    return c


@op("add", "sub")
def add_sub(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    if is_float(t) or t in ("f16x2", "bf16x2"):
        from jit.lower.ops_float import float_binop
        return float_binop(fl, ins)
    b = fl.b
    a, c = _ops(fl, ins, t, 2)
    sub = ins.opcode == "sub"
    if ins.has("sat"):
        r = fl.call_intr(f"llvm.{'ssub' if sub else 'sadd'}.sat.i{a.type.width}", a.type, [a, c])
    elif ins.has("cc"):
        cc = _carry(fl)
        r = b.sub(a, c) if sub else b.add(a, c)
        b.store(b.icmp_unsigned("<", a, c) if sub else b.icmp_unsigned("<", r, a), cc)
    else:
        r = b.sub(a, c) if sub else b.add(a, c)
    fl.put(ins.operands[0], r, t)


@op("addc", "subc")
def addc(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    a, c = _ops(fl, ins, t, 2)
    cc = _carry(fl)
    cin = b.zext(b.load(cc), a.type)
    w = ir.IntType(a.type.width * 2)
    if ins.opcode == "addc":
        wide = b.add(b.add(b.zext(a, w), b.zext(c, w)), b.zext(cin, w))
    else:
        wide = b.sub(b.sub(b.zext(a, w), b.zext(c, w)), b.zext(cin, w))
    r = b.trunc(wide, a.type)
    if ins.has("cc"):
        b.store(b.trunc(b.lshr(wide, ir.Constant(w, a.type.width)), I1), cc)
    fl.put(ins.operands[0], r, t)


def _mulparts(fl: FuncLowering, ins: A.Instr, t: str, a: ir.Value, c: ir.Value) -> tuple[ir.Value, str]:
    """Returns (product, dest type) for mul/mad .lo/.hi/.wide."""
    b = fl.b
    n = a.type.width
    w = ir.IntType(2 * n)
    ext = b.sext if is_signed(t) else b.zext
    if ins.has("wide"):
        return b.mul(ext(a, w), ext(c, w)), t[0] + str(2 * n)
    if ins.has("hi"):
        p = b.mul(ext(a, w), ext(c, w))
        return b.trunc(b.lshr(p, ir.Constant(w, n)), a.type), t
    return b.mul(a, c), t


@op("mul")
def mul(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    if is_float(t) or t in ("f16x2", "bf16x2"):
        from jit.lower.ops_float import float_binop
        return float_binop(fl, ins)
    a, c = _ops(fl, ins, t, 2)
    r, dt = _mulparts(fl, ins, t, a, c)
    fl.put(ins.operands[0], r, dt)


@op("mad", "madc")
def mad(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    if is_float(t) or t in ("f16x2", "bf16x2"):
        from jit.lower.ops_float import fma
        return fma(fl, ins)
    b = fl.b
    a, c = _ops(fl, ins, t, 2)
    p, dt = _mulparts(fl, ins, t, a, c)
    d = fl.get(ins.operands[3], dt)
    if ins.has("sat") and ins.has("hi"):
        r = fl.call_intr(f"llvm.sadd.sat.i{d.type.width}", d.type, [p, d])
    elif ins.has("cc") or ins.opcode == "madc":
        w = ir.IntType(d.type.width * 2)
        wide = b.add(b.zext(p, w), b.zext(d, w))
        cc = _carry(fl)
        if ins.opcode == "madc":
            wide = b.add(wide, b.zext(b.load(cc), w))
        r = b.trunc(wide, d.type)
        if ins.has("cc"):
            b.store(b.trunc(b.lshr(wide, ir.Constant(w, d.type.width)), I1), cc)
    else:
        r = b.add(p, d)
    fl.put(ins.operands[0], r, dt)


@op("mul24", "mad24")
def mul24(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    a, c = _ops(fl, ins, t, 2)
    ext = b.sext if is_signed(t) else b.zext
    i24 = ir.IntType(24)
    p = b.mul(ext(b.trunc(a, i24), I64), ext(b.trunc(c, i24), I64))
    r = b.trunc(b.lshr(p, ir.Constant(I64, 16)), I32) if ins.has("hi") else b.trunc(p, I32)
    if ins.opcode == "mad24":
        r = b.add(r, fl.get(ins.operands[3], t))
    fl.put(ins.operands[0], r, t)


@op("sad")
def sad(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    a, c, d = _ops(fl, ins, t, 3)
    lt = b.icmp_signed("<", a, c) if is_signed(t) else b.icmp_unsigned("<", a, c)
    fl.put(ins.operands[0], b.add(d, b.select(lt, b.sub(c, a), b.sub(a, c))), t)


@op("div", "rem")
def div_rem(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    if is_float(t):
        from jit.lower.ops_float import float_div
        return float_div(fl, ins)
    b = fl.b
    a, c = _ops(fl, ins, t, 2)
    ty = a.type
    zero, one, ones = ir.Constant(ty, 0), ir.Constant(ty, 1), ir.Constant(ty, -1)
    is0 = b.icmp_unsigned("==", c, zero)
    # NOTE [integer division by zero]: x86 traps where PTX defines a value. We follow the GPU:
    # q(u, 0) = all ones, q(s, 0) = -1 for a >= 0 else 1, r(x, 0) = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0.
    if is_signed(t):
        intmin = ir.Constant(ty, 1 << (ty.width - 1))
        ovf = b.and_(b.icmp_unsigned("==", a, intmin), b.icmp_unsigned("==", c, ones))
        bad = b.or_(is0, ovf)
        safe_c = b.select(bad, one, c)
        if ins.opcode == "div":
            q = b.sdiv(a, safe_c)
            q = b.select(ovf, intmin, q)
            r = b.select(is0, b.select(b.icmp_signed("<", a, zero), one, ones), q)
        else:
            m = b.srem(a, safe_c)
            r = b.select(is0, a, b.select(ovf, zero, m))
    else:
        safe_c = b.select(is0, one, c)
        if ins.opcode == "div":
            r = b.select(is0, ones, b.udiv(a, safe_c))
        else:
            r = b.select(is0, a, b.urem(a, safe_c))
    fl.put(ins.operands[0], r, t)


@op("abs", "neg")
def abs_neg(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    if is_float(t) or t in ("f16x2", "bf16x2"):
        from jit.lower.ops_float import float_unop
        return float_unop(fl, ins)
    b = fl.b
    (a,) = _ops(fl, ins, t, 1)
    if ins.opcode == "neg":
        r = b.neg(a)
    else:
        r = b.select(b.icmp_signed("<", a, ir.Constant(a.type, 0)), b.neg(a), a)
    fl.put(ins.operands[0], r, t)


@op("min", "max")
def min_max(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    if is_float(t) or t in ("f16x2", "bf16x2"):
        from jit.lower.ops_float import float_minmax
        return float_minmax(fl, ins)
    b = fl.b
    a, c = _ops(fl, ins, t, 2)
    if t in ("u16x2", "s16x2"):
        raise not_supported(f"{ins.opcode}.{t}", ins.line)
    cmp = b.icmp_signed if is_signed(t) else b.icmp_unsigned
    r = b.select(cmp("<" if ins.opcode == "min" else ">", a, c), a, c)
    if ins.has("relu"):
        r = b.select(b.icmp_signed("<", r, ir.Constant(r.type, 0)), ir.Constant(r.type, 0), r)
    fl.put(ins.operands[0], r, t)


@op("and", "or", "xor")
def logic(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    a, c = _ops(fl, ins, t, 2)
    f = {"and": fl.b.and_, "or": fl.b.or_, "xor": fl.b.xor}[ins.opcode]
    fl.put(ins.operands[0], f(a, c), t)


@op("not", "cnot")
def not_(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    (a,) = _ops(fl, ins, t, 1)
    if ins.opcode == "not":
        r = fl.b.not_(a)
    else:
        r = fl.b.zext(fl.b.icmp_unsigned("==", a, ir.Constant(a.type, 0)), a.type)
    fl.put(ins.operands[0], r, t)


@op("shl", "shr")
def shift(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    a = fl.get(ins.operands[1], t)
    n = fl.get(ins.operands[2], "u32")
    w = a.type.width
    big = b.icmp_unsigned(">=", n, ir.Constant(I32, w))
    nn = convert_bits(b, b.select(big, ir.Constant(I32, w - 1), n), a.type)
    if ins.opcode == "shl":
        r = b.select(big, ir.Constant(a.type, 0), b.shl(a, nn))
    elif is_signed(t):
        r = b.ashr(a, nn)  # clamped amount w-1 already gives the sign fill
    else:
        r = b.select(big, ir.Constant(a.type, 0), b.lshr(a, nn))
    fl.put(ins.operands[0], r, t)


@op("shf")
def shf(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    lo, hi = fl.get(ins.operands[1], t), fl.get(ins.operands[2], t)
    n = fl.get(ins.operands[3], "u32")
    w = lo.type.width
    if ins.has("clamp"):
        n = b.select(b.icmp_unsigned(">", n, ir.Constant(I32, w)), ir.Constant(I32, w), n)
        full = b.icmp_unsigned("==", n, ir.Constant(I32, w))
    else:
        n = b.and_(n, ir.Constant(I32, w - 1))
        full = ir.Constant(I1, 0)
    nn = convert_bits(b, n, lo.type)
    if ins.has("l"):
        r = fl.call_intr(f"llvm.fshl.i{w}", lo.type, [hi, lo, nn])
        r = b.select(full, lo, r)
    else:
        r = fl.call_intr(f"llvm.fshr.i{w}", lo.type, [hi, lo, nn])
        r = b.select(full, hi, r)
    fl.put(ins.operands[0], r, t)


@op("bfe")
def bfe(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    a = fl.get(ins.operands[1], t)
    ty, w = a.type, a.type.width
    pos = b.and_(fl.get(ins.operands[2], "u32"), ir.Constant(I32, 0xFF))
    ln = b.and_(fl.get(ins.operands[3], "u32"), ir.Constant(I32, 0xFF))
    signed = is_signed(t)
    posc = convert_bits(b, b.select(b.icmp_unsigned(">=", pos, ir.Constant(I32, w)), ir.Constant(I32, w - 1), pos), ty)
    big_pos = b.icmp_unsigned(">=", pos, ir.Constant(I32, w))
    if signed:
        shifted = b.ashr(a, posc)
    else:
        shifted = b.select(big_pos, ir.Constant(ty, 0), b.lshr(a, posc))
    full = b.icmp_unsigned(">=", ln, ir.Constant(I32, w))
    sh = convert_bits(b, b.sub(ir.Constant(I32, w), b.select(full, ir.Constant(I32, w), ln)), ty)
    if signed:
        r = b.select(full, shifted, b.ashr(b.shl(shifted, sh), sh))
    else:
        r = b.select(full, shifted, b.lshr(b.shl(shifted, sh), sh))
    r = b.select(b.icmp_unsigned("==", ln, ir.Constant(I32, 0)), ir.Constant(ty, 0), r)
    fl.put(ins.operands[0], r, t)


@op("bfi")
def bfi(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    f, base = fl.get(ins.operands[1], t), fl.get(ins.operands[2], t)
    ty, w = f.type, f.type.width
    pos = b.and_(fl.get(ins.operands[3], "u32"), ir.Constant(I32, 0xFF))
    ln = b.and_(fl.get(ins.operands[4], "u32"), ir.Constant(I32, 0xFF))
    lnc = convert_bits(b, b.select(b.icmp_unsigned(">=", ln, ir.Constant(I32, w)), ir.Constant(I32, w - 1), ln), ty)
    ones = ir.Constant(ty, -1)
    m = b.select(b.icmp_unsigned(">=", ln, ir.Constant(I32, w)), ones, b.sub(b.shl(ir.Constant(ty, 1), lnc), ir.Constant(ty, 1)))
    posc = convert_bits(b, b.and_(pos, ir.Constant(I32, w - 1)), ty)
    mask = b.shl(m, posc)
    r = b.or_(b.and_(base, b.not_(mask)), b.and_(b.shl(f, posc), mask))
    noop = b.or_(b.icmp_unsigned("==", ln, ir.Constant(I32, 0)), b.icmp_unsigned(">=", pos, ir.Constant(I32, w)))
    fl.put(ins.operands[0], b.select(noop, base, r), t)


_PRMT_MODES = {  # selector nibbles for d.b0..d.b3 per c[1:0]
    "f4e": [(0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6)],
    "b4e": [(0, 7, 6, 5), (1, 0, 7, 6), (2, 1, 0, 7), (3, 2, 1, 0)],
    "rc8": [(0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)],
    "ecl": [(0, 1, 2, 3), (1, 1, 2, 3), (2, 2, 2, 3), (3, 3, 3, 3)],
    "ecr": [(0, 0, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2), (0, 1, 2, 3)],
    "rc16": [(0, 1, 0, 1), (2, 3, 2, 3), (0, 1, 0, 1), (2, 3, 2, 3)],
}


@op("prmt")
def prmt(fl: FuncLowering, ins: A.Instr) -> None:
    b = fl.b
    a, c, s = (fl.get(o, "b32") for o in ins.operands[1:4])
    both = b.or_(b.shl(b.zext(c, I64), ir.Constant(I64, 32)), b.zext(a, I64))
    mode = next((m for m in ins.mods if m in _PRMT_MODES), None)
    out: ir.Value = ir.Constant(I32, 0)
    for i in range(4):
        if mode:
            sel2 = b.and_(s, ir.Constant(I32, 3))
            tab = _PRMT_MODES[mode]
            sel: ir.Value = ir.Constant(I32, tab[3][i])
            for k in (2, 1, 0):
                sel = b.select(b.icmp_unsigned("==", sel2, ir.Constant(I32, k)), ir.Constant(I32, tab[k][i]), sel)
            sign = None
        else:
            sel = b.and_(b.lshr(s, ir.Constant(I32, 4 * i)), ir.Constant(I32, 0xF))
            sign = b.icmp_unsigned("!=", b.and_(sel, ir.Constant(I32, 8)), ir.Constant(I32, 0))
        idx = b.and_(sel, ir.Constant(I32, 7))
        byte = b.trunc(b.lshr(both, b.zext(b.shl(idx, ir.Constant(I32, 3)), I64)), I8)
        if sign is not None:
            rep = b.select(b.icmp_signed("<", byte, ir.Constant(I8, 0)), ir.Constant(I8, 0xFF), ir.Constant(I8, 0))
            byte = b.select(sign, rep, byte)
        out = b.or_(out, b.shl(b.zext(byte, I32), ir.Constant(I32, 8 * i)))
    fl.put(ins.operands[0], out, "b32")


@op("brev", "popc", "clz")
def bitcount(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    a = fl.get(ins.operands[1], t)
    w = a.type.width
    if ins.opcode == "brev":
        fl.put(ins.operands[0], fl.call_intr(f"llvm.bitreverse.i{w}", a.type, [a]), t)
        return
    if ins.opcode == "popc":
        r = fl.call_intr(f"llvm.ctpop.i{w}", a.type, [a])
    else:
        r = fl.call_intr(f"llvm.ctlz.i{w}", a.type, [a, ir.Constant(I1, 0)])
    fl.put(ins.operands[0], convert_bits(fl.b, r, I32), "u32")


@op("bfind")
def bfind(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    a = fl.get(ins.operands[1], t)
    w = a.type.width
    if is_signed(t):
        a = b.select(b.icmp_signed("<", a, ir.Constant(a.type, 0)), b.not_(a), a)
    lz = convert_bits(b, fl.call_intr(f"llvm.ctlz.i{w}", a.type, [a, ir.Constant(I1, 0)]), I32)
    pos = b.sub(ir.Constant(I32, w - 1), lz)
    if ins.has("shiftamt"):
        pos = lz
    none = b.icmp_unsigned("==", a, ir.Constant(a.type, 0))
    fl.put(ins.operands[0], b.select(none, ir.Constant(I32, 0xFFFFFFFF), pos), "u32")


@op("lop3")
def lop3(fl: FuncLowering, ins: A.Instr) -> None:
    b = fl.b
    a, c, d = (fl.get(o, "b32") for o in ins.operands[1:4])
    lut = ins.operands[4]
    if not isinstance(lut, A.Imm):
        raise not_supported("lop3 with a non-immediate lookup table", ins.line)
    imm = int(lut.value) & 0xFF
    na, nc, nd = b.not_(a), b.not_(c), b.not_(d)
    r: ir.Value = ir.Constant(I32, 0)
    for i in range(8):
        if imm >> i & 1:
            term = b.and_(b.and_(a if i & 4 else na, c if i & 2 else nc), d if i & 1 else nd)
            r = b.or_(r, term)
    fl.put(ins.operands[0], r, "b32")


@op("dp4a", "dp2a")
def dp4a(fl: FuncLowering, ins: A.Instr) -> None:
    b = fl.b
    ta, tb = fl.itype(ins, -2), fl.itype(ins, -1)
    a, c = fl.get(ins.operands[1], "b32"), fl.get(ins.operands[2], "b32")
    acc = fl.get(ins.operands[3], "b32")
    if ins.opcode == "dp4a":
        pairs = [(8 * i, 8, 8 * i, 8) for i in range(4)]
    else:
        hi = 2 if ins.has("hi") else 0
        pairs = [(16 * i, 16, 8 * (i + hi), 8) for i in range(2)]
    for sa, wa, sb, wb in pairs:
        x = b.trunc(b.lshr(a, ir.Constant(I32, sa)), ir.IntType(wa))
        y = b.trunc(b.lshr(c, ir.Constant(I32, sb)), ir.IntType(wb))
        x = b.sext(x, I32) if is_signed(ta) else b.zext(x, I32)
        y = b.sext(y, I32) if is_signed(tb) else b.zext(y, I32)
        acc = b.add(acc, b.mul(x, y))
    fl.put(ins.operands[0], acc, "b32")


_ICMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
         "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}


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
    a, c = fl.get(ins.operands[1], st), fl.get(ins.operands[2], st)
    p = _combine(fl, ins, compare(fl, ins, st, a, c), 3)
    ty = compute_type(dt)
    if is_float(dt):
        r = fl.b.select(p, ir.Constant(ty, 1.0), ir.Constant(ty, 0.0))
    else:
        r = fl.b.select(p, ir.Constant(ty, -1), ir.Constant(ty, 0))
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
