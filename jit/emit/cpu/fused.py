"""A block of a grid-stride kernel run as one loop over its elements (CPU target).

See NOTE [fused grid-stride loops] in jit/passes/fused_loops.py for the shape, the run-time conditions and why the
result is one a GPU may produce. Emitted at the start of every block, before the usual thread loops (or scheduler),
which run the blocks that do not pass the probe.

NOTE [fused loops under bounds checks]
gpud compiles with bounds checks (NOTE [bounds checking], jit/emit/bounds.py), so fused loops run checked too. P only
reads .param/.const (nothing to check); the body's accesses get their usual checks. A failed table-search check
aborts the launch as anywhere else; a failed rooted check (NOTE [rooted bounds checks]) records the address and
"exits the thread", which in a fused loop means leaving the block's loop: the worker then reports
CUDA_ERROR_ILLEGAL_ADDRESS naming the address after the block, and the launch fails, as it does unfused (what the
other threads of the block had still to do is not run; after an illegal address the memory a launch leaves is
undefined on a GPU as well).

NOTE [fused loop prefetch]
A block walks its elements in chunks of ntid.x consecutive i, one grid stride apart: with the benchmark's 64 blocks
of 256 threads, 1 KiB of a u32 array, then a jump of 64 KiB. The hardware prefetcher follows a stream within a
4 KiB page and starts over on every new page, so such a walk stalls on memory at every chunk (the histogram took
27 ms on one worker against 17 ms for the same kernel launched as one block, whose chunks are contiguous). Before
each chunk, the block therefore prefetches the lines that the loads and stores at affine addresses (NOTE [fused
loop address forms]) will touch PREFETCH_CHUNKS chunks later: about one prefetch per 64 bytes of data, with the
latency hidden behind the chunks in between. Histogram, 24M elements, two workers: 20-30 ms -> 11-13 ms (numba
9.4-12.6 ms in the same runs); distances 1, 2, 8 and 16 were measured as well, 4 was the best. Prefetches of
lines past the end of an array are harmless (a prefetch never faults).
"""

from __future__ import annotations

from llvmlite import ir

from jit.analysis.fused_access import LIMIT, Aff, Idx, address_forms
from jit.emit.abi import DENSE_SLOTS, RB_HI, RB_LO
from jit.emit.cpu.env import EntryEnv
from jit.emit.cpu.loops import _Loop
from jit.emit.cpu.records import _i32, _i64
from jit.emit.cpu.red import is_strong
from jit.lower.core import FuncLowering
from jit.lower.types import I1, I32, I64, PTR, VOID
from jit.passes.fused_loops import FusedLoop
from jit.ptx import ast as A
from jit.ptx.ast import type_bytes

MAX_START = 1 << 62
MAX_STEP = 1 << 61
PREFETCH_CHUNKS = 4  # NOTE [fused loop prefetch]


def usable(fl: FuncLowering, plan: FusedLoop) -> bool:
    """Registers of the plan are integers of the loop test's width (else the kernel keeps the usual path)."""
    for name in (plan.iv, *(o.name for o in (plan.step, plan.bound) if isinstance(o, A.Reg))):
        a = fl.regs.get(name)
        if a is None or not isinstance(a.allocated_type, ir.IntType) or a.allocated_type.width != plan.width:
            return False
    return all(r in fl.regs for r in plan.invariants)


def _value(fl: FuncLowering, plan: FusedLoop, o: A.Operand) -> ir.Value:
    """An operand of the loop test or step as the exact integer the test compares, in i64."""
    b = fl.b
    if isinstance(o, A.Imm):
        v = int(o.value) & ((1 << plan.width) - 1)
        if plan.signed and v >= 1 << (plan.width - 1):
            v -= 1 << plan.width
        return _i64(v)
    assert isinstance(o, A.Reg)
    v = b.load(fl.regs[o.name])
    if plan.width == 64:
        return v
    return b.sext(v, I64) if plan.signed else b.zext(v, I64)


def _entered(fl: FuncLowering, plan: FusedLoop) -> ir.Value:
    """True when none of P's exit branches is taken."""
    b = fl.b
    ok: ir.Value = ir.Constant(I1, 1)
    for pred, neg in plan.exits:
        ok = b.and_(ok, b.icmp_unsigned("==", b.load(fl.regs[pred]), ir.Constant(I1, 1 if neg else 0)))
    return ok


