"""Inline calls to ``.func``s that contain barriers or warp collectives (directly or through their callees).

The CPU scheduler parks threads at sync points of the kernel body (NOTE [CPU work-group execution]); a sync point
inside a separately compiled function could not park its caller. NVRTC keeps such functions only for
``__noinline__`` code, so inlining them at the PTX level is cheap. Callee registers, labels and ``.local``/``.param``
variables get a per-call-site suffix; ``.param`` formals are renamed to the caller's argument buffers, ``.reg``
formals/returns become moves; ``ret`` becomes a branch to the end of the inlined body. Recursive sync functions stay
unsupported (reported by name).
"""

from __future__ import annotations

import dataclasses

from jit.errors import not_supported
from jit.passes.flatten_scopes import rename_operand
from jit.passes.sync_points import sync_kind
from jit.ptx import ast as A

MAX_DEPTH = 16


def _has_sync(fn: A.Function, funcs: dict[str, A.Function], seen: set[str]) -> bool:
    for st in fn.body or []:
        if isinstance(st, A.Instr):
            if sync_kind(st):
                return True
            if st.opcode == "call":
                callee = _callee(st)
                f = funcs.get(callee or "")
                if f is not None and callee not in seen and _has_sync(f, funcs, seen | {callee}):  # type: ignore[operator]
                    return True
    return False


def _callee(ins: A.Instr) -> str | None:
    return next((o.name for o in ins.operands if isinstance(o, A.Sym)), None)


def run(module: A.Module) -> A.Module:
    funcs = {f.name: f for f in module.functions if not f.is_entry and f.body is not None}
    sync_funcs = {n for n, f in funcs.items() if _has_sync(f, funcs, {n})}
    if not sync_funcs:
        return module
    counter = [0]
    for fn in module.functions:
        if fn.body is not None and fn.name not in sync_funcs:
            fn.body = _inline_body(fn, fn.body, funcs, sync_funcs, counter, ())
    for n in sync_funcs:  # every call site is inlined: the out-of-line bodies are never needed
        funcs[n].body = None
    return module


def _inline_body(
    host: A.Function,
    body: list[A.Stmt],
    funcs: dict[str, A.Function],
    sync_funcs: set[str],
    counter: list[int],
    chain: tuple[str, ...],
) -> list[A.Stmt]:
    out: list[A.Stmt] = []
    for st in body:
        name = _callee(st) if isinstance(st, A.Instr) and st.opcode == "call" else None
        if name not in sync_funcs:
            out.append(st)
            continue
        assert isinstance(st, A.Instr)
        if name in chain or len(chain) >= MAX_DEPTH:
            raise not_supported(f"recursive .func '{name}' containing a barrier or warp collective", st.line)
        counter[0] += 1
        out.extend(_expand(host, st, funcs[name], funcs, sync_funcs, counter, (*chain, name)))  # type: ignore[index]
    return out


def _expand(
    host: A.Function,
    call: A.Instr,
    f: A.Function,
    funcs: dict[str, A.Function],
    sync_funcs: set[str],
    counter: list[int],
    chain: tuple[str, ...],
) -> list[A.Stmt]:
    k = counter[0]
    sfx = f"$i{k}"
    ops = list(call.operands)
    ci = next(i for i, o in enumerate(ops) if isinstance(o, A.Sym))
    rets = [x for g in ops[:ci] if isinstance(g, A.Group) for x in g.items]
    args = [x for g in ops[ci + 1 :] if isinstance(g, A.Group) for x in g.items]
    env: dict[str, str] = {}
    pre: list[A.Stmt] = []
    post: list[A.Stmt] = []
    for formal, actual, is_ret in [(p, a, False) for p, a in zip(f.params, args, strict=False)] + [
        (p, a, True) for p, a in zip(f.rets, rets, strict=False)
    ]:
        if isinstance(actual, A.Sym):
            env[formal.name] = actual.name
            continue
        # a register, immediate or vector argument (hand-written PTX; .reg parameters, jit/passes/reg_params.py):
        # a .param buffer of the formal's own, filled before the body or read after it, as a call would
        buf = formal.name + sfx
        env[formal.name] = buf
        host.vars.append(A.VarDecl("param", formal.type, buf, formal.align, list(formal.dims), None, formal.vec))
        moves = _param_moves(host, formal, buf, actual, is_ret, call, f"{sfx}${len(pre) + len(post)}")
        (post if is_ret else pre).extend(moves)
    for r, t in f.regs.items():
        env[r] = r + sfx
        host.regs[r + sfx] = t
    for v in f.vars:
        if v.space in ("local", "param"):
            env[v.name] = v.name + sfx
            host.vars.append(dataclasses.replace(v, name=v.name + sfx))
    end = f"$wooly_ret{sfx}"
    body: list[A.Stmt] = []
    for st in f.body or []:
        if isinstance(st, A.Label):
            env.setdefault(st.name, st.name + sfx)
    for st in f.body or []:
        if isinstance(st, A.Label):
            body.append(A.Label(env[st.name], st.line))
        elif isinstance(st, A.Instr):
            pred = env.get(st.pred, st.pred) if st.pred else None
            if st.opcode == "ret":
                body.append(A.Instr("bra", [], [A.Sym(end)], pred, st.pred_neg, st.line, st.col))
                continue
            ops2 = [rename_operand(o, env) for o in st.operands]
            body.append(dataclasses.replace(st, operands=ops2, pred=pred))
    body = _inline_body(host, body, funcs, sync_funcs, counter, chain)
    guard: list[A.Stmt] = []
    tail: list[A.Stmt] = [A.Label(end, call.line)]
    if call.pred:  # @p call f -> @!p bra skip; <body>; skip:
        skip = f"$wooly_skip{sfx}"
        guard = [A.Instr("bra", [], [A.Sym(skip)], call.pred, not call.pred_neg, call.line, call.col)]
        tail = [A.Label(end, call.line)] + post + [A.Label(skip, call.line)]
        return guard + pre + body + tail
    return pre + body + tail + post


def _param_moves(
    host: A.Function, formal: A.Param, buf: str, actual: A.Operand, is_ret: bool, call: A.Instr, sfx: str
) -> list[A.Stmt]:
    """st.param of the actual into the buffer (an argument) or ld.param from it (a result); a .pred register
    travels as a u32 0/1 (the type reg_params gives .pred parameters)."""
    mods = ["param"] + ([f"v{formal.vec}"] if formal.vec != 1 else []) + [formal.type]
    addr = A.Addr(A.Sym(buf), 0)
    line, col = call.line, call.col
    if isinstance(actual, A.Reg) and host.regs.get(actual.name) == "pred":
        tmp = A.Reg(f"%__wooly_p{sfx}")
        host.regs[tmp.name] = formal.type
        if is_ret:
            return [
                A.Instr("ld", mods, [tmp, addr], None, False, line, col),
                A.Instr("setp", ["ne", formal.type], [actual, tmp, A.Imm(0)], None, False, line, col),
            ]
        return [
            A.Instr("selp", [formal.type], [tmp, A.Imm(1), A.Imm(0), actual], None, False, line, col),
            A.Instr("st", mods, [addr, tmp], None, False, line, col),
        ]
    if is_ret:
        return [A.Instr("ld", mods, [actual, addr], None, False, line, col)]
    return [A.Instr("st", mods, [addr, actual], None, False, line, col)]
