"""A grid-stride loop that carries values, run for all threads of a block at once (CPU target).

See NOTE [lockstep grid-stride loops] in jit/passes/lockstep_loops.py for the shapes, the run-time conditions and
why the result is one a GPU may produce. Emitted at the start of a scheduler round (jit/emit/cpu_sched.py): a round
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

NOTE [lockstep block groups]
A block's elements are runs of ntid.x consecutive ones, one grid stride apart (1 KiB every 512 KiB in the reduction
of benchmarks/jit.py). Walked one block at a time that is a stream the hardware prefetchers follow badly: on the
2-core Zen 3 host one worker summed 24M floats in 29 ms that way and in 11 ms when the same loop ran as one block
over contiguous memory. The blocks a worker claims at once (L_CHUNK consecutive ids, jit/emit/cpu_kernel.py) have
consecutive c, so their runs at one stride step are one contiguous range: the first of them that reaches the loop
runs it for up to GROUP_MAX of them (fewer where the stash would not fit the fixed record layout), lanes u = 0 .. k·ntid.x - 1 with i = c + u + j·s, and keeps the other blocks'
lanes in a stash in its thread records (the stash fields, after the registers' ones). A later block of the claim
takes its lanes from the stash, without running the loop, when the stash was made from the same values: its c is
one of the stash's blocks', n, s, ntid.x and the invariants of C are the ones the stash was computed with, and
each thread's carried registers start from the values the stash's lanes started from. Otherwise (and for the first
block) it computes for itself. The records are new and zeroed for every launch (jit/runtime.py), so a stash never
outlives its launch.

Running another block's loop before that block has started is an order a GPU may produce: blocks run concurrently
in any order, and the block's own code before F cannot matter when nothing there writes global memory or
synchronises with other blocks (no store but to shared memory, no atomic, fence or call) and F is in no loop, so
that the block reaches F once (LockstepLoop.early, jit/passes/lockstep_loops.py). A group is only formed then,
and when C stores nothing and reads no special register (all lanes then run the same code on the same registers
but `i`); what decides whether a block uses the stash is the block's own probe. A bounds
check that fails in a group's loop may belong to a block that never runs it (one that leaves earlier, for
instance): the group's loop then takes its failure back (the recorded address is restored) and the block runs the
loop for itself alone, where a failure is its own and ends the block as in NOTE [fused loops under bounds checks].
Under bounds checks only loops whose global accesses all have rooted checks (NOTE [rooted bounds checks]) are
grouped: a table search that fails aborts the launch at once.

NOTE [lockstep bounds checks]
gpud compiles with bounds checks, and a rooted check is a branch out of the loop, which LLVM's vectoriser does not
take: the benchmark's reduction ran 23 ms checked against 11 ms unchecked. Every load and store of C at an affine
address (NOTE [fused loop address forms]) whose check is rooted touches, over the whole loop, addresses between
those of i = c and i = n - 1 (plus its size): one comparison of that hull, in exact 128-bit arithmetic, with the
access's range per block picks a copy of the loop without those checks; a block whose hull leaves the range runs
the copy with them, which stops at the failing element as before. Checked reduction: 23 -> 14-15 ms.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.cpu import FIXED_RECORDS_MAX, R_PARK, R_PC, EntryEnv, _i32, _i64
from jit.emit.cpu_fused import MAX_START, MAX_STEP, PREFETCH_CHUNKS, _Accesses, _bits, _value
from jit.emit.cpu_loops import _Loop
from jit.lower.core import FuncLowering
from jit.lower.module import align_up
from jit.lower.types import F64, I1, I64, reg_type
from jit.passes.fused_access import LIMIT, Aff, address_forms
from jit.passes.liveness import defs_uses
from jit.passes.lockstep_loops import LockstepLoop
from jit.ptx import ast as A
from jit.ptx.ast import type_bytes

GROUP_MAX = 16  # blocks whose lanes one lockstep loop runs (NOTE [lockstep block groups])


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


def emit_lockstep(fl: FuncLowering, env: EntryEnv, points: tuple[LockstepLoop, A.SyncPoint, A.SyncPoint],
                  generic: ir.Block, round_end: ir.Block) -> None:
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
    conds = [b.icmp_signed(">=", c, _i64(0)), b.icmp_signed("<=", c, _i64(MAX_START)),
             b.icmp_signed(">=", step, nt), b.icmp_signed(">=", step, _i64(1)),
             b.icmp_signed("<=", step, _i64(MAX_STEP))]
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
    _Group(fl, env, plan, c, nb, step, inv0).emit(bad, done)
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
        b.store(last if plan.width == 64 else b.trunc(last, a.allocated_type), env.rec_addr(b, fin.i,
                                                                                          env.slots[plan.iv]))
    b.store(_i32(0), env.rec_addr(b, fin.i, R_PARK))
    b.store(_i32(g.id), env.rec_addr(b, fin.i, R_PC))
    fin.end()
    b.branch(round_end)


def _resume(fl: FuncLowering, env: EntryEnv, plan: LockstepLoop, f: A.SyncPoint, tx: ir.Value) -> None:
    """Thread (tx, 0, 0)'s registers as it resumes at F, then the setup."""
    from jit.emit.cpu_sched import start_thread
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

    def __init__(self, fl: FuncLowering, plan: LockstepLoop, c: ir.Value, step: ir.Value,
                 conds: list[ir.Value]) -> None:
        self.fl, self.plan, self.c, self.step = fl, plan, c, step
        b = fl.b
        if plan.bound is not None:
            nb = _value(fl, plan, plan.bound)  # type: ignore[arg-type]
            if plan.inclusive:  # i <= n  <=>  i < n + 1 (n <= 2**62 is checked first, so no overflow)
                nb = b.select(b.icmp_signed("<=", nb, _i64(MAX_START)), b.add(nb, _i64(1)), _i64(MAX_START + 1))
            conds += [b.icmp_signed("<=", nb, _i64(MAX_START)),
                      b.icmp_signed("<=", b.add(nb, step), _i64(LIMIT[(plan.width, plan.signed)])),
                      b.icmp_signed("<", c, nb)]
            ok0 = _all(b, conds)
            # T_0 = ceil((n - c) / s) (only used when ok0 holds; the selects keep the division defined)
            room = b.select(ok0, b.sub(nb, c), _i64(1))
            sd = b.select(ok0, step, _i64(1))
            self.t0 = b.udiv(b.add(room, b.sub(sd, _i64(1))), sd)
            self.edge: ir.Value = b.sub(b.sub(nb, c), b.mul(b.sub(self.t0, _i64(1)), sd))  # T_t = T_0 iff t < edge
            self.nb = nb
        else:
            self.t0 = b.add(self._trip(), _i64(1))
            ok0 = _all(b, [*conds, b.icmp_unsigned("<", self.t0, _i64(1 << 31)), b.icmp_unsigned(">=", self.t0, _i64(1)),
                           b.icmp_signed("<=", step, _i64(1 << 31))])
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
            return b.or_(first, b.and_(b.icmp_unsigned("==", b.add(tt, _i64(1)), self.t0),
                                       b.icmp_unsigned(">=", tt, _i64(1))))
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
        fits = b.and_(b.icmp_signed("<=", self.nb, _i64(MAX_START)), b.icmp_signed(
            "<=", b.add(self.nb, self.step), _i64(LIMIT[(self.plan.width, self.plan.signed)])))
        return self.nb, self.t0, self.edge, fits