def _bits(fl: FuncLowering, r: str) -> ir.Value:
    """A register as an integer (floats by their bits: a NaN equals itself)."""
    a = fl.regs[r]
    v = fl.b.load(a)
    t = a.allocated_type
    if isinstance(t, ir.IntType):
        return v
    return fl.b.bitcast(v, ir.IntType(64 if isinstance(t, ir.DoubleType) else 16 if isinstance(t, ir.HalfType) else 32))


def _thread(fl: FuncLowering, env: EntryEnv, tx: ir.Value, probe: bool) -> None:
    """Thread (tx, 0, 0) runs next. The probe starts each thread with zeroed registers, as the usual thread loops
    do (NOTE [uninitialised registers]); the fused loop must keep them (the invariants of L)."""
    env.tid = [tx, _i32(0), _i32(0)]
    env.t32 = tx
    if probe:
        fl.zero_regs()


def emit_fused(fl: FuncLowering, env: EntryEnv, plan: FusedLoop, done: ir.Block) -> None:
    """The probe, then the fused loop ending at ``done``; blocks that fail the probe continue at the builder's
    position when this returns."""
    b = fl.b
    zero = _i32(0)
    _thread(fl, env, zero, True)
    fl.lower_body(list(plan.pre), finish=False)
    c = _value(fl, plan, A.Reg(plan.iv))
    step = _value(fl, plan, plan.step)
    nb = _value(fl, plan, plan.bound)
    if plan.inclusive:  # i <= n  <=>  i < n + 1 (n <= 2**62 is checked first, so no overflow)
        nb = b.select(b.icmp_signed("<=", nb, _i64(MAX_START)), b.add(nb, _i64(1)), _i64(MAX_START + 1))
    inv0 = {r: _bits(fl, r) for r in plan.invariants}
    conds = [
        b.icmp_unsigned("==", env.ntid[1], _i32(1)),
        b.icmp_unsigned("==", env.ntid[2], _i32(1)),
        b.icmp_signed(">=", c, _i64(0)),
        b.icmp_signed("<=", c, _i64(MAX_START)),
        b.icmp_signed(">=", step, _i64(1)),
        b.icmp_signed("<=", step, _i64(MAX_STEP)),
        b.icmp_signed("<=", nb, _i64(MAX_START)),
        b.icmp_signed("<=", b.add(nb, step), _i64(LIMIT[(plan.width, plan.signed)])),
        b.icmp_unsigned("==", _entered(fl, plan), b.icmp_signed("<", c, nb)),
    ]
    ok0 = conds[0]
    for cond in conds[1:]:
        ok0 = b.and_(ok0, cond)
    ok = fl.ab.alloca(I1, name="fuse_ok")
    b.store(ok0, ok)
    probe, decide = fl.block("fuse_probe"), fl.block("fuse_decide")
    b.cbranch(ok0, probe, decide)
    b.position_at_end(probe)
    lp = _Loop(fl, b.sub(env.ntid[0], _i32(1)), "fuse_probe_t")
    tx = b.add(lp.i, _i32(1))
    _thread(fl, env, tx, True)
    fl.lower_body(list(plan.pre), finish=False)
    ent = _entered(fl, plan)
    ct = b.add(c, b.zext(tx, I64))
    same = b.icmp_unsigned("==", _value(fl, plan, A.Reg(plan.iv)), ct)
    for r, v0 in inv0.items():
        same = b.and_(same, b.icmp_unsigned("==", _bits(fl, r), v0))
    good = b.and_(b.icmp_unsigned("==", ent, b.icmp_signed("<", ct, nb)), b.or_(b.not_(ent), same))
    b.store(b.and_(b.load(ok), good), ok)
    lp.end()
    b.branch(decide)
    b.position_at_end(decide)
    fused, usual = fl.block("fused"), fl.block("unfused")
    b.cbranch(b.load(ok), fused, usual)

    b.position_at_end(fused)
    for r, v0 in inv0.items():  # the probe left the last thread's values, which may be a thread that did not enter
        a = fl.regs[r]
        b.store(v0 if v0.type == a.allocated_type else b.bitcast(v0, a.allocated_type), a)
    acc = _Accesses(fl, env, plan)
    fast = acc.begin(c, nb)
    if fast is None:
        _chunks(fl, env, plan, c, nb, step, done, acc)
    else:  # NOTE [fused loop address forms]: one overlap test for the whole loop, or the usual per-access ones
        quick, checked = fl.block("fused_unguarded"), fl.block("fused_guarded")
        b.cbranch(fast, quick, checked)
        b.position_at_end(quick)
        env.red_unguarded = acc.unguard
        _chunks(fl, env, plan, c, nb, step, done, acc)
        env.red_unguarded = set()
        b.position_at_end(checked)
        _chunks(fl, env, plan, c, nb, step, done, acc)
    env.red_dense = {}
    b.position_at_end(usual)


