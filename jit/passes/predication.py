"""Turn ``@p instr`` into ``@!p bra skip; instr; skip:`` so later passes see only predicated branches."""

from __future__ import annotations

import dataclasses

from jit.ptx import ast as A


def run(module: A.Module) -> A.Module:
    n = 0
    for fn in module.functions:
        if fn.body is None:
            continue
        out: list[A.Stmt] = []
        for st in fn.body:
            if isinstance(st, A.Instr) and st.pred and st.opcode != "bra":
                n += 1
                skip = f"$wooly_pred_skip{n}"
                out.append(A.Instr("bra", [], [A.Sym(skip)], st.pred, not st.pred_neg, st.line, st.col))
                out.append(dataclasses.replace(st, pred=None, pred_neg=False))
                out.append(A.Label(skip, st.line))
            else:
                out.append(st)
        fn.body = out
    return module
