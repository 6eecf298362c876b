"""Per-worker combining of relaxed integer reductions on global memory (CPU target).

NOTE [combined global reductions]
`red.global.add.u32 [bins+k], 1` (or an `atom.global.add` whose result is never read, which is what numba emits for
`cuda.atomic.add`) is a `lock xadd` on x86: ~5 ns uncontended and several times that when the workers of a launch
hit the same cache lines, as every histogram does. A GPU has per-SM atomic units for this; we give each worker a
small direct-mapped buffer instead: 256 slots of (tag = address | is64, pending delta). A buffered reduction that
finds its address in its slot adds to the delta with plain instructions; a miss evicts the slot (one real atomic add
of the old delta) and takes it over. The buffer is flushed (every pending delta added atomically) when the worker
finishes its blocks, and before anything that could observe or order the pending values:

* a `membar`/`fence`, an `atom`/`red` that is not buffered (e.g. one whose result is used: a ticket counter after
  `__threadfence()`), and a strong load (`.volatile`/`.relaxed`/`.acquire`: a spin-wait);
* an ordinary global or generic `ld`/`st`/`cp.async` that overlaps [lo, hi), the address range of buffered slots
  (two compares; read-your-own-writes and write-after-red coherence hold for every thread of the worker).

Why this is allowed: the reductions are `.relaxed` (the PTX default; `.acquire`/`.release`/`.acq_rel`/`.sys` are
never buffered), so the memory model does not order them with respect to other threads' accesses to other locations
except through fences and strong synchronisation, which flush. Other workers may see a pending increment later than
a GPU would show it, which is a legal outcome of a relaxed atomic. Only integer add is combined (wrapping add is
associative, so the final value is exactly the GPU's); float adds are not, since combining them would change the
rounding. A kernel that calls non-inlined `.func`s does not use the buffer (their loads are not guarded).

Layout: RB_* in jit/emit/__init__.py (the loader initialises it).

NOTE [dense reduction slots]
A histogram's `bins[v & 255] += 1` still paid the slot lookup per element (hash the address, compare the tag,
branch). When the address of a buffered reduction in a fused grid-stride loop is known to be B + scale*k with
0 <= k < count (NOTE [fused loop address forms], jit/analysis/fused_access.py), the block first *claims* that
range as the worker's dense region: `count` counters (rounded up to a power of two, at most DENSE_SLOTS), one per
address B + (k << shift). The reduction is then `dense[(addr - B) >> shift & (count - 1)] += v`: no tag, no
branch, as a CPU histogram would be written by hand. The region is part of the buffer for everything else: [lo,
hi) always covers it while it is claimed (a flush adds its non-zero counters atomically, zeroes them and leaves lo
and hi at the region), so loads, stores and fences see exactly what they saw before. A claim of a different range
flushes the buffer first. The sparse slots and the dense counters may both hold a pending delta for one address;
both are flushed together, and integer adds commute, so the final value is the same.

NOTE [cold slow paths]
The slow paths called from a kernel's hottest loops (evict a slot, flush the buffer; the bounds-check table search
of jit/emit/bounds.py) are functions marked `cold`. LLVM then treats the blocks that call them as rarely run and
places the spills and reloads a call needs (it clobbers the caller-saved registers) there instead of in the loop:
the histogram of benchmarks/jit.py went from 14.6 to 12.5 ms on one worker. Branch weights on the same branches
were measured too and did not help (12.7-13.4 ms); `preserve_allcc` on the calls made it slower (16.7 ms).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from jit.emit.abi import (
    DENSE_SLOTS,
    RB_COUNT,
    RB_DBASE,
    RB_DCOUNT,
    RB_DELTAS,
    RB_DENSE,
    RB_DIS64,
    RB_DSHIFT,
    RB_HI,
    RB_LO,
    RB_TAGS,
    RED_SLOTS,
)
from jit.lower.types import I1, I32, I64, PTR, VOID
from jit.ptx import ast as A

INT_TYPES = {"u32": False, "s32": False, "u64": True, "s64": True}
_ORDERED = ("volatile", "acquire", "release", "acq_rel", "sc", "mmio")  # never buffered
_STRONG = ("relaxed", *_ORDERED)  # accesses that flush the buffer
_BUILTIN_CALLS = {"vprintf", "__assertfail", "malloc", "free"}


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _field(b: ir.IRBuilder, buf: ir.Value, off: ir.Value | int) -> ir.Value:
    """The address of the buffer field at byte offset ``off`` (RB_* in jit/emit/__init__.py)."""
    return b.gep(buf, [off if isinstance(off, ir.Value) else _i64(off)], source_etype=ir.IntType(8))


def is_buffered(ins: A.Instr, dead: set[str]) -> bool:
    """A relaxed integer add to .global memory whose old value nobody reads."""
    if ins.opcode not in ("red", "atom") or not ins.has("global") or not ins.has("add"):
        return False
    if ins.has(*_ORDERED) or ins.has("sys") or not any(m in INT_TYPES for m in ins.mods):
        return False
    if ins.opcode == "atom":
        d = ins.operands[0]
        return isinstance(d, A.Sink) or isinstance(d, A.Reg) and d.name in dead
    return True


def plan(fn: A.Function) -> set[int]:
    """ids of the instructions of kernel ``fn`` to buffer (empty: the kernel does not use a buffer)."""
    from jit.analysis.liveness import defs_uses

    body = [st for st in fn.body or [] if isinstance(st, A.Instr)]
    used: set[str] = set()
    for ins in body:
        if ins.opcode == "call":
            callee = (
                ins.operands[1]
                if len(ins.operands) > 1 and isinstance(ins.operands[0], A.Group)
                else (ins.operands[0] if ins.operands else None)
            )
            if not (isinstance(callee, A.Sym) and callee.name in _BUILTIN_CALLS):
                return set()
        used.update(defs_uses(ins)[1])
    dead = {r for r in fn.regs if r not in used}
    return {id(ins) for ins in body if is_buffered(ins, dead)}


def is_strong(ins: A.Instr) -> bool:
    return ins.has(*_STRONG)


class RedBuffer:
    """Code generation for one kernel's use of its worker's combining buffer."""

    def __init__(self, module: ir.Module, buf: ir.Value) -> None:
        self.buf = buf
        self.flush_fn = _flush_fn(module)
        self.insert_fn = _insert_fn(module)

    def field(self, b: ir.IRBuilder, off: ir.Value | int) -> ir.Value:
        return _field(b, self.buf, off)

    def add(self, fl, p: ir.Value, v: ir.Value, is64: bool) -> None:  # type: ignore[no-untyped-def]
        b = fl.b
        addr = b.ptrtoint(p, I64)
        tag = b.or_(addr, _i64(int(is64)))
        idx = b.and_(b.lshr(addr, _i64(2)), _i64(RED_SLOTS - 1))
        tp = self.field(b, b.add(b.shl(idx, _i64(3)), _i64(RB_TAGS)))
        dv = b.sext(v, I64) if v.type != I64 else v
        hit = b.icmp_unsigned("==", b.load(tp, typ=I64), tag)
        yes, no, done = fl.block("red_hit"), fl.block("red_miss"), fl.block("red_done")
        b.cbranch(hit, yes, no)
        b.position_at_end(yes)
        dp = b.gep(tp, [_i64(RB_DELTAS - RB_TAGS)], source_etype=ir.IntType(8))
        b.store(b.add(b.load(dp, typ=I64), dv), dp)
        b.branch(done)
        b.position_at_end(no)
        b.call(self.insert_fn, [self.buf, tag, dv])
        b.branch(done)
        b.position_at_end(done)

    def guard(self, fl, p: ir.Value, size: int) -> None:  # type: ignore[no-untyped-def]
        """Flush if [p, p+size) overlaps the buffered range."""
        b = fl.b
        addr = b.ptrtoint(p, I64)
        lo = b.load(self.field(b, RB_LO), typ=I64)
        hi = b.load(self.field(b, RB_HI), typ=I64)
        hit = b.and_(b.icmp_unsigned("<", addr, hi), b.icmp_unsigned(">", b.add(addr, _i64(size)), lo))
        yes, done = fl.block("red_guard_flush"), fl.block("red_guard_done")
        b.cbranch(hit, yes, done)
        b.position_at_end(yes)
        b.call(self.flush_fn, [self.buf])
        b.branch(done)
        b.position_at_end(done)

    def flush(self, b: ir.IRBuilder) -> None:
        b.call(self.flush_fn, [self.buf])

    def claim(self, b: ir.IRBuilder, base: ir.Value, shift: int, count: int, is64: bool) -> None:
        """Make [base, base + (count << shift)) the worker's dense region (NOTE [dense reduction slots])."""
        assert count & (count - 1) == 0 and 0 < count <= DENSE_SLOTS
        b.call(_claim_fn(b.module, self.flush_fn), [self.buf, base, _i64(shift), _i64(count), _i64(int(is64))])

    def add_dense(self, fl, p: ir.Value, base: ir.Value, shift: int, count: int, v: ir.Value) -> None:  # type: ignore[no-untyped-def]
        """A buffered add to an address of the claimed dense region."""
        b = fl.b
        k = b.and_(b.lshr(b.sub(b.ptrtoint(p, I64), base), _i64(shift)), _i64(count - 1))
        dp = self.field(b, b.add(b.shl(k, _i64(3)), _i64(RB_DENSE)))
        b.store(b.add(b.load(dp, typ=I64), b.sext(v, I64) if v.type != I64 else v), dp)


