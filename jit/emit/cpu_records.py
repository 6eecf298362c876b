"""Thread records: where a thread parked at a sync point keeps its state (NOTE [thread records]), and the code
that parks and resumes it. EntryEnv (jit/emit/cpu.py) inherits these methods; they use its layout (``elem``,
``slots``, ``rec_bytes``), its scratch pointer and its per-block thread index (``rec_t``)."""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from jit.emit import R_DONE, R_PARK, R_PC, R_RPRED, R_RVAL, R_XA, R_XB, R_XC, R_XMASK, R_XPRED
from jit.errors import not_supported
from jit.lower.core import HANDLERS, FuncLowering
from jit.lower.module import align_up
from jit.lower.types import I32, I64, reg_type
from jit.ptx import ast as A

# NOTE [thread records]
# A thread parked at a sync point keeps its state in the worker's scratch area: pc, park state, the inputs and the
# result of a warp collective, and the registers live across the point. The records are laid out field by field
# (structure of arrays): field `off` of thread t is at scratch + off * ntpad + t * size(field), ntpad being a
# thread count rounded up to 16 (so every array is 64-byte aligned). Consecutive threads' copies of a register are
# then adjacent, which lets LLVM vectorise a thread loop that restores or saves them. ntpad is the kernel's largest
# block (1024 unless .maxntid/.reqntid say less) when the records of such a block take at most FIXED_RECORDS_MAX
# bytes: every field is then at a constant offset from scratch, one base register for all of them, where a ntpad
# known only at run time costs a register (or a spill) per field in the hot loops: 13% fewer instructions for the
# block reduction of benchmarks/jit.py, 18% for its matmul (callgrind). Bigger records use the launch's own block
# size, so a kernel with many live registers does not allocate and clear megabytes per launch.
HEADER_SIZES = {R_PC: 4, R_PARK: 4, R_XA: 8, R_XB: 4, R_XC: 4, R_XMASK: 4, R_XPRED: 4, R_RVAL: 8, R_RPRED: 4, R_DONE: 4}


FIXED_RECORDS_MAX = 256 * 1024  # bytes of thread records per worker up to which their layout is fixed


def _i32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


