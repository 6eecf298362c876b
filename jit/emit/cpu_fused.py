"""A block of a grid-stride kernel run as one loop over its elements (CPU target).

See NOTE [fused grid-stride loops] in jit/passes/fused_loops.py for the shape, the run-time conditions and why the
result is one a GPU may produce. Emitted at the start of every block, before the usual thread loops (or scheduler),
which run the blocks that do not pass the probe.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.cpu import EntryEnv, _i32, _i64
from jit.emit.cpu_loops import _Loop
from jit.lower.core import FuncLowering
from jit.lower.types import I1, I64
from jit.passes.fused_loops import FusedLoop
from jit.ptx import ast as A

MAX_START = 1 << 62
MAX_STEP = 1 << 61
_LIMIT = {(32, True): 1 << 31, (32, False): 1 << 32, (64, True): 1 << 62, (64, False): 1 << 62}


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
    return fl.b.bitcast(v, ir.IntType(64 if isinstance(t, ir.DoubleType) else 16 if isinstance(t, ir.HalfType)
                                      else 32))


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
    conds = [b.icmp_unsigned("==", env.ntid[1], _i32(1)), b.icmp_unsigned("==", env.ntid[2], _i32(1)),
             b.icmp_signed(">=", c, _i64(0)), b.icmp_signed("<=", c, _i64(MAX_START)),
             b.icmp_signed(">=", step, _i64(1)), b.icmp_signed("<=", step, _i64(MAX_STEP)),
             b.icmp_signed("<=", nb, _i64(MAX_START)),
             b.icmp_signed("<=", b.add(nb, step), _i64(_LIMIT[(plan.width, plan.signed)])),
             b.icmp_unsigned("==", _entered(fl, plan), b.icmp_signed("<", c, nb))]
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
    inner = _Loop(fl, b.select(b.icmp_signed("<", room, nt), room, nt), "fused_i")
    _thread(fl, env, b.trunc(inner.i, env.ntid[0].type), False)
    i = b.and_(b.add(lo, inner.i), _i64(_LIMIT[(plan.width, plan.signed)] - 1))  # a no-op: tells LLVM i >= 0
    a = fl.regs[plan.iv]
    b.store(i if plan.width == 64 else b.trunc(i, a.allocated_type), a)
    fl.lower_body(list(plan.body), finish=False)
    inner.end()
    lo.add_incoming(b.add(lo, step), b.block)
    b.branch(outer)
    b.position_at_end(usual)
