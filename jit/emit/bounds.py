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
#
# NOTE [state space checks]
# Every other state space is checked too (``guard`` is the one entry point of every load, store, atomic, async copy
# and mbarrier site), because on the CPU each of them is host memory and a register can hold any address:
# - .shared through a register or an immediate: the offset must lie in the block's window (static shared plus
#   dynamic shared); .local: the address must lie in the worker's .local area (every thread's .local and .func
#   frames, L[L_NTHREADS] * stride bytes from W[W_LOCAL]; tc[T_LLO], tc[T_LHI] inside a .func). Usually checked once
#   per register value with guard zones for the immediates (NOTE [confined windows]), exactly otherwise;
# - .const and .param through a register or an immediate: the table search above (the module's data block holds
#   the .const variables; the launch's parameter buffer is in the table too);
# - an access through a symbol, `[sym+imm]`, is free when it stays inside the symbol's declared size (what compilers
#   emit); beyond it a .shared/.global/.const symbol gets the runtime check of its space, and a .local or .param
#   symbol (a thread's own frame) is invalid PTX, refused at compile time with its line.
# In a kernel body a failure takes the rooted check's path (no call, no atomic: the thread loop still vectorises);
# in a .func it records the address and traps. Either way the launch fails with CUDA_ERROR_ILLEGAL_ADDRESS and no
# byte outside the tenant's own memory was read or written.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.abi import L_BADADDR, L_HEAP, L_HEAP_ALLOC, L_HEAP_FREE, L_NRANGES, L_RANGES, WINDOW_GUARD
from jit.errors import CUDA_ERROR_ILLEGAL_ADDRESS, invalid_ptx
from jit.lower.types import I64, PTR, convert_bits
from jit.ptx import ast as A

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
    fn.attributes.add("cold")  # only when an access misses its site's hint (NOTE [cold slow paths], cpu/red.py)
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
    inside = b.and_(
        b.icmp_unsigned("<=", s, addr), b.and_(b.icmp_unsigned("<=", end, e), b.icmp_unsigned(">=", end, addr))
    )
    ok = b.and_(ok_idx, inside)
    b.store(b.select(ok, s, _i64(1)), hint)
    b.store(b.select(ok, e, _i64(0)), b.gep(hint, [_i64(1)], source_etype=I64))
    b.ret(ok)
    return fn


def emit_check(
    fl,
    ptr: ir.Value,
    nbytes: int | ir.Value,  # type: ignore[no-untyped-def]
    root: tuple[str, int] | None = None,
) -> None:
    """Guard one access of nbytes at ptr (see NOTE [bounds checking]); ``root``: the kernel pointer parameter the
    address derives from, if known (NOTE [rooted bounds checks])."""
    nbytes = _i64(nbytes) if isinstance(nbytes, int) else nbytes
    if root is not None and hasattr(fl.env, "root_range"):
        _rooted_check(fl, ptr, nbytes, root)
        return
    b = fl.b
    L = fl.env.launch_ctx(fl)
    # per access site: [start, end) of the range this site matched last, in memory (see the NOTE); starts empty
    site_hint = getattr(fl.env, "site_hint", None)
    hint = site_hint(fl) if site_hint is not None else None
    if hint is not None:  # NOTE [.func hints]
        hint_hi = fl.ab.gep(hint, [_i64(1)], source_etype=I64)
    else:
        hint = fl.ab.alloca(I64, size=2, name="bc_hint")
        hint_hi = fl.ab.gep(hint, [_i64(1)], source_etype=I64)
        fl.ab.store(_i64(1), hint)
        fl.ab.store(_i64(0), hint_hi)
    addr = b.ptrtoint(ptr, I64)
    end = b.add(addr, nbytes)
    lo, hi = b.load(hint, typ=I64), b.load(hint_hi, typ=I64)
    fast = b.and_(
        b.icmp_unsigned("<=", lo, addr), b.and_(b.icmp_unsigned("<=", end, hi), b.icmp_unsigned(">=", end, addr))
    )
    slow = fl.block("bc_slow")
    bad = fl.block("oob")
    cont = fl.block("inb")
    b.cbranch(fast, cont, slow).set_weights([1000, 1])
    b.position_at_end(slow)
    ok = b.call(define_bc(fl.module), [L, addr, nbytes, hint])
    b.cbranch(ok, cont, bad).set_weights([1000, 1])
    b.position_at_end(bad)
    b.cmpxchg(b.gep(L, [_i64(L_BADADDR)], source_etype=I64), _i64(0), addr, "monotonic", "monotonic")
    fl.env.trap(fl, CUDA_ERROR_ILLEGAL_ADDRESS)
    b.position_at_end(cont)


