"""Flatten nested ``{ }`` scopes: inner registers and variables get unique names and move to function level."""

from __future__ import annotations

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


_RGBA = {"r": "x", "g": "y", "b": "z", "a": "w"}


def _named_regs(op: A.Operand, env: set[str], vecs: dict[str, list[str]]) -> A.Operand:
    """Registers declared without a `%` (`.reg .u64 in_addr;`, `.reg .v4 .u32 temp;` with `temp.w`) are plain names
    to the parser, which cannot tell them from variables: those in scope become registers, wherever they stand."""
    if isinstance(op, A.Sym):
        base = op.name.rpartition(".")[0]
        if op.name in env or op.name in vecs or base in vecs or base in env:  # base in env: a video lane selector
            return A.Reg(op.name)
        return op
    if isinstance(op, A.Addr) and isinstance(op.base, A.Sym):
        return A.Addr(_named_regs(op.base, env, vecs), op.offset)  # type: ignore[arg-type]
    if isinstance(op, (A.Vec, A.Group)):
        return type(op)(tuple(_named_regs(x, env, vecs) for x in op.items))
    if isinstance(op, A.PredPair):
        return A.PredPair(_named_regs(op.first, env, vecs), _named_regs(op.second, env, vecs))
    return op


def _expand_vec(op: A.Operand, vecs: dict[str, list[str]]) -> A.Operand:
    """Vector-register operands: %v -> {%v.x, ...}; %v.r/.g/.b/.a -> %v.x/.y/.z/.w."""
    if not vecs:
        return op
    if isinstance(op, A.Reg):
        if op.name in vecs:
            return A.Vec(tuple(A.Reg(c) for c in vecs[op.name]))
        base, _, comp = op.name.rpartition(".")
        if base in vecs and comp in _RGBA:
            return A.Reg(f"{base}.{_RGBA[comp]}")
    if isinstance(op, (A.Vec, A.Group)):  # a vector register as a call argument stays one (vector) argument
        return type(op)(tuple(_expand_vec(x, vecs) for x in op.items))
    return op


def _register_sums(st: A.Instr, regs: set[str], fn: A.Function, counter: list[int]) -> list[A.Instr]:
    """`st.u64 [p], r + 1;`: a register plus a constant as a value operand (outside PTX's grammar, but ptxas takes
    it) becomes an add into a fresh register before the instruction."""
    types = [m for m in st.mods if m[:1] in "bus" and m[1:] in ("8", "16", "32", "64")]  # integer sums only
    out: list[A.Instr] = []
    for k, o in enumerate(st.operands):
        if isinstance(o, A.SymOff) and o.name in regs and types:
            t = types[-1]
            tmp = f"{o.name}$plus{counter[0]}"
            counter[0] += 1
            fn.regs[tmp] = t
            out.append(
                A.Instr("add", [t], [A.Reg(tmp), A.Reg(o.name), A.Imm(o.offset)], st.pred, st.pred_neg, st.line, st.col)
            )
            st.operands[k] = A.Reg(tmp)
    return out


def _flatten(fn: A.Function) -> None:
    counter = [0]
    flat: list[A.Stmt] = []

    def walk(body: list[A.Stmt], env: dict[str, str], depth: int, regs: set[str]) -> None:
        env, regs = dict(env), set(regs)  # regs: the names in scope that are registers (env also maps variables)
        for st in body:
            if isinstance(st, A.RegDecl):
                if st.vec != 1:  # .reg .v4 .f32 %v: four scalars %v.x .. %v.w; %v alone is the vector
                    for n in st.names:
                        comps = [f"{n}.{c}" for c in "xyzw"[: st.vec]]
                        vecs[n] = comps
                        for c in comps:
                            fn.regs[c] = st.type
                    continue
                for n in st.names:
                    new = n if depth == 0 else f"{n}$s{counter[0]}"
                    counter[0] += depth != 0
                    env[n] = new
                    regs.add(n)
                    fn.regs[new] = st.type
            elif isinstance(st, A.VarDecl):
                new = st.name if depth == 0 else f"{st.name}$s{counter[0]}"
                counter[0] += depth != 0
                env[st.name] = new
                regs.discard(st.name)
                st.name = new
                fn.vars.append(st)
            elif isinstance(st, A.Scope):
                walk(st.body, env, depth + 1, regs)
            elif isinstance(st, A.Instr):
                flat.extend(_register_sums(st, regs, fn, counter))
                st.operands = [_expand_vec(rename_operand(_named_regs(o, regs, vecs), env), vecs) for o in st.operands]
                if st.pred:
                    st.pred = env.get(st.pred, st.pred)
                flat.append(st)
            else:
                flat.append(st)

    vecs: dict[str, list[str]] = {}
    walk(fn.body or [], {}, 0, set())
    fn.body = flat


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        if fn.body is not None:
            _flatten(fn)
    return module
