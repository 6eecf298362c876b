"""Shared-memory barrier objects: `mbarrier` (what `cuda::barrier` and `cuda::pipeline` compile to on sm_80+).

NOTE [mbarrier]
An mbarrier is a 64-bit word in shared memory. Ours holds: bits 0-19 the arrivals still pending in the current
phase, bits 20-39 the arrivals each phase expects (2^20 - 1 at most, as on sm_90), bits 40-61 the transaction count
(signed, 22 bits), bit 63 the phase parity. A phase completes when no arrival is pending and the transaction count
is 0.
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
* Transaction counts (sm_90: what `cuda::memcpy_async` with a `cuda::barrier` compiles to): `mbarrier.expect_tx
  [a], n` adds n, `mbarrier.complete_tx [a], n` and a bulk copy that completes on the barrier (`cp.async.bulk
  ...mbarrier::complete_tx::bytes`, done at once here) subtract n, `mbarrier.arrive.expect_tx` adds, then arrives.
  The count may go below 0 first (nvcc issues the copy before its expect_tx); whichever update brings both counts
  to 0 completes the phase.
On the CPU the read-modify-writes need no atomics: a block's shared memory is touched only by the worker running it,
and its threads switch only at sync points. A wait loop (test_wait/try_wait in a loop) yields on its back edge
(NOTE [waiting threads yield], jit/passes/yield_points.py), so the threads that have not arrived yet get to run.
Not supported: cluster scope, tensor-map (TMA) and multicast bulk copies, other targets.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.bounds import guard
from jit.errors import not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.types import I32, I64
from jit.ptx import ast as A

_PENDING = (1 << 20) - 1  # pending and expected arrival counts
_EXPECT_SHIFT, _TX_SHIFT, _TX_BITS = 20, 40, 22
_PHASE = 1 << 63


def _word(fl: FuncLowering, ins: A.Instr, o: A.Operand) -> ir.Value:
    if not fl.cg.private_shared:
        raise not_supported("mbarrier on this target", ins.line)
    if ins.has("cluster"):
        raise not_supported(f"'{'.'.join([ins.opcode, *ins.mods])}'", ins.line)
    sp = fl.space(ins)
    p = fl.addr(o, sp)
    guard(fl, o, sp, p, 8)
    return p


def _count(fl: FuncLowering, o: A.Operand | None) -> ir.Value:
    return ir.Constant(I64, 1) if o is None else fl.b.zext(fl.get(o, "u32"), I64)


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _update(
    fl: FuncLowering, p: ir.Value, k: ir.Value | None = None, tx: ir.Value | None = None, drop: bool = False
) -> ir.Value:
    """Arrivals (k of them) and/or a transaction-count change (tx) on the mbarrier at p, completing the phase if
    both counts reach 0 (NOTE [mbarrier]); the word before."""
    b = fl.b
    w = b.load(p, typ=I64, align=8)
    pending = b.and_(w, _c(_PENDING))
    expect = b.and_(b.lshr(w, _c(_EXPECT_SHIFT)), _c(_PENDING))
    count = b.ashr(b.shl(w, _c(64 - _TX_SHIFT - _TX_BITS)), _c(64 - _TX_BITS))  # sign-extended
    phase = b.and_(w, _c(_PHASE))
    if drop:
        expect = b.sub(expect, k)
    if k is not None:
        left = b.sub(pending, k)
        pending = b.select(b.icmp_signed("<", left, _c(0)), _c(0), left)
    if tx is not None:
        count = b.add(count, tx)
    done = b.and_(b.icmp_unsigned("==", pending, _c(0)), b.icmp_unsigned("==", count, _c(0)))
    new_phase = b.select(done, b.xor(phase, _c(_PHASE)), phase)
    new_pending = b.select(done, expect, pending)
    tx_bits = b.shl(b.and_(count, _c((1 << _TX_BITS) - 1)), _c(_TX_SHIFT))
    b.store(
        b.or_(
            b.or_(new_phase, tx_bits),
            b.or_(b.shl(b.and_(expect, _c(_PENDING)), _c(_EXPECT_SHIFT)), b.and_(new_pending, _c(_PENDING))),
        ),
        p,
        align=8,
    )
    return w


def mbarrier_arrive(fl: FuncLowering, p: ir.Value, k: ir.Value, drop: bool = False) -> ir.Value:
    """One arrival of count k on the mbarrier at p; the word before it."""
    return _update(fl, p, k, drop=drop)


def complete_tx(fl: FuncLowering, p: ir.Value, n: ir.Value) -> None:
    """n bytes of transactions done on the mbarrier at p (a bulk copy that completes on it)."""
    _update(fl, p, tx=fl.b.sub(_c(0), fl.b.zext(n, I64)))


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
        b.store(b.or_(b.shl(n, ir.Constant(I64, _EXPECT_SHIFT)), n), _word(fl, ins, ops[0]), align=8)
    elif ins.has("inval"):
        b.store(ir.Constant(I64, 0), _word(fl, ins, ops[0]), align=8)
    elif ins.has("arrive") or ins.has("arrive_drop"):
        p = _word(fl, ins, ops[1])
        if ins.has("expect_tx"):  # arrive.expect_tx state, [a], txCount: the count first, then one arrival
            _update(fl, p, tx=b.zext(fl.get(ops[2], "u32"), I64))
            w = _update(fl, p, _c(1), drop=ins.has("arrive_drop"))
        else:
            w = _update(fl, p, _count(fl, ops[2] if len(ops) > 2 else None), drop=ins.has("arrive_drop"))
        if not isinstance(ops[0], A.Sink):
            fl.put(ops[0], w, "b64")
    elif ins.has("expect_tx"):
        _update(fl, _word(fl, ins, ops[0]), tx=b.zext(fl.get(ops[1], "u32"), I64))
    elif ins.has("complete_tx"):
        complete_tx(fl, _word(fl, ins, ops[0]), fl.get(ops[1], "u32"))
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


__all__ = ["mbarrier", "mbarrier_arrive", "async_copies_arrive", "complete_tx"]
