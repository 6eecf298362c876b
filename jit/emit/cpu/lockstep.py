"""A grid-stride loop that carries values, run for all threads of a block at once (CPU target).

See NOTE [lockstep grid-stride loops] in jit/passes/lockstep_loops.py for the shapes, the run-time conditions and
why the result is one a GPU may produce. Emitted at the start of a scheduler round (jit/emit/cpu/sched.py): a round
that starts with every thread of the block runnable at F branches here. The probe resumes each thread at F into
the registers (as the generic round would), runs the setup and checks the block; a block that fails goes on to the
generic round, which resumes the threads at F as if nothing had happened (the probe writes nothing but the carried
registers' record fields, which resuming at F does not read). A block that passes runs

    for (lo = c; lo < n; lo += s)
        for (t = 0; t < min(ntid.x, n - lo); ++t)
            { carried = record[t]; i = lo + t; C; record[t] = carried; }

then gives every thread the `i` its own loop would have ended with and parks it at G, runnable.

A thread starting at c + t runs T_t = ceil((n - c - t) / s) iterations. With s >= ntid.x (checked) T_t is T_0 or
T_0 - 1, so one division per block gives them all: T_t = T_0 exactly when c + t + (T_0 - 1)·s < n.

The loop itself, alone or for a group of blocks, and its bounds checks: jit/emit/cpu/lockstep_run.py (NOTE
[lockstep block groups], NOTE [lockstep bounds checks]).
"""

from __future__ import annotations

from llvmlite import ir

from jit.analysis.fused_access import LIMIT
from jit.analysis.liveness import defs_uses
from jit.emit.abi import R_PARK, R_PC
from jit.emit.cpu.env import EntryEnv
from jit.emit.cpu.fused import MAX_START, MAX_STEP, _bits, _value
from jit.emit.cpu.lockstep_run import LockstepRun, _all
from jit.emit.cpu.loops import _Loop
from jit.emit.cpu.records import _i32, _i64
from jit.lower.core import FuncLowering
from jit.lower.types import I1, I64, reg_type
from jit.passes.lockstep_loops import LockstepLoop
from jit.ptx import ast as A


def lockstep_points(env: EntryEnv) -> tuple[LockstepLoop, A.SyncPoint, A.SyncPoint] | None:
    """The kernel's lockstep loop with its sync points F and G, when the emitter can run it."""
    plan = env.fn.lockstep
    if plan is None:
        return None
    f, g = env.sync_ids.get(id(plan.enter)), env.sync_ids.get(id(plan.leave))
    if f is None or g is None:
        return None
    regs = env.fn.regs
    for name in (plan.iv, *(o.name for o in (plan.step, plan.bound) if isinstance(o, A.Reg))):
        t = reg_type(regs[name]) if name in regs else None
        if not isinstance(t, ir.IntType) or t.width != plan.width:
            return None
    if plan.trip is not None and not isinstance(reg_type(regs[plan.trip]), ir.IntType):
        return None
    set_at_f = set(f.live) | {r for ins in f.remat for r in defs_uses(ins)[0]}
    set_at_f |= {r for ins in plan.setup for r in defs_uses(ins)[0]}
    if any(r not in set_at_f for r in plan.invariants) or any(r not in env.slots for r in plan.carried):
        return None
    setup_writes = {r for ins in plan.setup for r in defs_uses(ins)[0]}
    if any(r in f.live and r in setup_writes for r in plan.carried):
        return None  # the probe would overwrite a value that resuming at F reads
    for r in g.live:  # what G restores: carried, i, or untouched since F
        if r not in plan.carried and r != plan.iv and not (r in f.live and r not in plan.written):
            return None
    return plan, f, g


