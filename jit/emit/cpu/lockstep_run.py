"""The lockstep loop proper (jit/emit/cpu/lockstep.py probes the block and calls it): the loop over the block's
threads, or over a group of its worker's next blocks, with or without per-element bounds checks.

NOTE [lockstep block groups]
A block's elements are runs of ntid.x consecutive ones, one grid stride apart (1 KiB every 512 KiB in the reduction
of benchmarks/jit.py). Walked one block at a time that is a stream the hardware prefetchers follow badly: on the
2-core Zen 3 host one worker summed 24M floats in 29 ms that way and in 11 ms when the same loop ran as one block
over contiguous memory. The blocks a worker claims at once (L_CHUNK consecutive ids, jit/emit/cpu/kernel.py) have
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

from jit.analysis.fused_access import LIMIT, Aff, address_forms
from jit.emit.cpu.env import EntryEnv
from jit.emit.cpu.fused import PREFETCH_CHUNKS, _Accesses
from jit.emit.cpu.loops import _Loop
from jit.emit.cpu.records import _i32, _i64, stash_fields
from jit.lower.core import FuncLowering
from jit.lower.types import F64, I1, I64
from jit.passes.lockstep_loops import LockstepLoop
from jit.ptx import ast as A
from jit.ptx.ast import type_bytes


def _all(b: ir.IRBuilder, conds: list[ir.Value]) -> ir.Value:
    ok = conds[0]
    for cond in conds[1:]:
        ok = b.and_(ok, cond)
    return ok


class LockstepRun:
    """The loop of NOTE [lockstep grid-stride loops] for this block, or for a group of its worker's next blocks at
    once (NOTE [lockstep block groups])."""

    def __init__(
        self,
        fl: FuncLowering,
        env: EntryEnv,
        plan: LockstepLoop,
        c: ir.Value,
        nb: ir.Value,
        step: ir.Value,
        inv0: dict[str, ir.Value],
    ) -> None:
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
        return [self.nb, self.step, self.nt, *(self.b.zext(v, I64) if v.type != I64 else v for v in self.inv0.values())]

    def emit(self, bad: ir.Block, done: ir.Block) -> None:
        fl, env, b, plan = self.fl, self.env, self.b, self.plan
        own = fl.block("lockstep_compute")
        if self.groups:  # does a stash hold this block's lanes, made from the same values?
            rel = b.sub(self.c, b.load(self.hdr(1), typ=I64))
            hit = b.and_(
                b.icmp_unsigned("==", b.load(self.hdr(0), typ=I64), _i64(1)), b.icmp_signed(">=", rel, _i64(0))
            )
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
        retry, fault, finished = (
            fl.block("lockstep_retry"),
            fl.block("lockstep_group_fault"),
            fl.block("lockstep_loop_done"),
        )
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
            b.store(
                b.load(env.rec_addr(b, b.add(rel, lp.i), self.lanes[r]), typ=ty), env.rec_addr(b, lp.i, env.slots[r])
            )
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
