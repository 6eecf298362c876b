"""Video instructions: SIMD (vadd2/vadd4 ..., on half-words and bytes) and scalar (vadd ... vshl/vshr, with operand
selectors, saturation and a secondary operation or merge)."""

from __future__ import annotations

from llvmlite import ir

from jit.errors import not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.types import I32, I64
from jit.passes.special_regs import VIDEO_OPS
from jit.ptx import ast as A

_VSET_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _selector(ins: A.Instr, k: int, lanes: int) -> str | None:
    """The lane digits of operand k (special_regs moved `%r.b3210` into the modifier `sel1=b3210`): for d (k = 0)
    the lanes written, for a and b one source lane per result lane, from the pool {b, a} (8 bytes or 4 half-words)."""
    for m in ins.mods:
        if m.startswith(f"sel{k}="):
            sel = m.split("=", 1)[1]
            digits, top = sel[1:], (lanes if k == 0 else 2 * lanes)
            if (
                sel[0] != ("b" if lanes == 4 else "h")
                or (k and len(digits) != lanes)
                or any(int(ch) >= top for ch in digits)
            ):
                raise not_supported(f"lane selector '.{sel}' of {ins.opcode}")
            return digits
    return None


@op(*(f"{v}{n}" for v in VIDEO_OPS for n in (2, 4)))
def simd_video(fl: FuncLowering, ins: A.Instr) -> None:
    b = fl.b
    kind, lanes = ins.opcode[:-1], int(ins.opcode[-1])
    w = 32 // lanes
    types = [m for m in ins.mods if m in ("u32", "s32")]
    vset = kind == "vset"  # vset2/vset4.atype.btype.cmp: 0/1 per lane, unsigned (no destination type, no .sat)
    cmps = [m for m in ins.mods if m in _VSET_CMP] if vset else []
    known = ("u32", "s32", "add", *_VSET_CMP) if vset else ("u32", "s32", "sat", "add")
    if (
        len(types) != (2 if vset else 3)
        or any(m not in known and not m.startswith("sel") for m in ins.mods)
        or vset
        and len(cmps) != 1
    ):
        raise not_supported(f"'{'.'.join([ins.opcode, *ins.mods])}'")
    dt, at, bt = ["u32", *types] if vset else types
    do, ao, bo = ins.operands[:3]
    mask, asel, bsel = (_selector(ins, k, lanes) for k in range(3))
    pool = b.or_(b.zext(fl.get(ao, "b32"), I64), b.shl(b.zext(fl.get(bo, "b32"), I64), ir.Constant(I64, 32)))
    c = fl.get(ins.operands[3], "b32")
    written = {int(ch) for ch in mask} if mask is not None else set(range(lanes))
    lane_ty = ir.IntType(w)

    def pick(sel: str | None, first: int, signed: bool, i: int) -> ir.Value:
        k = int(sel[lanes - 1 - i]) if sel is not None else first + i  # digits name lanes from the top down
        v = b.trunc(b.lshr(pool, ir.Constant(I64, k * w)), lane_ty)
        return b.sext(v, I32) if signed else b.zext(v, I32)

    acc = c
    merged = ir.Constant(I32, 0)
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if dt == "s32" else (0, (1 << w) - 1)
    for i in range(lanes):
        x, y = pick(asel, 0, at == "s32", i), pick(bsel, lanes, bt == "s32", i)
        if kind == "vadd":
            t = b.add(x, y)
        elif kind == "vsub":
            t = b.sub(x, y)
        elif kind == "vavrg":  # (s + 1) >> 1 for s >= 0, s >> 1 below (arithmetic shift)
            s = b.add(x, y)
            t = b.ashr(b.add(s, b.zext(b.icmp_signed(">=", s, ir.Constant(I32, 0)), I32)), ir.Constant(I32, 1))
        elif kind == "vabsdiff":
            d = b.sub(x, y)
            t = b.select(b.icmp_signed("<", d, ir.Constant(I32, 0)), b.neg(d), d)
        elif vset:
            t = b.zext(b.icmp_signed(_VSET_CMP[cmps[0]], x, y), I32)
        else:
            lt = b.icmp_signed("<", x, y)
            t = b.select(lt, x, y) if kind == "vmin" else b.select(lt, y, x)
        if ins.has("sat") and not ins.has("add"):
            t = b.select(b.icmp_signed("<", t, ir.Constant(I32, lo)), ir.Constant(I32, lo), t)
            t = b.select(b.icmp_signed(">", t, ir.Constant(I32, hi)), ir.Constant(I32, hi), t)
        if i not in written:
            continue
        if ins.has("add"):
            acc = b.add(acc, t)
        else:
            merged = b.or_(merged, b.shl(b.and_(t, ir.Constant(I32, (1 << w) - 1)), ir.Constant(I32, i * w)))
    if not ins.has("add"):
        keep = sum(((1 << w) - 1) << (i * w) for i in range(lanes) if i not in written)
        acc = b.or_(merged, b.and_(c, ir.Constant(I32, keep)))
    fl.put(do, acc, "b32")