def _chunks(
    fl: FuncLowering,
    env: EntryEnv,
    plan: FusedLoop,
    c: ir.Value,
    nb: ir.Value,
    step: ir.Value,
    done: ir.Block,
    acc: _Accesses,
) -> None:
    """for (lo = c; lo < nb; lo += step) for (i = lo; i < min(lo + ntid.x, nb); ++i) body(i); then ``done``."""
    b = fl.b
    outer, run = fl.block("fused_chunk"), fl.block("fused_run")
    pre = b.block
    b.branch(outer)
    b.position_at_end(outer)
    lo = b.phi(I64, "fused_lo")
    lo.add_incoming(c, pre)
    b.cbranch(b.icmp_signed("<", lo, nb), run, done)
    b.position_at_end(run)
    room = b.sub(nb, lo)
    nt = b.zext(env.ntid[0], I64)
    acc.prefetch(b.add(lo, b.mul(step, _i64(PREFETCH_CHUNKS))), nt)
    inner = _Loop(fl, b.select(b.icmp_signed("<", room, nt), room, nt), "fused_i")
    _thread(fl, env, b.trunc(inner.i, env.ntid[0].type), False)
    i = b.and_(b.add(lo, inner.i), _i64(LIMIT[(plan.width, plan.signed)] - 1))  # a no-op: tells LLVM i >= 0
    a = fl.regs[plan.iv]
    b.store(i if plan.width == 64 else b.trunc(i, a.allocated_type), a)
    env.fused_exit = done  # NOTE [fused loops under bounds checks]
    fl.lower_body(list(plan.body), finish=False)
    env.fused_exit = None
    inner.end()
    lo.add_incoming(b.add(lo, step), b.block)
    b.branch(outer)