def _atomic_add(b: ir.IRBuilder, tag: ir.Value, delta: ir.Value) -> None:
    """Add delta at (tag & ~1), as an i64 if tag & 1 else as an i32."""
    _atomic_add_at(b, b.and_(tag, _i64(~1)), b.trunc(tag, I1), delta)


def _end(b: ir.IRBuilder, base: ir.Value, count: ir.Value, shift: ir.Value) -> ir.Value:
    """base + (count << shift), saturated (a region at the top of the address space must still cover itself)."""
    end = b.add(base, b.shl(count, shift))
    return b.select(b.icmp_unsigned("<", end, base), _i64(-1), end)


def _atomic_add_at(b: ir.IRBuilder, addr: ir.Value, is64: ir.Value, delta: ir.Value) -> None:
    fn = b.function
    w64, w32, out = fn.append_basic_block("w64"), fn.append_basic_block("w32"), fn.append_basic_block("wdone")
    b.cbranch(is64, w64, w32)
    b.position_at_end(w64)
    b.atomic_rmw("add", b.inttoptr(addr, PTR), delta, "monotonic")
    b.branch(out)
    b.position_at_end(w32)
    b.atomic_rmw("add", b.inttoptr(addr, PTR), b.trunc(delta, I32), "monotonic")
    b.branch(out)
    b.position_at_end(out)


