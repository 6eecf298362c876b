"""Lowering of one PTX function body to LLVM IR: registers, operands, addresses, labels and dispatch.

Instruction semantics live in the ops_*.py modules, which register handlers in ``HANDLERS``. What differs per
target or per execution model (special registers, shared-memory base, thread exit, sync points) is asked of the
``Env`` object (see jit/emit/cpu/env.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from llvmlite import ir

from jit.emit.abi import kernel_handle
from jit.errors import invalid_ptx, not_supported
from jit.lower.forwarding import Forwarding
from jit.lower.modifiers import unknown_modifier
from jit.lower.types import (
    F16,
    F32,
    F64,
    I1,
    I8,
    I32,
    I64,
    PTR,
    compute_type,
    const,
    convert_bits,
    float_bits_const,
    ins_types,
    is_signed,
    reg_type,
    to_opaque,
)
from jit.ptx import ast as A

if TYPE_CHECKING:
    from jit.lower.module import ModuleCodegen

# The `::`-qualified modifiers the lowering implements (NOTE [qualified modifiers], jit/ptx/parser.py); any other
# one is reported as not supported, whatever its instruction
QUALIFIED = {("cp", "mbarrier::complete_tx::bytes")}

# Every instruction name of the PTX ISA (up to 9.x): an opcode outside this set is malformed PTX (218), one inside
# it without a handler is a valid instruction we do not implement (801).
PTX_OPCODES = frozenset(
    """
