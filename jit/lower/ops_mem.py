"""Loads, stores, atomics, address-space conversion and fences.

NOTE [address spaces on the CPU]: global, const, param, local and generic addresses are host virtual addresses.
Only .shared differs: a shared address is an offset into the executing block's shared window, so ``cvta.shared``
adds the window base and ``cvta.to.shared`` subtracts it.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.bounds import emit_check, needs_check
from jit.errors import invalid_ptx, not_supported
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


def _red_guard(fl: FuncLowering, ins: A.Instr, sp: str, p: ir.Value, size: int) -> None:
    """Keep a kernel's own buffered reductions coherent with its loads and stores (NOTE [combined global
    reductions], jit/emit/cpu_red.py): a strong access flushes the buffer, an ordinary one flushes if it overlaps."""
    red = getattr(fl.env, "red", None)
    if red is None or sp not in ("global", "generic") or id(ins) in fl.env.red_unguarded:  # type: ignore[attr-defined]
        return
    from jit.emit.cpu_red import is_strong
    if is_strong(ins):
        red.flush(fl.b)
    else:
        red.guard(fl, p, size)


def store_atomic(b: ir.IRBuilder, v: ir.Value, p: ir.Value, ordering: str, align: int) -> None:
    """IRBuilder.store_atomic insists on typed pointers; build the instruction for an opaque ``ptr``."""
    from llvmlite.ir.instructions import StoreAtomicInstr
    b._insert(StoreAtomicInstr(b.block, v, p, ordering, align))


def _is_kernel_param(fl: FuncLowering, o: A.Operand) -> bool:
    """Only the .entry's own parameters are invariant; call-site .param buffers are written by callees."""
    if not fl.fn.is_entry:
        return False
    base = o.base if isinstance(o, A.Addr) else o
    name = getattr(base, "name", None)
    return any(p.name == name for p in fl.fn.params)


@op("ld", "ldu")
def ld(fl: FuncLowering, ins: A.Instr) -> None:
    t = fl.itype(ins)
    b = fl.b
    sp = fl.space(ins)
    base = fl.addr(ins.operands[1], sp)
    mt = _mem_type(t)
    n = _vec(ins)
    size = type_bytes(t)
    if needs_check(fl, ins.operands[1], sp):
        emit_check(fl, base, n * size, fl.root_of(ins.operands[1], sp))
    _red_guard(fl, ins, sp, base, n * size)
    order = _ordering(ins)
    dsts = fl.dst_ops(ins.operands[0])
    src = ins.operands[1]
    if sp == "param" and _is_kernel_param(fl, src) and isinstance(src, A.Addr) and hasattr(fl.env, "kernel_param"):
        for k, d in enumerate(dsts[:n]):
            v = fl.env.kernel_param(fl, src.base.name, src.offset + k * size, mt)  # type: ignore[union-attr]
            if v is None:
                break
            fl.put(d, v, t)
        else:
            return
    for k in range(n):
        p = b.gep(base, [ir.Constant(I64, k * size)], source_etype=I8) if k else base
        if (order or ins.has("volatile")) and sp != "shared":
            v = b.load_atomic(p, "monotonic" if order in (None, "release") else order, size, typ=mt)
        else:
            v = b.load(p, typ=mt, align=size)
            if sp == "param" and _is_kernel_param(fl, ins.operands[1]):  # never change during a launch: hoistable
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
    if needs_check(fl, ins.operands[0], sp):
        emit_check(fl, base, n * size, fl.root_of(ins.operands[0], sp))
    _red_guard(fl, ins, sp, base, n * size)
    srcs = fl.dst_ops(ins.operands[1])
    order = _ordering(ins)
    for k in range(n):
        p = b.gep(base, [ir.Constant(I64, k * size)], source_etype=I8) if k else base
        v = fl.get(srcs[k], t)
        v = convert_bits(b, v, mt)
        if (order or ins.has("volatile")) and sp != "shared":
            store_atomic(b, v, p, "monotonic" if order in (None, "acquire") else order, size)
        else:
            b.store(v, p, align=size)


@op("prefetch", "prefetchu", "membar", "fence", "discard", "applypriority", "griddepcontrol", "nanosleep",
    "pmevent", "createpolicy")
