"""Atomics and reductions: atom and red on global, shared and generic memory (NOTE [combined global reductions] in
jit/emit/cpu/red.py combines relaxed global reductions per worker)."""

from __future__ import annotations

from llvmlite import ir

from jit.emit.bounds import guard
from jit.errors import invalid_ptx, not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.ops_mem import vector_count
from jit.lower.types import F32, F64, compute_type, convert_bits, is_signed, width
from jit.ptx import ast as A
from jit.ptx.ast import type_bytes

_RMW = {"add": "add", "and": "and", "or": "or", "xor": "xor", "exch": "xchg", "min": "min", "max": "max"}


def atomic(fl: FuncLowering, ins: A.Instr, addr_op: A.Operand, vals: list[A.Operand]) -> ir.Value:
    t = fl.itype(ins)
    b = fl.b
    sp = fl.space(ins)
    p = fl.addr(addr_op, sp)
    guard(fl, addr_op, sp, p, type_bytes(t) * vector_count(ins), fl.root_of(addr_op, sp))
    opn = next(m for m in ins.mods if m in _RMW or m in ("inc", "dec", "cas"))
    red = getattr(fl.env, "red", None)
    if red is not None and sp != "shared":
        if id(ins) in fl.env.red_sites:  # type: ignore[attr-defined]
            t0 = fl.itype(ins)
            dense = fl.env.red_dense.get(id(ins))  # type: ignore[attr-defined]
            if dense is not None:  # NOTE [dense reduction slots]
                red.add_dense(fl, p, *dense, fl.get(vals[0], t0))
            else:
                red.add(fl, p, fl.get(vals[0], t0), t0 in ("u64", "s64"))
            return ir.Constant(compute_type(t0), 0)  # the result is dead (that made the site eligible)
        red.flush(b)  # any other atomic may observe or order the pending reductions
    if t in ("f16", "bf16", "f16x2", "bf16x2"):
        return _half_atomic(fl, ins, p, fl.get(vals[0], t), t, opn)
    v = fl.get(vals[0], t)
    ty = v.type
    # PTX atom/red default to .relaxed; x86 emits the same lock-prefixed instruction for any ordering, but a
    # seq_cst RMW would also stop LLVM from moving ordinary loads/stores around it.
    ordering = {"acquire": "acquire", "release": "release", "acq_rel": "acq_rel"}.get(
        next((m for m in ins.mods if m in ("acquire", "release", "acq_rel")), ""), "monotonic"
    )
    if sp == "shared" and fl.cg.private_shared:
        return _plain_rmw(fl, p, v, opn, t, vals)
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