abs activemask add addc alloca and applypriority atom bar barrier bfe bfi bfind bmsk bra brev brkpt brx call clz
clusterlaunchcontrol cnot copysign cos cp createpolicy cvt cvta discard div dp2a dp4a elect ex2 exit fence fma fns
getctarank griddepcontrol isspacep istypep ld ldmatrix ldu lg2 lop3 mad mad24 madc mapa match max mbarrier membar
min mma mov movmatrix multimem mul mul24 nanosleep neg not or pmevent popc prefetch prefetchu prmt rcp red redux rem
ret rsqrt sad selp set setmaxnreg setp shf shfl shl shr sin slct sqrt st stackrestore stacksave stmatrix sub subc
suld suq sured sust szext tanh tcgen05 tensormap testp tex tld4 trap txq vabsdiff vabsdiff2 vabsdiff4 vadd vadd2
vadd4 vavrg2 vavrg4 vmad vmax vmax2 vmax4 vmin vmin2 vmin4 vote vset vset2 vset4 vshl vshr vsub vsub2 vsub4
wgmma wmma xor
""".split()
)

Handler = Callable[["FuncLowering", A.Instr], None]
HANDLERS: dict[str, Handler] = {}


def op(*names: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn

    return deco


class Env(Protocol):
    """Per-target, per-execution-model services used by the front end."""

    def special(self, fl: FuncLowering, name: str) -> ir.Value: ...
    def shared_base(self, fl: FuncLowering) -> ir.Value: ...
    def local_ptr(self, fl: FuncLowering, var: A.VarDecl) -> ir.Value: ...
    def param_base(self, fl: FuncLowering) -> ir.Value: ...
    def globals_base(self, fl: FuncLowering) -> ir.Value: ...
    def exit_thread(self, fl: FuncLowering) -> None: ...
    def trap(self, fl: FuncLowering, code: int) -> None: ...
    def sync(self, fl: FuncLowering, ins: A.Instr) -> None: ...
    def yield_point(self, fl: FuncLowering, ins: A.Instr) -> None: ...
    def tctx(self, fl: FuncLowering) -> ir.Value: ...
    def launch_ctx(self, fl: FuncLowering) -> ir.Value: ...
    def after_call(self, fl: FuncLowering) -> None: ...


@dataclass
class Storage:
    kind: str  # 'ptr' (host pointer value), 'shared' (offset into the shared window), 'global' (data block)
    value: ir.Value | int


class FuncLowering:
    def __init__(
        self,
        cg: ModuleCodegen,
        fn: A.Function,
        llfn: ir.Function,
        env: Env,
        alloca_builder: ir.IRBuilder,
        builder: ir.IRBuilder,
    ) -> None:
        self.cg, self.fn, self.llfn, self.env = cg, fn, llfn, env
        self.module = cg.module
        self.ab = alloca_builder  # positioned in the entry block, for allocas
        self.b = builder
        self.regs: dict[str, ir.AllocaInstr] = {}
        self.labels: dict[str, ir.Block] = {}
        self.sym: dict[str, Storage] = {}  # function-level variables and parameters
        self.cur: A.Instr | None = None
        self._order: dict[int, int] | None = None  # id(statement) -> position in fn.body (branches_back)
        self._label_at: dict[str, int] = {}
        self.prechecked: frozenset[int] = frozenset()  # ids of accesses whose bounds check the block already did
        for name, t in fn.regs.items():
            self.regs[name] = self.ab.alloca(reg_type(t), name=name.lstrip("%").replace("$", "_"))
        self._fwd = Forwarding()  # NOTE [register forwarding] (jit/lower/forwarding.py)

    def reg_value(self, a: ir.AllocaInstr) -> ir.Value:
        """The current value of register alloca ``a`` at the builder's position (NOTE [register forwarding],
        jit/lower/forwarding.py)."""
        return self._fwd.value(self.b, a)

    # -- setup ---------------------------------------------------------------------------------
    def zero_regs(self, builder: ir.IRBuilder | None = None) -> None:
        b = builder or self.b
        for a in self.regs.values():
            b.store(ir.Constant(a.allocated_type, 0 if isinstance(a.allocated_type, ir.IntType) else 0.0), a)

    def declare_labels(self) -> None:
        for st in self.fn.body or []:
            if isinstance(st, A.Label):
                if st.name in self.labels:
                    raise invalid_ptx(f"duplicate label {st.name}", st.line)
                self.labels[st.name] = self.llfn.append_basic_block(_bbname(st.name))

    def block(self, name: str) -> ir.Block:
        return self.llfn.append_basic_block(name)

    def branches_back(self, label: str) -> bool:
        """Whether the instruction being lowered branches to ``label`` at or before itself in the function's body:
        every cycle of the control flow takes such a branch (NOTE [watchdog], jit/watchdog.py)."""
        if self._order is None:
            body = self.fn.body or []
            self._order = {id(st): i for i, st in enumerate(body)}
            self._label_at = {st.name: i for i, st in enumerate(body) if isinstance(st, A.Label)}
        here = self._order.get(id(self.cur))
        return here is None or self._label_at.get(label, -1) <= here

    def lower_body(self, body: list[A.Instr | A.Label] | None = None, finish: bool = True) -> None:
        """Emit ``body`` (default: the function's) at the builder's position, with the labels of self.labels;
        ``finish``: end a body that falls off its end as `ret` does."""
        for st in self.fn.body or [] if body is None else body:
            if isinstance(st, A.Label):
                tgt = self.labels[st.name]
                if not self.b.block.is_terminated:
                    self.b.branch(tgt)
                self.b.position_at_end(tgt)
                continue
            assert isinstance(st, A.Instr)
            if self.b.block.is_terminated:
                self.b.position_at_end(self.block("dead"))
            self.cur = st
            h = HANDLERS.get(st.opcode)
            if h is None or any("::" in m and (st.opcode, m) not in QUALIFIED for m in st.mods):
                full = ".".join([st.opcode, *st.mods])
                if st.opcode not in PTX_OPCODES:
                    raise invalid_ptx(f"unknown instruction '{full}'", st.line, st.col)
                raise not_supported(f"PTX instruction '{full}'", st.line)
            bad = unknown_modifier(st)  # NOTE [modifier table] (jit/lower/modifiers.py)
            if bad is not None:
                raise not_supported(
                    f"modifier '.{bad}' of PTX instruction '{'.'.join([st.opcode, *st.mods])}'", st.line
                )
            try:
                h(self, st)
            except (KeyError, IndexError, ValueError, TypeError, AttributeError) as e:
                if isinstance(e, KeyError) and self._is_jit_error(e):
                    raise
                raise invalid_ptx(
                    f"cannot lower '{'.'.join([st.opcode, *st.mods])}': {type(e).__name__}: {e}", st.line, st.col
                ) from e
        if finish and not self.b.block.is_terminated:
            if self.fn.is_entry:
                self.env.exit_thread(self)
            else:
                self.b.ret_void()

    @staticmethod
    def _is_jit_error(e: Exception) -> bool:
        return False

    # -- operand access ------------------------------------------------------------------------
    def itype(self, ins: A.Instr, k: int = -1) -> str:
        ts = ins_types(ins.mods)
        if not ts:
            raise invalid_ptx(f"missing type on '{ins.opcode}'", ins.line, ins.col)
        return ts[k]

    def get(self, o: A.Operand, t: str) -> ir.Value:
        ty = compute_type(t)
        b = self.b
        if isinstance(o, A.Reg):
            a = self.regs.get(o.name)
            if a is None:
                raise invalid_ptx(f"undeclared register {o.name}")
            v = self.reg_value(a)
            if ty == I1 and v.type != I1:
                return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
            if v.type == I1 and ty != I1:
                return b.zext(v, ty) if isinstance(ty, ir.IntType) else v
            return convert_bits(b, v, ty, is_signed(t))
        if isinstance(o, A.Imm):
            return self.imm(o, ty)
        if isinstance(o, A.Not):
            return b.not_(self.get(o.reg, "pred"))
        if isinstance(o, A.Special):
            return convert_bits(b, self.env.special(self, o.name), ty)
        if isinstance(o, (A.Sym, A.SymOff)):
            name = o.name
            off = o.offset if isinstance(o, A.SymOff) else 0
            return convert_bits(b, self.sym_value(name, off), ty)
        raise invalid_ptx(f"bad source operand {o}")

    def imm(self, o: A.Imm, ty: ir.Type) -> ir.Value:
        if ty == I1:
            return ir.Constant(I1, 1 if o.value else 0)
        if o.is_float and o.bits:
            if isinstance(ty, ir.IntType):
                return ir.Constant(ty, int(o.value) & ((1 << ty.width) - 1))
            src = F32 if o.bits == 32 else F64
            c = float_bits_const(src, int(o.value))
            if src == ty:
                return c
            return self.b.fpext(c, ty) if ty == F64 else self.b.fptrunc(c, ty)
        if isinstance(ty, ir.IntType):
            return const(ty, int(o.value))
        if ty == F16 and not o.is_float:
            return float_bits_const(F16, int(o.value))
        return ir.Constant(ty, float(o.value))

    def put(self, o: A.Operand, v: ir.Value, t: str | None = None) -> None:
        if isinstance(o, A.Sink):
            return
        if not isinstance(o, A.Reg):
            raise invalid_ptx(f"bad destination operand {o}")
        a = self.regs.get(o.name)
        if a is None:
            raise invalid_ptx(f"undeclared register {o.name}")
        rt = a.allocated_type
        if v.type == I1 and rt != I1:
            v = self.b.zext(v, rt if isinstance(rt, ir.IntType) else ir.IntType(32))
        elif rt == I1 and v.type != I1:
            v = self.b.icmp_unsigned(
                "!=", convert_bits(self.b, v, ir.IntType(_w(v.type))), ir.Constant(ir.IntType(_w(v.type)), 0)
            )
        self.b.store(convert_bits(self.b, v, rt, bool(t and is_signed(t))), a)

    def dst_ops(self, o: A.Operand) -> list[A.Operand]:
        return list(o.items) if isinstance(o, A.Vec) else [o]

    # -- symbols and addresses -----------------------------------------------------------------
    def storage(self, name: str) -> Storage:
        s = self.sym.get(name) or self.cg.storage(name)
        if s is None:
            raise invalid_ptx(f"unknown symbol {name}")
        return s

    def sym_value(self, name: str, off: int = 0) -> ir.Value:
        """The value of a symbol used as an operand: its address in its own state space."""
        fn = self.cg.funcs.get(name) if not self.sym.get(name) and not self.cg.storage(name) else None
        if fn is not None:  # mov.u64 %rd, func: a function address, for call through a register (.callprototype)
            v = self.b.ptrtoint(fn, I64)
            return self.b.add(v, ir.Constant(I64, off)) if off else v
        if not self.sym.get(name) and not self.cg.storage(name) and name in self.cg.entry_names:
            # mov.u64 %rd, kernel: what a device-side launch names (NOTE [device launches] in jit/devlaunch.py)
            return ir.Constant(I64, kernel_handle(name) + off)
        s = self.storage(name)
        if s.kind == "shared":
            return ir.Constant(I64, int(s.value) + off)  # type: ignore[arg-type]
        p = self.resolve_ptr(s)
        v = self.b.ptrtoint(p, I64)
        return self.b.add(v, ir.Constant(I64, off)) if off else v

    def resolve_ptr(self, s: Storage) -> ir.Value:
        if s.kind == "global":  # see NOTE [module globals live in a data block]
            return self.b.gep(self.env.globals_base(self), [ir.Constant(I64, s.value)], source_etype=I8)
        v = s.value
        v = v() if callable(v) else v  # type: ignore[operator]
        return to_opaque(self.b, v)  # type: ignore[arg-type]

    def space(self, ins: A.Instr) -> str:
        for m in ins.mods:
            if m in ("global", "shared", "local", "const", "param", "generic"):
                return m
            if m.startswith("shared::"):
                return "shared"
        return "generic"

    def root_of(self, o: A.Operand, space: str) -> tuple[str, int] | None:
        """The kernel pointer parameter an address operand is derived from (NOTE [pointer roots]), if known."""
        base = o.base if isinstance(o, A.Addr) else o
        if space == "shared" or not isinstance(base, A.Reg):
            return None
        return self.fn.ptr_roots.get(base.name)

    def addr(self, o: A.Operand, space: str) -> ir.Value:
        """Pointer for an address operand ``[...]`` in ``space``."""
        b = self.b
        if isinstance(o, A.Addr):
            base, off = o.base, o.offset
        elif isinstance(o, (A.Reg, A.Sym)):
            base, off = o, 0
        elif isinstance(o, A.SymOff):
            base, off = A.Sym(o.name), o.offset
        else:
            raise invalid_ptx(f"bad address operand {o}")
        if isinstance(base, A.Sym):
            s = self.storage(base.name)
            if s.kind == "shared":
                return b.gep(self.env.shared_base(self), [ir.Constant(I64, int(s.value) + off)], source_etype=I8)  # type: ignore[arg-type]
            p = self.resolve_ptr(s)
            return b.gep(p, [ir.Constant(I64, off)], source_etype=I8) if off else p
        if isinstance(base, A.Imm):
            iv: ir.Value = ir.Constant(I64, int(base.value) + off)
        else:
            assert isinstance(base, A.Reg)
            a = self.regs.get(base.name)
            if a is None:
                raise invalid_ptx(f"undeclared register {base.name}")
            iv = self.reg_value(a)
            if space == "shared" and iv.type == I32 and off:  # a 32-bit shared address wraps in 32 bits, as on a GPU
                iv, off = b.add(iv, ir.Constant(I32, off)), 0
            iv = convert_bits(b, iv, I64) if iv.type != I64 else iv
            if off:
                iv = b.add(iv, ir.Constant(I64, off))
            root = self.root_of(base, space)
            if root is not None and hasattr(self.env, "root_ptr"):  # NOTE [pointer roots]
                pint, pptr = self.env.root_ptr(self, *root)
                return b.gep(pptr, [b.sub(iv, pint)], source_etype=I8)
        if space == "shared":
            return b.gep(self.env.shared_base(self), [iv], source_etype=I8)
        return b.inttoptr(iv, PTR)

    # -- misc helpers --------------------------------------------------------------------------
    def call_intr(self, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, [a.type for a in args]), name)
        return self.b.call(fn, args)

    def sel(self, c: ir.Value, a: ir.Value, b_: ir.Value) -> ir.Value:
        return self.b.select(c, a, b_)

    def i(self, ty: ir.Type, v: int) -> ir.Constant:
        return const(ty, v)


def _w(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return t.width
    return {F16: 16, F32: 32, F64: 64}[t]


def _bbname(label: str) -> str:
    return "L" + "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in label)


__all__ = ["FuncLowering", "HANDLERS", "op", "Env", "Storage", "I1", "I8", "I32", "I64", "F32", "F64"]