class ThreadRecords:
    """Record addresses, and parking/resuming a thread at a sync point (barriers, warp collectives, yields)."""

    # set by EntryEnv.__init__ (and by the block code as it is emitted: scratch, rec_t, thread_end, nt32)
    fn: A.Function
    meta: Any  # KernelMeta
    elem: dict[int, int]  # record field offset -> element size
    slots: dict[str, int]  # register -> record field offset
    rec_bytes: int
    rec_ptrs: dict[int, int]
    sync_ids: dict[int, A.SyncPoint]
    resume: dict[int, ir.Block]
    _rec_cache: dict[tuple[int, int, int], tuple[Any, Any, ir.Value]]
    _field_bases: dict[int, ir.Value]
    _field_builder: ir.IRBuilder | None
    ntpad: int | ir.Value
    scratch: ir.Value
    rec_t: ir.Value
    nt32: ir.Value
    thread_end: ir.Block

    def rec_addr(self, b: ir.IRBuilder, t: ir.Value, off: int) -> ir.Value:
        """Address of field ``off`` of thread ``t``'s record (NOTE [thread records])."""
        blk = b.block
        # only when appending: then whatever this block computed before dominates the new instruction
        cache = self._rec_cache if b._anchor == len(blk.instructions) else {}
        key, row_key = (id(blk), id(t), off), (id(blk), id(t), -self.elem[off])
        if key in cache:
            return cache[key][2]
        if row_key not in cache:  # t * element size
            t64 = b.zext(t, I64) if t.type != I64 else t
            cache[row_key] = (blk, t, b.mul(t64, _i64(self.elem[off])))
        if isinstance(self.ntpad, int):  # fixed layout: thread t's row of this element size, then a constant
            row_ptr = (id(blk), id(t), -self.elem[off], "ptr")
            if row_ptr not in cache:
                cache[row_ptr] = (blk, t, b.gep(self.scratch, [cache[row_key][2]], source_etype=ir.IntType(8)))
            row = cache[row_ptr][2]
            p = b.gep(row, [_i64(off * self.ntpad)], source_etype=ir.IntType(8)) if off * self.ntpad else row
        else:  # a run-time ntpad: the field's array (computed once), then thread t
            base = self._field_bases.get(off)
            if base is None:
                fb = self._field_builder
                assert fb is not None, "record access before begin_records"
                base = self._field_bases[off] = fb.gep(
                    self.scratch, [fb.mul(_i64(off), self.ntpad)], source_etype=ir.IntType(8)
                )
            p = b.gep(base, [cache[row_key][2]], source_etype=ir.IntType(8))
        self.rec_ptrs[id(p)] = off
        cache[key] = (blk, t, p)
        return p

    def begin_records(self, b: ir.IRBuilder, scratch: ir.Value) -> None:
        """The thread records of this block start here (NOTE [thread records]): ntpad, and the point where each
        field's array address is computed on first use, which dominates every record access after it."""
        self.scratch = scratch
        fixed = align_up(self.meta.max_threads, 16)
        if fixed * self.rec_bytes <= FIXED_RECORDS_MAX:
            self.ntpad = fixed
            self.meta.rec_threads = fixed
        else:
            self.ntpad = b.and_(b.add(b.zext(self.nt32, I64), _i64(15)), _i64(~15))
            self._field_builder = ir.IRBuilder(b.block)
            self._field_builder.position_after(self.ntpad)
        self._field_bases = {}

    def rec_field(self, fl: FuncLowering, off: int) -> ir.Value:
        """Field ``off`` of the running thread's record."""
        return self.rec_addr(fl.b, self.rec_t, off)

    def sync(self, fl: FuncLowering, ins: A.Instr) -> None:
        sp = self.sync_ids.get(id(ins))
        if sp is None:
            raise not_supported(f"{ins.opcode} outside a kernel body", ins.line)
        self.park(fl, sp)
        b = fl.b
        blk = fl.block(f"resume{sp.id}")
        self.resume[sp.id] = blk
        b.position_at_end(blk)
        self.restore(fl, sp)

    def park(self, fl: FuncLowering, sp: A.SyncPoint) -> None:
        """The running thread stops at ``sp``: its inputs and live registers go to its record, then on to the next
        thread."""
        from jit.emit.cpu_warp import collect_inputs

        b = fl.b
        if sp.kind != "yield":
            collect_inputs(self, fl, sp)
        for r in sp.live:
            b.store(b.load(fl.regs[r]), self.rec_field(fl, self.slots[r]))
        # a yielding thread stays runnable (park 0) and resumes at its pc in the next round
        b.store(_i32(0 if sp.kind == "yield" else sp.id), self.rec_field(fl, R_PARK))
        b.store(_i32(sp.id), self.rec_field(fl, R_PC))
        b.branch(self.thread_end)

    def yield_point(self, fl: FuncLowering, ins: A.Instr) -> None:
        """NOTE [interleaved strided loops] (jit/passes/yield_points.py)."""
        self.sync(fl, ins)

    def restore(self, fl: FuncLowering, sp: A.SyncPoint) -> None:
        """Resume code of sync point ``sp``: reload the saved registers, recompute the rematerialised ones, take the
        collective's result."""
        from jit.emit.cpu_warp import write_outputs

        b = fl.b
        for r in sp.live:
            ty = reg_type(self.fn.regs[r])
            b.store(b.load(self.rec_field(fl, self.slots[r]), typ=ty), fl.regs[r])
        for d in sp.remat:  # NOTE [rematerialised registers] (jit/passes/sync_points.py)
            HANDLERS[d.opcode](fl, d)
        if sp.kind != "yield":
            write_outputs(self, fl, sp)
