"""Bit manipulation: shf, bfe, bfi, prmt, brev/popc/clz, bfind, fns, bmsk, szext, lop3, elect, dp4a/dp2a (video
instructions: jit/lower/ops_video.py)."""

from __future__ import annotations

from llvmlite import ir

from jit.errors import not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.ops_int import _ops  # noqa: F401
from jit.lower.types import I1, I8, I32, I64, convert_bits, is_signed
from jit.ptx import ast as A


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
    m = b.select(
        b.icmp_unsigned(">=", ln, ir.Constant(I32, w)), ones, b.sub(b.shl(ir.Constant(ty, 1), lnc), ir.Constant(ty, 1))
    )
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


@op("szext")
def szext(fl: FuncLowering, ins: A.Instr) -> None:
    """szext.{clamp,wrap}.{u32,s32} d, a, b: the low N bits of a, zero- or sign-extended, N = b mod 32 (.wrap) or
    b clamped to 32 (.clamp: b >= 32 gives a unchanged); N = 0 gives 0 (PTX ISA pseudocode)."""
    b = fl.b
    a, n = fl.get(ins.operands[1], "b32"), fl.get(ins.operands[2], "b32")
    zero, ones = ir.Constant(I32, 0), ir.Constant(I32, 0xFFFFFFFF)
    n1 = b.and_(n, ir.Constant(I32, 31))
    mask = b.shl(ones, n1)  # the bits above the field
    if ins.has("clamp"):
        mask = b.select(b.icmp_unsigned(">=", n, ir.Constant(I32, 32)), zero, mask)
    d = b.and_(a, b.not_(mask))
    if ins.has("s32"):
        top = b.and_(b.sub(n1, ir.Constant(I32, 1)), ir.Constant(I32, 31))
        sign = b.trunc(b.lshr(a, top), I1)
        live = b.and_(sign, b.icmp_unsigned("!=", n1, zero))  # N = 0: the result stays 0
        d = b.select(live, b.or_(d, mask), d)
    fl.put(ins.operands[0], d, "b32")


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
    dst = ins.operands[0]
    if isinstance(dst, A.PredPair):  # lop3.{and,or}.b32 d|p, a, b, c, lut, q: p = (d != 0) and/or q (PTX 8.2)
        nz = b.icmp_unsigned("!=", r, ir.Constant(I32, 0))
        q = fl.get(ins.operands[5], "pred")
        p = b.and_(nz, q) if ins.has("and") else b.or_(nz, q)
        fl.put(dst.first, r, "b32")
        fl.put(dst.second, p, "pred")
        return
    fl.put(dst, r, "b32")


@op("elect")
def elect(fl: FuncLowering, ins: A.Instr) -> None:
    """elect.sync d|p, membermask: the leader is the lowest lane of membermask (d, in every thread; p true in the
    leader). Every thread of membermask executes the same elect.sync (a .sync rule), so the leader follows from the
    mask alone and no thread has to wait for another."""
    b = fl.b
    mask = fl.get(ins.operands[1], "b32")
    lead = fl.call_intr("llvm.cttz.i32", I32, [mask, ir.Constant(I1, 0)])
    dst = ins.operands[0]
    first, pred = (dst.first, dst.second) if isinstance(dst, A.PredPair) else (dst, None)
    fl.put(first, lead, "b32")
    if pred is not None:
        fl.put(pred, b.icmp_unsigned("==", fl.env.special(fl, "laneid"), lead), "pred")


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


# SIMD video instructions (PTX ISA "SIMD video instructions"): vop4 works on the four bytes, vop2 on the two
# half-words of 32-bit registers. nvcc emits `vabsdiff4` (with and without `.add`) for __vabsdiffu4/__vsadu4 and
# friends; the rest of the family is here too. Operand suffixes select lanes: `d.bXYZ`/`d.hXY` is the mask of
# result lanes written (the others keep c's), `a.bwxyz`/`a.hxy` picks each lane from the 8 bytes (4 half-words)
# of the pool {b, a}, default a's own lanes for a and b's for b.


@op("fns")
def fns(fl: FuncLowering, ins: A.Instr) -> None:
    """fns.b32 d, mask, base, offset: the position of the |offset|-th set bit of mask counting from bit base
    (upwards for offset > 0, downwards for offset < 0, base itself included); for offset 0, base if that bit is set;
    0xffffffff when there is none."""
    b = fl.b
    mask = fl.get(ins.operands[1], "b32")
    base = fl.get(ins.operands[2], "b32")
    off = fl.get(ins.operands[3], "s32")
    none = ir.Constant(I32, 0xFFFFFFFF)
    zero, one = ir.Constant(I32, 0), ir.Constant(I32, 1)
    start = b.block
    head, body, done = fl.block("fns_head"), fl.block("fns_body"), fl.block("fns_done")
    base = b.and_(base, ir.Constant(I32, 31))  # a base above 31 is undefined in PTX; keep LLVM's shift defined
    at_base = b.select(b.icmp_unsigned("!=", b.and_(b.lshr(mask, base), one), zero), base, none)
    inc = b.select(b.icmp_signed(">", off, zero), one, ir.Constant(I32, -1))
    need = b.select(b.icmp_signed("<", off, zero), b.neg(off), off)
    b.cbranch(b.icmp_signed("==", off, zero), done, head)
    b.position_at_end(head)
    pos = b.phi(I32)
    left = b.phi(I32)
    pos.add_incoming(base, start)
    left.add_incoming(need, start)
    inside = b.icmp_unsigned("<", pos, ir.Constant(I32, 32))  # pos is in [0, 32): negative is huge unsigned
    b.cbranch(inside, body, done)
    b.position_at_end(body)
    hit = b.icmp_unsigned("!=", b.and_(b.lshr(mask, pos), one), zero)
    left2 = b.sub(left, b.zext(hit, I32))
    found = b.and_(hit, b.icmp_signed("==", left2, zero))
    pos.add_incoming(b.add(pos, inc), body)
    left.add_incoming(left2, body)
    b.cbranch(found, done, head)
    b.position_at_end(done)
    d = b.phi(I32)
    d.add_incoming(at_base, start)
    d.add_incoming(none, head)
    d.add_incoming(pos, body)
    fl.put(ins.operands[0], d, "b32")


@op("bmsk")
def bmsk(fl: FuncLowering, ins: A.Instr) -> None:
    """bmsk.{clamp,wrap}.b32 d, a, b: b one-bits starting at bit a (PTX ISA semantics: with .clamp, a >= 32 gives
    0 and b >= 32 runs to bit 31; .wrap takes both modulo 32; a width that reaches past bit 31 stops there)."""
    b = fl.b
    a, w = fl.get(ins.operands[1], "b32"), fl.get(ins.operands[2], "b32")
    c31, c32, ones, zero = (ir.Constant(I32, v) for v in (31, 32, 0xFFFFFFFF, 0))
    a1, b1 = b.and_(a, c31), b.and_(w, c31)
    mask0 = b.shl(ones, a1)
    s = b.add(a1, b1)  # at most 62
    over = b.icmp_unsigned(">=", s, c32)
    if ins.has("clamp"):
        pos_over = b.icmp_unsigned(">=", a, c32)
        mask0 = b.select(pos_over, zero, mask0)
        over = b.or_(over, b.or_(pos_over, b.icmp_unsigned(">=", w, c32)))
    mask1 = b.shl(ones, b.and_(s, c31))  # only used when s < 32
    mask1 = b.select(over, zero, b.select(b.icmp_unsigned("==", b1, zero), ones, mask1))
    fl.put(ins.operands[0], b.and_(mask0, b.not_(mask1)), "b32")
