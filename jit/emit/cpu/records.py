"""Thread records: where a thread parked at a sync point keeps its state (NOTE [thread records]), and the code
that parks and resumes it. EntryEnv (jit/emit/cpu/env.py) inherits these methods; they use its layout (``elem``,
``slots``, ``rec_bytes``), its scratch pointer and its per-block thread index (``rec_t``)."""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from jit.emit.abi import R_DONE, R_PARK, R_PC, R_RPRED, R_RVAL, R_XA, R_XB, R_XC, R_XMASK, R_XPRED
from jit.errors import invalid_ptx, not_supported
from jit.lower.core import HANDLERS, FuncLowering
from jit.lower.module import align_up
from jit.lower.types import F64, I1, I32, I64, reg_type
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
        b = fl.b
        for r in sp.live:
            ty = reg_type(self.fn.regs[r])
            b.store(b.load(self.rec_field(fl, self.slots[r]), typ=ty), fl.regs[r])
        for d in sp.remat:  # NOTE [rematerialised registers] (jit/passes/sync_points.py)
            HANDLERS[d.opcode](fl, d)
        if sp.kind != "yield":
            write_outputs(self, fl, sp)


# ---------------------------------------------------------------- a warp collective's inputs and result
def _dest(ins: A.Instr) -> tuple[A.Operand | None, A.Operand | None]:
    if not ins.operands:
        return None, None
    d = ins.operands[0]
    if isinstance(d, A.PredPair):
        return d.first, d.second
    return d, None


def member_mask_operand(ins: A.Instr) -> A.Operand | None:
    """The membermask operand of a .sync warp collective (None: all lanes)."""
    o = ins.operands
    if ins.opcode in ("vote", "match", "redux") and len(o) >= 3:
        return o[2]
    if ins.opcode == "shfl" and len(o) >= 5:  # shfl.sync d|p, a, b, c, membermask (plain shfl: all lanes)
        return o[4]
    if ins.opcode == "bar" and ins.has("warp") and o:
        return o[0]
    return None


def collect_inputs(env: ThreadRecords, fl: FuncLowering, sp: A.SyncPoint) -> None:
    ins = sp.instr
    b = fl.b
    o = ins.operands
    f = lambda off: env.rec_field(fl, off)  # noqa: E731
    mm = member_mask_operand(ins)
    b.store(fl.get(mm, "b32") if mm is not None else _i32(-1), f(R_XMASK))
    if ins.opcode in ("bar", "barrier") and ins.has("red"):
        b.store(b.zext(fl.get(o[-1], "pred"), I32), f(R_XPRED))
    elif ins.opcode == "shfl":
        b.store(b.zext(fl.get(o[1], "b32"), I64), f(R_XA))
        b.store(fl.get(o[2], "b32"), f(R_XB))
        b.store(fl.get(o[3], "b32"), f(R_XC))
    elif ins.opcode == "vote":
        b.store(b.zext(fl.get(o[1], "pred"), I32), f(R_XPRED))
    elif ins.opcode in ("match", "redux"):
        t = fl.itype(ins)
        if ins.opcode == "redux" and t == "f32" and not ins.has("min", "max"):
            raise invalid_ptx("redux.sync on .f32 is .min or .max", ins.line, ins.col)
        v = fl.get(o[1], "b32" if t == "f32" else t)  # redux.f32: the bits (NOTE [redux.f32])
        if ins.opcode == "redux" and t.startswith("s"):
            b.store(b.sext(v, I64), f(R_XA))
        else:
            b.store(b.zext(v, I64) if v.type != I64 else v, f(R_XA))


def write_outputs(env: ThreadRecords, fl: FuncLowering, sp: A.SyncPoint) -> None:
    ins = sp.instr
    b = fl.b
    if ins.opcode in ("bar", "barrier"):
        if ins.has("red"):  # release wrote popc to RVAL, and/or bits to RPRED
            rv = b.load(env.rec_field(fl, R_RVAL), typ=I64)
            rp = b.load(env.rec_field(fl, R_RPRED), typ=I32)
            if ins.has("popc"):
                fl.put(ins.operands[0], b.trunc(rv, I32), "u32")
            else:
                bit = 0 if ins.has("and") else 1
                fl.put(ins.operands[0], b.trunc(b.lshr(rp, _i32(bit)), I1))
        return
    d, p = _dest(ins)
    rval = b.load(env.rec_field(fl, R_RVAL), typ=I64)
    rpred = b.trunc(b.load(env.rec_field(fl, R_RPRED), typ=I32), I1)
    if ins.opcode == "vote" and not ins.has("ballot"):
        fl.put(d, rpred)  # type: ignore[arg-type]
        return
    t = fl.itype(ins) if ins.opcode != "activemask" else "b32"
    if t == "pred":
        t = "b32"
    w = 64 if t.endswith("64") and ins.opcode != "match" else 32
    if ins.opcode == "redux" or ins.opcode == "shfl":
        w = 32
    fl.put(d, b.trunc(rval, ir.IntType(w)), f"b{w}")  # type: ignore[arg-type]
    if p is not None:
        fl.put(p, rpred)


# ---------------------------------------------------------------- the lockstep stash (NOTE [lockstep block groups], jit/emit/cpu/lockstep_run.py)
GROUP_MAX = 16  # blocks whose lanes one lockstep loop runs (NOTE [lockstep block groups])


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
