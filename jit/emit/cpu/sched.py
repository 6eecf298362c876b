"""The scheduler side of a CPU kernel: rounds of thread loops between sync points, the thread prologue, and the
alias scopes of thread records.

See NOTE [CPU work-group execution] in jit/emit/cpu/__init__.py.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.abi import (
    R_DONE,
    R_PARK,
    R_PC,
)
from jit.emit.cpu.env import EntryEnv, start_thread
from jit.emit.cpu.loops import _Loop
from jit.emit.cpu.records import _i32
from jit.lower.core import FuncLowering
from jit.lower.types import I32
from jit.ptx import ast as A


def _thread_loops(fl: FuncLowering, env: EntryEnv, prefix: str) -> tuple[_Loop, _Loop, _Loop]:
    """The loops over tid.z/y/x of a round; the running thread's record index and where its run ends."""
    b = fl.b
    lz = _Loop(fl, env.ntid[2], f"{prefix}z")
    ly = _Loop(fl, env.ntid[1], f"{prefix}y")
    lx = _Loop(fl, env.ntid[0], f"{prefix}x")
    env.thread_end = lx.latch
    env.rec_t = b.add(b.mul(b.add(b.mul(lz.i, env.ntid[1]), ly.i), env.ntid[0]), lx.i)
    return lz, ly, lx


def _start_thread(fl: FuncLowering, env: EntryEnv, loops: tuple[_Loop, _Loop, _Loop], local_base: ir.Value) -> None:
    lz, ly, lx = loops
    start_thread(fl, env, lz.i, ly.i, lx.i, local_base)


def scheduler(fl: FuncLowering, env: EntryEnv, scratch: ir.Value, local_base: ir.Value, start: ir.Block) -> None:
    """Rounds of the block's thread loops: each runnable thread resumes at its pc (a `switch`) and runs to its next
    sync point or exit; then the resolution step releases whom it can (jit/emit/cpu/resolve.py)."""
    from jit.emit.cpu.resolve import resolve

    b = fl.b
    env.begin_records(b, scratch)
    init = _Loop(fl, env.nt32, "init")
    warp = any(sp.kind == "warp" for sp in env.fn.sync_points.values())
    for f in (R_PC, R_PARK, R_DONE) if warp else (R_PC, R_PARK):  # R_DONE: only warp resolution uses it
        b.store(_i32(0), env.rec_addr(b, init.i, f))
    init.end()
    rnd = fl.block("round")
    b.branch(rnd)
    b.position_at_end(rnd)
    generic, round_end = fl.block("round_generic"), fl.block("round_end")
    regions = uniform_regions(env) if env.barrier_only else {}
    from jit.emit.cpu.lockstep import emit_lockstep, lockstep_points

    lock = lockstep_points(env)  # NOTE [lockstep grid-stride loops]
    if regions or lock:
        sw = b.switch(_uniform_pc(fl, env), generic)
    if lock:
        blk = fl.block("lockstep")
        sw.add_case(_i32(lock[1].id), blk)
        b.position_at_end(blk)
        emit_lockstep(fl, env, lock, generic, round_end)
    if regions:  # NOTE [uniform regions]
        for k, (instrs, end) in regions.items():
            blk = fl.block(f"uniform{k}")
            sw.add_case(_i32(k), blk)
            b.position_at_end(blk)
            _region_threads(fl, env, env.fn.sync_points[k], instrs, end, local_base)
            b.branch(round_end)
    elif not lock:
        b.branch(generic)
    b.position_at_end(generic)
    lz, ly, lx = _thread_loops(fl, env, "t")
    park = b.load(env.rec_field(fl, R_PARK), typ=I32)
    run = fl.block("thread_run")
    b.cbranch(b.icmp_unsigned("!=", park, _i32(0)), lx.latch, run)
    b.position_at_end(run)
    _start_thread(fl, env, (lz, ly, lx), local_base)
    pc = b.load(env.rec_field(fl, R_PC), typ=I32)
    sw = b.switch(pc, start)
    b.position_at_end(start)
    fl.lower_body()
    for k, blk in env.resume.items():
        sw.add_case(_i32(k), blk)
    lx.end()
    ly.end()
    lz.end()
    b.branch(round_end)
    b.position_at_end(round_end)
    again = resolve(fl, env)
    nxt = fl.block("block_done")
    b.cbranch(again, rnd, nxt)
    b.position_at_end(nxt)


# NOTE [uniform regions]
# All threads of a block usually wait at the same barrier or warp collective, and the code after it up to the next
# one is often straight-line: the inner product of a tiled matmul between its two `__syncthreads()`, the add
# between two steps of a shuffle reduction. The generic round runs it thread by thread behind a `switch` on each
# thread's pc, so LLVM sees one scalar chain of 16 dependent FMAs per thread. When a round starts with every thread
# runnable at the same sync point's resume (a vectorisable check over the records), it runs a loop made for that
# region instead: restore, the region's instructions, park at the next sync point, for every thread, with nothing
# else in the loop. LLVM vectorises that loop across threads (tx innermost: As[ty][k] is one broadcast, Bs[k][tx]
# one vector load). Rounds that start any other way (some thread exited, threads parked at different points) take
# the generic loop, so what runs is the same code in the same thread order, only compiled apart. Regions start
# and end at a barrier or warp collective (not a yield point) and hold no label, branch, call, exit or trap and at
# most REGION_MAX instructions. Only kernels whose sync points are all barriers get them: in a shuffle reduction
# the regions are a single add each, and they cost 13% more compile work for 1% fewer executed instructions
# (callgrind). Warp kernels get the matching fast path in the resolution instead: when every thread waits at the
# same collective, it is resolved for the whole block in one loop (cpu_resolve._uniform_collectives).
REGION_MAX = 400
MAX_REGIONS = 4
_NOT_IN_REGION = {"bra", "ret", "exit", "trap", "call", "brx", "brkpt"}


