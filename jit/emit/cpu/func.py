""".func bodies on the CPU: the thread context they get, calls, and their .local frames.

See NOTE [CPU work-group execution] in jit/emit/cpu/__init__.py.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.abi import (
    FUNC_HINTS,
    L_DYN,
    L_ERROR,
    L_GLOBALS,
    SHARED_UNIT,
    T_CTAID,
    T_EXITED,
    T_HINTS,
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
)
from jit.emit.cpu.env import call_assert, call_printf, emit_poll, ld_slot, stacksave, time_register
from jit.emit.cpu.records import _i32, _i64
from jit.errors import CUDA_ERROR_ASSERT, CUDA_ERROR_LAUNCH_FAILED, not_supported
from jit.lower.core import FuncLowering, Storage
from jit.lower.module import ModuleCodegen, align_up
from jit.lower.types import I8, I32, I64, PTR, opaque_alloca
from jit.ptx import ast as A

# NOTE [call ABI]
# Every non-inlined .func is lowered to one LLVM shape: ``void f(ptr tc, ptr ret0, ..., ptr arg0, ...)``, the
# thread context (tc: the slots the kernel's threads keep, jit/emit/abi.py) first, then one pointer per return
# value and per parameter, in PTX order (jit/lower/module.py declares them). Each pointer is a caller-side buffer
# holding the value as the formal's type: a caller's ``.param`` variable is passed as it is (its own storage), a
# register, immediate or vector operand is first stored into a temporary buffer (jit/lower/ops_ctrl.py
# ``_buffer``; at least 16 bytes). The callee binds each formal's name to its pointer, so ``ld.param``/``st.param``
# in the body read and write the caller's buffers directly; after the call, register results are read back from
# theirs (``_copy_back``; a ``.pred`` travels as 0/1). Because all functions share the shape, an indirect call
# through a register (``call (r), %rd, (a), proto;``) calls a pointer of that one type. ``.reg`` parameters (the
# pre-ABI form) are rewritten to this one first (jit/passes/reg_params.py). vprintf, __assertfail, malloc and free
# are not .funcs: the call lowers them to the runtime's own entry points.

# NOTE [checked .func stack]
# Without bounds checking a non-inlined .func's .local variables are an alloca on the worker's native stack. With
# checking, a generic pointer to them (`cvta.local`, numba's debug builds pass such pointers around) must pass the
# range check, and the native stack cannot be in the allowed table (it holds return addresses of gpud's own
# frames). So a checked kernel gives every thread a frame stack after its .local area (KernelMeta.func_stack bytes:
# one frame of every .func plus FUNC_STACK_HEADROOM for recursion), registered with the launch like the rest of the
# worker's local memory; a .func with locals takes its frame from tc[T_LSP] on entry and gives it back before every
# return; running past tc[T_LEND] is CUDA_ERROR_LAUNCH_FAILED (a GPU's stack overflow), never a write outside.

# NOTE [bounded recursion]
# A .func that calls itself without end must fail its launch, not overflow the worker's native stack (a SIGSEGV
# that takes gpud and every tenant down). In a bounds-checked kernel each thread's prologue stores a floor, the
# native stack pointer at the kernel's entry less FUNC_NATIVE_STACK (jit/emit/cpu/env.py), in tc[T_STACK_FLOOR], and
# every .func compares its own stack pointer (llvm.stacksave, after its frame is allocated) with it on entry:
# below it is CUDA_ERROR_LAUNCH_FAILED, a thread out of stack, as a GPU reports its own stack overflow. The .local
# frames of recursive calls have their own bound (NOTE [checked .func stack]).


class FuncEnv:
    """Env for .func bodies: everything per-thread comes from the thread context passed as the first argument."""

    def __init__(self, cg: ModuleCodegen, llfn: ir.Function, local_bytes: int) -> None:
        self.cg, self.llfn, self.local_bytes = cg, llfn, local_bytes
        self.local_align = 16
        self.tc = llfn.args[0]
        self.local: ir.Value | None = None
        self._shared_window: ir.Value | None = None
        self._local_span: tuple[ir.Value, ir.Value] | None = None
        self._hints: ir.Value | None = None

    def _slot(self, fl: FuncLowering, slot: int) -> ir.Value:
        return ld_slot(fl.b, self.tc, slot)

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
            return time_register(fl, name)  # NOTE [time registers]
        if name.startswith("lanemask"):
            lane = b.zext(b.and_(t, _i32(31)), I64)
            eq = b.shl(_i64(1), lane)
            lt = b.sub(eq, _i64(1))
            le = b.sub(b.shl(eq, _i64(1)), _i64(1))
            return b.trunc(
                {
                    "lanemask_eq": eq,
                    "lanemask_lt": lt,
                    "lanemask_le": le,
                    "lanemask_gt": b.not_(le),
                    "lanemask_ge": b.not_(lt),
                }[name],
                I32,
            )
        if name in ("envreg1", "envreg2"):
            from jit.emit.cpu.grid import envreg

            return envreg(fl, name)
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
        a = self.local_align  # the frame honours the function's largest .local .align
        base = b.and_(b.add(sp, _i64(a - 1)), _i64(-a))
        top = b.add(base, _i64(align_up(self.local_bytes, 16)))
        over, fits = fl.block("frame_overflow"), fl.block("frame_ok")
        b.cbranch(b.icmp_unsigned(">", top, self._slot(fl, T_LEND)), over, fits)
        b.position_at_end(over)
        self.trap(fl, CUDA_ERROR_LAUNCH_FAILED)  # stack overflow, as a GPU reports it
        b.position_at_end(fits)
        b.store(top, spp)
        self.local = b.inttoptr(base, PTR)
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

    def check_stack(self, fl: FuncLowering) -> None:
        """NOTE [bounded recursion]: trap when this call's frame reaches below the thread's stack floor."""
        b = fl.b
        sp = b.ptrtoint(b.call(stacksave(fl.module), []), I64)
        over, fits = fl.block("stack_overflow"), fl.block("stack_ok")
        b.cbranch(b.icmp_unsigned("<", sp, self._slot(fl, T_STACK_FLOOR)), over, fits).set_weights([1, 1000])
        b.position_at_end(over)
        self.trap(fl, CUDA_ERROR_LAUNCH_FAILED)
        b.position_at_end(fits)

    def shared_window(self, fl: FuncLowering) -> ir.Value:
        """The block's shared window in bytes (NOTE [state space checks], jit/emit/bounds.py)."""
        if self._shared_window is None:
            ab = fl.ab
            L = ab.inttoptr(ld_slot(ab, self.tc, T_LCTX), PTR)
            total = ab.add(ld_slot(ab, L, L_DYN), _i64(self.cg.dyn_offset + SHARED_UNIT - 1))  # (SHARED_UNIT)
            self._shared_window = ab.and_(total, _i64(-SHARED_UNIT))
        return self._shared_window

    def local_span(self, fl: FuncLowering) -> tuple[ir.Value, ir.Value]:
        """[lo, hi) of the worker's .local area, as the thread's prologue stored it."""
        if self._local_span is None:
            self._local_span = (ld_slot(fl.ab, self.tc, T_LLO), ld_slot(fl.ab, self.tc, T_LHI))
        return self._local_span

    def bad_access(self, fl: FuncLowering, addr: ir.Value) -> None:
        from jit.emit.bounds import fail_trap

        fail_trap(fl, addr)

    def poll(self, fl: FuncLowering) -> None:
        """NOTE [watchdog] (jit/watchdog.py): leave this call when the launch's error word was set; the callers'
        after_call checks take the thread out."""
        emit_poll(fl, self.launch_ctx(fl), lambda: self.exit_thread(fl))

    def param_base(self, fl: FuncLowering) -> ir.Value:
        raise not_supported("kernel parameters referenced from a .func")

    def globals_base(self, fl: FuncLowering) -> ir.Value:
        return fl.b.inttoptr(ld_slot(fl.b, self.launch_ctx(fl), L_GLOBALS), PTR)

    def launch_ctx(self, fl: FuncLowering) -> ir.Value:
        return fl.b.inttoptr(self._slot(fl, T_LCTX), PTR)

    def site_hint(self, fl: FuncLowering) -> ir.Value | None:
        """NOTE [.func hints] (jit/emit/bounds.py): this access site's slot in the worker's hint array, or None when
        the module's sites have used them all (the site then keeps a per-call hint)."""
        i = self.cg.func_hint_sites
        if i >= FUNC_HINTS:
            return None
        self.cg.func_hint_sites = i + 1
        if self._hints is None:
            self._hints = fl.ab.inttoptr(ld_slot(fl.ab, self.tc, T_HINTS), PTR)
        return fl.ab.gep(self._hints, [_i64(2 * i)], source_etype=I64)

    def os_yield(self, fl: FuncLowering) -> None:
        from jit.emit.cpu.grid import os_yield

        os_yield(fl)

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
        err = ld_slot(b, self.launch_ctx(fl), L_ERROR)
        stop = b.icmp_unsigned("!=", b.or_(ex, err), _i64(0))
        cont = fl.block("after_call")
        out = fl.block("call_exit")
        b.cbranch(stop, out, cont)
        b.position_at_end(out)
        b.ret_void()
        b.position_at_end(cont)

    def sync(self, fl: FuncLowering, ins: A.Instr) -> None:
        raise not_supported(f"'{ins.opcode}' (barrier or warp collective) inside a non-inlined .func", ins.line)

    def yield_point(self, fl: FuncLowering, ins: A.Instr) -> None:
        pass  # only kernel bodies get yield points (jit/passes/yield_points.py)


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
        if cg.bounds_check:  # after the frame: every return (this trap's too) gives the frame back
            env.check_stack(fl)
        fl.declare_labels()
        fl.lower_body()
        ab.branch(body)
        if checked_frame:
            env.pop_frames(llfn)