def _drain(
    b: ir.IRBuilder, n: ir.Value, slot: Callable[[ir.Value], ir.Value], act: Callable[[ir.Value, ir.Value], None]
) -> None:
    """for (i = 0; i < n; ++i) if ((v = *slot(i)) != 0) { act(i, v); *slot(i) = 0; } at the builder's position."""
    fn = b.function
    pre = b.block
    loop, hit, nxt, out = (fn.append_basic_block(x) for x in ("drain", "drain_hit", "drain_next", "drain_out"))
    b.cbranch(b.icmp_unsigned("==", n, _i64(0)), out, loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(_i64(0), pre)
    p = slot(i)
    v = b.load(p, typ=I64)
    b.cbranch(b.icmp_unsigned("!=", v, _i64(0)), hit, nxt)
    b.position_at_end(hit)
    act(i, v)
    b.store(_i64(0), p)
    b.branch(nxt)
    b.position_at_end(nxt)
    i2 = b.add(i, _i64(1))
    i.add_incoming(i2, nxt)
    b.cbranch(b.icmp_unsigned("<", i2, n), loop, out)
    b.position_at_end(out)


def _flush_fn(module: ir.Module) -> ir.Function:
    fn = module.globals.get("wooly_red_flush")
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR]), "wooly_red_flush")
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("cold")  # NOTE [cold slow paths]
    (buf,) = fn.args
    entry, sparse, dense = (fn.append_basic_block(n) for n in ("entry", "sparse", "dense"))
    b = ir.IRBuilder(entry)

    def field(off: ir.Value | int) -> ir.Value:
        return _field(b, buf, off)

    def slot(base: int) -> Callable[[ir.Value], ir.Value]:
        return lambda i: field(b.add(b.shl(i, _i64(3)), _i64(base)))

    b.cbranch(b.icmp_unsigned("==", b.load(field(RB_COUNT), typ=I64), _i64(0)), dense, sparse)
    b.position_at_end(sparse)  # the sparse slots: tag -> pending delta
    _drain(b, _i64(RED_SLOTS), slot(RB_TAGS), lambda i, tag: _atomic_add(b, tag, b.load(slot(RB_DELTAS)(i), typ=I64)))
    b.store(_i64(0), field(RB_COUNT))
    b.branch(dense)
    b.position_at_end(dense)  # the dense region's non-zero counters (NOTE [dense reduction slots])
    base, shift, count = (b.load(field(o), typ=I64) for o in (RB_DBASE, RB_DSHIFT, RB_DCOUNT))
    is64 = b.trunc(b.load(field(RB_DIS64), typ=I64), I1)
    _drain(b, count, slot(RB_DENSE), lambda i, d: _atomic_add_at(b, b.add(base, b.shl(i, shift)), is64, d))
    # nothing is pending; the buffered range is the dense region (if any) from now on
    empty = b.icmp_unsigned("==", count, _i64(0))
    b.store(b.select(empty, _i64(-1), base), field(RB_LO))
    b.store(b.select(empty, _i64(0), _end(b, base, count, shift)), field(RB_HI))
    b.ret_void()
    return fn