def nop(fl: FuncLowering, ins: A.Instr) -> None:
    if ins.opcode == "nanosleep" and hasattr(fl.env, "os_yield"):  # CPU: NOTE [grid sync] (jit/emit/cpu_grid.py)
        fl.env.os_yield(fl)
        return
    if ins.opcode in ("membar", "fence") and not ins.has("proxy"):
        if getattr(fl.env, "red", None) is not None:
            fl.env.red.flush(fl.b)  # type: ignore[attr-defined]
        fl.b.fence("seq_cst")
    if ins.opcode == "createpolicy":
        fl.put(ins.operands[0], ir.Constant(I64, 0), "b64")


@op("getctarank", "mapa", "setmaxnreg")
def cluster_of_one(fl: FuncLowering, ins: A.Instr) -> None:
    """Every launch here is a cluster of one CTA: a shared::cluster address belongs to rank 0 (getctarank), the
    address of rank r's variable is the CTA's own (mapa; only r = 0 exists), and the register budget is not ours
    to move (setmaxnreg)."""
    if ins.opcode == "getctarank":
        fl.put(ins.operands[0], ir.Constant(I32, 0), "u32")
    elif ins.opcode == "mapa":
        typ = "u64" if ins.has("u64") else "u32"
        fl.put(ins.operands[0], fl.get(ins.operands[1], typ), typ)


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
    if needs_check(fl, addr_op, sp):
        emit_check(fl, p, type_bytes(t) * _vec(ins), fl.root_of(addr_op, sp))
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
        next((m for m in ins.mods if m in ("acquire", "release", "acq_rel")), ""), "monotonic")
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
    cur = b.load(p, typ=ity, align=ity.width // 8)
    pre = b.block
    loop = fl.block("hatom_loop")
    done = fl.block("hatom_done")
    b.branch(loop)
    b.position_at_end(loop)
    old = b.phi(ity)
    old.add_incoming(cur, pre)
    res = []
    for x, y in zip(unpack(fl, old, t), unpack(fl, vb, t), strict=True):
        if opn == "add":
            res.append(b.fadd(x, y))
        else:
            res.append(b.select(b.fcmp_ordered("<" if opn == "min" else ">", y, x), y, x))
    new = convert_bits(b, pack(fl, res, t), ity)
    pair = b.cmpxchg(p, old, new, "monotonic", "monotonic")
    old.add_incoming(b.extract_value(pair, 0), b.block)
    b.cbranch(b.extract_value(pair, 1), done, loop)
    b.position_at_end(done)
    return convert_bits(b, old, compute_type(t))


def _inc_dec_value(b: ir.IRBuilder, old: ir.Value, lim: ir.Value, opn: str) -> ir.Value:
    """The value atom.inc/atom.dec store: inc: old >= lim ? 0 : old+1; dec: (old == 0 || old > lim) ? lim : old-1."""
    one, zero = ir.Constant(old.type, 1), ir.Constant(old.type, 0)
    if opn == "inc":
        return b.select(b.icmp_unsigned(">=", old, lim), zero, b.add(old, one))
    wrap = b.or_(b.icmp_unsigned("==", old, zero), b.icmp_unsigned(">", old, lim))
    return b.select(wrap, lim, b.sub(old, one))


def _inc_dec(fl: FuncLowering, p: ir.Value, lim: ir.Value, opn: str, ordering: str) -> ir.Value:
    """atom.inc / atom.dec (_inc_dec_value) via a CAS loop."""
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
    pair = b.cmpxchg(p, old, _inc_dec_value(b, old, lim, opn), ordering, "monotonic")
    seen = b.extract_value(pair, 0)
    ok = b.extract_value(pair, 1)
    old.add_incoming(seen, b.block)
    b.cbranch(ok, done, loop)
    b.position_at_end(done)
    return old


@op("atom")
def atom(fl: FuncLowering, ins: A.Instr) -> None:
    if _vec(ins) > 1:
        dsts = fl.dst_ops(ins.operands[0])
        if len(dsts) != _vec(ins):
            raise invalid_ptx(f"vector atom: {_vec(ins)} destination registers expected", ins.line, ins.col)
        for d, r in zip(dsts, _vector_atomic(fl, ins, 1), strict=True):
            fl.put(d, r, fl.itype(ins))
        return
    r = atomic(fl, ins, ins.operands[1], ins.operands[2:])
    fl.put(ins.operands[0], r, fl.itype(ins))


@op("red")
def red(fl: FuncLowering, ins: A.Instr) -> None:
    if _vec(ins) > 1:
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
    srcs = [fl.dst_ops(o) for o in ins.operands[at + 1:]]
    n = _vec(ins)
    if any(len(v) != n for v in srcs):
        raise invalid_ptx(f"vector atom/red: {n} elements expected in each source operand", ins.line, ins.col)
    mods = [m for m in ins.mods if m not in ("v2", "v4", "v8")]
    olds = []
    for k in range(n):
        one = A.Instr(ins.opcode, mods, [A.Addr(a.base, a.offset + k * size), *(v[k] for v in srcs)],
                      line=ins.line, col=ins.col)
        olds.append(atomic(fl, one, one.operands[0], one.operands[1:]))
    return olds


@op("cp")
def cp_async(fl: FuncLowering, ins: A.Instr) -> None:
    if not ins.has("async") or ins.has("reduce"):
        raise not_supported("cp." + ".".join(ins.mods), ins.line)
    if ins.has("bulk"):
        _bulk_copy(fl, ins)
        return
    if ins.has("mbarrier"):  # NOTE [mbarrier] (jit/lower/ops_mbarrier.py): the copies are already done
        from jit.lower.ops_mbarrier import async_copies_arrive
        async_copies_arrive(fl, ins)
        return
    if ins.has("commit_group") or ins.has("wait_group") or ins.has("wait_all"):
        return
    dst = fl.addr(ins.operands[0], "shared")
    src = fl.addr(ins.operands[1], "global")
    if needs_check(fl, ins.operands[1], "global"):
        cp = ins.operands[2]
        emit_check(fl, src, int(cp.value) if isinstance(cp, A.Imm) else 16, fl.root_of(ins.operands[1], "global"))
    _red_guard(fl, ins, "global", src, 16)
    size = fl.get(ins.operands[2], "u32")
    n = size
    if len(ins.operands) > 3:
        n = fl.get(ins.operands[3], "u32")  # src-size: the rest is zero-filled
    fl.call_intr("llvm.memset.p0.i32", ir.VoidType(), [dst, ir.Constant(I8, 0), size, ir.Constant(ir.IntType(1), 0)])
    fl.call_intr("llvm.memcpy.p0.p0.i32", ir.VoidType(), [dst, src, n, ir.Constant(ir.IntType(1), 0)])


def _bulk_copy(fl: FuncLowering, ins: A.Instr) -> None:
    """cp.async.bulk, done at once (NOTE [mbarrier]): shared -> global completing on a bulk group (whose
    commit_group/wait_group are then no-ops); global -> shared and shared -> shared (a cluster of one) completing
    on an mbarrier, whose transaction count the copy's size then lowers; the L2 prefetch form (a no-op). Tensor-map
    (TMA) and multicast copies are not supported."""
    if ins.has("tensor") or ins.has("multicast::cluster"):
        raise not_supported("cp." + ".".join(ins.mods), ins.line)
    if ins.has("prefetch") or ins.has("commit_group") or ins.has("wait_group"):
        return
    spaces = [m for m in ins.mods if m in ("global", "shared")]
    on_mbarrier = ins.has("mbarrier::complete_tx::bytes")
    if len(spaces) != 2 or on_mbarrier == ins.has("bulk_group") or (spaces[0] == "global") == on_mbarrier:
        raise not_supported("cp." + ".".join(ins.mods), ins.line)
    ops = ins.operands
    dst, src = fl.addr(ops[0], spaces[0]), fl.addr(ops[1], spaces[1])
    n = ops[2]
    for o, p, sp in ((ops[0], dst, spaces[0]), (ops[1], src, spaces[1])):
        if sp == "global":
            if needs_check(fl, o, "global"):
                emit_check(fl, p, int(n.value) if isinstance(n, A.Imm) else 16, fl.root_of(o, "global"))
            _red_guard(fl, ins, "global", p, 16)
    size = fl.get(n, "u32")
    fl.call_intr("llvm.memcpy.p0.p0.i32", ir.VoidType(), [dst, src, size, ir.Constant(ir.IntType(1), 0)])
    if on_mbarrier:
        from jit.lower.ops_mbarrier import complete_tx
        complete_tx(fl, fl.addr(ops[3], "shared"), size)


__all__ = ["atomic", "PTR", "F16", "F32", "F64", "I32", "bf16_to_f32", "f32_to_bf16"]