def emit_lockstep(
    fl: FuncLowering,
    env: EntryEnv,
    points: tuple[LockstepLoop, A.SyncPoint, A.SyncPoint],
    generic: ir.Block,
    round_end: ir.Block,
) -> None:
    """The builder is at the start of a round whose threads all stand at F."""
    plan, f, g = points
    b = fl.b
    one_d = b.and_(b.icmp_unsigned("==", env.ntid[1], _i32(1)), b.icmp_unsigned("==", env.ntid[2], _i32(1)))
    go = fl.block("lockstep_probe0")
    b.cbranch(one_d, go, generic)
    b.position_at_end(go)
    _resume(fl, env, plan, f, _i32(0))
    c = _value(fl, plan, A.Reg(plan.iv))  # type: ignore[arg-type]
    step = _value(fl, plan, plan.step)  # type: ignore[arg-type]
    nt = b.zext(env.ntid[0], I64)
    conds = [
        b.icmp_signed(">=", c, _i64(0)),
        b.icmp_signed("<=", c, _i64(MAX_START)),
        b.icmp_signed(">=", step, nt),
        b.icmp_signed(">=", step, _i64(1)),
        b.icmp_signed("<=", step, _i64(MAX_STEP)),
    ]
    trips = _Trips(fl, plan, c, step, conds)
    inv0 = {r: _bits(fl, r) for r in plan.invariants}
    ok = fl.ab.alloca(I1, name="lockstep_ok")
    b.store(b.and_(trips.ok0, trips.good(_i64(0))), ok)
    _save_carried(fl, env, plan, _i32(0))
    probe, decide = fl.block("lockstep_probe"), fl.block("lockstep_decide")
    b.cbranch(b.load(ok), probe, decide)
    b.position_at_end(probe)
    lp = _Loop(fl, b.sub(env.ntid[0], _i32(1)), "lockstep_probe_t", False, False)
    tx = b.add(lp.i, _i32(1))
    _resume(fl, env, plan, f, tx)
    t64 = b.zext(tx, I64)
    good = trips.good(t64)
    same = b.icmp_unsigned("==", _value(fl, plan, A.Reg(plan.iv)), b.add(c, t64))  # type: ignore[arg-type]
    for r, v0 in inv0.items():
        same = b.and_(same, b.icmp_unsigned("==", _bits(fl, r), v0))
    b.store(b.and_(b.load(ok), b.and_(good, same)), ok)
    _save_carried(fl, env, plan, tx)
    lp.end()
    b.branch(decide)
    b.position_at_end(decide)
    nb, t0, edge, fits = trips.finish()
    run = fl.block("lockstep_run")
    b.cbranch(b.and_(b.load(ok), fits), run, generic)

    b.position_at_end(run)
    for r, v0 in inv0.items():  # the probe left the last thread's values in the registers
        a = fl.regs[r]
        b.store(v0 if v0.type == a.allocated_type else b.bitcast(v0, a.allocated_type), a)
    bad, done = fl.block("lockstep_fault"), fl.block("lockstep_done")
    LockstepRun(fl, env, plan, c, nb, step, inv0).emit(bad, done)
    b.position_at_end(bad)  # NOTE [fused loops under bounds checks]: a failed rooted check ends the block
    ex = _Loop(fl, env.nt32, "lockstep_exit", False, False)
    b.store(_i32(-1), env.rec_addr(b, ex.i, R_PARK))
    ex.end()
    b.branch(round_end)
    b.position_at_end(done)
    fin = _Loop(fl, env.nt32, "lockstep_park", False, False)
    t64 = b.zext(fin.i, I64)
    if plan.iv in g.live:
        trips = b.select(b.icmp_signed("<", t64, edge), t0, b.sub(t0, _i64(1)))
        last = b.add(b.add(c, t64), b.mul(trips, step))
        a = fl.regs[plan.iv]
        b.store(
            last if plan.width == 64 else b.trunc(last, a.allocated_type), env.rec_addr(b, fin.i, env.slots[plan.iv])
        )
    b.store(_i32(0), env.rec_addr(b, fin.i, R_PARK))
    b.store(_i32(g.id), env.rec_addr(b, fin.i, R_PC))
    fin.end()
    b.branch(round_end)


def _resume(fl: FuncLowering, env: EntryEnv, plan: LockstepLoop, f: A.SyncPoint, tx: ir.Value) -> None:
    """Thread (tx, 0, 0)'s registers as it resumes at F, then the setup."""
    from jit.emit.cpu.env import start_thread

    env.rec_t = tx
    start_thread(fl, env, _i32(0), _i32(0), tx, env.local_base)  # (the kernel's .local area: a remat may need it)
    env.restore(fl, f)
    fl.lower_body(list(plan.setup), finish=False)