def _plain_rmw(fl: FuncLowering, p: ir.Value, v: ir.Value, opn: str, t: str, vals: list[A.Operand]) -> ir.Value:
    """atom/red on a block's private shared window (CPU target): an ordinary load-modify-store. Only the worker
    running the block touches that memory, and threads switch only at sync points, so this is atomic."""
    b = fl.b
    ty = v.type
    old = b.load(p, typ=ty, align=width(ty) // 8)
    if opn == "cas":
        new = b.select(_eq(b, old, v), fl.get(vals[1], t), old)
    elif opn in ("inc", "dec"):
        new = _inc_dec_value(b, old, v, opn)
    elif opn == "exch":
        new = v
    elif ty in (F32, F64):
        if opn == "add":
            new = b.fadd(old, v)
        elif opn in ("min", "max"):
            new = fl.call_intr(f"llvm.{opn}num.f{width(ty)}", ty, [old, v])
        else:
            raise not_supported(f"atom.{opn}.{t}", fl.cur.line if fl.cur else 0)
    elif opn in ("min", "max"):
        cmp = b.icmp_signed if is_signed(t) else b.icmp_unsigned
        new = b.select(cmp("<" if opn == "min" else ">", v, old), v, old)
    else:
        new = {"add": b.add, "and": b.and_, "or": b.or_, "xor": b.xor}[opn](old, v)
    b.store(new, p, align=width(ty) // 8)
    return old


def _eq(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Bitwise equality (cas compares bits, so -0.0 != +0.0 and NaN == the same NaN)."""
    if x.type in (F32, F64):
        it = ir.IntType(width(x.type))
        x, y = b.bitcast(x, it), b.bitcast(y, it)
    return b.icmp_unsigned("==", x, y)


def _half_atomic(fl: FuncLowering, ins: A.Instr, p: ir.Value, v: ir.Value, t: str, opn: str) -> ir.Value:
    """atom.add.noftz.f16/f16x2/bf16/bf16x2 (and min/max): a compare-and-swap loop on the raw bits."""
    from jit.lower.ops_float import pack, unpack

    if opn not in ("add", "min", "max"):
        raise not_supported(f"atom.{opn}.{t}", ins.line)
    b = fl.b
    ity = ir.IntType(32 if t.endswith("x2") else 16)
    vb = convert_bits(b, v, ity)

    def update(old: ir.Value) -> ir.Value:
        res = []
        for x, y in zip(unpack(fl, old, t), unpack(fl, vb, t), strict=True):
            if opn == "add":
                res.append(b.fadd(x, y))
            else:
                res.append(b.select(b.fcmp_ordered("<" if opn == "min" else ">", y, x), y, x))
        return convert_bits(b, pack(fl, res, t), ity)

    return convert_bits(b, _cas_loop(fl, p, ity, "monotonic", update), compute_type(t))


def _cas_loop(fl: FuncLowering, p: ir.Value, ty: ir.Type, ordering: str, update) -> ir.Value:  # type: ignore[no-untyped-def]
    """A read-modify-write the hardware has no instruction for: *p = update(old) by compare-and-swap until no other
    thread wrote in between. Returns the old value."""
    b = fl.b
    cur = b.load(p, typ=ty, align=ty.width // 8)
    pre = b.block
    loop, done = fl.block("cas_loop"), fl.block("cas_done")
    b.branch(loop)
    b.position_at_end(loop)
    old = b.phi(ty)
    old.add_incoming(cur, pre)
    pair = b.cmpxchg(p, old, update(old), ordering, "monotonic")
    old.add_incoming(b.extract_value(pair, 0), b.block)
    b.cbranch(b.extract_value(pair, 1), done, loop)
    b.position_at_end(done)
    return old


def _inc_dec_value(b: ir.IRBuilder, old: ir.Value, lim: ir.Value, opn: str) -> ir.Value:
    """The value atom.inc/atom.dec store: inc: old >= lim ? 0 : old+1; dec: (old == 0 || old > lim) ? lim : old-1."""
    one, zero = ir.Constant(old.type, 1), ir.Constant(old.type, 0)
    if opn == "inc":
        return b.select(b.icmp_unsigned(">=", old, lim), zero, b.add(old, one))
    wrap = b.or_(b.icmp_unsigned("==", old, zero), b.icmp_unsigned(">", old, lim))
    return b.select(wrap, lim, b.sub(old, one))


def _inc_dec(fl: FuncLowering, p: ir.Value, lim: ir.Value, opn: str, ordering: str) -> ir.Value:
    """atom.inc / atom.dec (_inc_dec_value) via a CAS loop."""
    return _cas_loop(fl, p, lim.type, ordering, lambda old: _inc_dec_value(fl.b, old, lim, opn))


@op("atom")
def atom(fl: FuncLowering, ins: A.Instr) -> None:
    if vector_count(ins) > 1:
        dsts = fl.dst_ops(ins.operands[0])
        if len(dsts) != vector_count(ins):
            raise invalid_ptx(f"vector atom: {vector_count(ins)} destination registers expected", ins.line, ins.col)
        for d, r in zip(dsts, _vector_atomic(fl, ins, 1), strict=True):
            fl.put(d, r, fl.itype(ins))
        return
    r = atomic(fl, ins, ins.operands[1], ins.operands[2:])
    fl.put(ins.operands[0], r, fl.itype(ins))


@op("red")
def red(fl: FuncLowering, ins: A.Instr) -> None:
    if vector_count(ins) > 1:
        _vector_atomic(fl, ins, 0)
        return
    atomic(fl, ins, ins.operands[0], ins.operands[1:])


def _vector_atomic(fl: FuncLowering, ins: A.Instr, at: int) -> list[ir.Value]:
    """`atom/red{.global}.op.v2/.v4/.v8.type [a], {b0, ...}` (sm_90): one atomic per element, element k at a + k *
    sizeof(type), as the PTX ISA defines them (the vector as a whole is not one atomic access). The old values."""
    a = ins.operands[at]
    if not isinstance(a, A.Addr):
        raise invalid_ptx("vector atom/red needs an address operand [a]", ins.line, ins.col)
    t = fl.itype(ins)
    size = type_bytes(t)
    srcs = [fl.dst_ops(o) for o in ins.operands[at + 1 :]]
    n = vector_count(ins)
    if any(len(v) != n for v in srcs):
        raise invalid_ptx(f"vector atom/red: {n} elements expected in each source operand", ins.line, ins.col)
    mods = [m for m in ins.mods if m not in ("v2", "v4", "v8")]
    olds = []
    for k in range(n):
        one = A.Instr(
            ins.opcode, mods, [A.Addr(a.base, a.offset + k * size), *(v[k] for v in srcs)], line=ins.line, col=ins.col
        )
        olds.append(atomic(fl, one, one.operands[0], one.operands[1:]))
    return olds


__all__ = ["atomic"]
