"""Integer, bitwise, comparison and move instructions."""

from __future__ import annotations

from llvmlite import ir

from jit.lower.core import FuncLowering, op
from jit.lower.types import I1, I32, I64, convert_bits, is_float, is_signed
from jit.ptx import ast as A


def _ops(fl: FuncLowering, ins: A.Instr, t: str, n: int) -> list[ir.Value]:
    return [fl.get(o, t) for o in ins.operands[1 : 1 + n]]


def _carry(fl: FuncLowering) -> ir.AllocaInstr:
    c = fl.regs.get("%%cc")
    if c is None:
        c = fl.ab.alloca(I1, name="cc")
        fl.ab.store(ir.Constant(I1, 0), c)
        fl.regs["%%cc"] = c
    return c


# NOTE [carry flag]
# CC.CF is a carry, also for subtraction, as on NVIDIA hardware: sub.cc computes a + ~b + 1 and keeps its carry-out
# (1 = no borrow), subc computes a + ~b + CF. A chain of sub.cc/subc gives the same differences either way; the
# convention shows when a chain mixes adds and subtracts or reads CF with addc after sub.cc (ZLUDA's subc_cc_s32
# test, checked on NVIDIA: 0x627ADF75 - 0x864CCEF5 with sub.cc leaves CF = 0).
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
    elif ins.has("cc"):  # NOTE [carry flag]
        cc = _carry(fl)
        r = b.sub(a, c) if sub else b.add(a, c)
        b.store(b.icmp_unsigned(">=", a, c) if sub else b.icmp_unsigned("<", r, a), cc)
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
    if ins.opcode == "subc":  # a + ~b + CF (NOTE [carry flag])
        c = b.not_(c)
    wide = b.add(b.add(b.zext(a, w), b.zext(c, w)), b.zext(cin, w))
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
    if t in ("u16x2", "s16x2"):  # per half-word (PTX 8.0; nvcc's __vmins2/__vmaxu2 ... on sm_90)
        v2 = ir.VectorType(ir.IntType(16), 2)
        a, c = (b.bitcast(fl.get(o, "b32"), v2) for o in ins.operands[1:3])
        cmp = b.icmp_signed if t == "s16x2" else b.icmp_unsigned
        r = b.select(cmp("<" if ins.opcode == "min" else ">", a, c), a, c)
        if ins.has("relu"):
            zero = ir.Constant(v2, [0, 0])
            r = b.select(b.icmp_signed("<", r, zero), zero, r)
        fl.put(ins.operands[0], b.bitcast(r, I32), "b32")
        return
    a, c = _ops(fl, ins, t, 2)
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
    w = a.type.width
    amount = ins.operands[2]
    if isinstance(amount, A.Imm) and not amount.is_float:  # the usual case: no clamp to emit
        k = int(amount.value) & 0xFFFFFFFF
        if k < w:
            r = (
                b.shl(a, ir.Constant(a.type, k))
                if ins.opcode == "shl"
                else b.ashr(a, ir.Constant(a.type, k))
                if is_signed(t)
                else b.lshr(a, ir.Constant(a.type, k))
            )
        elif ins.opcode == "shr" and is_signed(t):
            r = b.ashr(a, ir.Constant(a.type, w - 1))
        else:
            r = ir.Constant(a.type, 0)
        fl.put(ins.operands[0], r, t)
        return
    n = fl.get(amount, "u32")
    big = b.icmp_unsigned(">=", n, ir.Constant(I32, w))
    nn = convert_bits(b, b.select(big, ir.Constant(I32, w - 1), n), a.type)
    if ins.opcode == "shl":
        r = b.select(big, ir.Constant(a.type, 0), b.shl(a, nn))
    elif is_signed(t):
        r = b.ashr(a, nn)  # clamped amount w-1 already gives the sign fill
    else:
        r = b.select(big, ir.Constant(a.type, 0), b.lshr(a, nn))
    fl.put(ins.operands[0], r, t)