class _Trips:
    """How many iterations each thread runs, T_t, and the bound n of the loop over the block's elements.

    With the loop test known (plain and prolog shapes), n is its bound and T_t = ceil((n - c - t) / s); the
    prolog shape also has each thread's trip count - 1 in a register, which must agree. In the epilogue shape
    there is no test on i, only that register: T_t must then be T_0 for t < edge and T_0 - 1 after (what a bound
    gives when s >= ntid.x), and n = c + (T_0 - 1)·s + edge is one bound that gives them."""

    def __init__(
        self, fl: FuncLowering, plan: LockstepLoop, c: ir.Value, step: ir.Value, conds: list[ir.Value]
    ) -> None:
        self.fl, self.plan, self.c, self.step = fl, plan, c, step
        b = fl.b
        if plan.bound is not None:
            nb = _value(fl, plan, plan.bound)  # type: ignore[arg-type]
            if plan.inclusive:  # i <= n  <=>  i < n + 1 (n <= 2**62 is checked first, so no overflow)
                nb = b.select(b.icmp_signed("<=", nb, _i64(MAX_START)), b.add(nb, _i64(1)), _i64(MAX_START + 1))
            conds += [
                b.icmp_signed("<=", nb, _i64(MAX_START)),
                b.icmp_signed("<=", b.add(nb, step), _i64(LIMIT[(plan.width, plan.signed)])),
                b.icmp_signed("<", c, nb),
            ]
            ok0 = _all(b, conds)
            # T_0 = ceil((n - c) / s) (only used when ok0 holds; the selects keep the division defined)
            room = b.select(ok0, b.sub(nb, c), _i64(1))
            sd = b.select(ok0, step, _i64(1))
            self.t0 = b.udiv(b.add(room, b.sub(sd, _i64(1))), sd)
            self.edge: ir.Value = b.sub(b.sub(nb, c), b.mul(b.sub(self.t0, _i64(1)), sd))  # T_t = T_0 iff t < edge
            self.nb = nb
        else:
            self.t0 = b.add(self._trip(), _i64(1))
            ok0 = _all(
                b,
                [
                    *conds,
                    b.icmp_unsigned("<", self.t0, _i64(1 << 31)),
                    b.icmp_unsigned(">=", self.t0, _i64(1)),
                    b.icmp_signed("<=", step, _i64(1 << 31)),
                ],
            )
            self.edge = fl.ab.alloca(I64, name="lockstep_edge")
            b.store(_i64(0), self.edge)
        self.ok0 = ok0

    def _trip(self) -> ir.Value:
        v = self.fl.b.load(self.fl.regs[self.plan.trip])  # type: ignore[index]
        return v if v.type == I64 else self.fl.b.zext(v, I64)

    def good(self, t64: ir.Value) -> ir.Value:
        """Thread t (its registers as at F after the setup) runs the iterations the fused loop gives it."""
        b, plan = self.fl.b, self.plan
        if plan.bound is None:
            tt = b.add(self._trip(), _i64(1))
            e = b.load(self.edge)
            first = b.and_(b.icmp_unsigned("==", tt, self.t0), b.icmp_unsigned("==", e, t64))
            b.store(b.select(first, b.add(t64, _i64(1)), e), self.edge)
            return b.or_(
                first, b.and_(b.icmp_unsigned("==", b.add(tt, _i64(1)), self.t0), b.icmp_unsigned(">=", tt, _i64(1)))
            )
        good = b.icmp_signed("<", b.add(self.c, t64), self.nb)
        if plan.trip is not None:
            good = b.and_(good, b.icmp_unsigned("==", self._trip(), b.sub(self.trips(t64), _i64(1))))
        return good

    def trips(self, t64: ir.Value) -> ir.Value:
        b = self.fl.b
        return b.select(b.icmp_signed("<", t64, self.edge), self.t0, b.sub(self.t0, _i64(1)))

    def finish(self) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """After the probe: (n, T_0, edge, whether n is in range)."""
        b = self.fl.b
        if self.plan.bound is not None:
            return self.nb, self.t0, self.edge, ir.Constant(I1, 1)
        self.edge = b.load(self.edge)
        self.nb = b.add(b.add(self.c, b.mul(b.sub(self.t0, _i64(1)), self.step)), self.edge)
        fits = b.and_(
            b.icmp_signed("<=", self.nb, _i64(MAX_START)),
            b.icmp_signed("<=", b.add(self.nb, self.step), _i64(LIMIT[(self.plan.width, self.plan.signed)])),
        )
        return self.nb, self.t0, self.edge, fits


def _save_carried(fl: FuncLowering, env: EntryEnv, plan: LockstepLoop, tx: ir.Value) -> None:
    b = fl.b
    for r in plan.carried:
        b.store(b.load(fl.regs[r]), env.rec_addr(b, tx, env.slots[r]))