# NOTE [.func hints]
# A hint in a .func's own frame would start empty at every call, so a small function called in a loop (the texture
# library's fetches, jit/texture.py, or any __noinline__ helper) would search the table at each of its accesses: 7x
# slower texture reads. Instead each kernel invocation (one worker of a launch) keeps an array of FUNC_HINTS hints in
# its frame, zeroed at its start, and passes it to every .func through the thread context (tc[T_HINTS]); each .func
# access site of the module owns one slot of it (sites past FUNC_HINTS fall back to a per-call hint). A zeroed hint
# [0, 0) admits only a zero-byte access at address 0, which touches nothing. The array belongs to one worker (its
# threads run one at a time on one OS thread) and one launch, so a hint is always a range of the running launch's
# own table: sharing slots across threads and calls only saves searches, never widens what is allowed.
def init_func_hints(b: ir.IRBuilder, tc: ir.Value, ab: ir.IRBuilder) -> None:
    """Give a kernel invocation a zeroed .func hint array (in its entry block ``ab``) and publish it in the thread
    context."""
    from jit.emit.abi import FUNC_HINTS, T_HINTS
    from jit.lower.types import opaque_alloca

    ty = ir.ArrayType(I64, 2 * FUNC_HINTS)
    hints = opaque_alloca(ab, ty, "fhints")
    b.store(ir.Constant(ty, None), hints)
    b.store(b.ptrtoint(hints, I64), b.gep(tc, [_i64(T_HINTS)], source_etype=I64))


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
def _rooted_check(fl, ptr: ir.Value, nbytes: ir.Value, root: tuple[str, int]) -> None:  # type: ignore[no-untyped-def]
    lo, hi = fl.env.root_range(fl, root)
    _span_check(fl, fl.b.ptrtoint(ptr, I64), nbytes, lo, hi, "oob_rooted")


def _span_check(
    fl,
    addr: ir.Value,
    nbytes: ir.Value,
    lo: ir.Value,
    hi: ir.Value,  # type: ignore[no-untyped-def]
    name: str = "oob_span",
) -> None:
    """``lo <= addr && addr + nbytes <= hi`` (no wrap-around), or the access fails (NOTE [rooted bounds checks])."""
    b = fl.b
    end = b.add(addr, nbytes)
    ok = b.and_(
        b.icmp_unsigned("<=", lo, addr), b.and_(b.icmp_unsigned("<=", end, hi), b.icmp_unsigned(">=", end, addr))
    )
    bad = fl.block(name)
    cont = fl.block("inb")
    b.cbranch(ok, cont, bad).set_weights([1000, 1])
    b.position_at_end(bad)
    fl.env.bad_access(fl, addr)
    b.position_at_end(cont)


def fail_soft(fl, addr: ir.Value) -> None:  # type: ignore[no-untyped-def]
    """A kernel body's failed check: record ``addr`` in the worker's maximum and end the thread; the worker turns it
    into CUDA_ERROR_ILLEGAL_ADDRESS after the block (NOTE [rooted bounds checks])."""
    b = fl.b
    acc = fl.env.bad_slot(fl)
    cur = b.load(acc)
    one_past = b.add(addr, _i64(1))  # stored + 1 so that a null dereference is non-zero too
    b.store(b.select(b.icmp_unsigned(">", one_past, cur), one_past, cur), acc)
    fl.env.exit_thread(fl)


def fail_trap(fl, addr: ir.Value) -> None:  # type: ignore[no-untyped-def]
    """A .func's failed check: record ``addr`` and trap with CUDA_ERROR_ILLEGAL_ADDRESS."""
    b = fl.b
    b.cmpxchg(
        b.gep(fl.env.launch_ctx(fl), [_i64(L_BADADDR)], source_etype=I64), _i64(0), addr, "monotonic", "monotonic"
    )
    fl.env.trap(fl, CUDA_ERROR_ILLEGAL_ADDRESS)


def guard(
    fl,
    o: A.Operand,
    space: str,
    ptr: ir.Value,
    nbytes: int | ir.Value,  # type: ignore[no-untyped-def]
    root: tuple[str, int] | None = None,
) -> None:
    """Check one access of ``nbytes`` at ``ptr`` (= fl.addr(o, space)) in a bounds-checked module: NOTE [bounds
    checking] for global and generic addresses, NOTE [state space checks] for the others."""
    if not getattr(fl.cg, "bounds_check", False):
        return
    n = _i64(nbytes) if isinstance(nbytes, int) else nbytes
    base = o.base if isinstance(o, A.Addr) else o
    if isinstance(base, (A.Sym, A.SymOff)):
        name = base.name
        off = (o.offset if isinstance(o, A.Addr) else 0) + (base.offset if isinstance(base, A.SymOff) else 0)
        space = _symbol_space(fl, name, off, nbytes)
        if space is None:
            return  # inside the symbol's declared size
    if space in ("global", "generic"):
        if needs_check(fl, o, space):
            emit_check(fl, ptr, n, root)
    elif space in ("shared", "local"):
        b = fl.b
        if space == "shared":
            lo = b.ptrtoint(fl.env.shared_base(fl), I64)
            hi = b.add(lo, fl.env.shared_window(fl))
        else:
            lo, hi = fl.env.local_span(fl)
        if not (isinstance(nbytes, int) and nbytes <= 64 and _confined(fl, o, space, lo, hi, ptr, n)):
            _span_check(fl, b.ptrtoint(ptr, I64), n, lo, hi)
    elif space in ("const", "param"):
        emit_check(fl, ptr, n)