def _all(b: ir.IRBuilder, conds: list[ir.Value]) -> ir.Value:
    ok = conds[0]
    for cond in conds[1:]:
        ok = b.and_(ok, cond)
    return ok


def _save_carried(fl: FuncLowering, env: EntryEnv, plan: LockstepLoop, tx: ir.Value) -> None:
    b = fl.b
    for r in plan.carried:
        b.store(b.load(fl.regs[r]), env.rec_addr(b, tx, env.slots[r]))


def stash_fields(fn: A.Function, group_max: int) -> tuple[list[tuple[int, int]], int]:
    """NOTE [lockstep block groups]: the record fields of the stash, (offset from EntryEnv.stash_off, element
    size), and the bytes per thread they take: a header (8 bytes per thread, of which the first 6 + invariants
    words are used), then per carried register its values at the start of the loop (one per thread) and its lanes
    (``group_max`` per thread)."""
    fields = [(0, 8)]
    off = 8
    for r in fn.lockstep.carried:
        size = _size(reg_type(fn.regs[r]))
        fields += [(off, size), (off + 8, size)]
        off += 8 + align_up(size * group_max, 8)
    return fields, off


def group_max(fn: A.Function, rec_bytes: int, threads: int) -> int:
    """The most blocks a group may hold: GROUP_MAX, halved while the stash would push the records of a block of
    ``threads`` past the fixed layout (NOTE [thread records]: a layout known only at run time costs every record
    access a register)."""
    g = GROUP_MAX
    while g > 1 and (rec_bytes + stash_fields(fn, g)[1]) * align_up(threads, 16) > FIXED_RECORDS_MAX:
        g //= 2
    return g