def uniform_regions(env: EntryEnv) -> dict[int, tuple[list[A.Instr], A.SyncPoint]]:
    """sync id -> (the straight-line instructions after that barrier or collective, the one that ends them)."""
    body = env.fn.body or []
    where = {id(st): i for i, st in enumerate(body)}
    out: dict[int, tuple[list[A.Instr], A.SyncPoint]] = {}
    for k, sp in env.fn.sync_points.items():
        if sp.kind == "yield" or id(sp.instr) not in where or len(out) == MAX_REGIONS:
            continue
        instrs: list[A.Instr] = []
        for st in body[where[id(sp.instr)] + 1 :]:
            if not isinstance(st, A.Instr) or st.opcode in _NOT_IN_REGION or len(instrs) > REGION_MAX:
                break
            end = env.sync_ids.get(id(st))
            if end is not None:
                if end.kind != "yield":
                    out[k] = (instrs, end)
                break
            instrs.append(st)
    return out


def _uniform_pc(fl: FuncLowering, env: EntryEnv) -> ir.Value:
    """The pc every thread of the block is runnable at, or 0 (the kernel start: never a region) if they differ or
    some thread is parked or exited. A loop over the records that LLVM vectorises. (An exited thread's pc is the
    barrier it last left, whose code led to its exit and so is no region: the park test only makes that explicit.)"""
    b = fl.b
    pc0 = b.load(env.rec_addr(b, _i32(0), R_PC), typ=I32)
    bad = fl.ab.alloca(I32, name="nonuniform")
    b.store(_i32(0), bad)
    lp = _Loop(fl, env.nt32, "uni")
    park = b.load(env.rec_addr(b, lp.i, R_PARK), typ=I32)
    pc = b.load(env.rec_addr(b, lp.i, R_PC), typ=I32)
    b.store(b.or_(b.load(bad), b.or_(park, b.xor(pc, pc0))), bad)
    lp.end()
    return b.select(b.icmp_unsigned("==", b.load(bad), _i32(0)), pc0, _i32(0))


def _region_threads(
    fl: FuncLowering, env: EntryEnv, sp: A.SyncPoint, instrs: list[A.Instr], end: A.SyncPoint, local_base: ir.Value
) -> None:
    """Every thread of the block runs the region after barrier ``sp`` and parks at barrier ``end``. Emitted before
    the generic thread loops, which set the per-thread values of ``env`` again for themselves."""
    lz, ly, lx = _thread_loops(fl, env, "r")
    _start_thread(fl, env, (lz, ly, lx), local_base)
    env.restore(fl, sp)
    fl.lower_body(list(instrs), finish=False)
    env.park(fl, end)
    lx.end()
    ly.end()
    lz.end()


def annotate_record_scopes(module: ir.Module, fn: ir.Function, rec_ptrs: dict[int, int]) -> None:
    """Scoped no-alias metadata: each field of the thread records (worker scratch, touched only through
    EntryEnv.rec_addr; one array per field, NOTE [thread records]) aliases neither another field nor any memory the
    kernel itself addresses. Without it LLVM needs a runtime overlap check between every pair of those arrays before
    it vectorises a loop over threads (the record initialisation, the release loop of _release_all)."""
    from llvmlite.ir.instructions import AllocaInstr, LoadInstr, StoreInstr

    domain = module.add_metadata(["wooly.memory"])
    kernel = module.add_metadata(["wooly.kernel", domain])
    fields = {off: module.add_metadata([f"wooly.record.{off}", domain]) for off in sorted(set(rec_ptrs.values()))}
    own = {off: module.add_metadata([s]) for off, s in fields.items()}
    others = {off: module.add_metadata([kernel] + [s for o, s in fields.items() if o != off]) for off in fields}
    kernel_own = module.add_metadata([kernel])
    kernel_others = module.add_metadata(list(fields.values()))
    for blk in fn.blocks:
        for ins in blk.instructions:
            if isinstance(ins, LoadInstr):
                ptr = ins.operands[0]
            elif isinstance(ins, StoreInstr):
                ptr = ins.operands[1]
            else:
                continue
            if isinstance(ptr, AllocaInstr):
                continue  # a register (SROA promotes it); BasicAA already knows no other access aliases it
            off = rec_ptrs.get(id(ptr))
            ins.set_metadata("alias.scope", kernel_own if off is None else own[off])
            ins.set_metadata("noalias", kernel_others if off is None else others[off])
