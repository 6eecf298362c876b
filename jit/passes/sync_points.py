"""Find barriers and warp collectives in each kernel, number them, and record what is live across them.

See NOTE [CPU work-group execution] in jit/emit/cpu/__init__.py for how the numbered sync points are used.

NOTE [rematerialised registers]
A register live across a sync point is saved to the thread's record when it parks and loaded back when it resumes.
Many such registers are pure functions of the thread's coordinates and the kernel parameters (shared-memory
addresses like `tile + 4*tid.x`, row offsets, loop bounds). Recomputing them is a few integer instructions where
saving and restoring is a store and a load per thread per sync point, and LLVM sees the addresses as affine in the
thread index again (barrier-tiled matmul: 1.7x faster with this, records and chunked blocks together). So a live
register whose only definition in the kernel is a pure instruction over rematerialisable operands (immediates,
symbols, %tid/%ntid/%ctaid/%nctaid, kernel parameters, other such registers) is not saved: the resume code
re-executes its defining chain, in program order. Single definition makes the recomputed value the one the thread
had (a definition skipped on some path leaves a register that is read uninitialised there, which PTX leaves
undefined anyway). Chains are capped at REMAT_LIMIT instructions per sync point; anything longer is saved as before.
"""

from __future__ import annotations

from jit.analysis.liveness import defs_uses, live_after
from jit.ptx import ast as A

WARP_OPS = {"shfl", "vote", "match", "redux", "activemask"}
YIELD = "wooly_yield"  # synthetic: a thread may be switched out here (NOTE [interleaved strided loops])


def sync_kind(ins: A.Instr) -> str | None:
    op = ins.opcode
    if op == YIELD:
        return "yield"
    if op == "bar" and "warp" in ins.mods:
        return "warp"
    if op in ("bar", "barrier") and not ins.has("arrive"):
        return "bar"
    if op in WARP_OPS:
        return "warp"
    return None


REMAT_LIMIT = 64
_PURE = {
    "mov",
    "add",
    "sub",
    "mul",
    "mad",
    "mul24",
    "mad24",
    "shl",
    "shr",
    "and",
    "or",
    "xor",
    "not",
    "cvt",
    "cvta",
    "selp",
    "setp",
    "min",
    "max",
    "neg",
    "abs",
    "bfe",
    "bfi",
    "prmt",
}
_THREAD_SPECIALS = {f"{b}.{c}" for b in ("tid", "ntid", "ctaid", "nctaid") for c in "xyz"} | {"laneid", "warpid"}


def _rematerialisable(fn: A.Function) -> dict[str, tuple[int, A.Instr]]:
    """register -> (position, defining instruction) for registers that can be recomputed anywhere."""
    body = fn.body or []
    defs: dict[str, list[tuple[int, A.Instr]]] = {}
    for i, st in enumerate(body):
        if isinstance(st, A.Instr):
            for d in defs_uses(st)[0]:
                defs.setdefault(d, []).append((i, st))
    params = {p.name for p in fn.params}
    cand = {r: ds[0] for r, ds in defs.items() if len(ds) == 1 and _pure(ds[0][1], params)}
    ok: dict[str, tuple[int, A.Instr]] = {}
    changed = True
    while changed:  # keep registers whose register operands are all rematerialisable
        changed = False
        for r, (i, ins) in cand.items():
            if r not in ok and all(u in ok for u in defs_uses(ins)[1]):
                ok[r] = (i, ins)
                changed = True
    return ok


def _pure(ins: A.Instr, params: set[str]) -> bool:
    if len(defs_uses(ins)[0]) != 1 or ins.pred:
        return False
    if ins.opcode == "ld":
        src = ins.operands[1] if len(ins.operands) == 2 else None
        return (
            ins.has("param")
            and isinstance(src, A.Addr)
            and isinstance(src.base, A.Sym)
            and src.base.name in params
            and not ins.has("v2", "v4")
        )
    if ins.opcode not in _PURE or ins.opcode == "cvta" and ins.has("local"):
        return False
    for o in ins.operands[1:]:
        if isinstance(o, A.Special) and o.name not in _THREAD_SPECIALS:
            return False
        if isinstance(o, (A.Addr, A.Vec)):
            return False
    return True


def _chain(regs: list[str], remat: dict[str, tuple[int, A.Instr]]) -> tuple[list[str], list[A.Instr]]:
    """Pick registers of ``regs`` to recompute, greedily, while their defining chains together stay within
    REMAT_LIMIT instructions; returns (picked registers, the chain in program order)."""
    need: dict[str, tuple[int, A.Instr]] = {}
    picked = []
    for reg in regs:
        add: dict[str, tuple[int, A.Instr]] = {}
        todo = [reg]
        while todo:
            r = todo.pop()
            if r in need or r in add:
                continue
            add[r] = remat[r]
            todo += defs_uses(remat[r][1])[1]
        if len(need) + len(add) <= REMAT_LIMIT:
            need.update(add)
            picked.append(reg)
    return picked, [ins for _, ins in sorted(need.values(), key=lambda x: x[0])]


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        if fn.body is None or not fn.is_entry:
            continue
        idx = [i for i, st in enumerate(fn.body) if isinstance(st, A.Instr) and sync_kind(st)]
        if not idx:
            continue
        live = live_after(fn.body, set(idx))
        remat = _rematerialisable(fn)
        for k, i in enumerate(idx, start=1):
            ins = fn.body[i]
            assert isinstance(ins, A.Instr)
            defs, _ = defs_uses(ins)
            keep = sorted(live[i] - set(defs))
            picked, chain = _chain([r for r in keep if r in remat], remat)
            keep = [r for r in keep if r not in picked]
            fn.sync_points[k] = A.SyncPoint(k, sync_kind(ins) or "bar", ins, keep, chain)
    return module
