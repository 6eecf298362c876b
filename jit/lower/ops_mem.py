"""Loads, stores, address-space conversion, fences and async copies (atomics: jit/lower/ops_atomic.py).

NOTE [address spaces on the CPU]: global, const, param, local and generic addresses are host virtual addresses.
Only .shared differs: a shared address is an offset into the executing block's shared window, so ``cvta.shared``
adds the window base and ``cvta.to.shared`` subtracts it.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.bounds import guard
from jit.errors import invalid_ptx, not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.types import I8, I32, I64, compute_type, convert_bits
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


def vector_count(ins: A.Instr) -> int:
    for m in ins.mods:
        if m in ("v2", "v4", "v8"):
            return int(m[1:])
    return 1


def _red_guard(fl: FuncLowering, ins: A.Instr, sp: str, p: ir.Value, size: int) -> None:
    """Keep a kernel's own buffered reductions coherent with its loads and stores (NOTE [combined global
    reductions], jit/emit/cpu/red.py): a strong access flushes the buffer, an ordinary one flushes if it overlaps."""
    red = getattr(fl.env, "red", None)
    if red is None or sp not in ("global", "generic") or id(ins) in fl.env.red_unguarded:  # type: ignore[attr-defined]
        return
    from jit.emit.cpu.red import is_strong

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
    n = vector_count(ins)
    size = type_bytes(t)
    guard(fl, ins.operands[1], sp, base, n * size, fl.root_of(ins.operands[1], sp))
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
    n = vector_count(ins)
    size = type_bytes(t)
    guard(fl, ins.operands[0], sp, base, n * size, fl.root_of(ins.operands[0], sp))
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


@op(
    "prefetch",
    "prefetchu",
    "membar",
    "fence",
    "discard",
    "applypriority",
    "griddepcontrol",
    "nanosleep",
    "pmevent",
    "createpolicy",
)
def nop(fl: FuncLowering, ins: A.Instr) -> None:
    if ins.opcode == "nanosleep" and hasattr(fl.env, "os_yield"):  # CPU: NOTE [grid sync] (jit/emit/cpu/grid.py)
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
    cp = ins.operands[2]
    if not isinstance(cp, A.Imm) or int(cp.value) not in (4, 8, 16):
        raise invalid_ptx("cp.async: cp-size must be 4, 8 or 16", ins.line)
    guard(fl, ins.operands[0], "shared", dst, int(cp.value))
    guard(fl, ins.operands[1], "global", src, int(cp.value), fl.root_of(ins.operands[1], "global"))
    _red_guard(fl, ins, "global", src, 16)
    size = fl.get(ins.operands[2], "u32")
    n = size
    if len(ins.operands) > 3:  # src-size: the rest is zero-filled; more than cp-size reads no further (a GPU's
        src_size = fl.get(ins.operands[3], "u32")  # behaviour is undefined there; here it is bounded)
        n = fl.b.select(fl.b.icmp_unsigned("<", src_size, size), src_size, size)
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
    size = fl.get(n, "u32")
    nbytes = int(n.value) if isinstance(n, A.Imm) else fl.b.zext(size, I64)
    guard(fl, ops[0], spaces[0], dst, nbytes, fl.root_of(ops[0], spaces[0]))
    guard(fl, ops[1], spaces[1], src, nbytes, fl.root_of(ops[1], spaces[1]))
    for p, sp in ((dst, spaces[0]), (src, spaces[1])):
        if sp == "global":
            _red_guard(fl, ins, "global", p, 16)
    fl.call_intr("llvm.memcpy.p0.p0.i32", ir.VoidType(), [dst, src, size, ir.Constant(ir.IntType(1), 0)])
    if on_mbarrier:
        from jit.lower.ops_mbarrier import complete_tx

        bar = fl.addr(ops[3], "shared")
        guard(fl, ops[3], "shared", bar, 8)
        complete_tx(fl, bar, size)


__all__ = ["store_atomic", "vector_count"]
