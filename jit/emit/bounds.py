"""Bounds-checked global memory (tenant isolation): every global/generic load, store and atomic is checked against
the launching session's allowed ranges.

# NOTE [bounds checking]
# compile_module(ptx, bounds_check=True) compiles every ld/st/atom/red/cp.async whose address is a register in the
# global or generic space as
#     if (!wooly.bc(launch_ctx, addr, bytes)) { record addr; error 700; abort the launch }
# wooly.bc binary-searches a per-launch table of disjoint [start, end) ranges, sorted by start, that the runtime
# builds from launch(allowed_ranges=...) plus the module's own data block (its .global/.const variables) and each
# worker's shared-memory window and .local area (generic pointers to shared/local memory stay legal). Accesses
# through a symbol ([sym+imm], ld.param/ld.shared/ld.local) are not checked: they cannot leave the module's own
# memory. The first violating address is reported as CUDA_ERROR_ILLEGAL_ADDRESS (700) naming it.
"""

from __future__ import annotations

from llvmlite import ir

from jit.errors import CUDA_ERROR_ILLEGAL_ADDRESS
from jit.lower.types import I64, PTR

L_RANGES, L_NRANGES, L_BADADDR = 15, 16, 17  # launch-context slots (mirrored in jit/emit/cpu.py)
BC_NAME = "wooly.bc"
_PAIR = ir.LiteralStructType([I64, I64])


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def define_bc(module: ir.Module) -> ir.Function:
    """{i64, i64} wooly.bc(ptr L, i64 addr, i64 n): the [start, end) range of the launch's table holding
    [addr, addr+n), or (1, 0) (an empty range) when none does; callers keep it as a hint for the next access."""
    fn = module.globals.get(BC_NAME)
    if fn is not None:
        return fn  # type: ignore[return-value]
    fn = ir.Function(module, ir.FunctionType(_PAIR, [PTR, I64, I64]), BC_NAME)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    L, addr, n = fn.args
    entry, head, body, done = (fn.append_basic_block(x) for x in ("entry", "head", "body", "done"))
    b = ir.IRBuilder(entry)
    tab = b.inttoptr(b.load(b.gep(L, [_i64(L_RANGES)], source_etype=I64), typ=I64), PTR)
    cnt = b.load(b.gep(L, [_i64(L_NRANGES)], source_etype=I64), typ=I64)
    b.branch(head)
    # lo/hi: search for the last range whose start <= addr
    b.position_at_end(head)
    lo = b.phi(I64)
    hi = b.phi(I64)
    lo.add_incoming(_i64(0), entry)
    hi.add_incoming(cnt, entry)
    b.cbranch(b.icmp_unsigned("<", lo, hi), body, done)
    b.position_at_end(body)
    mid = b.lshr(b.add(lo, hi), _i64(1))
    start = b.load(b.gep(tab, [b.shl(mid, _i64(1))], source_etype=I64), typ=I64)
    le = b.icmp_unsigned("<=", start, addr)
    lo.add_incoming(b.select(le, b.add(mid, _i64(1)), lo), body)
    hi.add_incoming(b.select(le, hi, mid), body)
    b.branch(head)
    b.position_at_end(done)
    ok_idx = b.icmp_unsigned(">", lo, _i64(0))
    k = b.select(ok_idx, b.sub(lo, _i64(1)), _i64(0))
    pair = b.gep(tab, [b.shl(k, _i64(1))], source_etype=I64)
    s = b.load(pair, typ=I64)
    e = b.load(b.gep(pair, [_i64(1)], source_etype=I64), typ=I64)
    end = b.add(addr, n)
    inside = b.and_(b.icmp_unsigned("<=", s, addr), b.and_(b.icmp_unsigned("<=", end, e),
                                                            b.icmp_unsigned(">=", end, addr)))
    ok = b.and_(ok_idx, inside)
    r = b.insert_value(ir.Constant(_PAIR, None), b.select(ok, s, _i64(1)), 0)
    b.ret(b.insert_value(r, b.select(ok, e, _i64(0)), 1))
    return fn


def emit_check(fl, ptr: ir.Value, nbytes: int) -> None:  # type: ignore[no-untyped-def]
    """Guard one access of nbytes at ptr (see NOTE [bounds checking])."""
    b = fl.b
    L = fl.env.launch_ctx(fl)
    # per access site: [start, end) of the range this site matched last (SSA after mem2reg); starts empty
    hint = (fl.ab.alloca(I64, name="bc_lo"), fl.ab.alloca(I64, name="bc_hi"))
    fl.ab.store(_i64(1), hint[0])
    fl.ab.store(_i64(0), hint[1])
    addr = b.ptrtoint(ptr, I64)
    end = b.add(addr, _i64(nbytes))
    lo, hi = b.load(hint[0]), b.load(hint[1])
    fast = b.and_(b.icmp_unsigned("<=", lo, addr), b.and_(b.icmp_unsigned("<=", end, hi),
                                                          b.icmp_unsigned(">=", end, addr)))
    slow = fl.block("bc_slow")
    bad = fl.block("oob")
    cont = fl.block("inb")
    b.cbranch(fast, cont, slow).set_weights([1000, 1])
    b.position_at_end(slow)
    r = b.call(define_bc(fl.module), [L, addr, _i64(nbytes)])
    nlo, nhi = b.extract_value(r, 0), b.extract_value(r, 1)
    b.store(nlo, hint[0])
    b.store(nhi, hint[1])
    b.cbranch(b.icmp_unsigned("<", nlo, nhi), cont, bad).set_weights([1000, 1])
    b.position_at_end(bad)
    b.cmpxchg(b.gep(L, [_i64(L_BADADDR)], source_etype=I64), _i64(0), addr, "monotonic", "monotonic")
    fl.env.trap(fl, CUDA_ERROR_ILLEGAL_ADDRESS)
    b.position_at_end(cont)


def needs_check(fl, o, space: str) -> bool:  # type: ignore[no-untyped-def]
    """Only register-based global/generic addresses can reach memory outside the module's own."""
    from jit.ptx import ast as A
    if not getattr(fl.cg, "bounds_check", False) or space not in ("global", "generic"):
        return False
    base = o.base if isinstance(o, A.Addr) else o
    return not isinstance(base, (A.Sym, A.SymOff))
