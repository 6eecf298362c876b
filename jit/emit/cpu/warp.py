"""Warp collectives and barrier release for the CPU scheduler (see NOTE [CPU work-group execution] in cpu.py).

Semantics follow the PTX ISA: shfl.sync computes the source lane from b and the packed c operand
(c = ((32 - width) << 8) | clamp); an out-of-range source returns the thread's own value with the predicate false.
Lanes "participating" in a collective are the lanes of the warp parked at the same sync point.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.abi import R_PARK, R_RPRED, R_RVAL, R_XA, R_XB, R_XC, R_XMASK, R_XPRED
from jit.emit.cpu.env import EntryEnv
from jit.emit.cpu.loops import _Loop
from jit.emit.cpu.records import _i32, _i64
from jit.errors import not_supported
from jit.lower.core import FuncLowering
from jit.lower.types import F32, I1, I32, I64
from jit.ptx import ast as A


class _Peer:
    """Another thread's record (NOTE [thread records])."""

    def __init__(self, fl: FuncLowering, env: EntryEnv) -> None:
        self.fl, self.env = fl, env

    def field(self, t: ir.Value, off: int, ty: ir.Type) -> ir.Value:
        return self.fl.b.load(self.env.rec_addr(self.fl.b, t, off), typ=ty)

    def store(self, t: ir.Value, off: int, v: ir.Value) -> None:
        self.fl.b.store(v, self.env.rec_addr(self.fl.b, t, off))


def _arrived(
    fl: FuncLowering,
    env: EntryEnv,
    peer: _Peer,
    w0: ir.Value,
    k: ir.Value,
    reduce=None,  # type: ignore[no-untyped-def]
    mm: ir.Value | None = None,
):
    """Mask of lanes of the warp starting at w0 parked at sync k; optional per-lane reduction callback."""
    b = fl.b
    mask = fl.ab.alloca(I32)
    b.store(_i32(0), mask)
    lp = _Loop(fl, _i32(32), "lane")
    j = b.add(w0, lp.i)
    inb = b.icmp_unsigned("<", j, env.nt32)
    yes = fl.block("lane_in")
    b.cbranch(inb, yes, lp.latch)
    b.position_at_end(yes)
    jj = b.select(inb, j, _i32(0))
    here = b.icmp_unsigned("==", peer.field(jj, R_PARK, I32), k)
    if mm is not None:
        here = b.and_(here, b.trunc(b.lshr(mm, lp.i), I1))
    add = fl.block("lane_add")
    b.cbranch(here, add, lp.latch)
    b.position_at_end(add)
    b.store(b.or_(b.load(mask), b.shl(_i32(1), lp.i)), mask)
    if reduce is not None:
        reduce(jj, lp.i)
    lp.end()
    return b.load(mask)


def _signature(ins: A.Instr) -> tuple[str, ...]:
    """Sync points whose instructions share this signature share one resolution block (compile time)."""
    keep = (
        "up",
        "down",
        "bfly",
        "idx",
        "all",
        "any",
        "uni",
        "ballot",
        "add",
        "min",
        "max",
        "and",
        "or",
        "xor",
        "s32",
        "u32",
        "b32",
        "b64",
        "u64",
        "s64",
        "f32",
        "abs",
        "NaN",
        "warp",
    )
    return (ins.opcode, *[m for m in ins.mods if m in keep])


