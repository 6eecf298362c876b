"""Flatten nested ``{ }`` scopes: inner registers and variables get unique names and move to function level."""

from __future__ import annotations

from jit.errors import invalid_ptx
from jit.ptx import ast as A


def rename_operand(op: A.Operand, env: dict[str, str]) -> A.Operand:
    if isinstance(op, A.Reg):
        return A.Reg(env.get(op.name, op.name))
    if isinstance(op, A.Sym):
        return A.Sym(env.get(op.name, op.name))
    if isinstance(op, A.SymOff):
        return A.SymOff(env.get(op.name, op.name), op.offset)
    if isinstance(op, A.Addr) and isinstance(op.base, (A.Reg, A.Sym)):
        return A.Addr(rename_operand(op.base, env), op.offset)  # type: ignore[arg-type]
    if isinstance(op, A.Vec):
        return A.Vec(tuple(rename_operand(x, env) for x in op.items))
    if isinstance(op, A.Group):
        return A.Group(tuple(rename_operand(x, env) for x in op.items))
    if isinstance(op, A.PredPair):
        return A.PredPair(rename_operand(op.first, env), rename_operand(op.second, env))
    if isinstance(op, A.Not):
        return A.Not(A.Reg(env.get(op.reg.name, op.reg.name)))
    return op


def _flatten(fn: A.Function) -> None:
    counter = [0]
    flat: list[A.Stmt] = []

    def walk(body: list[A.Stmt], env: dict[str, str], depth: int) -> None:
        env = dict(env)
        for st in body:
            if isinstance(st, A.RegDecl):
                if st.vec != 1:
                    raise invalid_ptx("vector registers (.reg .v2/.v4) are not supported")
                for n in st.names:
                    new = n if depth == 0 else f"{n}$s{counter[0]}"
                    counter[0] += depth != 0
                    env[n] = new
                    fn.regs[new] = st.type
            elif isinstance(st, A.VarDecl):
                new = st.name if depth == 0 else f"{st.name}$s{counter[0]}"
                counter[0] += depth != 0
                env[st.name] = new
                st.name = new
                fn.vars.append(st)
            elif isinstance(st, A.Scope):
                walk(st.body, env, depth + 1)
            elif isinstance(st, A.Instr):
                st.operands = [rename_operand(o, env) for o in st.operands]
                if st.pred:
                    st.pred = env.get(st.pred, st.pred)
                flat.append(st)
            else:
                flat.append(st)

    walk(fn.body or [], {}, 0)
    fn.body = flat


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        if fn.body is not None:
            _flatten(fn)
    return module
