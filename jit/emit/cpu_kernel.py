"""Scaffolding of the CPU kernel function (block loop, thread loops, scheduler) and of .func bodies.

See NOTE [CPU work-group execution] in jit/emit/cpu.py.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.cpu import (
    L_BADADDR,
    L_BLOCK,
    L_CHUNK,
    L_ERROR,
    L_GLOBALS,
    L_GRID,
    L_NBLOCKS,
    L_NEXT,
    L_PARAMS,
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
    T_SLOTS,
    T_TID,
    W_LOCAL,
    W_RED,
    W_SCRATCH,
    W_SHARED,
    EntryEnv,
    _i32,
    _i64,
    _Loop,
    call_assert,
    call_printf,
    no_interleave,
)
from jit.errors import CUDA_ERROR_ASSERT, CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED, not_supported
from jit.lower.core import FuncLowering, Storage
from jit.lower.module import KernelMeta, ModuleCodegen, align_up
from jit.lower.types import I8, I32, I64, PTR, VOID, opaque_alloca
from jit.ptx import ast as A

_GRID_MASKS = (0x7FFFFFFF, 0xFFFF, 0xFFFF)
_BLOCK_MASKS = (0x7FF, 0x7FF, 0x7F)


def _ld(b: ir.IRBuilder, base: ir.Value, slot: int) -> ir.Value:
    return b.load(b.gep(base, [_i64(slot)], source_etype=I64), typ=I64)


def emit_kernel(cg: ModuleCodegen, fn: A.Function, env: EntryEnv, meta: KernelMeta) -> None:
    llfn = ir.Function(cg.module, ir.FunctionType(VOID, [PTR, PTR]), meta.symbol)
    L, W = llfn.args
    entry = llfn.append_basic_block("entry")
    ab = ir.IRBuilder(entry)
    setup = llfn.append_basic_block("setup")
    b = ir.IRBuilder(setup)
    fl = FuncLowering(cg, fn, llfn, env, ab, b)
    env.L = L
    env.params = b.inttoptr(_ld(b, L, L_PARAMS), PTR)
    env.gbase = b.inttoptr(_ld(b, L, L_GLOBALS), PTR)
    # The masks are the launch limits launch() enforces (grid x < 2^31, y/z < 2^16; block x/y <= 1024, z <= 64): they
    # cost nothing and tell LLVM that tid/ctaid products are non-negative, so `mul.wide.s32`-style index arithmetic
    # becomes affine and the thread loop can vectorise.
    env.nctaid = [b.and_(b.trunc(_ld(b, L, L_GRID + k), I32), _i32(m)) for k, m in enumerate(_GRID_MASKS)]
    env.ntid = [b.and_(b.trunc(_ld(b, L, L_BLOCK + k), I32), _i32(m)) for k, m in enumerate(_BLOCK_MASKS)]
    nblocks = _ld(b, L, L_NBLOCKS)
    env.shared = b.inttoptr(_ld(b, W, W_SHARED), PTR)
    local_base = env.local_base = b.inttoptr(_ld(b, W, W_LOCAL), PTR)
    scratch = b.inttoptr(_ld(b, W, W_SCRATCH), PTR)
    env.nt32 = b.mul(b.mul(env.ntid[0], env.ntid[1]), env.ntid[2])
    env.tc = opaque_alloca(ab, ir.ArrayType(I64, T_SLOTS), "tctx")
    stride = meta.local_bytes + meta.func_stack  # a thread's area: its .local, then its .func frames
    if not env.sched and meta.local_bytes and not cg.bounds_check:
        env.local = opaque_alloca(ab, ir.ArrayType(I8, meta.local_bytes), "local", cg.local_align(fn))
    meta.scheduler = env.sched
    meta.rec_bytes = env.rec_bytes if env.sched else 0
    cg.bind_locals_and_params(fl, fn)
    env.params_entry = ab.inttoptr(_ld(ab, L, L_PARAMS), PTR)
    for p, lay in zip(fn.params, meta.params, strict=False):
        fl.sym[p.name] = Storage("ptr", _param_ptr(fl, env, lay.offset))
        env.param_offsets[p.name] = lay.offset
    env.abort = llfn.append_basic_block("abort")
    if env.red_sites:
        from jit.emit.cpu_red import RED_BYTES, RedBuffer
        env.red = RedBuffer(cg.module, b.inttoptr(_ld(b, W, W_RED), PTR))
        meta.red_bytes = RED_BYTES
        env.red.flush(ir.IRBuilder(env.abort))  # the worker's last block is done (or the launch failed)
    ir.IRBuilder(env.abort).ret_void()

    # block loop: a worker claims L_CHUNK consecutive blocks per atomic add on the launch's block counter (which
    # sits on a cache line of its own: one claim per block made two workers ping-pong that line, doubling saxpy)
    chunk = _ld(b, L, L_CHUNK)
    head = fl.block("chunk_head")
    b.branch(head)
    b.position_at_end(head)
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
    gx, gy = (b.zext(v, I64) for v in env.nctaid[:2])
    cx = b.urem(bid, gx)
    rest = b.udiv(bid, gx)
    env.ctaid = [b.trunc(cx, I32), b.trunc(b.urem(rest, gy), I32), b.trunc(b.udiv(rest, gy), I32)]
    fl.declare_labels()
    start = fl.block("kernel_start")
    if env.sched:
        _scheduler(fl, env, scratch, local_base, meta, start)
    else:
        _simple_threads(fl, env, start, local_base, stride if cg.bounds_check else 0)
    if env.rec_ptrs:
        annotate_record_scopes(cg.module, llfn, env.rec_ptrs)
    if env.bc_bad is not None:  # a rooted bounds check failed in this block (NOTE [rooted bounds checks])
        badv = b.load(env.bc_bad)
        fault, fine = fl.block("bc_fault"), fl.block("bc_fine")
        b.cbranch(b.icmp_unsigned("!=", badv, _i64(0)), fault, fine)
        b.position_at_end(fault)
        b.cmpxchg(b.gep(L, [_i64(L_BADADDR)], source_etype=I64), _i64(0), b.sub(badv, _i64(1)), "monotonic",
                  "monotonic")
        env.set_error(fl, L, CUDA_ERROR_ILLEGAL_ADDRESS)
        b.branch(env.abort)
        b.position_at_end(fine)
    err = _ld(b, L, L_ERROR)
    nxt = b.add(bid, _i64(1))
    more = fl.block("block_next")
    b.cbranch(b.icmp_unsigned("!=", err, _i64(0)), env.abort, more)
    b.position_at_end(more)
    bid.add_incoming(nxt, more)
    b.cbranch(b.icmp_unsigned("<", nxt, last), body, head)
    ab.branch(setup)


def annotate_record_scopes(module: ir.Module, fn: ir.Function, rec_ptrs: dict[int, int]) -> None:
    """Scoped no-alias metadata: each field of the thread records (worker scratch, touched only through
    EntryEnv.rec_addr; one array per field, NOTE [thread records]) aliases neither another field nor any memory the
    kernel itself addresses. Without it LLVM guards a vectorised thread loop with a runtime overlap check between
    every pair of those arrays and streams, and runs it only for 48+ threads, so a 16-wide tile never took it."""
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


def _param_ptr(fl: FuncLowering, env: EntryEnv, offset: int):  # type: ignore[no-untyped-def]
    return lambda: fl.b.gep(env.params, [_i64(offset)], source_etype=I8)


def _thread_prologue(fl: FuncLowering, env: EntryEnv, tz: ir.Value, ty: ir.Value, tx: ir.Value) -> None:
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


def _simple_threads(fl: FuncLowering, env: EntryEnv, start: ir.Block, local_base: ir.Value, local_bytes: int) -> None:
    lz = _Loop(fl, env.ntid[2], "tz")
    ly = _Loop(fl, env.ntid[1], "ty")
    lx = _Loop(fl, env.ntid[0], "tx")
    env.thread_end = lx.latch
    _thread_prologue(fl, env, lz.i, ly.i, lx.i)
    if local_bytes and not env.meta.func_stack:  # bounds checking: .local lives in the worker's registered area
        env.local = fl.b.gep(local_base, [fl.b.mul(fl.b.zext(env.t32, I64), _i64(local_bytes))], source_etype=I8)
    fl.b.branch(start)
    fl.b.position_at_end(start)
    fl.lower_body()
    lx.end()
    ly.end()
    lz.end()


def _scheduler(fl: FuncLowering, env: EntryEnv, scratch: ir.Value, local_base: ir.Value, meta: KernelMeta,
               start: ir.Block) -> None:
    from jit.emit.cpu_resolve import resolve
    b = fl.b
    rec_bytes = _i64(env.rec_bytes)
    env.scratch = scratch
    env.ntpad = b.and_(b.add(b.zext(env.nt32, I64), _i64(15)), _i64(~15))  # NOTE [thread records]
    init = _Loop(fl, env.nt32, "init")
    for f in (R_PC, R_PARK, R_DONE):
        b.store(_i32(0), env.rec_addr(b, init.i, f))
    init.end()
    rnd = fl.block("round")
    special = _uniform_regions(env)
    if special:  # NOTE [uniform barrier regions]
        env.uniform_pc = fl.ab.alloca(I32, name="uniform_pc")
        b.store(_i32(-1), env.uniform_pc)  # the first round is generic
    b.branch(rnd)
    b.position_at_end(rnd)
    generic = fl.block("round_generic")
    after = fl.block("round_done")
    if special:
        dispatch = b.switch(b.load(env.uniform_pc), generic)
        b.position_at_end(generic)
    else:
        b.branch(generic)
        b.position_at_end(generic)
    lz, ly, lx, t = _round_loops(fl, env, scratch, rec_bytes, local_base, meta)
    pc = b.load(env.rec_field(fl, R_PC), typ=I32)
    sw = b.switch(pc, start)
    b.position_at_end(start)
    fl.lower_body()
    for k, blk in env.resume.items():
        sw.add_case(_i32(k), blk)
    lx.end()
    ly.end()
    lz.end()
    b.branch(after)
    for k, region in special.items():
        entry = fl.block(f"round_uniform{k}")
        dispatch.add_case(_i32(k), entry)
        b.position_at_end(entry)
        _uniform_round(fl, env, scratch, rec_bytes, local_base, meta, k, region)
        b.branch(after)
    b.position_at_end(after)
    again = resolve(fl, env, scratch)
    nxt = fl.block("block_done")
    b.cbranch(again, rnd, nxt)
    b.position_at_end(nxt)


# NOTE [uniform barrier regions]
# Under the scheduler every round loops over the block's threads and each thread enters the kernel body through a
# `switch` on its resume point. That dispatch hides the thread loop from LLVM's vectoriser. In a kernel whose only
# sync points are plain `bar.sync`s, every round normally starts with all runnable threads at the same point (the
# kernel start or one barrier). For those rounds a second copy of the body is lowered inside its own thread loop and
# entered directly at that point: code not reachable from it before the next barrier is dead and removed, and what
# is left (the region up to the next barrier) is an ordinary loop body that LLVM can vectorise across threads. The
# copy parks threads exactly like the generic path (same records), so the next round may take either path. The
# release loop of the resolution step records in `uniform_pc` the one barrier every released thread was parked at,
# or -1 (generic round). A copy holds only the statements reachable from its barrier before the next sync point
# (`region_statements`), and only kernels with a few barriers get copies. The first round (kernel start) stays
# generic: it runs once per block, and vectorising the address set-up code before the first barrier cost LLVM 4x
# the compile time of the whole kernel for no measurable gain.
MAX_UNIFORM_REGIONS = 16


def _uniform_regions(env: EntryEnv) -> dict[int, tuple[int, set[int]]]:
    """sync point id -> (index of the statement after it, statements of its region), for the barriers that get a
    uniform-round copy: all of them if the kernel has only plain barriers, as long as the copies together are no
    bigger than the body (loops unrolled around barriers make many small regions, which is fine)."""
    sps = list(env.fn.sync_points.values())
    if not sps or any(sp.kind != "bar" or sp.instr.has("red") for sp in sps):
        return {}
    body = env.fn.body or []
    where = {id(st): i for i, st in enumerate(body)}
    out: dict[int, tuple[int, set[int]]] = {}
    budget = len(body)
    for sp in sps[:MAX_UNIFORM_REGIONS]:
        first = where[id(sp.instr)] + 1
        only = region_statements(body, first)
        budget -= len(only)
        if budget < 0:
            break
        out[sp.id] = (first, only)
    return out


def region_statements(body: list[A.Stmt], first: int) -> set[int]:
    """Indices of the statements reachable from ``first`` without passing a sync point (the sync points that end
    the region are included: they park the thread)."""
    from jit.passes.liveness import TERMINATORS
    from jit.passes.sync_points import sync_kind
    labels = {st.name: i for i, st in enumerate(body) if isinstance(st, A.Label)}
    seen: set[int] = set()
    todo = [first]
    while todo:
        i = todo.pop()
        while i < len(body) and i not in seen:
            seen.add(i)
            st = body[i]
            if isinstance(st, A.Instr):
                if sync_kind(st) or st.opcode in TERMINATORS:
                    break
                if st.opcode == "bra":
                    tgt = st.operands[0]
                    if isinstance(tgt, A.Sym) and tgt.name in labels:
                        todo.append(labels[tgt.name])
                    if st.pred is None:
                        break
            i += 1
    return seen


def _round_loops(fl: FuncLowering, env: EntryEnv, scratch: ir.Value, rec_bytes: ir.Value, local_base: ir.Value,
                 meta: KernelMeta) -> tuple[_Loop, _Loop, _Loop, ir.Value]:
    """Open the three thread loops of a round; positioned where a runnable thread enters the body."""
    b = fl.b
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
    _thread_prologue(fl, env, lz.i, ly.i, lx.i)
    if meta.local_bytes and not meta.func_stack:  # (with a .func stack the prologue set it)
        env.local = b.gep(local_base, [b.mul(b.zext(t, I64), _i64(meta.local_bytes))], source_etype=I8)
    return lz, ly, lx, t


def _uniform_round(fl: FuncLowering, env: EntryEnv, scratch: ir.Value, rec_bytes: ir.Value, local_base: ir.Value,
                   meta: KernelMeta, k: int, region: tuple[int, set[int]]) -> None:
    """A round in which every runnable thread resumes at barrier k."""
    b = fl.b
    lz, ly, lx, _ = _round_loops(fl, env, scratch, rec_bytes, local_base, meta)
    first, only = region
    env.restore(fl, fl.fn.sync_points[k])
    start = fl.block(f"u{k}_start")
    b.branch(start)
    saved = fl.labels
    fl.labels = {}
    fl.declare_labels(only)
    b.position_at_end(fl.block(f"u{k}_unreached"))
    env.region_copy = True
    fl.lower_body(only, (first, start))
    env.region_copy = False
    fl.labels = saved
    lx.end(no_interleave(fl.cg.module))
    ly.end()
    lz.end()


# NOTE [checked .func stack]
# Without bounds checking a non-inlined .func's .local variables are an alloca on the worker's native stack. With
# checking, a generic pointer to them (`cvta.local`, numba's debug builds pass such pointers around) must pass the
# range check, and the native stack cannot be in the allowed table (it holds return addresses of gpud's own
# frames). So a checked kernel gives every thread a frame stack after its .local area (KernelMeta.func_stack bytes:
# one frame of every .func plus FUNC_STACK_HEADROOM for recursion), registered with the launch like the rest of the
# worker's local memory; a .func with locals takes its frame from tc[T_LSP] on entry and gives it back before every
# return; running past tc[T_LEND] is CUDA_ERROR_LAUNCH_FAILED (a GPU's stack overflow), never a write outside.


class FuncEnv:
    """Env for .func bodies: everything per-thread comes from the thread context passed as the first argument."""

    def __init__(self, cg: ModuleCodegen, llfn: ir.Function, local_bytes: int) -> None:
        self.cg, self.llfn, self.local_bytes = cg, llfn, local_bytes
        self.local_align = 16
        self.tc = llfn.args[0]
        self.local: ir.Value | None = None

    def _slot(self, fl: FuncLowering, slot: int) -> ir.Value:
        return _ld(fl.b, self.tc, slot)

    def special(self, fl: FuncLowering, name: str) -> ir.Value:
        b = fl.b
        base, _, comp = name.partition(".")
        slots = {"tid": T_TID, "ntid": T_NTID, "ctaid": T_CTAID, "nctaid": T_NCTAID}
        if base in slots and comp:
            return b.trunc(self._slot(fl, slots[base] + "xyz".index(comp)), I32)
        t = b.trunc(self._slot(fl, T_LINEAR), I32)
        if name == "laneid":
            return b.and_(t, _i32(31))
        if name == "warpid":
            return b.lshr(t, _i32(5))
        if name.startswith("clock") or name.startswith("globaltimer"):
            c = fl.call_intr("llvm.readcyclecounter", I64, [])
            return c if name in ("clock64", "globaltimer") else b.trunc(c, I32)
        if name.startswith("lanemask"):
            lane = b.zext(b.and_(t, _i32(31)), I64)
            eq = b.shl(_i64(1), lane)
            lt = b.sub(eq, _i64(1))
            le = b.sub(b.shl(eq, _i64(1)), _i64(1))
            return b.trunc({"lanemask_eq": eq, "lanemask_lt": lt, "lanemask_le": le,
                            "lanemask_gt": b.not_(le), "lanemask_ge": b.not_(lt)}[name], I32)
        return _i32(0)

    def shared_base(self, fl: FuncLowering) -> ir.Value:
        return fl.b.inttoptr(self._slot(fl, T_SHARED), PTR)

    def local_ptr(self, fl: FuncLowering, offset: int) -> ir.Value:
        if self.local is None:
            self.local = opaque_alloca(fl.ab, ir.ArrayType(I8, max(self.local_bytes, 16)), "local", self.local_align)
        return fl.b.gep(self.local, [_i64(offset)], source_etype=I8)

    def push_frame(self, fl: FuncLowering) -> None:
        """NOTE [checked .func stack]: take this call's .local frame from the thread's frame stack."""
        b = fl.b
        spp = b.gep(self.tc, [_i64(T_LSP)], source_etype=I64)
        sp = b.load(spp, typ=I64)
        top = b.add(sp, _i64(align_up(self.local_bytes, 16)))
        over, fits = fl.block("frame_overflow"), fl.block("frame_ok")
        b.cbranch(b.icmp_unsigned(">", top, self._slot(fl, T_LEND)), over, fits)
        b.position_at_end(over)
        self.trap(fl, CUDA_ERROR_LAUNCH_FAILED)  # stack overflow, as a GPU reports it
        b.position_at_end(fits)
        b.store(top, spp)
        self.local = b.inttoptr(sp, PTR)
        self.frame_sp = sp

    def pop_frames(self, fn: ir.Function) -> None:
        """Before every return: give the frame back."""
        from llvmlite.ir.instructions import Ret
        for blk in fn.blocks:
            term = blk.terminator
            if isinstance(term, Ret):
                b = ir.IRBuilder(blk)
                b.position_before(term)
                b.store(self.frame_sp, b.gep(self.tc, [_i64(T_LSP)], source_etype=I64))

    def param_base(self, fl: FuncLowering) -> ir.Value:
        raise not_supported("kernel parameters referenced from a .func")

    def globals_base(self, fl: FuncLowering) -> ir.Value:
        return fl.b.inttoptr(_ld(fl.b, self.launch_ctx(fl), L_GLOBALS), PTR)

    def launch_ctx(self, fl: FuncLowering) -> ir.Value:
        return fl.b.inttoptr(self._slot(fl, T_LCTX), PTR)

    def exit_thread(self, fl: FuncLowering) -> None:
        fl.b.store(_i64(1), fl.b.gep(self.tc, [_i64(T_EXITED)], source_etype=I64))
        fl.b.ret_void()

    def trap(self, fl: FuncLowering, code: int) -> None:
        p = fl.b.gep(self.launch_ctx(fl), [_i64(L_ERROR)], source_etype=I64)
        fl.b.cmpxchg(p, _i64(0), _i64(code), "seq_cst", "monotonic")
        self.exit_thread(fl)

    def printf(self, fl: FuncLowering, fmt: ir.Value, args: ir.Value) -> ir.Value:
        return call_printf(fl, self.launch_ctx(fl), fmt, args)

    def assert_fail(self, fl: FuncLowering, msg: ir.Value, file: ir.Value, line: ir.Value) -> None:
        call_assert(fl, self.launch_ctx(fl), msg, file, line)
        self.trap(fl, CUDA_ERROR_ASSERT)

    def tctx(self, fl: FuncLowering) -> ir.Value:
        return self.tc

    def after_call(self, fl: FuncLowering) -> None:
        b = fl.b
        ex = self._slot(fl, T_EXITED)
        err = _ld(b, self.launch_ctx(fl), L_ERROR)
        stop = b.icmp_unsigned("!=", b.or_(ex, err), _i64(0))
        cont = fl.block("after_call")
        out = fl.block("call_exit")
        b.cbranch(stop, out, cont)
        b.position_at_end(out)
        b.ret_void()
        b.position_at_end(cont)

    def sync(self, fl: FuncLowering, ins: A.Instr) -> None:
        raise not_supported(f"'{ins.opcode}' (barrier or warp collective) inside a non-inlined .func", ins.line)


def emit_funcs(cg: ModuleCodegen) -> None:
    for f in cg.ast.functions:
        if f.is_entry or f.body is None:
            continue
        llfn = cg.funcs[f.name]
        entry = llfn.append_basic_block("entry")
        ab = ir.IRBuilder(entry)
        body = llfn.append_basic_block("body")
        b = ir.IRBuilder(body)
        env = FuncEnv(cg, llfn, cg.local_layout(f)[1])
        env.local_align = cg.local_align(f)
        fl = FuncLowering(cg, f, llfn, env, ab, b)  # type: ignore[arg-type]
        cg.bind_locals_and_params(fl, f)
        for i, p in enumerate(list(f.rets) + list(f.params)):
            fl.sym[p.name] = Storage("ptr", llfn.args[1 + i])
        fl.zero_regs()
        checked_frame = cg.bounds_check and env.local_bytes > 0
        if checked_frame:
            env.push_frame(fl)
        fl.declare_labels()
        fl.lower_body()
        ab.branch(body)
        if checked_frame:
            env.pop_frames(llfn)