def _resolve_one(fl: FuncLowering, env: EntryEnv, peer: _Peer, t: ir.Value, sp: A.SyncPoint, k: ir.Value) -> None:
    b = fl.b
    ins = sp.instr
    lane = b.and_(t, _i32(31))
    w0 = b.sub(t, lane)
    own = peer.field(t, R_XA, I64)
    mm = peer.field(t, R_XMASK, I32)
    if ins.opcode == "shfl":
        bv = b.and_(peer.field(t, R_XB, I32), _i32(31))
        c = peer.field(t, R_XC, I32)
        cval = b.and_(c, _i32(31))
        seg = b.and_(b.lshr(c, _i32(8)), _i32(31))
        maxl = b.or_(b.and_(lane, seg), b.and_(cval, b.not_(seg)))
        minl = b.and_(lane, seg)
        if ins.has("up"):
            j = b.sub(lane, bv)
            pval = b.icmp_signed(">=", j, maxl)
        elif ins.has("down"):
            j = b.add(lane, bv)
            pval = b.icmp_signed("<=", j, maxl)
        elif ins.has("bfly"):
            j = b.xor(lane, bv)
            pval = b.icmp_signed("<=", j, maxl)
        else:
            j = b.or_(minl, b.and_(bv, b.not_(seg)))
            pval = b.icmp_signed("<=", j, maxl)
        j = b.select(pval, j, lane)
        src = b.add(w0, j)
        ok = b.icmp_unsigned("<", src, env.nt32)
        src = b.select(ok, src, t)
        ok = b.and_(ok, b.icmp_unsigned("==", peer.field(src, R_PARK, I32), k))
        val = b.select(ok, peer.field(src, R_XA, I64), own)
        peer.store(t, R_RVAL, val)
        peer.store(t, R_RPRED, b.zext(pval, I32))
        return
    if ins.opcode in ("bar", "activemask"):
        m = _arrived(fl, env, peer, w0, k, mm=mm)
        peer.store(t, R_RVAL, b.zext(m, I64))
        return
    if ins.opcode == "vote":
        ballot = fl.ab.alloca(I32)
        b.store(_i32(0), ballot)

        def red(jj: ir.Value, ln: ir.Value) -> None:
            pv = peer.field(jj, R_XPRED, I32)
            b.store(b.or_(b.load(ballot), b.shl(b.and_(pv, _i32(1)), ln)), ballot)

        m = _arrived(fl, env, peer, w0, k, red, mm=mm)
        bal = b.load(ballot)
        if ins.has("ballot"):
            peer.store(t, R_RVAL, b.zext(bal, I64))
            return
        if ins.has("all"):
            r = b.icmp_unsigned("==", bal, m)
        elif ins.has("any"):
            r = b.icmp_unsigned("!=", bal, _i32(0))
        else:
            r = b.or_(b.icmp_unsigned("==", bal, _i32(0)), b.icmp_unsigned("==", bal, m))
        peer.store(t, R_RPRED, b.zext(r, I32))
        return
    if ins.opcode == "match":
        same = fl.ab.alloca(I32)
        b.store(_i32(0), same)

        def red(jj: ir.Value, ln: ir.Value) -> None:
            eq = b.icmp_unsigned("==", peer.field(jj, R_XA, I64), own)
            b.store(b.or_(b.load(same), b.shl(b.zext(eq, I32), ln)), same)

        m = _arrived(fl, env, peer, w0, k, red, mm=mm)
        s = b.load(same)
        if ins.has("all"):
            allsame = b.icmp_unsigned("==", s, m)
            peer.store(t, R_RVAL, b.zext(b.select(allsame, m, _i32(0)), I64))
            peer.store(t, R_RPRED, b.zext(allsame, I32))
        else:
            peer.store(t, R_RVAL, b.zext(s, I64))
        return
    if ins.opcode == "redux" and ins.has("f32"):
        _redux_f32(fl, env, peer, ins, t, w0, k, mm)
        return
    if ins.opcode == "redux":
        kind = next(x for x in ins.mods if x in ("add", "min", "max", "and", "or", "xor"))
        signed = ins.has("s32")
        acc = fl.ab.alloca(I64)
        init = {
            "add": 0,
            "or": 0,
            "xor": 0,
            "and": -1,
            "min": (1 << 31) - 1 if signed else 0xFFFFFFFF,
            "max": -(1 << 31) if signed else 0,
        }[kind]
        b.store(_i64(init), acc)

        def red(jj: ir.Value, ln: ir.Value) -> None:
            v = peer.field(jj, R_XA, I64)
            a = b.load(acc)
            if kind == "add":
                r = b.add(a, v)
            elif kind in ("and", "or", "xor"):
                r = {"and": b.and_, "or": b.or_, "xor": b.xor}[kind](a, v)
            else:
                cmp = b.icmp_signed if signed else b.icmp_unsigned
                r = b.select(cmp("<" if kind == "min" else ">", v, a), v, a)
            b.store(r, acc)

        _arrived(fl, env, peer, w0, k, red, mm=mm)
        peer.store(t, R_RVAL, b.load(acc))
        return
    raise not_supported(f"warp collective {ins.opcode}", ins.line)


def _redux_f32(
    fl: FuncLowering, env: EntryEnv, peer: _Peer, ins: A.Instr, t: ir.Value, w0: ir.Value, k: ir.Value, mm: ir.Value
) -> None:
    """NOTE [redux.f32]: `redux.sync.{min,max}{.abs}{.NaN}.f32` (sm_100a) as the PTX ISA defines it: +0.0 > -0.0;
    .abs reduces |x|; NaN inputs are skipped (the result is the canonical NaN 0x7fffffff only when every input is
    NaN), or, with .NaN, any NaN input makes the result the canonical NaN."""
    b = fl.b
    nan = _i32(0x7FFFFFFF)
    acc, anynan = fl.ab.alloca(I32), fl.ab.alloca(I1)
    b.store(nan, acc)
    b.store(ir.Constant(I1, 0), anynan)
    is_min = ins.has("min")

    def red(jj: ir.Value, ln: ir.Value) -> None:
        v = b.trunc(peer.field(jj, R_XA, I64), I32)
        if ins.has("abs"):
            v = b.and_(v, _i32(0x7FFFFFFF))
        a = b.load(acc)
        fv, fa = b.bitcast(v, F32), b.bitcast(a, F32)
        v_nan = b.fcmp_unordered("uno", fv, fv)
        a_nan = b.fcmp_unordered("uno", fa, fa)
        # order: the float order, and -0.0 below +0.0 (as signed-integer bits, -0.0 < +0.0 too)
        zero = ir.Constant(F32, 0.0)
        zeros = b.and_(b.fcmp_ordered("==", fv, zero), b.fcmp_ordered("==", fa, zero))
        if is_min:
            better = b.or_(b.fcmp_ordered("<", fv, fa), b.and_(zeros, b.icmp_signed("<", v, a)))
        else:
            better = b.or_(b.fcmp_ordered(">", fv, fa), b.and_(zeros, b.icmp_signed(">", v, a)))
        take = b.and_(b.not_(v_nan), b.or_(a_nan, better))
        b.store(b.select(take, v, a), acc)
        b.store(b.or_(b.load(anynan), v_nan), anynan)

    _arrived(fl, env, peer, w0, k, red, mm=mm)
    r = b.load(acc)
    if ins.has("NaN"):
        r = b.select(b.load(anynan), nan, r)
    peer.store(t, R_RVAL, b.zext(r, I64))


__all__ = ["R_XMASK", "_Peer", "_signature", "_resolve_one"]