def _claim_fn(module: ir.Module, flush: ir.Function) -> ir.Function:
    """claim(buf, base, shift, count, is64): NOTE [dense reduction slots]. A no-op when the region is claimed."""
    fn = module.globals.get("wooly_red_claim")
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64, I64, I64, I64]), "wooly_red_claim")
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    buf, base, shift, count, is64 = fn.args
    entry, take, ret = (fn.append_basic_block(n) for n in ("entry", "take", "ret"))
    b = ir.IRBuilder(entry)

    desc = ((RB_DBASE, base), (RB_DSHIFT, shift), (RB_DCOUNT, count), (RB_DIS64, is64))
    same: ir.Value = ir.Constant(I1, 1)
    for off, v in desc:
        same = b.and_(same, b.icmp_unsigned("==", b.load(_field(b, buf, off), typ=I64), v))
    b.cbranch(same, ret, take)
    b.position_at_end(take)
    b.call(flush, [buf])  # the old region's counters (and the sparse slots) go out first
    for off, v in desc:
        b.store(v, _field(b, buf, off))
    b.store(base, _field(b, buf, RB_LO))
    b.store(_end(b, base, count, shift), _field(b, buf, RB_HI))
    b.branch(ret)
    b.position_at_end(ret)
    b.ret_void()
    return fn


def _insert_fn(module: ir.Module) -> ir.Function:
    """Slow path of a buffered add: evict the slot's pending delta (if any) and take the slot over."""
    fn = module.globals.get("wooly_red_insert")
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64, I64]), "wooly_red_insert")
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("cold")  # NOTE [cold slow paths]
    buf, tag, dv = fn.args
    entry, evict, fresh, take = (fn.append_basic_block(n) for n in ("entry", "evict", "fresh", "take"))
    b = ir.IRBuilder(entry)

    def field(off: ir.Value | int) -> ir.Value:
        return _field(b, buf, off)

    addr = b.and_(tag, _i64(~1))
    idx = b.and_(b.lshr(addr, _i64(2)), _i64(RED_SLOTS - 1))
    tp = field(b.add(b.shl(idx, _i64(3)), _i64(RB_TAGS)))
    dp = field(b.add(b.shl(idx, _i64(3)), _i64(RB_DELTAS)))
    old = b.load(tp, typ=I64)
    b.cbranch(b.icmp_unsigned("!=", old, _i64(0)), evict, fresh)
    b.position_at_end(evict)
    _atomic_add(b, old, b.load(dp, typ=I64))
    b.branch(take)
    b.position_at_end(fresh)
    cp = field(RB_COUNT)
    b.store(b.add(b.load(cp, typ=I64), _i64(1)), cp)
    b.branch(take)
    b.position_at_end(take)
    b.store(tag, tp)
    b.store(dv, dp)
    lop, hip = field(RB_LO), field(RB_HI)
    lo, hi = b.load(lop, typ=I64), b.load(hip, typ=I64)
    b.store(b.select(b.icmp_unsigned("<", addr, lo), addr, lo), lop)
    end = b.add(addr, _i64(8))
    b.store(b.select(b.icmp_unsigned(">", end, hi), end, hi), hip)
    b.ret_void()
    return fn
