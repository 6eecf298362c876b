"""`.func`s with `.reg` parameters and return values (the pre-ABI form, still valid PTX and common in hand-written
code): `.func (.reg .u32 a, .reg .pred b) f(.reg .u32 x, .reg .v2 .u32 v)`.

The rest of the translator knows `.param` parameters only (a caller-side buffer per parameter, NOTE [call ABI] in
jit/emit/cpu/func.py). This pass rewrites each `.reg` parameter p into a `.param` one of the same type and shape,
named `p$reg`, plus a register p that the function body uses as before: an input is loaded into the register on
entry, a return value is stored from the register before every `ret` (under the `ret`'s own predicate) and at the
end of a body that falls off its end. A `.pred` travels as a `.u32` 0/1. A call passes register and vector
operands straight into the buffers (jit/lower/ops_ctrl.py) and copies register results back after the call.
"""

from __future__ import annotations

from dataclasses import dataclass

from jit.ptx import ast as A

PRED_CARRIER = "u32"  # .param cannot be .pred


@dataclass
class _Move:
    """Between the `.param` buffer `param` and the register `reg` (of type `typ`, `vec` elements)."""

    param: str
    reg: str
    typ: str
    vec: int

    def _operand(self) -> A.Operand:
        if self.vec == 1:
            return A.Reg(self.reg)
        return A.Vec(tuple(A.Reg(f"{self.reg}.{c}") for c in "xyzw"[: self.vec]))

    def _mods(self, typ: str) -> list[str]:
        return ["param"] + ([f"v{self.vec}"] if self.vec != 1 else []) + [typ]

    def load(self, line: int) -> list[A.Stmt]:
        if self.typ == "pred":
            tmp = A.Reg(f"{self.reg}$in")
            return [
                A.RegDecl(PRED_CARRIER, [tmp.name]),
                A.Instr("ld", self._mods(PRED_CARRIER), [tmp, A.Addr(A.Sym(self.param), 0)], line=line),
                A.Instr("setp", ["ne", PRED_CARRIER], [A.Reg(self.reg), tmp, A.Imm(0)], line=line),
            ]
        return [A.Instr("ld", self._mods(self.typ), [self._operand(), A.Addr(A.Sym(self.param), 0)], line=line)]

    def store(self, pred: str | None, neg: bool, line: int) -> list[A.Stmt]:
        if self.typ == "pred":
            tmp = A.Reg(f"{self.reg}$out")
            return [
                A.Instr("selp", [PRED_CARRIER], [tmp, A.Imm(1), A.Imm(0), A.Reg(self.reg)], pred, neg, line),
                A.Instr("st", self._mods(PRED_CARRIER), [A.Addr(A.Sym(self.param), 0), tmp], pred, neg, line),
            ]
        return [A.Instr("st", self._mods(self.typ), [A.Addr(A.Sym(self.param), 0), self._operand()], pred, neg, line)]


def _rewrite(fn: A.Function) -> None:
    moves = [(p, p in fn.rets) for p in [*fn.params, *fn.rets] if p.space == "reg"]
    if not moves:
        return
    prologue: list[A.Stmt] = []
    outs: list[_Move] = []
    for p, is_ret in moves:
        mv = _Move(f"{p.name}$reg", p.name, p.type, p.vec)
        p.name, p.space = mv.param, "param"
        if p.type == "pred":
            p.type = PRED_CARRIER
        prologue.append(A.RegDecl(mv.typ, [mv.reg], mv.vec))
        if is_ret:
            outs.append(mv)
            if mv.typ == "pred":
                prologue.append(A.RegDecl(PRED_CARRIER, [f"{mv.reg}$out"]))
        else:
            prologue += mv.load(fn.line)

    def walk(stmts: list[A.Stmt]) -> list[A.Stmt]:
        out: list[A.Stmt] = []
        for st in stmts:
            if isinstance(st, A.Scope):
                st.body = walk(st.body)
            elif isinstance(st, A.Instr) and st.opcode == "ret":
                out += [x for mv in outs for x in mv.store(st.pred, st.pred_neg, st.line)]
            out.append(st)
        return out

    body = walk(fn.body or [])
    last = next((st for st in reversed(body) if isinstance(st, A.Instr)), None)
    if outs and (last is None or last.opcode != "ret" or last.pred):  # falls off its end
        body += [x for mv in outs for x in mv.store(None, False, fn.line)]
    fn.body = prologue + body


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        if not fn.is_entry and fn.body is not None:
            _rewrite(fn)
    return module
