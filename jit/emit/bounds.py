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
#
# Each access site keeps the range it matched last as a hint ([lo, hi), starting empty) in a stack slot of its own
# that wooly.bc itself updates on a miss. The slot escapes into that (noinline) call, so mem2reg/SROA leave it in
# memory: the fast path is two loads and two compares. Hints must not become SSA values: S sites then make 2*S
# values live across the whole kernel (the thread loop included), i.e. ~2*S phis at every join, and LLVM 22's SLP
# vectoriser is superlinear in the phis per block (numba's NRT kernels with ~140 sites took ~60 s to optimise
# instead of ~1 s; tests/unit/jit/test_numba_suite_fixes.py::test_bounds_check_many_sites_compile_time).
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit import L_BADADDR, L_HEAP, L_HEAP_ALLOC, L_HEAP_FREE, L_NRANGES, L_RANGES
from jit.errors import CUDA_ERROR_ILLEGAL_ADDRESS
from jit.lower.types import I64, PTR

BC_NAME = "wooly.bc"


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def define_bc(module: ir.Module) -> ir.Function:
    """i1 wooly.bc(ptr L, i64 addr, i64 n, ptr hint): whether a range of the launch's table holds [addr, addr+n).
    Writes that range's [start, end) to hint[0], hint[1] (the caller's per-site hint), or (1, 0) -- an empty
    range -- when none does."""
    fn = module.globals.get(BC_NAME)
    if fn is not None:
        return fn  # type: ignore[return-value]
    fn = ir.Function(module, ir.FunctionType(ir.IntType(1), [PTR, I64, I64, PTR]), BC_NAME)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("cold")  # only when an access misses its site's hint (NOTE [cold slow paths], cpu_red.py)
    L, addr, n, hint = fn.args
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
    b.store(b.select(ok, s, _i64(1)), hint)
    b.store(b.select(ok, e, _i64(0)), b.gep(hint, [_i64(1)], source_etype=I64))
    b.ret(ok)
    return fn


def emit_check(fl, ptr: ir.Value, nbytes: int, root: tuple[str, int] | None = None) -> None:  # type: ignore[no-untyped-def]
    """Guard one access of nbytes at ptr (see NOTE [bounds checking]); ``root``: the kernel pointer parameter the
    address derives from, if known (NOTE [rooted bounds checks])."""
    if root is not None and hasattr(fl.env, "root_range"):
        _rooted_check(fl, ptr, nbytes, root)
        return
    b = fl.b
    L = fl.env.launch_ctx(fl)
    # per access site: [start, end) of the range this site matched last, in memory (see the NOTE); starts empty
    hint = fl.ab.alloca(I64, size=2, name="bc_hint")
    hint_hi = fl.ab.gep(hint, [_i64(1)], source_etype=I64)
    fl.ab.store(_i64(1), hint)
    fl.ab.store(_i64(0), hint_hi)
    addr = b.ptrtoint(ptr, I64)
    end = b.add(addr, _i64(nbytes))
    lo, hi = b.load(hint, typ=I64), b.load(hint_hi, typ=I64)
    fast = b.and_(b.icmp_unsigned("<=", lo, addr), b.and_(b.icmp_unsigned("<=", end, hi),
                                                          b.icmp_unsigned(">=", end, addr)))
    slow = fl.block("bc_slow")
    bad = fl.block("oob")
    cont = fl.block("inb")
    b.cbranch(fast, cont, slow).set_weights([1000, 1])
    b.position_at_end(slow)
    ok = b.call(define_bc(fl.module), [L, addr, _i64(nbytes), hint])
    b.cbranch(ok, cont, bad).set_weights([1000, 1])
    b.position_at_end(bad)
    b.cmpxchg(b.gep(L, [_i64(L_BADADDR)], source_etype=I64), _i64(0), addr, "monotonic", "monotonic")
    fl.env.trap(fl, CUDA_ERROR_ILLEGAL_ADDRESS)
    b.position_at_end(cont)


