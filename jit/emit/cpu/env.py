"""A kernel's entry environment on the CPU target (NOTE [CPU work-group execution] in jit/emit/cpu/__init__.py):
its launch, worker and thread contexts, registers and thread records (``EntryEnv``), and the runtime calls
(printf, assert, polls) the emitters share."""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from jit.emit.abi import (
    L_BADADDR,
    L_DYN,
    L_ERROR,
    L_NTHREADS,
    L_ROOTS,
    R_PARK,
    R_SLOTS,
    SHARED_UNIT,
    T_CTAID,
    T_EXITED,
    T_LCTX,
    T_LEND,
    T_LHI,
    T_LINEAR,
    T_LLO,
    T_LSP,
    T_NCTAID,
    T_NTID,
    T_SHARED,
    T_STACK_FLOOR,
    T_TID,
    W_LOCAL,
)
from jit.emit.cpu.records import HEADER_SIZES, ThreadRecords, _i32, _i64
from jit.errors import CUDA_ERROR_ASSERT, CUDA_ERROR_ILLEGAL_ADDRESS
from jit.lower.core import FuncLowering
from jit.lower.module import KernelMeta, ModuleCodegen, align_up
from jit.lower.types import F64, I8, I32, I64, PTR, opaque_alloca, reg_type
from jit.ptx import ast as A

_XYZ = {"x": 0, "y": 1, "z": 2}


def ld_slot(b: ir.IRBuilder, base: ir.Value, slot: int) -> ir.Value:
    """The i64 in slot ``slot`` of a launch/worker/thread context."""
    return b.load(b.gep(base, [_i64(slot)], source_etype=I64), typ=I64)


# NOTE [bounded recursion] (jit/emit/cpu/func.py): the native stack .func calls of one worker may use. gpud's worker
# threads have glibc's default stack (RLIMIT_STACK, 8 MiB almost everywhere), of which this is a small part.
FUNC_NATIVE_STACK = 256 << 10


def emit_poll(fl: FuncLowering, L: ir.Value, leave: Any, extra: ir.Value | None = None) -> None:
    """if (L[L_ERROR] | extra) != 0: leave(); as a relaxed atomic load, so that LLVM reads it on every pass of a
    loop."""
    b = fl.b
    err = b.load_atomic(b.gep(L, [_i64(L_ERROR)], source_etype=I64), "monotonic", 8, typ=I64)
    if extra is not None:
        err = b.or_(err, extra)
    stop, cont = fl.block("poll_stop"), fl.block("poll_go")
    b.cbranch(b.icmp_unsigned("!=", err, _i64(0)), stop, cont).set_weights([1, 1000])
    b.position_at_end(stop)
    leave()
    b.position_at_end(cont)


def stacksave(module: ir.Module) -> ir.Function:
    """llvm.stacksave: the native stack pointer."""
    fn = module.globals.get("llvm.stacksave.p0")
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(PTR, []), "llvm.stacksave.p0")
    return fn  # type: ignore[return-value]


FUNC_STACK_HEADROOM = 4096  # beyond one frame of every .func: room for recursion, as CUDA's default 1 KiB stack