def _size(t: ir.Type) -> int:
    return max(1, t.width // 8) if isinstance(t, ir.IntType) else 8 if t == F64 else 4


class _Group:
    """The loop of NOTE [lockstep grid-stride loops] for this block, or for a group of its worker's next blocks at
    once (NOTE [lockstep block groups])."""

    def __init__(self, fl: FuncLowering, env: EntryEnv, plan: LockstepLoop, c: ir.Value, nb: ir.Value,
                 step: ir.Value, inv0: dict[str, ir.Value]) -> None:
        self.fl, self.env, self.plan, self.c, self.nb, self.step, self.inv0 = fl, env, plan, c, nb, step, inv0
        self.b = fl.b
        self.nt = fl.b.zext(env.ntid[0], I64)
        base = env.stash_off
        fields = stash_fields(fl.fn, env.group_max)[0]
        self.init = {r: base + fields[1 + 2 * k][0] for k, r in enumerate(plan.carried)}
        self.lanes = {r: off + 8 for r, off in self.init.items()}
        self.groups = groupable(fl, plan)

    def hdr(self, k: int) -> ir.Value:
        return self.env.rec_addr(self.b, _i64(k), self.env.stash_off)

    def _key(self) -> list[ir.Value]:
        """What the stash was made for, after valid and its first element c: n, the step, ntid.x, the invariants."""
        return [self.nb, self.step, self.nt, *(self.b.zext(v, I64) if v.type != I64 else v
                                               for v in self.inv0.values())]

    def emit(self, bad: ir.Block, done: ir.Block) -> None:
        fl, env, b, plan = self.fl, self.env, self.b, self.plan
        own = fl.block("lockstep_compute")
        if self.groups:  # does a stash hold this block's lanes, made from the same values?
            rel = b.sub(self.c, b.load(self.hdr(1), typ=I64))
            hit = b.and_(b.icmp_unsigned("==", b.load(self.hdr(0), typ=I64), _i64(1)),
                         b.icmp_signed(">=", rel, _i64(0)))
            hit = b.and_(hit, b.icmp_signed("<=", b.add(rel, self.nt), b.load(self.hdr(2), typ=I64)))
            hit = b.and_(hit, b.icmp_unsigned("==", b.urem(rel, self.nt), _i64(0)))
            for k, v in enumerate(self._key()):
                hit = b.and_(hit, b.icmp_unsigned("==", b.load(self.hdr(3 + k), typ=I64), v))
            same, use = fl.block("lockstep_stash_inits"), fl.block("lockstep_stash_use")
            b.cbranch(hit, same, own)
            b.position_at_end(same)
            eq = fl.ab.alloca(I1, name="lockstep_same")
            b.store(ir.Constant(I1, 1), eq)
            lp = _Loop(fl, self.nt, "lockstep_cmp", False, False)
            for r in plan.carried:
                ty = fl.regs[r].allocated_type
                x = _as_int(b, b.load(env.rec_addr(b, lp.i, env.slots[r]), typ=ty))
                y = _as_int(b, b.load(env.rec_addr(b, lp.i, self.init[r]), typ=ty))
                b.store(b.and_(b.load(eq), b.icmp_unsigned("==", x, y)), eq)
            lp.end()
            b.cbranch(b.load(eq), use, own)
            b.position_at_end(use)
            self._copy_out(rel)
            b.branch(done)
        else:
            b.branch(own)
        b.position_at_end(own)
        claim_left = b.sub(env.claim_last, env.bid)
        gm = _i64(env.group_max)
        groups = b.select(b.icmp_unsigned("<", claim_left, gm), claim_left, gm)
        width = fl.ab.alloca(I64, name="lockstep_width")
        b.store(b.mul(self.nt, groups) if self.groups else self.nt, width)
        saved = None
        if fl.cg.bounds_check:
            if env.bc_bad is None:
                env.bc_bad = fl.ab.alloca(I64, name="bc_bad")
                fl.ab.store(_i64(0), env.bc_bad)
            saved = b.load(env.bc_bad)
        retry, fault, finished = fl.block("lockstep_retry"), fl.block("lockstep_group_fault"), fl.block(
            "lockstep_loop_done")
        b.branch(retry)
        b.position_at_end(retry)
        w = b.load(width)
        lp = _Loop(fl, self.nt, "lockstep_init", False, False)
        for r in plan.carried:
            ty = fl.regs[r].allocated_type
            v = b.load(env.rec_addr(b, lp.i, env.slots[r]), typ=ty)
            b.store(v, env.rec_addr(b, lp.i, self.init[r]))
            rep = _Loop(fl, b.udiv(w, self.nt), "lockstep_rep", False, False)
            b.store(v, env.rec_addr(b, b.add(b.mul(rep.i, self.nt), lp.i), self.lanes[r]))
            rep.end()
        lp.end()
        self._chunks(w, fault, finished)
        b.position_at_end(fault)  # a bounds check failed: in a group, maybe for a block that will not run the loop
        again = fl.block("lockstep_alone")
        b.cbranch(b.icmp_unsigned(">", w, self.nt), again, bad)
        b.position_at_end(again)
        if saved is not None:
            b.store(saved, env.bc_bad)
        b.store(self.nt, width)
        b.branch(retry)
        b.position_at_end(finished)
        self._copy_out(_i64(0))
        if self.groups:
            b.store(b.zext(b.icmp_unsigned(">", w, self.nt), I64), self.hdr(0))
            b.store(self.c, self.hdr(1))
            b.store(w, self.hdr(2))
            for k, v in enumerate(self._key()):
                b.store(v, self.hdr(3 + k))
        b.branch(done)

    def _copy_out(self, rel: ir.Value) -> None:
        """The lanes rel .. rel + ntid.x - 1 go to the threads' records."""
        b, env = self.b, self.env
        lp = _Loop(self.fl, self.nt, "lockstep_out", False, False)
        for r in self.plan.carried:
            ty = self.fl.regs[r].allocated_type
            b.store(b.load(env.rec_addr(b, b.add(rel, lp.i), self.lanes[r]), typ=ty),
                    env.rec_addr(b, lp.i, env.slots[r]))
        lp.end()

    def _chunks(self, w: ir.Value, bad: ir.Block, done: ir.Block) -> None:
        """The loop over the chunks; under bounds checks two copies of it (NOTE [lockstep bounds checks])."""
        b = self.b
        pre = self._prechecked() if self.fl.cg.bounds_check else None
        if pre is None:
            self._chunk_loop(w, bad, done, frozenset())
            return
        quick, checked = self.fl.block("lockstep_prechecked"), self.fl.block("lockstep_checked")
        b.cbranch(pre[0], quick, checked)
        b.position_at_end(quick)
        self._chunk_loop(w, bad, done, pre[1])
        b.position_at_end(checked)
        self._chunk_loop(w, bad, done, frozenset())

    def _prechecked(self) -> tuple[ir.Value, frozenset[int]] | None:
        """NOTE [lockstep bounds checks]: whether every global load and store at an affine address with a rooted
        check (NOTE [rooted bounds checks]) stays inside its range for every i in [c, n), and their ids."""
        fl, b, plan = self.fl, self.b, self.plan
        forms = address_forms(plan.body, plan.iv, plan.width, plan.signed)
        i128 = ir.IntType(128)
        first, last = b.sext(self.c, i128), b.sext(b.sub(self.nb, _i64(1)), i128)
        ok: ir.Value = ir.Constant(I1, 1)
        ids = []
        for ins in plan.body:
            if ins.opcode not in ("ld", "st"):
                continue
            space = fl.space(ins)
            addr = ins.operands[1] if ins.opcode == "ld" else ins.operands[0]
            f = forms.get(id(ins))
            root = fl.root_of(addr, space) if space in ("global", "generic") else None
            if not isinstance(f, Aff) or not f.base or root is None:
                continue
            n = next((int(m[1:]) for m in ins.mods if m in ("v2", "v4", "v8")), 1)
            size = n * type_bytes(fl.itype(ins))
            rlo, rhi = self.env.root_range(fl, root)
            base = b.add(b.zext(fl.get(A.Reg(f.base), "u64"), i128), ir.Constant(i128, f.off))
            a1 = b.add(base, b.mul(first, ir.Constant(i128, f.coef)))
            a2 = b.add(base, b.mul(last, ir.Constant(i128, f.coef)))
            lo = b.select(b.icmp_signed("<", a1, a2), a1, a2)
            hi = b.add(b.select(b.icmp_signed("<", a1, a2), a2, a1), ir.Constant(i128, size))
            inside = b.and_(b.icmp_signed(">=", lo, b.zext(rlo, i128)), b.icmp_signed("<=", hi, b.zext(rhi, i128)))
            ok = b.and_(ok, inside)
            ids.append(id(ins))
        return (ok, frozenset(ids)) if ids else None

    def _chunk_loop(self, w: ir.Value, bad: ir.Block, done: ir.Block, unchecked: frozenset[int]) -> None:
        """for (lo = c; lo < n; lo += s) for (u = 0; u < min(w, n - lo); ++u) C for lane u; then ``done``."""
        fl, env, b, plan = self.fl, self.env, self.b, self.plan
        acc = _Accesses(fl, env, plan)  # type: ignore[arg-type]
        outer, run = fl.block("lockstep_chunk"), fl.block("lockstep_run")
        pre = b.block
        b.branch(outer)
        b.position_at_end(outer)
        lo = b.phi(I64, "lockstep_lo")
        lo.add_incoming(self.c, pre)
        b.cbranch(b.icmp_signed("<", lo, self.nb), run, done)
        b.position_at_end(run)
        room = b.sub(self.nb, lo)
        acc.prefetch(b.add(lo, b.mul(self.step, _i64(PREFETCH_CHUNKS))), w)
        inner = _Loop(fl, b.select(b.icmp_signed("<", room, w), room, w), "lockstep_u")
        tx = b.trunc(inner.i, env.ntid[0].type)  # the thread when w = ntid.x (C reads no %tid when it may not be)
        env.tid = [tx, _i32(0), _i32(0)]
        env.t32 = tx
        for r in plan.carried:
            b.store(b.load(env.rec_addr(b, inner.i, self.lanes[r]), typ=fl.regs[r].allocated_type), fl.regs[r])
        i = b.and_(b.add(lo, inner.i), _i64(LIMIT[(plan.width, plan.signed)] - 1))  # a no-op: tells LLVM i >= 0
        a = fl.regs[plan.iv]
        b.store(i if plan.width == 64 else b.trunc(i, a.allocated_type), a)
        env.fused_exit = bad
        fl.prechecked = unchecked
        fl.lower_body(list(plan.body), finish=False)
        fl.prechecked = frozenset()
        env.fused_exit = None
        for r in plan.carried:
            b.store(b.load(fl.regs[r]), env.rec_addr(b, inner.i, self.lanes[r]))
        inner.end()
        lo.add_incoming(b.add(lo, self.step), b.block)
        b.branch(outer)


def groupable(fl: FuncLowering, plan: LockstepLoop) -> bool:
    """Whether other blocks' lanes may run early (NOTE [lockstep block groups]): nothing the kernel does before F
    can matter to them (LockstepLoop.early), C stores nothing and reads no special register, and (bounds-checked) every global access it makes has a rooted check, whose failure the
    group can take back."""
    for ins in plan.body:
        if ins.opcode == "st" or any(isinstance(o, A.Special) for o in ins.operands):
            return False
        if fl.cg.bounds_check and ins.opcode in ("ld", "ldu") and fl.space(ins) in ("global", "generic"):
            if fl.root_of(ins.operands[1], fl.space(ins)) is None:
                return False
    return plan.early and len(plan.invariants) + 6 <= 16


def _as_int(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    t = v.type
    if isinstance(t, ir.IntType):
        return v
    return b.bitcast(v, ir.IntType(64 if t == F64 else 16 if isinstance(t, ir.HalfType) else 32))
