"""Find barriers and warp collectives in each kernel, number them, and record what is live across them.

See NOTE [CPU work-group execution] in jit/emit/cpu.py for how the numbered sync points are used.
"""

from __future__ import annotations

from jit.passes.liveness import defs_uses, live_after
from jit.ptx import ast as A

WARP_OPS = {"shfl", "vote", "match", "redux", "activemask"}


def sync_kind(ins: A.Instr) -> str | None:
    op = ins.opcode
    if op == "bar" and "warp" in ins.mods:
        return "warp"
    if op in ("bar", "barrier") and not ins.has("arrive"):
        return "bar"
    if op in WARP_OPS:
        return "warp"
    return None


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        if fn.body is None or not fn.is_entry:
            continue
        idx = [i for i, st in enumerate(fn.body) if isinstance(st, A.Instr) and sync_kind(st)]
        if not idx:
            continue
        live = live_after(fn.body, set(idx))
        for k, i in enumerate(idx, start=1):
            ins = fn.body[i]
            assert isinstance(ins, A.Instr)
            defs, _ = defs_uses(ins)
            keep = sorted(live[i] - set(defs))
            fn.sync_points[k] = A.SyncPoint(k, sync_kind(ins) or "bar", ins, keep)
    return module