# NOTE [rooted bounds checks]
# An access whose address derives from a kernel pointer parameter p (NOTE [pointer roots]) is checked against the
# one allowed range that holds p's value, which the runtime looks up once per launch (L[L_ROOTS]: [lo, hi) per
# rooted parameter; empty when p is in no range): `lo <= addr && addr + n <= hi`, two compares against
# loop-invariant values and no call. A failing thread records the address in a per-worker maximum (`bc_bad`, an
# unsigned max: a reduction) and exits; the access is skipped. After each block the worker turns a non-zero
# `bc_bad` into CUDA_ERROR_ILLEGAL_ADDRESS naming that address and stops. With no call and no atomic in the thread
# loop, LLVM can still vectorise it (masked loads/stores), which the per-site hints of NOTE [bounds checking] prevent.
# The rule is stricter than "any allowed range": an address derived from p must stay inside p's allocation, which
# is what CUDA C++ requires of pointer arithmetic anyway. Accesses through other registers (pointers loaded from
# memory, returned by malloc, ...) keep the table search.
def _rooted_check(fl, ptr: ir.Value, nbytes: int, root: tuple[str, int]) -> None:  # type: ignore[no-untyped-def]
    b = fl.b
    lo, hi = fl.env.root_range(fl, root)
    addr = b.ptrtoint(ptr, I64)
    end = b.add(addr, _i64(nbytes))
    ok = b.and_(b.icmp_unsigned("<=", lo, addr), b.and_(b.icmp_unsigned("<=", end, hi),
                                                        b.icmp_unsigned(">=", end, addr)))
    bad = fl.block("oob_rooted")
    cont = fl.block("inb")
    b.cbranch(ok, cont, bad).set_weights([1000, 1])
    b.position_at_end(bad)
    acc = fl.env.bc_bad
    cur = b.load(acc)
    one_past = b.add(addr, _i64(1))  # stored + 1 so that a null dereference is non-zero too
    b.store(b.select(b.icmp_unsigned(">", one_past, cur), one_past, cur), acc)
    fl.env.exit_thread(fl)
    b.position_at_end(cont)


# NOTE [device heap]
# Device-side malloc/free (numba's NRT allocates every array a kernel creates with them) in a bounds-checked module
# do not go to libc: a libc block is not in the launch's range table, so its first access was reported as an illegal
# address (and the context then stayed faulted for every later launch). They call the runtime's allocator through the
# launch context instead: L[L_HEAP_ALLOC](L[L_HEAP], n) -> address or 0 (exhausted, as CUDA's malloc returns NULL),
# L[L_HEAP_FREE](L[L_HEAP], p). The heap is one arena per loaded module instance (jit/checked.py, DeviceHeap, 8 MiB
# like CUDA's default cudaLimitMallocHeapSize, WOOLY_JIT_MALLOC_HEAP), and every launch's table holds its range.
def emit_malloc(fl, n: ir.Value) -> ir.Value:  # type: ignore[no-untyped-def]
    """malloc(n) of a bounds-checked module: an i64 address in the module's device heap, or 0."""
    b = fl.b
    L = fl.env.launch_ctx(fl)
    fty = ir.FunctionType(I64, [I64, I64])
    fn = b.inttoptr(b.load(b.gep(L, [_i64(L_HEAP_ALLOC)], source_etype=I64), typ=I64), fty.as_pointer())
    return b.call(fn, [b.load(b.gep(L, [_i64(L_HEAP)], source_etype=I64), typ=I64), n])


def emit_free(fl, p: ir.Value) -> None:  # type: ignore[no-untyped-def]
    """free(p) of a bounds-checked module (p: i64); blocks not from the heap (NULL included) are ignored."""
    b = fl.b
    L = fl.env.launch_ctx(fl)
    fty = ir.FunctionType(ir.VoidType(), [I64, I64])
    fn = b.inttoptr(b.load(b.gep(L, [_i64(L_HEAP_FREE)], source_etype=I64), typ=I64), fty.as_pointer())
    b.call(fn, [b.load(b.gep(L, [_i64(L_HEAP)], source_etype=I64), typ=I64), p])


def needs_check(fl, o, space: str) -> bool:  # type: ignore[no-untyped-def]
    """Only register-based global/generic addresses can reach memory outside the module's own."""
    from jit.ptx import ast as A
    if not getattr(fl.cg, "bounds_check", False) or space not in ("global", "generic"):
        return False
    if fl.cur is not None and id(fl.cur) in fl.prechecked:  # NOTE [exit-guard versioning]: checked per block
        return False
    base = o.base if isinstance(o, A.Addr) else o
    return not isinstance(base, (A.Sym, A.SymOff))
