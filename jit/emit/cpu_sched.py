"""The scheduler side of a CPU kernel: rounds of thread loops between sync points, the thread prologue, and the
alias scopes of thread records.

See NOTE [CPU work-group execution] in jit/emit/cpu.py.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.cpu import (
    R_DONE,
    R_PARK,
    R_PC,
    T_CTAID,
    T_EXITED,
    T_LCTX,
    T_LEND,
    T_LINEAR,
    T_LSP,
    T_NCTAID,
    T_NTID,
    T_SHARED,
    T_TID,
    EntryEnv,
    _i32,
    _i64,
    _Loop,
)
from jit.lower.core import FuncLowering
from jit.lower.module import KernelMeta
from jit.lower.types import I8, I32, I64


def thread_prologue(fl: FuncLowering, env: EntryEnv, tz: ir.Value, ty: ir.Value, tx: ir.Value) -> None:
    b = fl.b
    env.tid = [tx, ty, tz]
    env.t32 = b.add(b.mul(b.add(b.mul(tz, env.ntid[1]), ty), env.ntid[0]), tx)
    meta = env.meta
    if meta.func_stack:  # env.local is this thread's area; its .func frames follow its .local
        env.local = b.gep(env.local_base, [b.mul(b.zext(env.t32, I64), _i64(meta.local_bytes + meta.func_stack))],
                          source_etype=I8)
    if not env.sched:
        # NOTE [uninitialised registers]: a straight thread loop zeroes registers (cheap, deterministic). Under the
        # scheduler a resumed thread restores exactly the registers live across its sync point; any other register
        # is dead there, so it is left undefined: zeroing it would put a phi for every register at every merge
        # of resume paths and double LLVM's work on kernels with many warp collectives.
        fl.zero_regs()
    if fl.cg.has_calls:
        vals = {T_TID + k: env.tid[k] for k in range(3)}
        vals.update({T_NTID + k: env.ntid[k] for k in range(3)})
        vals.update({T_CTAID + k: env.ctaid[k] for k in range(3)})
        vals.update({T_NCTAID + k: env.nctaid[k] for k in range(3)})
        vals[T_LINEAR] = env.t32
        for slot, v in vals.items():
            b.store(b.zext(v, I64), b.gep(env.tc, [_i64(slot)], source_etype=I64))
        b.store(b.ptrtoint(env.shared, I64), b.gep(env.tc, [_i64(T_SHARED)], source_etype=I64))
        b.store(b.ptrtoint(env.L, I64), b.gep(env.tc, [_i64(T_LCTX)], source_etype=I64))
        b.store(_i64(0), b.gep(env.tc, [_i64(T_EXITED)], source_etype=I64))
        if meta.func_stack:
            sp = b.add(b.ptrtoint(env.local, I64), _i64(meta.local_bytes))
            b.store(sp, b.gep(env.tc, [_i64(T_LSP)], source_etype=I64))
            b.store(b.add(sp, _i64(meta.func_stack)), b.gep(env.tc, [_i64(T_LEND)], source_etype=I64))


def scheduler(fl: FuncLowering, env: EntryEnv, scratch: ir.Value, local_base: ir.Value, meta: KernelMeta,
              start: ir.Block) -> None:
    """Rounds of the block's thread loops: each runnable thread resumes at its pc (a `switch`) and runs to its next
    sync point or exit; then the resolution step releases whom it can (jit/emit/cpu_resolve.py)."""
    from jit.emit.cpu_resolve import resolve
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
    lz = _Loop(fl, env.ntid[2], "tz")
    ly = _Loop(fl, env.ntid[1], "ty")
    lx = _Loop(fl, env.ntid[0], "tx")
    env.thread_end = lx.latch
    t = b.add(b.mul(b.add(b.mul(lz.i, env.ntid[1]), ly.i), env.ntid[0]), lx.i)
    env.rec_t = t
    park = b.load(env.rec_field(fl, R_PARK), typ=I32)
    run = fl.block("thread_run")
    b.cbranch(b.icmp_unsigned("!=", park, _i32(0)), lx.latch, run)
    b.position_at_end(run)
    thread_prologue(fl, env, lz.i, ly.i, lx.i)
    if meta.local_bytes and not meta.func_stack:  # (with a .func stack the prologue set it)
        env.local = b.gep(local_base, [b.mul(b.zext(t, I64), _i64(meta.local_bytes))], source_etype=I8)
    pc = b.load(env.rec_field(fl, R_PC), typ=I32)
    sw = b.switch(pc, start)
    b.position_at_end(start)
    fl.lower_body()
    for k, blk in env.resume.items():
        sw.add_case(_i32(k), blk)
    lx.end()
    ly.end()
    lz.end()
    again = resolve(fl, env)
    nxt = fl.block("block_done")
    b.cbranch(again, rnd, nxt)
    b.position_at_end(nxt)


def annotate_record_scopes(module: ir.Module, fn: ir.Function, rec_ptrs: dict[int, int]) -> None:
    """Scoped no-alias metadata: each field of the thread records (worker scratch, touched only through
    EntryEnv.rec_addr; one array per field, NOTE [thread records]) aliases neither another field nor any memory the
    kernel itself addresses. Without it LLVM needs a runtime overlap check between every pair of those arrays before
    it vectorises a loop over threads (the record initialisation, the release loop of _release_all)."""
    from llvmlite.ir.instructions import LoadInstr, StoreInstr
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
            off = rec_ptrs.get(id(ptr))
            ins.set_metadata("alias.scope", kernel_own if off is None else own[off])
            ins.set_metadata("noalias", kernel_others if off is None else others[off])
