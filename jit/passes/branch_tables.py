"""``brx.idx i, ts`` (indirect branch through a ``.branchtargets`` table) -> a chain of compare-and-branch.

Runs after predication (a guarded brx is then already inside ``@!p bra skip``), so liveness, sync points and the
lowering only ever see ordinary conditional branches. An index outside the table falls through (PTX: undefined).
"""

from __future__ import annotations

from jit.errors import invalid_ptx
from jit.ptx import ast as A


def run(module: A.Module) -> A.Module:
    n = 0
    for fn in module.functions:
        if fn.body is None or not any(isinstance(s, A.Instr) and s.opcode == "brx" for s in fn.body):
            continue
        out: list[A.Stmt] = []
        for st in fn.body:
            if not (isinstance(st, A.Instr) and st.opcode == "brx"):
                out.append(st)
                continue
            if len(st.operands) != 2 or not isinstance(st.operands[1], A.Sym):
                raise invalid_ptx("brx.idx expects an index and a .branchtargets table", st.line, st.col)
            table = fn.branch_tables.get(st.operands[1].name)
            if table is None:
                raise invalid_ptx(f"unknown .branchtargets table {st.operands[1].name}", st.line, st.col)
            n += 1
            p = f"%$wooly_brx{n}"
            fn.regs[p] = "pred"
            for k, label in enumerate(table):
                out.append(
                    A.Instr("setp", ["eq", "u32"], [A.Reg(p), st.operands[0], A.Imm(k)], None, False, st.line, st.col)
                )
                out.append(A.Instr("bra", [], [A.Sym(label)], p, False, st.line, st.col))
        fn.body = out
    return module
