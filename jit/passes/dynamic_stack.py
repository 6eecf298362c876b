"""``alloca`` / ``stacksave`` / ``stackrestore`` -> ordinary PTX over a per-thread stack in ``.local`` memory.

NOTE [dynamic stack]
PTX 7.3's ``alloca.u64 ptr, size{, align}`` takes ``size`` bytes from the executing function's stack frame and
returns their ``.local`` address (nvcc emits it for ``alloca()`` in device code); ``stacksave`` reads the stack
pointer and ``stackrestore`` sets it, so that memory taken in a loop is given back each round; what a ``.func`` took
is given back when it returns. On the CPU every ``.local`` address is a host address (NOTE [address spaces on the
CPU], jit/lower/ops_mem.py) and a function's ``.local`` variables are already per thread (per call, for a
``.func``), kept across barriers by the region split like the rest of a thread's state. So a function that uses
these instructions gets one more ``.local`` variable, its stack of STACK_BYTES (4 KiB: CUDA's default per-thread
stack limit is 1 KiB), and a stack pointer register set to that variable's address on entry; ``alloca`` aligns the
pointer up (to ``align``, at least 8), checks that ``size`` bytes fit below the end of the stack, returns the
aligned pointer and moves the stack pointer past the block; ``stacksave``/``stackrestore`` are moves from/to the
stack pointer. Their ``.u32`` forms (nvcc saves and restores the stack around an inlined ``alloca`` in a loop with
them: a GPU's ``.local`` window is 32-bit) carry the pointer as its offset from the stack's end, which survives the
``cvt``/``cvta.local`` round trip nvcc puts between them. Running out of stack is a ``trap``
(CUDA_ERROR_LAUNCH_FAILED for that launch), never a write outside the thread's stack. The stack pointer being a
register, a thread's allocations survive barriers and warp collectives, and a ``.func``'s vanish with its frame.

Runs after predication (a guarded ``alloca`` is already branched around) and before the passes that look at
barriers and loops, which see only plain instructions.
"""

from __future__ import annotations

from jit.errors import invalid_ptx, not_supported
from jit.ptx import ast as A

STACK_BYTES = 4096
OPS = ("alloca", "stacksave", "stackrestore")
_SP, _END, _PTR, _ROOM, _FULL = "%wooly_sp", "%wooly_sp_end", "%wooly_sp_ptr", "%wooly_sp_room", "%wooly_sp_full"
_STACK = "__wooly_stack"
_OPERANDS = {"alloca": (2, 3), "stacksave": (1, 1), "stackrestore": (1, 1)}


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        if fn.body is not None and any(isinstance(s, A.Instr) and s.opcode in OPS for s in fn.body):
            _expand(fn)
    return module


def _type(ins: A.Instr) -> str:
    if len(ins.mods) != 1 or ins.mods[0] not in ("u32", "u64"):
        raise invalid_ptx(
            f"{ins.opcode} needs exactly one of .u32/.u64 (got {'.'.join(ins.mods) or 'none'})", ins.line, ins.col
        )
    if ins.opcode == "alloca" and ins.mods[0] == "u32":
        raise not_supported(
            "alloca.u32: 32-bit .local pointers (gpud's CPU backend uses 64-bit host addresses for .local)", ins.line
        )
    return ins.mods[0]


def _align(ins: A.Instr) -> int:
    if len(ins.operands) == 2:
        return 8
    a = ins.operands[2]
    if not (isinstance(a, A.Imm) and not a.is_float and isinstance(a.value, int)):
        raise invalid_ptx("alloca: the alignment must be an integer constant", ins.line, ins.col)
    v = int(a.value)
    if v <= 0 or v & (v - 1) or v > 1 << 23:
        raise invalid_ptx(f"alloca: alignment {v} is not a power of 2 in [1, 2^23]", ins.line, ins.col)
    return max(v, 8)  # 8: the minimum alignment the ISA guarantees


SP, END, PTR, ROOM, FULL = A.Reg(_SP), A.Reg(_END), A.Reg(_PTR), A.Reg(_ROOM), A.Reg(_FULL)


def _expand(fn: A.Function) -> None:
    for r, t in ((_SP, "b64"), (_END, "b64"), (_PTR, "b64"), (_ROOM, "b64"), (_FULL, "pred")):
        fn.regs[r] = t
    fn.vars.append(A.VarDecl("local", "b8", _STACK, align=16, dims=[STACK_BYTES], line=fn.line))
    out: list[A.Stmt] = [
        A.Instr("mov", ["u64"], [SP, A.Sym(_STACK)], line=fn.line),
        A.Instr("add", ["u64"], [END, SP, A.Imm(STACK_BYTES)], line=fn.line),
    ]
    allocas = 0
    for st in fn.body or []:
        if isinstance(st, A.Instr) and st.opcode in OPS:
            allocas += st.opcode == "alloca"
            out += _replace(st, allocas)
        else:
            out.append(st)
    fn.body = out


def _replace(ins: A.Instr, n: int) -> list[A.Stmt]:
    """The plain PTX for one alloca (the ``n``-th of its function), stacksave or stackrestore (see the NOTE)."""
    assert ins.pred is None, "dynamic_stack runs after predication"
    t = _type(ins)
    lo, hi = _OPERANDS[ins.opcode]
    if not lo <= len(ins.operands) <= hi or not isinstance(ins.operands[0], A.Reg):
        raise invalid_ptx(f"{ins.opcode}: wrong operands", ins.line, ins.col)
    d = ins.operands[0]

    def at(opcode: str, mods: list[str], *ops: A.Operand, **kw: object) -> A.Instr:
        return A.Instr(opcode, mods, list(ops), line=ins.line, col=ins.col, **kw)  # type: ignore[arg-type]

    if ins.opcode == "stacksave":  # .u32 (what nvcc emits): the offset from the stack's end, in [-size, 0]
        return (
            [at("mov", ["u64"], d, SP)]
            if t == "u64"
            else [at("sub", ["u64"], ROOM, SP, END), at("cvt", ["u32", "u64"], d, ROOM)]
        )
    if ins.opcode == "stackrestore":
        return (
            [at("mov", ["u64"], SP, d)]
            if t == "u64"
            else [at("cvt", ["s64", "s32"], ROOM, d), at("add", ["u64"], SP, END, ROOM)]
        )
    a, size = _align(ins), ins.operands[1]
    if not isinstance(size, (A.Reg, A.Imm)):
        raise invalid_ptx("alloca: the size must be a register or a constant", ins.line, ins.col)
    ok = f"$wooly_alloca_ok{n}"
    return [
        at("add", ["u64"], PTR, SP, A.Imm(a - 1)),
        at("and", ["b64"], PTR, PTR, A.Imm(-a)),
        at("sub", ["u64"], ROOM, END, PTR),
        at("setp", ["gt", "u64"], FULL, PTR, END),  # the alignment alone went past the end
        at("setp", ["gt", "or", "u64"], FULL, size, ROOM, FULL),
        at("bra", [], A.Sym(ok), pred=_FULL, pred_neg=True),
        at("trap", []),  # out of stack: CUDA_ERROR_LAUNCH_FAILED
        A.Label(ok, ins.line),
        at("add", ["u64"], SP, PTR, size),
        at("mov", ["u64"], d, PTR),
    ]