# NOTE [confined windows]
# .shared and .local accesses through registers are frequent in real kernels (numba's tiled matmul makes 32 per
# thread and tile, nvcc addresses its stack frame through %SPL). An exact check per access (a branch on
# `lo <= addr && addr + n <= hi`) made the tiled matmul 3.5x slower than unchecked: 32 branches, each making the
# loads after it conditional, which the loop vectoriser turns into masked loads (microcoded on AVX2 hosts). So each
# window (the block's shared memory, the worker's .local area) is allocated with WINDOW_GUARD bytes of the launch's
# own on either side, and an access `[%r + imm]` with |imm| within the guard is checked through its register:
# `%r` must lie in [lo, hi]. The check is the same for every access through one register value, so LLVM keeps one
# per register and block (two for that matmul instead of 32): ~1.7x unchecked, against ~1.15x before .shared was
# checked at all (benchmarks/jit.py, matmul_bounds_checked_ms). An access through a register outside the window
# takes the exact check of its own address, off the fast path: legal code does that (CUB's radix sort keeps one
# register `base + 46080`, past the end of its 48128-byte window, and reaches its staged keys at [%r-46080] ...
# [%r-3072]; reporting the register made CuPy's sort of 10000 doubles an illegal address). An address outside the
# window fails the launch with CUDA_ERROR_ILLEGAL_ADDRESS (in a kernel body the rooted check's path, reported after
# the block; in a .func a trap); an access through a register inside it reaches at most the guard zones, which
# belong to the launch and never hold another tenant's bytes (nor are they reported). Accesses with larger
# immediates take the exact check.
# Tried and dropped: masking every address into a power-of-two buffer (software fault isolation, no branch) was
# slower still (2x): the mask hides that neighbouring threads touch neighbouring words, so nothing vectorises.
def _confined(  # type: ignore[no-untyped-def]
    fl, o: A.Operand, space: str, lo: ir.Value, hi: ir.Value, ptr: ir.Value, n: ir.Value
) -> bool:
    """Check the register ``o`` goes through against [lo, hi], and the access at ``ptr`` of ``n`` bytes exactly where
    the register lies outside (see NOTE [confined windows]); False when the access cannot be confined that way (its
    immediate reaches past the guard zones) and needs the exact check."""
    b = fl.b
    base = o.base if isinstance(o, A.Addr) else o
    imm = o.offset if isinstance(o, A.Addr) else 0
    if not (isinstance(base, A.Reg) and base.name in fl.regs) or not -WINDOW_GUARD <= imm <= WINDOW_GUARD - 64:
        return False
    v = fl.reg_value(fl.regs[base.name])
    v = convert_bits(b, v, I64) if v.type != I64 else v
    rel = v if space == "shared" else b.sub(v, lo)  # the same value for every access through this register
    ok = b.icmp_unsigned("<=", rel, b.sub(hi, lo))  # so LLVM keeps one check per register value
    outside, cont = fl.block("reg_outside_window"), fl.block("inw")
    b.cbranch(ok, cont, outside).set_weights([1000, 1])
    b.position_at_end(outside)
    _span_check(fl, b.ptrtoint(ptr, I64), n, lo, hi)
    b.branch(cont)
    b.position_at_end(cont)
    return True


def _symbol_space(fl, name: str, off: int, nbytes: int | ir.Value) -> str | None:  # type: ignore[no-untyped-def]
    """None when ``[name+off]`` of ``nbytes`` lies inside the symbol's declared size; otherwise the state space whose
    runtime check the access needs (a .local/.param symbol past its size is invalid PTX)."""
    decl = _decl(fl, name)
    size = A.var_size(decl) if decl is not None else 0
    if isinstance(nbytes, int) and decl is not None and size and 0 <= off and off + nbytes <= size:
        return None
    kind = fl.storage(name).kind
    if kind == "shared":
        return "shared"
    if kind == "global":
        return "global"
    if decl is not None and getattr(decl, "space", "param") in ("local", "param"):
        raise invalid_ptx(
            f"access to [{name}{off:+d}] of {nbytes if isinstance(nbytes, int) else 'a register'} bytes "
            f"is outside {name} ({size} bytes)",
            fl.cur.line if fl.cur is not None else 0,
        )
    return "global"


def _decl(fl, name: str):  # type: ignore[no-untyped-def]
    """The declaration (VarDecl or Param) of a symbol visible in the function being lowered."""
    decls = getattr(fl, "_decls", None)
    if decls is None:
        decls = {}
        for v in fl.cg.ast.globals:
            decls[v.name] = v
        for v in [*fl.fn.params, *fl.fn.rets, *fl.fn.vars]:
            decls[v.name] = v
        fl._decls = decls
    return decls.get(name)


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