_SCALAR_SEL = {"b0": (0, 8), "b1": (8, 8), "b2": (16, 8), "b3": (24, 8), "h0": (0, 16), "h1": (16, 16)}


@op("vadd", "vsub", "vabsdiff", "vmin", "vmax", "vshl", "vshr", "vset")
def scalar_video(fl: FuncLowering, ins: A.Instr) -> None:
    """Scalar video instructions (PTX ISA pseudocode): a and b (a byte or half-word of them with .b0-.b3/.h0/.h1,
    sign- or zero-extended by their types) combined exactly (here in 128 bits), saturated with .sat to the range of
    the destination type, or of the destination's byte/half-word under a merge; then a secondary .add/.min/.max
    with c, or a merge of the result into the selected part of c (d.dsel). vshl/vshr take b as an unsigned
    amount, clamped to 32 (.clamp) or taken modulo 32 (.wrap); vshr shifts a signed a arithmetically. vset
    (`vset.atype.btype.cmp`, no destination type: its 0/1 result is unsigned) compares the extended values."""
    b = fl.b
    W = ir.IntType(128)  # noqa: N806 - wide enough for a 32-bit value shifted left by 32
    types = [m for m in ins.mods if m in ("u32", "s32")]
    vset = ins.opcode == "vset"
    known = {"u32", "s32", "add", "min", "max"} | (set(_VSET_CMP) if vset else {"sat", "clamp", "wrap"})
    shift = ins.opcode in ("vshl", "vshr")
    cmps = [m for m in ins.mods if m in _VSET_CMP] if vset else []
    if (
        len(types) != (2 if vset else 3)
        or any(m not in known and not m.startswith("sel") for m in ins.mods)
        or shift != (ins.has("clamp") or ins.has("wrap"))
        or vset
        and len(cmps) != 1
    ):
        raise not_supported(f"'{'.'.join([ins.opcode, *ins.mods])}'", ins.line)
    sels = {int(m[3]): m.split("=", 1)[1] for m in ins.mods if m.startswith("sel")}
    if any(s not in _SCALAR_SEL for s in sels.values()):
        raise not_supported(f"'{'.'.join([ins.opcode, *ins.mods])}'", ins.line)
    dt, at, bt = ["u32", *types] if vset else types

    def part(k: int, signed: bool) -> ir.Value:
        v = fl.get(ins.operands[k], "b32")
        lo, width = _SCALAR_SEL.get(sels.get(k, ""), (0, 32))
        v = b.trunc(b.lshr(v, ir.Constant(I32, lo)), ir.IntType(width)) if width < 32 else v
        return b.sext(v, W) if signed else b.zext(v, W)

    x, y = part(1, at == "s32"), part(2, bt == "s32")
    op_ = ins.opcode
    if op_ == "vadd":
        t = b.add(x, y)
    elif op_ == "vsub":
        t = b.sub(x, y)
    elif op_ == "vabsdiff":
        d = b.sub(x, y)
        t = b.select(b.icmp_signed("<", d, ir.Constant(W, 0)), b.neg(d), d)
    elif op_ in ("vmin", "vmax"):
        lt = b.icmp_signed("<", x, y)
        t = b.select(lt, x, y) if op_ == "vmin" else b.select(lt, y, x)
    elif vset:
        t = b.zext(b.icmp_signed(_VSET_CMP[cmps[0]], x, y), W)
    else:
        n = y
        if ins.has("clamp"):
            n = b.select(b.icmp_unsigned(">", n, ir.Constant(W, 32)), ir.Constant(W, 32), n)
        else:
            n = b.and_(n, ir.Constant(W, 31))
        t = b.shl(x, n) if op_ == "vshl" else b.ashr(x, n)  # x is extended to 64 bits: ashr = lshr for unsigned
    dsel = sels.get(0)
    if ins.has("sat"):
        width = _SCALAR_SEL[dsel][1] if dsel else 32
        lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if dt == "s32" else (0, (1 << width) - 1)
        t = b.select(b.icmp_signed("<", t, ir.Constant(W, lo)), ir.Constant(W, lo), t)
        t = b.select(b.icmp_signed(">", t, ir.Constant(W, hi)), ir.Constant(W, hi), t)
    r = b.trunc(t, I32)
    if len(ins.operands) > 3:
        c = fl.get(ins.operands[3], "b32")
        if dsel:  # merge into the selected byte/half-word of c
            pos, width = _SCALAR_SEL[dsel]
            keep = ir.Constant(I32, ~(((1 << width) - 1) << pos) & 0xFFFFFFFF)
            field = b.shl(b.and_(r, ir.Constant(I32, (1 << width) - 1)), ir.Constant(I32, pos))
            r = b.or_(b.and_(c, keep), field)
        elif ins.has("add"):
            r = b.add(r, c)
        elif ins.has("min") or ins.has("max"):
            cmp = b.icmp_signed if dt == "s32" else b.icmp_unsigned
            lt = cmp("<", r, c)
            r = b.select(lt, r, c) if ins.has("min") else b.select(lt, c, r)
    fl.put(ins.operands[0], r, "b32")
