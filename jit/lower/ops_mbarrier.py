"""Shared-memory barrier objects: `mbarrier` (what `cuda::barrier` and `cuda::pipeline` compile to on sm_80+).

NOTE [mbarrier]
An mbarrier is a 64-bit word in shared memory. Ours holds: bits 0-30 the arrivals still pending in the current
phase, bits 32-62 the arrivals each phase expects, bit 63 the phase parity.
* `mbarrier.init [a], n`: expect n, pending n, phase 0. `mbarrier.inval`: the word becomes 0.
* `mbarrier.arrive{.noComplete} state, [a]{, k}`: pending -= k (default 1); the arrival that brings it to 0
  completes the phase: parity flips and pending starts again from the expected count. `state` is the word before
  the arrival (its bit 63 is the phase the thread arrived in). `mbarrier.arrive_drop` also lowers the expected count
  of the following phases by k.
* `mbarrier.test_wait/try_wait{.parity} p, [a], state|parity`: p = the phase in `state` (or the phase with that
  parity) is complete, i.e. the current parity differs from it. try_wait never suspends here.
* `mbarrier.pending_count n, state`: the pending count in `state`.
* `cp.async.mbarrier.arrive [a]`: copies complete at once on the CPU (NOTE [address spaces on the CPU]), so the
  pending-count increment and the arrival it triggers cancel out: nothing to do; with `.noinc` it is one arrival.
On the CPU the read-modify-writes need no atomics: a block's shared memory is touched only by the worker running it,
and its threads switch only at sync points. A wait loop (test_wait/try_wait in a loop) yields on its back edge
(NOTE [waiting threads yield], jit/passes/yield_points.py), so the threads that have not arrived yet get to run.
Not supported: transaction counts (`expect_tx`, `complete_tx`; TMA, sm_90), cluster scope, other targets.
"""

from __future__ import annotations

from llvmlite import ir

from jit.errors import not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.types import I32, I64
from jit.ptx import ast as A

_PENDING = 0x7FFFFFFF
_PHASE = 1 << 63


def _word(fl: FuncLowering, ins: A.Instr, o: A.Operand) -> ir.Value:
    if not fl.cg.private_shared:
        raise not_supported("mbarrier on this target", ins.line)
    if ins.has("expect_tx", "complete_tx", "cluster") or any(m.startswith("shared::cluster") for m in ins.mods):
        raise not_supported(f"'{'.'.join([ins.opcode, *ins.mods])}'", ins.line)
    return fl.addr(o, fl.space(ins))


def _count(fl: FuncLowering, o: A.Operand | None) -> ir.Value:
    return ir.Constant(I64, 1) if o is None else fl.b.zext(fl.get(o, "u32"), I64)


def mbarrier_arrive(fl: FuncLowering, p: ir.Value, k: ir.Value, drop: bool = False) -> ir.Value:
    """One arrival of count k on the mbarrier at p; the word before it."""
    b = fl.b
    w = b.load(p, typ=I64, align=8)
    pending = b.and_(w, ir.Constant(I64, _PENDING))
    expect = b.and_(b.lshr(w, ir.Constant(I64, 32)), ir.Constant(I64, _PENDING))
    phase = b.and_(w, ir.Constant(I64, _PHASE))
    if drop:
        expect = b.sub(expect, k)
    left = b.sub(pending, k)
    done = b.icmp_signed("<=", left, ir.Constant(I64, 0))
    new_phase = b.select(done, b.xor(phase, ir.Constant(I64, _PHASE)), phase)
    new_pending = b.select(done, expect, left)
    b.store(b.or_(b.or_(new_phase, b.shl(b.and_(expect, ir.Constant(I64, _PENDING)), ir.Constant(I64, 32))),
                  b.and_(new_pending, ir.Constant(I64, _PENDING))), p, align=8)
    return w


def async_copies_arrive(fl: FuncLowering, ins: A.Instr) -> None:
    """cp.async.mbarrier.arrive{.noinc} [a] (see the NOTE): one arrival with .noinc, nothing without."""
    if ins.has("noinc"):
        mbarrier_arrive(fl, _word(fl, ins, ins.operands[0]), ir.Constant(I64, 1))


@op("mbarrier")
def mbarrier(fl: FuncLowering, ins: A.Instr) -> None:
    b = fl.b
    ops = ins.operands
    if ins.has("init"):
        n = b.and_(b.zext(fl.get(ops[1], "u32"), I64), ir.Constant(I64, _PENDING))
        b.store(b.or_(b.shl(n, ir.Constant(I64, 32)), n), _word(fl, ins, ops[0]), align=8)
    elif ins.has("inval"):
        b.store(ir.Constant(I64, 0), _word(fl, ins, ops[0]), align=8)
    elif ins.has("arrive") or ins.has("arrive_drop"):
        w = mbarrier_arrive(fl, _word(fl, ins, ops[1]), _count(fl, ops[2] if len(ops) > 2 else None),
                            drop=ins.has("arrive_drop"))
        if not isinstance(ops[0], A.Sink):
            fl.put(ops[0], w, "b64")
    elif ins.has("test_wait") or ins.has("try_wait"):
        cur = b.and_(b.load(_word(fl, ins, ops[1]), typ=I64, align=8), ir.Constant(I64, _PHASE))
        if ins.has("parity"):
            want = b.shl(b.and_(b.zext(fl.get(ops[2], "u32"), I64), ir.Constant(I64, 1)), ir.Constant(I64, 63))
        else:
            want = b.and_(fl.get(ops[2], "b64"), ir.Constant(I64, _PHASE))
        fl.put(ops[0], b.icmp_unsigned("!=", cur, want), "pred")
    elif ins.has("pending_count"):
        fl.put(ops[0], b.trunc(b.and_(fl.get(ops[1], "b64"), ir.Constant(I64, _PENDING)), I32), "b32")
    else:
        raise not_supported(f"'{'.'.join([ins.opcode, *ins.mods])}'", ins.line)


__all__ = ["mbarrier", "mbarrier_arrive", "async_copies_arrive"]
