"""Block-fused grid-stride loops: find kernels whose whole work is one grid-stride loop (CPU target).

NOTE [fused grid-stride loops]
The commonest CUDA loop is the grid-stride loop:

    i = ctaid.x * ntid.x + tid.x;                 // P: straight-line, no side effects
    while (i < n) { body(i); i += stride; }       // L: one straight-line block
    ret;                                          // X: nothing after it that has an effect

On the CPU the threads of a block take turns; yield points (NOTE [interleaved strided loops]) make them take turns
every few iterations so that the block walks the array together, but each turn costs a context switch (save and
restore the thread's registers, the scheduler's dispatch) and a countdown in the loop: a histogram spent 7 of its
21 instructions per element on them. Yet the iterations such a block runs are just

    { c + t + k*stride  :  0 <= t < ntid.x,  k >= 0,  c + t + k*stride < n }      (c = ctaid.x * ntid.x)

so the block can run them as `for (lo = c; lo < n; lo += stride) for (i = lo; i < min(lo + ntid.x, n); ++i)
body(i)`: one plain loop over consecutive elements with every thread's registers but `i` the same. Each thread's
iterations still run in its program order (k increasing); between threads any order is one a GPU may produce, as
nothing in P or L synchronises threads.

This pass only recognises the shape and records it (``Function.fused``); the CPU emitter (jit/emit/cpu/fused.py)
decides per block, at run time, whether the block really is of that form, and runs it fused or the usual way:

* the block is one-dimensional (ntid.y = ntid.z = 1);
* P is run for every thread (it has no effects, so running it is free of consequences): every thread that enters
  the loop has the same value in every register L reads but does not write, `i` = c + t exactly, and a thread
  enters the loop exactly when c + t < n (P's own exit branches agree with the loop test);
* range guards that make the fused bounds exact: 0 <= c <= 2**62, 1 <= stride <= 2**61, n <= 2**62 and
  n + stride <= 2**31 / 2**32 / 2**62 for s32 / u32 / 64-bit `i` (as the loop test reads them: signed or
  unsigned). Then no `i` of any thread wraps while the loop runs (i < n and i + stride stays in range), so the
  sequential loop's values are the exact integers c + t + k*stride, and since stride >= 0 the test holding at
  iteration k means it held at every earlier one.

Recognised: P straight-line but for forward branches to X (the `if (i >= n) return` numba emits); ld only from
.param/.const in P (it is re-run, so it must not read memory a thread may write); L one block, its back edge
`@p bra L`, `p` from `setp.{lt,le,gt,ge}` of `i` after its only definition `add i, i, stride` and a bound not
written in L; the only register L reads before writing is `i` or not written in L at all; no call, exit,
barrier, warp collective, `.local` memory or sync point anywhere; X pure up to `ret`.
"""

from __future__ import annotations

from dataclasses import dataclass

from jit.analysis.liveness import defs_uses
from jit.passes.sync_points import sync_kind
from jit.ptx import ast as A

# opcodes with no effect but their destination registers (P and X are re-run or skipped)
_PURE = {
    "mov",
    "add",
    "sub",
    "mul",
    "mad",
    "mul24",
    "mad24",
    "div",
    "rem",
    "abs",
    "neg",
    "min",
    "max",
    "and",
    "or",
    "xor",
    "not",
    "cnot",
    "shl",
    "shr",
    "cvt",
    "cvta",
    "setp",
    "selp",
    "set",
    "slct",
    "bfe",
    "bfi",
    "brev",
    "clz",
    "popc",
    "bfind",
    "prmt",
    "lop3",
    "shf",
    "fma",
    "sqrt",
    "rcp",
    "rsqrt",
    "ex2",
    "lg2",
    "sin",
    "cos",
    "tanh",
    "copysign",
    "testp",
    "sad",
    "isspacep",
    "addc",
    "subc",
    "fns",
    "bmsk",
    "szext",
    "dp4a",
    "dp2a",
}
_NOT_IN_LOOP = {"call", "exit", "ret", "bra", "brx", "alloca", "stacksave", "stackrestore", "brkpt"}
_WIDTH = A.INT_WIDTH


@dataclass
class FusedLoop:
    """What jit/emit/cpu/fused.py needs. ``pre``: P without its exit branches; ``exits``: (predicate, negated) of
    each branch from P to X (a thread enters L when none is taken); ``body``: L without its back edge."""

    pre: list[A.Instr]
    exits: list[tuple[str, bool]]
    body: list[A.Instr]
    iv: str
    step: A.Operand
    bound: A.Operand
    inclusive: bool  # le/ge: i <= n
    width: int
    signed: bool
    invariants: list[str]  # registers L reads without writing them (besides iv)


def _reg(o: A.Operand) -> str | None:
    return o.name if isinstance(o, A.Reg) else None


def _touches_local(ins: A.Instr) -> bool:
    return ins.has("local")  # ld/st.local, cvta(.to).local: a thread's own memory, which fusing would share


