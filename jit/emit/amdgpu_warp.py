"""Barriers and 32-lane warp collectives on AMDGPU waves (see NOTE [AMDGPU lowering] in jit/emit/amdgpu.py)."""

from __future__ import annotations

from llvmlite import ir

from jit.errors import not_supported
from jit.lower.core import FuncLowering
from jit.lower.types import I1, I32, I64, VOID
from jit.ptx import ast as A


def _i32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def _hw_lane(env, fl: FuncLowering) -> ir.Value:  # type: ignore[no-untyped-def]
    """Lane of this work-item in its wave (mbcnt over the exec-independent all-ones mask)."""
    lo = fl.call_intr("llvm.amdgcn.mbcnt.lo", I32, [_i32(-1), _i32(0)])
    if env.wave == 32:
        return lo
    return fl.call_intr("llvm.amdgcn.mbcnt.hi", I32, [_i32(-1), lo])


def _bpermute(fl: FuncLowering, hw_src: ir.Value, v: ir.Value) -> ir.Value:
    return fl.call_intr("llvm.amdgcn.ds.bpermute", I32, [fl.b.shl(hw_src, _i32(2)), v])


def _ballot(env, fl: FuncLowering, p: ir.Value) -> ir.Value:  # type: ignore[no-untyped-def]
    """32-bit ballot of this work-item's 32-lane warp."""
    b = fl.b
    if env.wave == 32:
        return fl.call_intr("llvm.amdgcn.ballot.i32", I32, [p])
    full = fl.call_intr("llvm.amdgcn.ballot.i64", I64, [p])
    half = b.zext(b.and_(_hw_lane(env, fl), _i32(32)), I64)
    return b.trunc(b.lshr(full, half), I32)


def lower_sync(env, fl: FuncLowering, ins: A.Instr) -> None:  # type: ignore[no-untyped-def]
    b = fl.b
    o = ins.operands
    op = ins.opcode
    if op in ("bar", "barrier") and ins.has("warp"):
        fl.call_intr("llvm.amdgcn.wave.barrier", VOID, [])
        return
    if op in ("bar", "barrier"):
        if ins.has("red"):
            raise not_supported("bar.red on AMDGPU", ins.line)
        b.fence("release", "workgroup")
        fl.call_intr("llvm.amdgcn.s.barrier", VOID, [])
        b.fence("acquire", "workgroup")
        return
    hw = _hw_lane(env, fl)
    lane = b.and_(hw, _i32(31))
    w0 = b.sub(hw, lane)
    if op == "shfl":
        d, pd = (o[0].first, o[0].second) if isinstance(o[0], A.PredPair) else (o[0], None)
        v = fl.get(o[1], "b32")
        bv = b.and_(fl.get(o[2], "b32"), _i32(31))
        c = fl.get(o[3], "b32")
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
        fl.put(d, _bpermute(fl, b.add(w0, j), v), "b32")
        if pd is not None:
            fl.put(pd, pval)
        return
    mm = fl.get(o[2], "b32") if op in ("vote", "redux") and len(o) >= 3 else _i32(-1)
    if op == "activemask":
        fl.put(o[0], _ballot(env, fl, ir.Constant(I1, 1)), "b32")
        return
    if op == "vote":
        p = fl.get(o[1], "pred")
        bal = b.and_(_ballot(env, fl, p), mm)
        if ins.has("ballot"):
            fl.put(o[0], bal, "b32")
            return
        act = b.and_(_ballot(env, fl, ir.Constant(I1, 1)), mm)
        if ins.has("all"):
            r = b.icmp_unsigned("==", bal, act)
        elif ins.has("any"):
            r = b.icmp_unsigned("!=", bal, _i32(0))
        else:
            r = b.or_(b.icmp_unsigned("==", bal, _i32(0)), b.icmp_unsigned("==", bal, act))
        fl.put(o[0], r)
        return
    if op == "redux":
        kind = next(x for x in ins.mods if x in ("add", "min", "max", "and", "or", "xor"))
        if ins.has("f32"):
            raise not_supported("redux.sync.f32", ins.line)
        signed = ins.has("s32")
        v = fl.get(o[1], "b32")
        for k in (16, 8, 4, 2, 1):  # butterfly inside the 32-lane warp: every lane ends with the total
            u = _bpermute(fl, b.add(w0, b.xor(lane, _i32(k))), v)
            if kind == "add":
                v = b.add(v, u)
            elif kind in ("and", "or", "xor"):
                v = {"and": b.and_, "or": b.or_, "xor": b.xor}[kind](v, u)
            else:
                cmp = b.icmp_signed if signed else b.icmp_unsigned
                v = b.select(cmp("<" if kind == "min" else ">", u, v), u, v)
        fl.put(o[0], v, "b32")
        return
    raise not_supported(f"{op}.{'.'.join(ins.mods)} on AMDGPU", ins.line)