class EntryEnv(ThreadRecords):
    """Env for a kernel body running inside the block loops of wooly_run_<i>."""

    def __init__(self, cg: ModuleCodegen, fn: A.Function, meta: KernelMeta) -> None:
        self.cg, self.fn, self.meta = cg, fn, meta
        self.sched = bool(fn.sync_points)
        self.slots: dict[str, int] = {}
        self.elem = dict(HEADER_SIZES)  # record field offset -> element size (NOTE [thread records])
        off = R_SLOTS
        for sp in fn.sync_points.values():
            for r in sp.live:
                if r not in self.slots:
                    self.slots[r] = off
                    t = reg_type(fn.regs[r])
                    self.elem[off] = max(1, t.width // 8) if isinstance(t, ir.IntType) else (8 if t == F64 else 4)
                    off += 16 if fn.regs[r] == "b128" else 8
        self.stash_off = off  # NOTE [lockstep block groups] (jit/emit/cpu/lockstep_run.py): its fields follow
        self.group_max = 1
        if fn.lockstep is not None:
            from jit.emit.cpu.records import group_max, stash_fields

            self.group_max = group_max(fn, off, meta.max_threads)
            fields, total = stash_fields(fn, self.group_max)
            for k, size in fields:
                self.elem[off + k] = size
            off += total
        self.rec_bytes = align_up(off, 16)
        self.sync_ids = {id(sp.instr): sp for sp in fn.sync_points.values()}
        self.resume: dict[int, ir.Block] = {}
        self.param_offsets: dict[str, int] = {}
        self.param_values: dict[tuple[int, str], ir.Value] = {}
        self.roots: dict[tuple[str, int], tuple[ir.Value, ir.Value]] = {}
        from jit.emit.cpu.red import plan

        self.red_sites = plan(fn)  # NOTE [combined global reductions]
        self.red = None  # RedBuffer, set by emit_kernel when red_sites is not empty
        # while a fused loop's body is lowered (jit/emit/cpu/fused.py): reductions into the claimed dense region,
        # id -> (base, shift, count) (NOTE [dense reduction slots]), and accesses whose overlap test was made once
        self.red_dense: dict[int, tuple[ir.Value, int, int]] = {}
        self.red_unguarded: set[int] = set()
        self.fused_exit: ir.Block | None = None
        self.bid: ir.Value | None = None  # the block's linear id and the end of its worker's claim (cpu_kernel)
        self.claim_last: ir.Value | None = None
        # only plain barriers as sync points: the release step is a vectorisable loop (cpu_resolve._release_all)
        self.barrier_only = bool(fn.sync_points) and all(
            sp.kind in ("bar", "yield") and not sp.instr.has("red") for sp in fn.sync_points.values()
        )
        self.yields = any(sp.kind == "yield" for sp in fn.sync_points.values())
        self.root_ranges: dict[tuple[str, int], tuple[ir.Value, ir.Value]] = {}
        self.bc_bad: ir.Value | None = None  # max(bad address + 1) of rooted checks (NOTE [rooted bounds checks])
        self._shared_window: ir.Value | None = None
        self._local_span: tuple[ir.Value, ir.Value] | None = None
        self._stack_floor: ir.Value | None = None
        self.W: ir.Value | None = None  # the worker context (W_* slots)
        self.rec_ptrs: dict[int, int] = {}  # id(record address) -> field: accesses get per-field alias scopes
        # (id(block), id(thread index), field or -element size) -> (block, index, value): record addresses a block
        # computed already (fewer instructions for Python to build and LLVM to clean up; see rec_addr). The value
        # keeps block and index alive, so their ids stay theirs.
        self._rec_cache: dict[tuple[int, int, int], tuple[Any, Any, ir.Value]] = {}
        self.ntpad: int | ir.Value = 0  # threads per record field array (begin_records; NOTE [thread records])
        self._field_bases: dict[int, ir.Value] = {}  # field -> scratch + field * ntpad, when ntpad is dynamic
        self._field_builder: ir.IRBuilder | None = None

    def kernel_param(self, fl: FuncLowering, name: str, off: int, ty: ir.Type) -> ir.Value | None:
        """A kernel parameter loaded once in the entry block: it dominates every use, so LLVM sees a loop
        invariant (a load inside a guarded thread body could not be hoisted, which blocked vectorisation)."""
        base = self.param_offsets.get(name)
        if base is None:
            return None
        key = (base + off, str(ty))
        v = self.param_values.get(key)
        if v is None:
            ab = fl.ab
            p = ab.gep(self.params_entry, [_i64(base + off)], source_etype=ir.IntType(8))
            v = self.param_values[key] = ab.load(p, typ=ty)
        return v

    def root_range(self, fl: FuncLowering, root: tuple[str, int]) -> tuple[ir.Value, ir.Value]:
        """[lo, hi) of the allowed range holding a rooted pointer parameter, loaded once in the entry block from the
        launch's root table (NOTE [rooted bounds checks] in jit/emit/bounds.py)."""
        r = self.root_ranges.get(root)
        if r is None:
            ab = fl.ab
            if self.bc_bad is None:
                self.bc_bad = ab.alloca(I64, name="bc_bad")
                ab.store(_i64(0), self.bc_bad)
            i = len(self.meta.bc_roots)
            self.meta.bc_roots.append(self.param_offsets[root[0]] + root[1])
            tab = ab.inttoptr(ab.load(ab.gep(self.L, [_i64(L_ROOTS)], source_etype=I64), typ=I64), PTR)
            r = self.root_ranges[root] = tuple(  # type: ignore[assignment]
                ab.load(ab.gep(tab, [_i64(2 * i + k)], source_etype=I64), typ=I64) for k in (0, 1)
            )
        return r  # type: ignore[return-value]

    def bad_slot(self, fl: FuncLowering) -> ir.Value:
        """The worker's max(bad address + 1) of failed checks in this block (NOTE [rooted bounds checks])."""
        if self.bc_bad is None:
            self.bc_bad = fl.ab.alloca(I64, name="bc_bad")
            fl.ab.store(_i64(0), self.bc_bad)
        return self.bc_bad

    def bad_access(self, fl: FuncLowering, addr: ir.Value) -> None:
        from jit.emit.bounds import fail_soft

        fail_soft(fl, addr)

    def poll(self, fl: FuncLowering) -> None:
        """NOTE [watchdog] (jit/watchdog.py): leave the launch when its error word was set (from outside too), or
        when this worker's confined accesses went wild (NOTE [confined windows])."""
        bad = fl.b.load(self.bad_slot(fl))

        def leave() -> None:
            b = fl.b
            fault, out = fl.block("poll_fault"), fl.block("poll_out")
            b.cbranch(b.icmp_unsigned("!=", bad, _i64(0)), fault, out)
            b.position_at_end(fault)
            b.cmpxchg(
                b.gep(self.L, [_i64(L_BADADDR)], source_etype=I64),
                _i64(0),
                b.sub(bad, _i64(1)),
                "monotonic",
                "monotonic",
            )
            self.set_error(fl, self.L, CUDA_ERROR_ILLEGAL_ADDRESS)
            b.branch(out)
            b.position_at_end(out)
            b.branch(self.abort)

        emit_poll(fl, self.L, leave, bad)

    def stack_floor(self, fl: FuncLowering) -> ir.Value:
        """The lowest native stack address .func calls of this worker may reach (NOTE [bounded recursion] in
        jit/emit/cpu/func.py), computed once."""
        if self._stack_floor is None:
            sp = fl.ab.ptrtoint(fl.ab.call(stacksave(fl.module), []), I64)
            self._stack_floor = fl.ab.sub(sp, _i64(FUNC_NATIVE_STACK))
        return self._stack_floor

    def shared_window(self, fl: FuncLowering) -> ir.Value:
        """The block's shared window in bytes, static plus dynamic (NOTE [state space checks]), loaded once."""
        if self._shared_window is None:
            ab = fl.ab
            dyn = ab.load(ab.gep(self.L, [_i64(L_DYN)], source_etype=I64), typ=I64)
            total = ab.add(dyn, _i64(self.cg.dyn_offset + SHARED_UNIT - 1))  # whole allocation units (SHARED_UNIT)
            self._shared_window = ab.and_(total, _i64(-SHARED_UNIT))
        return self._shared_window

    def local_span(self, fl: FuncLowering) -> tuple[ir.Value, ir.Value]:
        """[lo, hi) of the worker's .local area: every thread's .local and .func frames (NOTE [state space
        checks]), computed once."""
        if self._local_span is None:
            ab = fl.ab
            lo = ab.load(ab.gep(self.W, [_i64(W_LOCAL)], source_etype=I64), typ=I64)
            nt = ab.load(ab.gep(self.L, [_i64(L_NTHREADS)], source_etype=I64), typ=I64)
            size = ab.mul(nt, _i64(self.meta.local_bytes + self.meta.func_stack))
            self._local_span = (lo, ab.add(lo, size))
        return self._local_span

    def root_ptr(self, fl: FuncLowering, name: str, off: int) -> tuple[ir.Value, ir.Value]:
        """A pointer parameter as (i64, ptr), both made once in the entry block (NOTE [pointer roots])."""
        key = (name, off)
        r = self.roots.get(key)
        if r is None:
            v = self.kernel_param(fl, name, off, I64)
            assert v is not None
            r = self.roots[key] = (v, fl.ab.inttoptr(v, PTR))
        return r

    # -- values set per thread by the loop scaffolding ------------------------------------------
    def special(self, fl: FuncLowering, name: str) -> ir.Value:
        b = fl.b
        base, _, comp = name.partition(".")
        if base in ("tid", "ntid", "ctaid", "nctaid") and comp:
            return {"tid": self.tid, "ntid": self.ntid, "ctaid": self.ctaid, "nctaid": self.nctaid}[base][_XYZ[comp]]
        lane = b.and_(self.t32, _i32(31))
        if name == "laneid":
            return lane
        if name == "warpid":
            return b.lshr(self.t32, _i32(5))
        if name == "nwarpid":
            return b.lshr(b.add(self.nt32, _i32(31)), _i32(5))
        if name.startswith("lanemask"):
            eq = b.shl(_i64(1), b.zext(lane, I64))
            lt = b.sub(eq, _i64(1))
            le = b.sub(b.shl(eq, _i64(1)), _i64(1))
            v = {
                "lanemask_eq": eq,
                "lanemask_lt": lt,
                "lanemask_le": le,
                "lanemask_gt": b.not_(le),
                "lanemask_ge": b.not_(lt),
            }[name]
            return b.trunc(v, I32)
        if name in ("clock", "clock64", "globaltimer", "globaltimer_lo", "globaltimer_hi", "clock_hi"):
            return time_register(fl, name)
        if name == "dynamic_smem_size":
            return b.trunc(self.lval(fl, L_DYN), I32)
        if name in ("total_smem_size", "aggr_smem_size"):
            return b.trunc(b.add(self.lval(fl, L_DYN), _i64(self.cg.dyn_offset)), I32)
        if name in ("nsmid", "cluster_nctarank"):
            return _i32(1)
        if name.startswith("cluster_nctaid"):
            return _i32(1)
        if name.startswith("clusterid"):
            return self.ctaid[_XYZ[name[-1]]]
        if name.startswith("nclusterid"):
            return self.nctaid[_XYZ[name[-1]]]
        if name in ("envreg1", "envreg2"):
            from jit.emit.cpu.grid import envreg

            return envreg(fl, name)
        return _i32(0)  # smid, gridid, cluster_ctaid, cluster_ctarank, other envregs, ...

    def lval(self, fl: FuncLowering, slot: int) -> ir.Value:
        return fl.b.load(fl.b.gep(self.L, [_i64(slot)], source_etype=I64), typ=I64)

    def shared_base(self, fl: FuncLowering) -> ir.Value:
        return self.shared

    def local_ptr(self, fl: FuncLowering, offset: int) -> ir.Value:
        return fl.b.gep(self.local, [_i64(offset)], source_etype=ir.IntType(8))

    def param_base(self, fl: FuncLowering) -> ir.Value:
        return self.params

    def globals_base(self, fl: FuncLowering) -> ir.Value:
        return self.gbase

    def launch_ctx(self, fl: FuncLowering) -> ir.Value:
        return self.L

    def os_yield(self, fl: FuncLowering) -> None:
        from jit.emit.cpu.grid import os_yield

        os_yield(fl)

    def exit_thread(self, fl: FuncLowering) -> None:
        if self.fused_exit is not None:  # a failed bounds check in a fused loop ends the block's loop (cpu_fused)
            fl.b.branch(self.fused_exit)
            return
        if self.sched:
            fl.b.store(_i32(-1), self.rec_field(fl, R_PARK))
        fl.b.branch(self.thread_end)

    def set_error(self, fl: FuncLowering, L: ir.Value, code: int) -> None:
        p = fl.b.gep(L, [_i64(L_ERROR)], source_etype=I64)
        fl.b.cmpxchg(p, _i64(0), _i64(code), "seq_cst", "monotonic")

    def trap(self, fl: FuncLowering, code: int) -> None:
        self.set_error(fl, self.L, code)
        fl.b.branch(self.abort)

    def printf(self, fl: FuncLowering, fmt: ir.Value, args: ir.Value) -> ir.Value:
        return call_printf(fl, self.L, fmt, args)

    def assert_fail(self, fl: FuncLowering, msg: ir.Value, file: ir.Value, line: ir.Value) -> None:
        call_assert(fl, self.L, msg, file, line)
        self.set_error(fl, self.L, CUDA_ERROR_ASSERT)
        fl.b.branch(self.abort)

    def tctx(self, fl: FuncLowering) -> ir.Value:
        return self.tc

    def after_call(self, fl: FuncLowering) -> None:
        b = fl.b
        ex = b.load(b.gep(self.tc, [_i64(T_EXITED)], source_etype=I64), typ=I64)
        err = self.lval(fl, L_ERROR)
        stop = b.icmp_unsigned("!=", b.or_(ex, err), _i64(0))
        cont = fl.block("after_call")
        out = fl.block("call_exit")
        b.cbranch(stop, out, cont)
        b.position_at_end(out)
        b.cbranch(b.icmp_unsigned("!=", err, _i64(0)), self.abort, self.thread_end_block(fl))
        b.position_at_end(cont)

    def thread_end_block(self, fl: FuncLowering) -> ir.Block:
        blk = fl.block("exit_thread")
        save = fl.b.block
        fl.b.position_at_end(blk)
        self.exit_thread(fl)
        fl.b.position_at_end(save)
        return blk


def call_printf(fl: FuncLowering, L: ir.Value, fmt: ir.Value, args: ir.Value) -> ir.Value:
    """vprintf is served by the host: wooly_rt_printf is bound by the loader (jit/loader.py)."""
    fn = fl.cg.module.globals.get("wooly_rt_printf") or ir.Function(
        fl.cg.module, ir.FunctionType(I32, [PTR, I64, I64]), "wooly_rt_printf"
    )
    return fl.b.call(fn, [L, fmt, args])


def call_assert(fl: FuncLowering, L: ir.Value, msg: ir.Value, file: ir.Value, line: ir.Value) -> None:
    fn = fl.cg.module.globals.get("wooly_rt_assert") or ir.Function(
        fl.cg.module, ir.FunctionType(I32, [PTR, I64, I64, I32]), "wooly_rt_assert"
    )
    fl.b.call(fn, [L, msg, file, line])


def thread_prologue(fl: FuncLowering, env: EntryEnv, tz: ir.Value, ty: ir.Value, tx: ir.Value) -> None:
    b = fl.b
    env.tid = [tx, ty, tz]
    env.t32 = b.add(b.mul(b.add(b.mul(tz, env.ntid[1]), ty), env.ntid[0]), tx)
    meta = env.meta
    if meta.func_stack:  # env.local is this thread's area; its .func frames follow its .local
        env.local = b.gep(
            env.local_base, [b.mul(b.zext(env.t32, I64), _i64(meta.local_bytes + meta.func_stack))], source_etype=I8
        )
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
        if fl.cg.bounds_check:  # NOTE [state space checks], NOTE [bounded recursion]
            lo, hi = env.local_span(fl)
            b.store(lo, b.gep(env.tc, [_i64(T_LLO)], source_etype=I64))
            b.store(hi, b.gep(env.tc, [_i64(T_LHI)], source_etype=I64))
            b.store(env.stack_floor(fl), b.gep(env.tc, [_i64(T_STACK_FLOOR)], source_etype=I64))
        if meta.func_stack:
            sp = b.add(b.ptrtoint(env.local, I64), _i64(meta.local_bytes))
            b.store(sp, b.gep(env.tc, [_i64(T_LSP)], source_etype=I64))
            b.store(b.add(sp, _i64(meta.func_stack)), b.gep(env.tc, [_i64(T_LEND)], source_etype=I64))


def start_thread(
    fl: FuncLowering, env: EntryEnv, tz: ir.Value, ty: ir.Value, tx: ir.Value, local_base: ir.Value
) -> None:
    """Thread (tx, ty, tz), whose record is env.rec_t, runs next: its coordinates and its .local area."""
    thread_prologue(fl, env, tz, ty, tx)
    meta = env.meta
    if meta.local_bytes and not meta.func_stack:  # (with a .func stack the prologue set it)
        env.local = fl.b.gep(local_base, [fl.b.mul(fl.b.zext(env.rec_t, I64), _i64(meta.local_bytes))], source_etype=I8)


# NOTE [time registers]
# %clock/%clock64 count cycles of "the SM": the host's cycle counter (llvm.readcyclecounter) serves, since PTX gives
# its rate no meaning. %globaltimer is a nanosecond clock, and kernels use it as one (a wait of N ns, a timestamp a
# host compares with its own): it reads CLOCK_REALTIME through libc's clock_gettime (the vDSO: ~20 ns), which the
# loader's engine resolves from the process. The cycle counter served it before and ran ~2.5x fast on a 2.5 GHz host.
CLOCK_REALTIME = 0


def time_register(fl: FuncLowering, name: str) -> ir.Value:
    """%clock, %clock64, %clock_hi, %globaltimer, %globaltimer_lo, %globaltimer_hi."""
    b = fl.b
    if name.startswith("globaltimer"):
        ts = opaque_alloca(fl.ab, ir.ArrayType(I64, 2), "timespec", 8)  # in the entry block: a loop does not grow it
        b.call(fl.cg.libc("clock_gettime"), [_i32(CLOCK_REALTIME), ts])
        sec = b.load(ts, typ=I64)
        nsec = b.load(b.gep(ts, [_i64(1)], source_etype=I64), typ=I64)
        c = b.add(b.mul(sec, _i64(1_000_000_000)), nsec)
    else:
        c = fl.call_intr("llvm.readcyclecounter", I64, [])
    if name in ("clock", "globaltimer_lo"):
        return b.trunc(c, I32)
    if name in ("globaltimer_hi", "clock_hi"):
        return b.trunc(b.lshr(c, _i64(32)), I32)
    return c