class _Accesses:
    """What the address forms of the body (jit/analysis/fused_access.py) buy a block that runs fused, when the kernel
    combines reductions (NOTE [combined global reductions]): a dense region for the reductions at Idx addresses
    (NOTE [dense reduction slots]) and, when no reduction in the body can grow the buffered range, one overlap test
    per block for the loads and stores at Aff addresses instead of one per access."""

    def __init__(self, fl: FuncLowering, env: EntryEnv, plan: FusedLoop) -> None:
        self.fl, self.env, self.plan = fl, env, plan
        self.dense: tuple[str, int, int, int, bool] | None = None  # base register, offset, shift, count, is64
        self.dense_ids: list[int] = []
        self.affine: list[tuple[int, Aff, int]] = []  # id, form, bytes touched
        self.unguard: set[int] = set()
        forms = address_forms(plan.body, plan.iv, plan.width, plan.signed)
        # NOTE [fused loop prefetch]: (base, coef) -> [first, last] offset of the loads and stores at B + coef*i + off
        self.streams: dict[tuple[str, int], tuple[int, int]] = {}
        for ins in plan.body:
            f = forms.get(id(ins))
            if ins.opcode in ("ld", "ldu", "st") and isinstance(f, Aff) and f.base and 0 < f.coef <= 64:
                a, z = self.streams.get((f.base, f.coef), (f.off, f.off))
                self.streams[(f.base, f.coef)] = (min(a, f.off), max(z, f.off))
        if env.red is None:
            return
        groups: dict[tuple[str, int, int, int, bool], list[int]] = {}
        for ins in plan.body:
            f = forms.get(id(ins))
            if id(ins) in env.red_sites and isinstance(f, Idx) and f.base is not None:
                t = fl.itype(ins)
                size = type_bytes(t)
                count = 1 << max(0, f.count - 1).bit_length()
                if f.scale >= size and f.scale & (f.scale - 1) == 0 and count <= DENSE_SLOTS:
                    key = (f.base, f.off, f.scale.bit_length() - 1, count, t in ("u64", "s64"))
                    groups.setdefault(key, []).append(id(ins))
        if groups:
            self.dense, self.dense_ids = max(groups.items(), key=lambda kv: len(kv[1]))
        sparse = [ins for ins in plan.body if id(ins) in env.red_sites and id(ins) not in self.dense_ids]
        if sparse:
            return  # a sparse reduction may widen the buffered range in the middle of the loop
        for ins in plan.body:
            f = forms.get(id(ins))
            if (
                ins.opcode in ("ld", "ldu", "st")
                and isinstance(f, Aff)
                and fl.space(ins) in ("global", "generic")
                and not is_strong(ins)
            ):
                n = next((int(m[1:]) for m in ins.mods if m in ("v2", "v4", "v8")), 1)
                self.affine.append((id(ins), f, n * type_bytes(fl.itype(ins))))

    def prefetch(self, first: ir.Value, n: ir.Value) -> None:
        """Prefetch the lines the affine accesses touch for i in [first, first + n)."""
        b = self.fl.b
        pf = b.module.globals.get("llvm.prefetch.p0") or ir.Function(
            b.module, ir.FunctionType(VOID, [PTR, I32, I32, I32]), "llvm.prefetch.p0"
        )
        for (base, coef), (o1, o2) in self.streams.items():
            start = b.add(b.add(self._reg64(base), _i64(o1)), b.mul(first, _i64(coef)))
            lines = b.lshr(b.add(b.mul(n, _i64(coef)), _i64(o2 - o1 + 63)), _i64(6))
            lp = _Loop(self.fl, lines, "fused_pf")
            b.call(pf, [b.inttoptr(b.add(start, b.shl(lp.i, _i64(6))), PTR), _i32(0), _i32(3), _i32(1)])
            lp.end()

    def _reg64(self, name: str) -> ir.Value:
        return self.fl.get(A.Reg(name), "u64")

    def begin(self, c: ir.Value, nb: ir.Value) -> ir.Value | None:
        """Claim the dense region; the condition under which the block may skip the per-access overlap tests
        (None: it may not)."""
        b, red = self.fl.b, self.env.red
        if self.dense is not None:
            base, off, shift, count, is64 = self.dense
            bv = b.add(self._reg64(base), _i64(off))
            red.claim(b, bv, shift, count, is64)  # type: ignore[union-attr]
            self.env.red_dense = {k: (bv, shift, count) for k in self.dense_ids}
        if not self.affine:
            return None
        i128 = ir.IntType(128)
        rlo = b.zext(b.load(red.field(b, RB_LO), typ=I64), i128)  # type: ignore[union-attr]
        rhi = b.zext(b.load(red.field(b, RB_HI), typ=I64), i128)  # type: ignore[union-attr]
        first, last = b.sext(c, i128), b.sext(b.sub(nb, _i64(1)), i128)
        ok: ir.Value = ir.Constant(I1, 1)
        for _, f, size in self.affine:
            # every address the access touches lies in [lo, hi); exact (no wrap) when 0 <= lo and hi <= 2**64
            bv = b.add(b.zext(self._reg64(f.base), i128), ir.Constant(i128, f.off))  # type: ignore[arg-type]
            a1 = b.add(bv, b.mul(first, ir.Constant(i128, f.coef)))
            a2 = b.add(bv, b.mul(last, ir.Constant(i128, f.coef)))
            lo = b.select(b.icmp_signed("<", a1, a2), a1, a2)
            hi = b.add(b.select(b.icmp_signed("<", a1, a2), a2, a1), ir.Constant(i128, size))
            exact = b.and_(
                b.icmp_signed(">=", lo, ir.Constant(i128, 0)), b.icmp_signed("<=", hi, ir.Constant(i128, 1 << 64))
            )
            apart = b.or_(b.icmp_signed("<=", hi, rlo), b.icmp_signed(">=", lo, rhi))
            ok = b.and_(ok, b.and_(exact, apart))
        self.unguard = {k for k, _, _ in self.affine}
        return ok
