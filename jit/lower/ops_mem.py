"""Loads, stores, atomics, address-space conversion and fences.

NOTE [address spaces on the CPU]: global, const, param, local and generic addresses are host virtual addresses.
Only .shared differs: a shared address is an offset into the executing block's shared window, so ``cvta.shared``
adds the window base and ``cvta.to.shared`` subtracts it.
"""

from __future__ import annotations

from llvmlite import ir

from jit.errors import not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.ops_float import bf16_to_f32, f32_to_bf16
from jit.lower.types import F16, F32, F64, I8, I32, I64, PTR, compute_type, convert_bits, is_signed, width
from jit.ptx import ast as A
from jit.ptx.ast import type_bytes


def _mem_type(t: str) -> ir.Type:
    if t in ("f16", "bf16"):
        return ir.IntType(16)
    return compute_type(t) if t != "pred" else I8


def _ordering(ins: A.Instr) -> str | None:
    if ins.has("acquire"):
        return "acquire"
    if ins.has("release"):
        return "release"
    if ins.has("relaxed"):
        return "monotonic"
    return None


def _vec(ins: A.Instr) -> int:
    for m in ins.mods:
        if m in ("v2", "v4", "v8"):
            return int(m[1:])
    return 1


@op("ld", "ldu")
def ld(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    sp = fl.space(ins)
    base = fl.addr(ins.operands[1], sp)
    mt = _mem_type(t)
    n = _vec(ins)
    size = type_bytes(t)
    order = _ordering(ins)
    dsts = fl.dst_ops(ins.operands[0])
    for k in range(n):
        p = b.gep(base, [ir.Constant(I64, k * size)], source_etype=I8) if k else base
        if (order or ins.has("volatile")) and sp != "shared":
            v = b.load_atomic(p, "monotonic" if order in (None, "release") else order, size, typ=mt)
        else:
            v = b.load(p, typ=mt, align=size)
            if sp == "param" and fl.fn.is_entry:  # kernel params never change during a launch: let LLVM hoist
                v.set_metadata("invariant.load", fl.module.add_metadata([]))
        if k < len(dsts):
            fl.put(dsts[k], v, t)


@op("st")
def st(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    sp = fl.space(ins)
    base = fl.addr(ins.operands[0], sp)
    mt = _mem_type(t)
    n = _vec(ins)
    size = type_bytes(t)
    srcs = fl.dst_ops(ins.operands[1])
    order = _ordering(ins)
    for k in range(n):
        p = b.gep(base, [ir.Constant(I64, k * size)], source_etype=I8) if k else base
        v = fl.get(srcs[k], t)
        v = convert_bits(b, v, mt)
        if (order or ins.has("volatile")) and sp != "shared":
            b.store_atomic(v, p, "monotonic" if order in (None, "acquire") else order, size)
        else:
            b.store(v, p, align=size)


@op("prefetch", "prefetchu", "membar", "fence", "discard", "applypriority", "griddepcontrol", "nanosleep",
    "pmevent", "createpolicy")
def nop(fl: FuncLowering, ins: A.Instr) -> None:
    if ins.opcode in ("membar", "fence") and not ins.has("proxy"):
        fl.b.fence("seq_cst")
    if ins.opcode == "createpolicy":
        fl.put(ins.operands[0], ir.Constant(I64, 0), "b64")


@op("cvta")
def cvta(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    v = convert_bits(b, fl.get(ins.operands[1], t), I64)
    if ins.has("shared"):
        base = b.ptrtoint(fl.env.shared_base(fl), I64)
        v = b.sub(v, base) if ins.has("to") else b.add(v, base)
    fl.put(ins.operands[0], v, t)


@op("isspacep")
def isspacep(fl: FuncLowering, ins: A.Instr) -> None:
    b = fl.b
    a = fl.get(ins.operands[1], "u64")
    base = b.ptrtoint(fl.env.shared_base(fl), I64)
    lim = b.add(base, ir.Constant(I64, 1 << 20))
    in_sh = b.and_(b.icmp_unsigned(">=", a, base), b.icmp_unsigned("<", a, lim))
    if ins.has("shared"):
        r = in_sh
    elif ins.has("global"):
        r = b.not_(in_sh)
    else:
        r = ir.Constant(ir.IntType(1), 0)
    fl.put(ins.operands[0], r)


_RMW = {"add": "add", "and": "and", "or": "or", "xor": "xor", "exch": "xchg", "min": "min", "max": "max"}


def atomic(fl: FuncLowering, ins: A.Instr, addr_op: A.Operand, vals: list[A.Operand]) -> ir.Value:
    t = fl.itype(ins)
    b = fl.b
    sp = fl.space(ins)
    p = fl.addr(addr_op, sp)
    opn = next(m for m in ins.mods if m in _RMW or m in ("inc", "dec", "cas"))
    if t in ("f16", "bf16", "f16x2", "bf16x2") or _vec(ins) > 1:
        raise not_supported(f"atom/red on {t}{' vector' if _vec(ins) > 1 else ''}", ins.line)
    v = fl.get(vals[0], t)
    ty = v.type
    ordering = "seq_cst" if sp != "shared" else "monotonic"
    if opn == "cas":
        new = fl.get(vals[1], t)
        cmp, nv = v, new
        if ty in (F32, F64):
            it = ir.IntType(width(ty))
            cmp, nv = b.bitcast(cmp, it), b.bitcast(nv, it)
        pair = b.cmpxchg(p, cmp, nv, ordering, "monotonic")
        old = b.extract_value(pair, 0)
        return b.bitcast(old, ty) if ty in (F32, F64) else old
    if opn in ("inc", "dec"):
        return _inc_dec(fl, p, v, opn, ordering)
    if ty in (F32, F64):
        if opn == "add":
            return b.atomic_rmw("fadd", p, v, ordering)
        if opn in ("min", "max"):
            return b.atomic_rmw("f" + opn, p, v, ordering)
        if opn == "exch":
            it = ir.IntType(width(ty))
            return b.bitcast(b.atomic_rmw("xchg", p, b.bitcast(v, it), ordering), ty)
        raise not_supported(f"atom.{opn}.{t}", ins.line)
    kind = _RMW[opn]
    if opn in ("min", "max") and not is_signed(t):
        kind = "u" + kind
    return b.atomic_rmw(kind, p, v, ordering)


def _inc_dec(fl: FuncLowering, p: ir.Value, lim: ir.Value, opn: str, ordering: str) -> ir.Value:
    """atom.inc: old >= lim ? 0 : old+1; atom.dec: (old == 0 || old > lim) ? lim : old-1, via a CAS loop."""
    b = fl.b
    ty = lim.type
    cur = b.load(p, typ=ty, align=ty.width // 8)
    pre = b.block
    loop = fl.block("atom_loop")
    done = fl.block("atom_done")
    b.branch(loop)
    b.position_at_end(loop)
    old = b.phi(ty)
    old.add_incoming(cur, pre)
    one, zero = ir.Constant(ty, 1), ir.Constant(ty, 0)
    if opn == "inc":
        new = b.select(b.icmp_unsigned(">=", old, lim), zero, b.add(old, one))
    else:
        wrap = b.or_(b.icmp_unsigned("==", old, zero), b.icmp_unsigned(">", old, lim))
        new = b.select(wrap, lim, b.sub(old, one))
    pair = b.cmpxchg(p, old, new, ordering, "monotonic")
    seen = b.extract_value(pair, 0)
    ok = b.extract_value(pair, 1)
    old.add_incoming(seen, b.block)
    b.cbranch(ok, done, loop)
    b.position_at_end(done)
    return old


@op("atom")
def atom(fl: FuncLowering, ins: A.Instr) -> None:
    r = atomic(fl, ins, ins.operands[1], ins.operands[2:])
    fl.put(ins.operands[0], r, fl.itype(ins))


@op("red")
def red(fl: FuncLowering, ins: A.Instr) -> None:
    atomic(fl, ins, ins.operands[0], ins.operands[1:])


@op("cp")
def cp_async(fl: FuncLowering, ins: A.Instr) -> None:
    if not ins.has("async"):
        raise not_supported("cp." + ".".join(ins.mods), ins.line)
    if ins.has("commit_group") or ins.has("wait_group") or ins.has("wait_all") or ins.has("mbarrier"):
        return
    dst = fl.addr(ins.operands[0], "shared")
    src = fl.addr(ins.operands[1], "global")
    size = fl.get(ins.operands[2], "u32")
    n = size
    if len(ins.operands) > 3:
        n = fl.get(ins.operands[3], "u32")  # src-size: the rest is zero-filled
    fl.call_intr("llvm.memset.p0.i32", ir.VoidType(), [dst, ir.Constant(I8, 0), size, ir.Constant(ir.IntType(1), 0)])
    fl.call_intr("llvm.memcpy.p0.p0.i32", ir.VoidType(), [dst, src, n, ir.Constant(ir.IntType(1), 0)])


__all__ = ["atomic", "PTR", "F16", "F32", "F64", "I32", "bf16_to_f32", "f32_to_bf16"]
