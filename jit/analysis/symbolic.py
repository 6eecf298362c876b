"""Symbolic evaluation of straight-line PTX over hash-consed terms: a register's value is a tuple built from the
values at entry with the instructions that computed it, so two instruction sequences compute the same values exactly
when their terms are equal. jit/passes/lockstep_loops.py proves with it that the copies in an unrolled main loop
are runs of the remainder loop's body (NOTE [lockstep grid-stride loops])."""

from __future__ import annotations

from typing import Any

from jit.analysis.liveness import defs_uses
from jit.ptx import ast as A

_WIDTH = A.INT_WIDTH

Term = Any


class Eval:
    """Symbolic evaluation over hash-consed terms: a register's value is a tuple built from the values at entry
    (('in', r)) with the instructions that computed it. Loads carry how many stores preceded them."""

    def __init__(self) -> None:
        self.state: dict[str, Term] = {}
        self.effects: list[Term] = []
        self.stores = 0

    def val(self, o: A.Operand) -> Term:
        if isinstance(o, A.Reg):
            return self.state.get(o.name, ("in", o.name))
        if isinstance(o, A.Addr):
            return ("addr", self.val(o.base) if o.base is not None else None, o.offset)
        if isinstance(o, A.Vec):
            return ("vec", tuple(self.val(x) for x in o.items))
        return ("op", o)

    def run(self, instrs: list[A.Instr]) -> Eval:
        for ins in instrs:
            d, _ = defs_uses(ins)
            srcs = tuple(self.val(o) for o in ins.operands[1:]) if d or ins.opcode == "ld" else ()
            key = (ins.opcode, tuple(ins.mods))
            if ins.opcode == "st":
                self.effects.append((key, tuple(self.val(o) for o in ins.operands)))
                self.stores += 1
                continue
            t = (key, srcs, self.stores) if ins.opcode == "ld" else fold((key, srcs))
            for k, r in enumerate(d):
                self.state[r] = t if len(d) == 1 else ("part", k, t)
        return self


def fold(t: Term) -> Term:
    """`add (add x, a), b` with immediates a and b is `add x, a + b` (wrapping: associative), immediates second:
    LLVM's unroller turns four `c += 1` into one `c += 4`."""
    (op, mods), srcs = t
    if op != "add" or len(srcs) != 2 or not int_mods(mods):
        return t
    x, y = srcs
    if imm_of(x) is not None and imm_of(y) is None:
        x, y = y, x
    b = imm_of(y)
    if b is None:
        return t
    w = _WIDTH[next(m for m in mods if m in _WIDTH)][0]
    inner = op_of(x, "add")
    if inner is not None and inner[0] == mods and len(inner[1]) == 2 and imm_of(inner[1][1]) is not None:
        x, b = inner[1][0], b + imm_of(inner[1][1])  # type: ignore[operator]
    b &= (1 << w) - 1
    return ((op, mods), (x, ("op", A.Imm(b - (1 << w) if b >> (w - 1) else b))))


def imm_of(t: Term) -> int | None:
    if isinstance(t, tuple) and t[0] == "op" and isinstance(t[1], A.Imm) and not t[1].is_float:
        return int(t[1].value)
    return None


def op_of(t: Term, opcode: str) -> tuple[tuple[str, ...], tuple[Term, ...]] | None:
    """(mods, operands) when ``t`` is a result of ``opcode``."""
    if isinstance(t, tuple) and len(t) in (2, 3) and isinstance(t[0], tuple) and t[0][0] == opcode:
        return t[0][1], t[1]
    return None


def int_mods(mods: tuple[str, ...]) -> bool:
    return any(m in _WIDTH for m in mods) and not any(m in ("sat", "cc", "hi", "wide", "lo") for m in mods)


def add_of(t: Term, base: Term) -> Term | None:
    """The other operand when ``t`` is `add base, x` (either order), else None."""
    a = op_of(t, "add")
    if a is None or not int_mods(a[0]) or len(a[1]) != 2:
        return None
    x, y = a[1]
    return y if x == base else x if y == base else None


def invariant(t: Term, written: set[str]) -> bool:
    return t[0] == "op" and isinstance(t[1], A.Imm) and not t[1].is_float or t[0] == "in" and t[1] not in written