def _pure(ins: A.Instr) -> bool:
    if ins.opcode in ("ld", "ldu"):
        return ins.has("param", "const") and not ins.has("volatile")
    return ins.opcode in _PURE and not _touches_local(ins) and not ins.pred


def _loop_plan(loop: list[A.Instr]) -> tuple[str, A.Operand, A.Operand, bool, int, bool, list[str]] | None:
    """L = body + back edge: (iv, step, bound, inclusive, width, signed, invariants) or None."""
    back = loop[-1]
    body = loop[:-1]
    if back.pred is None or back.pred_neg or not body:
        return None
    for ins in body:
        if ins.opcode in _NOT_IN_LOOP or sync_kind(ins) or ins.pred or _touches_local(ins):
            return None
    written: set[str] = set()
    exposed: list[str] = []  # read before written in an iteration
    for ins in body:
        d, u = defs_uses(ins)
        exposed += [r for r in u if r not in written and r not in exposed]
        written.update(d)
    test = max((k for k, ins in enumerate(body) if back.pred in defs_uses(ins)[0]), default=None)
    if test is None:
        return None
    st = body[test]
    ty = next((m for m in st.mods if m in _WIDTH), None)
    if st.opcode != "setp" or ty is None or len(st.operands) != 3 or st.has("and", "or", "xor"):
        return None
    a, c = st.operands[1], st.operands[2]
    cmp = next((m for m in st.mods if m in ("lt", "le", "gt", "ge")), None)
    if cmp in ("lt", "le"):
        iv, bound = _reg(a), c
    elif cmp in ("gt", "ge"):
        iv, bound = _reg(c), a
    else:
        return None
    if iv is None or not isinstance(bound, (A.Reg, A.Imm)) or isinstance(bound, A.Imm) and bound.is_float:
        return None
    if isinstance(bound, A.Reg) and bound.name in written:
        return None
    # the only write of iv: `add iv, iv, step` before the test, step not written in L
    adds = [k for k, ins in enumerate(body) if iv in defs_uses(ins)[0]]
    if len(adds) != 1 or adds[0] > test:
        return None
    add = body[adds[0]]
    if add.opcode != "add" or len(add.operands) != 3 or next((m for m in add.mods if m in _WIDTH), None) is None:
        return None
    if _WIDTH[next(m for m in add.mods if m in _WIDTH)][0] != _WIDTH[ty][0]:
        return None
    x, y = add.operands[1], add.operands[2]
    step = y if _reg(x) == iv else x if _reg(y) == iv else None
    if step is None or _reg(step) == iv or isinstance(step, A.Reg) and step.name in written:
        return None
    if not isinstance(step, (A.Reg, A.Imm)) or isinstance(step, A.Imm) and step.is_float:
        return None
    if any(r in written and r != iv for r in exposed):
        return None  # a value carried from one iteration to the next other than iv
    width, signed = _WIDTH[ty]
    return iv, step, bound, cmp in ("le", "ge"), width, signed, [r for r in exposed if r != iv]


def plan(fn: A.Function) -> FusedLoop | None:
    body = fn.body or []
    if not fn.is_entry or not body or any(v.space == "local" for v in fn.vars):
        return None
    labels = [i for i, st in enumerate(body) if isinstance(st, A.Label)]
    if len(labels) < 2:
        return None
    h, x = labels[0], labels[1]  # L's header, X's label
    back = body[x - 1]
    if not (
        isinstance(back, A.Instr)
        and back.opcode == "bra"
        and back.operands
        and isinstance(back.operands[0], A.Sym)
        and back.operands[0].name == body[h].name
    ):  # type: ignore[union-attr]
        return None
    if any(isinstance(st, A.Label) for st in body[x + 1 :]):
        return None
    xname = body[x].name  # type: ignore[union-attr]
    pre: list[A.Instr] = []
    exits: list[tuple[str, bool]] = []
    for st in body[:h]:
        if not isinstance(st, A.Instr):
            return None
        if st.opcode == "bra":
            tgt = st.operands[0] if st.operands else None
            if not isinstance(tgt, A.Sym) or tgt.name != xname or st.pred is None:
                return None
            exits.append((st.pred, st.pred_neg))
        elif _pure(st):
            pre.append(st)
        else:
            return None
    tail = [st for st in body[x + 1 :] if isinstance(st, A.Instr)]
    if not tail or tail[-1].opcode != "ret" or tail[-1].pred or not all(_pure(st) for st in tail[:-1]):
        return None
    loop = body[h + 1 : x]
    if not all(isinstance(st, A.Instr) for st in loop):
        return None
    lp = _loop_plan(loop)  # type: ignore[arg-type]
    if lp is None:
        return None
    iv, step, bound, inclusive, width, signed, invariants = lp
    return FusedLoop(pre, exits, loop[:-1], iv, step, bound, inclusive, width, signed, invariants)  # type: ignore[arg-type]


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        fn.fused = plan(fn)
    return module
