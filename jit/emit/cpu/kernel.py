"""Scaffolding of the CPU kernel function: block loop (chunked claiming), thread loops, and the hand-off to the
scheduler (jit/emit/cpu/sched.py) for kernels with sync points. .func bodies: jit/emit/cpu/func.py.

See NOTE [CPU work-group execution] in jit/emit/cpu/__init__.py.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.abi import (
    L_ALLOWED,
    L_BADADDR,
    L_BLOCK,
    L_CHUNK,
    L_ERROR,
    L_GLOBALS,
    L_GRID,
    L_NBLOCKS,
    L_NEXT,
    L_PARAMS,
    RED_BYTES,
    T_SLOTS,
    W_INDEX,
    W_LOCAL,
    W_RED,
    W_SCRATCH,
    W_SHARED,
)
from jit.emit.cpu.env import EntryEnv, ld_slot, thread_prologue
from jit.emit.cpu.fused import emit_fused, usable
from jit.emit.cpu.guard import find_exit_guards, plan_prechecks, versioned_threads
from jit.emit.cpu.loops import _Loop, keep_checked_copy_scalar
from jit.emit.cpu.records import _i32, _i64
from jit.emit.cpu.sched import annotate_record_scopes, scheduler
from jit.errors import CUDA_ERROR_ILLEGAL_ADDRESS
from jit.lower.core import FuncLowering, Storage
from jit.lower.module import KernelMeta, ModuleCodegen
from jit.lower.types import I8, I32, I64, PTR, VOID, opaque_alloca
from jit.ptx import ast as A

_GRID_MASKS = (0x7FFFFFFF, 0xFFFF, 0xFFFF)
_BLOCK_MASKS = (0x7FF, 0x7FF, 0x7F)


def emit_kernel(cg: ModuleCodegen, fn: A.Function, env: EntryEnv, meta: KernelMeta) -> None:
    llfn = ir.Function(cg.module, ir.FunctionType(VOID, [PTR, PTR]), meta.symbol)
    L, W = llfn.args
    entry = llfn.append_basic_block("entry")
    ab = ir.IRBuilder(entry)
    setup = llfn.append_basic_block("setup")
    b = ir.IRBuilder(setup)
    fl = FuncLowering(cg, fn, llfn, env, ab, b)
    env.L, env.W = L, W
    env.params = b.inttoptr(ld_slot(b, L, L_PARAMS), PTR)
    env.gbase = b.inttoptr(ld_slot(b, L, L_GLOBALS), PTR)
    # The masks are the launch limits launch() enforces (grid x < 2^31, y/z < 2^16; block x/y <= 1024, z <= 64): they
    # cost nothing and tell LLVM that tid/ctaid products are non-negative, so `mul.wide.s32`-style index arithmetic
    # becomes affine and the thread loop can vectorise.
    env.nctaid = [b.and_(b.trunc(ld_slot(b, L, L_GRID + k), I32), _i32(m)) for k, m in enumerate(_GRID_MASKS)]
    env.ntid = [b.and_(b.trunc(ld_slot(b, L, L_BLOCK + k), I32), _i32(m)) for k, m in enumerate(_BLOCK_MASKS)]
    nblocks = ld_slot(b, L, L_NBLOCKS)
    env.shared = b.inttoptr(ld_slot(b, W, W_SHARED), PTR)
    local_base = env.local_base = b.inttoptr(ld_slot(b, W, W_LOCAL), PTR)
    scratch = b.inttoptr(ld_slot(b, W, W_SCRATCH), PTR)
    env.nt32 = b.mul(b.mul(env.ntid[0], env.ntid[1]), env.ntid[2])
    env.tc = opaque_alloca(ab, ir.ArrayType(I64, T_SLOTS), "tctx")
    if cg.bounds_check:  # NOTE [.func hints] (jit/emit/bounds.py): empty ([1, 0)) until a site's first search
        from jit.emit.bounds import init_func_hints

        init_func_hints(b, env.tc, ab)
    stride = meta.local_bytes + meta.func_stack  # a thread's area: its .local, then its .func frames
    if not env.sched and meta.local_bytes and not cg.bounds_check:
        env.local = opaque_alloca(ab, ir.ArrayType(I8, meta.local_bytes), "local", cg.local_align(fn))
    meta.scheduler = env.sched
    meta.rec_bytes = env.rec_bytes if env.sched else 0
    cg.bind_locals_and_params(fl, fn)
    env.params_entry = ab.inttoptr(ld_slot(ab, L, L_PARAMS), PTR)
    for p, lay in zip(fn.params, meta.params, strict=False):
        fl.sym[p.name] = Storage("ptr", _param_ptr(fl, env, lay.offset))
        env.param_offsets[p.name] = lay.offset
    env.abort = llfn.append_basic_block("abort")
    if env.red_sites:
        from jit.emit.cpu.red import RedBuffer

        env.red = RedBuffer(cg.module, b.inttoptr(ld_slot(b, W, W_RED), PTR))
        meta.red_bytes = RED_BYTES
        env.red.flush(ir.IRBuilder(env.abort))  # the worker's last block is done (or the launch failed)
    ir.IRBuilder(env.abort).ret_void()

    # block loop: a worker claims L_CHUNK consecutive blocks per atomic add on the launch's block counter (which
    # sits on a cache line of its own: one claim per block made two workers ping-pong that line, doubling saxpy)
    chunk = ld_slot(b, L, L_CHUNK)
    head = fl.block("chunk_head")
    b.branch(head)
    b.position_at_end(head)
    # NOTE [spatial sharing] (jit/cores.py): a worker past its launch's allowance leaves before it claims more
    allowed = b.load_atomic(b.gep(L, [_i64(L_ALLOWED)], source_etype=I64), "monotonic", 8, typ=I64)
    stay = fl.block("chunk_claim")
    b.cbranch(b.icmp_unsigned("<", ld_slot(b, W, W_INDEX), allowed), stay, env.abort).set_weights([1000, 1])
    b.position_at_end(stay)
    first = b.atomic_rmw("add", b.gep(L, [_i64(L_NEXT)], source_etype=I64), chunk, "monotonic")
    claimed = fl.block("chunk_claimed")
    b.cbranch(b.icmp_unsigned(">=", first, nblocks), env.abort, claimed)
    b.position_at_end(claimed)
    fin = b.add(first, chunk)
    last = b.select(b.icmp_unsigned("<", fin, nblocks), fin, nblocks)
    body = fl.block("block_body")
    b.branch(body)
    b.position_at_end(body)
    bid = b.phi(I64, "bid")
    bid.add_incoming(first, claimed)
    env.bid, env.claim_last = bid, last
    gx, gy = (b.zext(v, I64) for v in env.nctaid[:2])
    cx = b.urem(bid, gx)
    rest = b.udiv(bid, gx)
    env.ctaid = [b.trunc(cx, I32), b.trunc(b.urem(rest, gy), I32), b.trunc(b.udiv(rest, gy), I32)]
    fused = fn.fused if fn.fused is not None and usable(fl, fn.fused) else None
    if fused is not None:  # NOTE [fused grid-stride loops]
        finished = fl.block("block_finished")
        emit_fused(fl, env, fused, finished)
    if env.sched:
        fl.declare_labels()
        scheduler(fl, env, scratch, local_base, fl.block("kernel_start"))
    else:
        _simple_threads(fl, env, local_base, stride if cg.bounds_check else 0)
    if fused is not None:
        b.branch(finished)
        b.position_at_end(finished)
    if env.rec_ptrs:
        annotate_record_scopes(cg.module, llfn, env.rec_ptrs)
    if env.bc_bad is not None:  # a rooted bounds check failed in this block (NOTE [rooted bounds checks])
        badv = b.load(env.bc_bad)
        fault, fine = fl.block("bc_fault"), fl.block("bc_fine")
        b.cbranch(b.icmp_unsigned("!=", badv, _i64(0)), fault, fine)
        b.position_at_end(fault)
        b.cmpxchg(
            b.gep(L, [_i64(L_BADADDR)], source_etype=I64), _i64(0), b.sub(badv, _i64(1)), "monotonic", "monotonic"
        )
        env.set_error(fl, L, CUDA_ERROR_ILLEGAL_ADDRESS)
        b.branch(env.abort)
        b.position_at_end(fine)
    err = ld_slot(b, L, L_ERROR)
    nxt = b.add(bid, _i64(1))
    more = fl.block("block_next")
    b.cbranch(b.icmp_unsigned("!=", err, _i64(0)), env.abort, more)
    b.position_at_end(more)
    bid.add_incoming(nxt, more)
    b.cbranch(b.icmp_unsigned("<", nxt, last), body, head)
    if cg.bounds_check:
        # NOTE [uninitialised registers] (cpu/sched.py) leaves a register that a thread reads before writing undefined
        # under the scheduler, and LLVM may treat a branch on an undefined value as unreachable: a bounds check on an
        # address read from such a register could vanish (the PTX fuzzer's SIGSEGV). Checked kernels start every
        # register at zero once per worker, in the entry block: it costs a store per register per worker, and no
        # phis, since a register that is always written before it is read is never live into the thread loop.
        fl.zero_regs(ab)
    ab.branch(setup)


def _param_ptr(fl: FuncLowering, env: EntryEnv, offset: int):  # type: ignore[no-untyped-def]
    return lambda: fl.b.gep(env.params, [_i64(offset)], source_etype=I8)


def _simple_threads(fl: FuncLowering, env: EntryEnv, local_base: ir.Value, local_bytes: int) -> None:
    def start_thread(lz: _Loop, ly: _Loop, lx: _Loop) -> None:
        thread_prologue(fl, env, lz.i, ly.i, lx.i)
        if local_bytes and not env.meta.func_stack:  # bounds checking: .local lives in the worker's registered area
            env.local = fl.b.gep(local_base, [fl.b.mul(fl.b.zext(env.t32, I64), _i64(local_bytes))], source_etype=I8)

    def threads(body: list[A.Instr | A.Label], checked: bool, copy: str = "") -> None:
        """``copy``: "fast" or "slow" for the two copies of NOTE [exit-guard versioning]. The slow one runs only
        in blocks where a guard or a check fails (usually the last): it is neither vectorised nor unrolled, which
        keeps the second copy's compile time down."""
        lz = _Loop(fl, env.ntid[2], "tz")
        ly = _Loop(fl, env.ntid[1], "ty")
        scalar = copy == "slow" or copy == "fast" and keep_checked_copy_scalar(checked)
        lx = _Loop(fl, env.ntid[0], "tx", not scalar, copy != "slow")
        env.thread_end = lx.latch
        start_thread(lz, ly, lx)
        fl.labels = {}  # every copy of the body has its own blocks
        fl.declare_labels()
        start = fl.block("kernel_start")
        fl.b.branch(start)
        fl.b.position_at_end(start)
        fl.lower_body(body)
        lx.end()
        ly.end()
        lz.end()

    body = fl.fn.body or []
    plan = find_exit_guards(body)  # NOTE [exit-guard versioning] (jit/emit/cpu/guard.py)
    if plan is not None and fl.cg.bounds_check:
        plan_prechecks(fl, plan)
    if plan is None or not (plan.guards or plan.prechecked):
        threads(body, fl.cg.bounds_check)
        return
    versioned_threads(fl, env, plan, start_thread, threads)
