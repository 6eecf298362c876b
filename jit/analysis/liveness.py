"""Register def/use sets and a backward liveness analysis over the flat PTX instruction list."""

from __future__ import annotations

from jit.ptx import ast as A

NO_DEST = {
    "st",
    "red",
    "bar",
    "barrier",
    "membar",
    "fence",
    "prefetch",
    "prefetchu",
    "bra",
    "ret",
    "exit",
    "trap",
    "brkpt",
    "nanosleep",
    "pmevent",
    "discard",
    "applypriority",
    "griddepcontrol",
    "call",
    "stmatrix",
    "cp",
    "multimem",
    "setmaxnreg",
    "elect_none",
}
TERMINATORS = {"ret", "exit", "trap"}


def regs_in(op: A.Operand) -> list[str]:
    if isinstance(op, A.Reg):
        return [op.name]
    if isinstance(op, A.Not):
        return [op.reg.name]
    if isinstance(op, A.Addr):
        return [op.base.name] if isinstance(op.base, A.Reg) else []
    if isinstance(op, (A.Vec, A.Group)):
        return [r for x in op.items for r in regs_in(x)]
    if isinstance(op, A.PredPair):
        return regs_in(op.first) + regs_in(op.second)
    return []


def defs_uses(ins: A.Instr) -> tuple[list[str], list[str]]:
    uses = [ins.pred] if ins.pred else []
    ops = ins.operands
    if ins.opcode == "call":
        # old-style register arguments: call (%r_out), f, (%r_in)
        d = regs_in(ops[0]) if ops and isinstance(ops[0], A.Group) else []
        return d, uses + [r for o in ops[1:] for r in regs_in(o)]
    if ins.opcode in ("bar", "barrier") and ins.has("red") and ops:  # bar.red.popc d, a, {b,} p
        return regs_in(ops[0]), uses + [r for o in ops[1:] for r in regs_in(o)]
    if ins.opcode in NO_DEST or not ops:
        return [], uses + [r for o in ops for r in regs_in(o)]
    d0 = ops[0]
    defs = [r for r in regs_in(d0)] if not isinstance(d0, A.Addr) else []
    return defs, uses + [r for o in ops[1:] for r in regs_in(o)]


def blocks(body: list[A.Stmt]) -> tuple[list[list[int]], dict[str, int], list[A.Instr | A.Label]]:
    """Split the body into basic blocks of statement indices; returns (blocks, label->block, stmts)."""
    bl: list[list[int]] = [[]]
    label_block: dict[str, int] = {}
    for i, st in enumerate(body):
        if isinstance(st, A.Label):
            if bl[-1]:
                bl.append([])
            label_block[st.name] = len(bl) - 1
            bl[-1].append(i)
            continue
        bl[-1].append(i)
        if isinstance(st, A.Instr) and (st.opcode == "bra" or st.opcode in TERMINATORS):
            bl.append([])
    return bl, label_block, body  # type: ignore[return-value]


def successors(bl: list[list[int]], label_block: dict[str, int], body: list) -> list[list[int]]:
    succ: list[list[int]] = []
    for b, idxs in enumerate(bl):
        s: list[int] = []
        last = body[idxs[-1]] if idxs else None
        fall = b + 1 < len(bl)
        if isinstance(last, A.Instr) and last.opcode == "bra":
            tgt = last.operands[0]
            if isinstance(tgt, A.Sym) and tgt.name in label_block:
                s.append(label_block[tgt.name])
            fall = fall and last.pred is not None
        elif isinstance(last, A.Instr) and last.opcode in TERMINATORS:
            fall = False
        if fall:
            s.append(b + 1)
        succ.append(s)
    return succ


def innermost_loops(body: list[A.Stmt], pos: dict[str, int]) -> list[tuple[int, int]]:
    """(header index, back-edge index) of innermost loops: a branch to a label (at ``pos``) at or before it, with no
    other back edge between."""
    edges = []
    for j, st in enumerate(body):
        if isinstance(st, A.Instr) and st.opcode == "bra" and st.operands and isinstance(st.operands[0], A.Sym):
            h = pos.get(st.operands[0].name)
            if h is not None and h < j:
                edges.append((h, j))
    return [(h, j) for h, j in edges if not any(h <= h2 and j2 <= j and (h2, j2) != (h, j) for h2, j2 in edges)]


def live_after(body: list[A.Stmt], wanted: set[int]) -> dict[int, set[str]]:
    """Registers live immediately after each statement index in ``wanted``."""
    bl, label_block, _ = blocks(body)
    succ = successors(bl, label_block, body)
    du = {i: defs_uses(st) for i, st in enumerate(body) if isinstance(st, A.Instr)}
    gen: list[set[str]] = []
    kill: list[set[str]] = []
    for idxs in bl:
        g: set[str] = set()
        k: set[str] = set()
        for i in reversed(idxs):
            if i in du:
                d, u = du[i]
                g -= set(d)
                k |= set(d)
                g |= set(u)
        gen.append(g)
        kill.append(k)
    live_in: list[set[str]] = [set() for _ in bl]
    live_out: list[set[str]] = [set() for _ in bl]
    changed = True
    while changed:
        changed = False
        for b in reversed(range(len(bl))):
            out: set[str] = set()
            for s in succ[b]:
                out |= live_in[s]
            inn = gen[b] | (out - kill[b])
            if inn != live_in[b] or out != live_out[b]:
                live_in[b], live_out[b] = inn, out
                changed = True
    result: dict[int, set[str]] = {}
    for b, idxs in enumerate(bl):
        live = set(live_out[b])
        for i in reversed(idxs):
            if i in wanted:
                result[i] = set(live)
            if i in du:
                d, u = du[i]
                live -= set(d)
                live |= set(u)
    return result
