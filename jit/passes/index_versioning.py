"""Loop versioning that drops numba's negative-index wrap-around where the index provably is not negative.

NOTE [non-negative index versioning]
numba indexes arrays Python-style, so every `x[i]` with a signed `i` carries a wrap-around: `shr.s64 t, i, 63;
and.b64 u, t, size; add.s64 j, u, i` (j = i < 0 ? i + size : i). In a grid-stride loop
(`while i < n: ...; i += stride`) those three instructions, plus the register they keep busy, are as many as the
rest of the loop body: a block reduction spends 16 of its 29 instructions per four elements on them. The index is
never negative there, but nothing in the loop says so: i + stride may wrap past 2**63 for a large enough `n`, and
a GPU would then follow the wrap-around. So we version the loop:

    head:       guard: i0 in [0, 2**62], n <= 2**62, every step in [0, 2**56]   (once per entry)
                @!ok bra head_slow
    head_fast:  the body, each wrap-around of a non-negative index a plain `mov`
                @p bra head_fast; bra exit
    head_slow:  the body unchanged
                @p bra head_slow
    exit:

Why the fast copy is exact: the loop is straight-line (no label or branch but its back edge `@p bra head`), and
`p` is `i < n` (signed) computed after the last definition of `i`. Tracking each register version through the
body, a value is *bounded* if it is `i` as the iteration began, or a bounded value plus a step (a loop-invariant
register or an immediate in [0, 2**56]), at most 16 steps from `i`. When an iteration begins, 0 <= i <= 2**62 (the
guard; after that the back edge, taken only when i < n <= 2**62), so every bounded value lies in
[0, 2**62 + 16 * 2**56] and never overflows: the wrap-around adds 0 to it. The back edge needs `i` itself bounded
at the end of the body. Registers are plain PTX registers, so the copy shares them; a thread that yields inside
either copy (NOTE [interleaved strided loops], the next pass) resumes in the same copy.
"""

from __future__ import annotations

from jit.analysis.liveness import defs_uses, innermost_loops
from jit.ptx import ast as A

GUARD_MAX_START = 1 << 62
GUARD_MAX_STEP = 1 << 56
MAX_STEPS = 16
_W64 = ("s64", "u64", "b64")
_OK, _TMP = "%__wooly_ivok", "%__wooly_ivt"


def _is64(ins: A.Instr) -> bool:
    return any(m in _W64 for m in ins.mods)


def _reg(o: A.Operand) -> str | None:
    return o.name if isinstance(o, A.Reg) else None


class _Plan:
    """What the fast copy of one loop needs: the IV, the bound, the steps to guard, the adds to turn into movs."""

    def __init__(self, iv: str, bound: A.Operand, steps: set[str], wraps: dict[int, A.Operand]) -> None:
        self.iv, self.bound, self.steps, self.wraps = iv, bound, steps, wraps


def _plan(loop: list[A.Stmt]) -> _Plan | None:
    """``loop`` = header label, straight-line body, back edge. None unless it matches the NOTE's shape and holds
    at least one wrap-around of a bounded value."""
    back = loop[-1]
    assert isinstance(back, A.Instr)
    if back.pred is None or back.pred_neg or len(loop) < 3:
        return None
    body = loop[1:-1]
    if not all(
        isinstance(st, A.Instr)
        and st.opcode != "bra"
        and st.opcode not in ("ret", "exit", "trap", "call")
        and not st.pred
        for st in body
    ):
        return None
    defined = {r for st in body for r in defs_uses(st)[0]}  # type: ignore[arg-type]
    # the exit test: the last definition of the branch predicate is `setp.lt.s64 p, i, n` (or `gt n, i`)
    test = next((k for k in range(len(body) - 1, -1, -1) if back.pred in defs_uses(body[k])[0]), None)  # type: ignore[arg-type]
    if test is None:
        return None
    st = body[test]
    assert isinstance(st, A.Instr)
    if st.opcode != "setp" or not st.has("s64") or len(st.operands) != 3:
        return None
    a, c = st.operands[1], st.operands[2]
    iv, bound = (_reg(a), c) if st.has("lt") else (_reg(c), a) if st.has("gt") else (None, None)
    if iv is None or bound is None or isinstance(bound, A.Reg) and bound.name in defined:
        return None
    if not isinstance(bound, (A.Reg, A.Imm)) or isinstance(bound, A.Imm) and bound.is_float:
        return None
    # forward over register versions: bounded[(reg, version)] = steps from the iteration's i
    ver: dict[str, int] = {}
    bounded: dict[tuple[str, int], int] = {(iv, 0): 0}
    sign: dict[tuple[str, int], tuple[str, int]] = {}  # t = x >> 63 (arithmetic) -> x's version
    mask: dict[tuple[str, int], tuple[str, int]] = {}  # u = t & s -> x's version
    steps: set[str] = set()
    wraps: dict[int, A.Operand] = {}  # body index of the wrap-around's add -> its index operand

    def cur(o: A.Operand) -> tuple[str, int] | None:
        r = _reg(o)
        return (r, ver.get(r, 0)) if r is not None else None

    def step_of(o: A.Operand) -> str | int | None:
        if isinstance(o, A.Imm) and not o.is_float and 0 <= int(o.value) <= GUARD_MAX_STEP:
            return int(o.value)
        r = _reg(o)
        return r if r is not None and r not in defined else None

    iv_test_version = None
    for k, st in enumerate(body):
        assert isinstance(st, A.Instr)
        ops = st.operands
        new: dict[str, object] = {}
        if st.opcode == "add" and _is64(st) and len(ops) == 3:
            x, y = cur(ops[1]), cur(ops[2])
            for m, other, index in ((mask.get(x) if x else None, y, ops[2]), (mask.get(y) if y else None, x, ops[1])):
                if m is not None and other == m and m in bounded:
                    wraps[k] = index
                    break
            for p, q in ((ops[1], ops[2]), (ops[2], ops[1])):
                cp, s = cur(p), step_of(q)
                if cp in bounded and s is not None and bounded[cp] < MAX_STEPS:
                    new["bounded"] = bounded[cp] + 1
                    if isinstance(s, str):
                        steps.add(s)
                    break
        elif st.opcode == "mov" and _is64(st) and len(ops) == 2 and cur(ops[1]) in bounded:
            new["bounded"] = bounded[cur(ops[1])]  # type: ignore[index]
        elif (
            st.opcode == "shr"
            and st.has("s64")
            and len(ops) == 3
            and isinstance(ops[2], A.Imm)
            and ops[2].value == 63
            and cur(ops[1]) is not None
        ):
            new["sign"] = cur(ops[1])
        elif st.opcode == "and" and _is64(st) and len(ops) == 3:
            for p in (ops[1], ops[2]):
                if cur(p) in sign:
                    new["mask"] = sign[cur(p)]  # type: ignore[index]
                    break
        if k == test:
            iv_test_version = cur(ops[1] if st.has("lt") else ops[2])
        for r in defs_uses(st)[0]:
            ver[r] = ver.get(r, 0) + 1
            key = (r, ver[r])
            if "bounded" in new:
                bounded[key] = new["bounded"]  # type: ignore[assignment]
            if "sign" in new:
                sign[key] = new["sign"]  # type: ignore[assignment]
            if "mask" in new:
                mask[key] = new["mask"]  # type: ignore[assignment]
    # the back edge is taken only when the final i (< n) is bounded: then the next iteration starts in range
    final = (iv, ver.get(iv, 0))
    if iv_test_version != final or final not in bounded or final == (iv, 0) or not wraps:
        return None
    return _Plan(iv, bound, steps, wraps)


def _guard(plan: _Plan, slow: str) -> list[A.Stmt]:
    ok, t = A.Reg(_OK), A.Reg(_TMP)
    out: list[A.Stmt] = [A.Instr("setp", ["le", "u64"], [ok, A.Reg(plan.iv), A.Imm(GUARD_MAX_START)])]
    checks = [("le", "s64", plan.bound, GUARD_MAX_START)]
    checks += [("le", "u64", A.Reg(s), GUARD_MAX_STEP) for s in sorted(plan.steps)]
    for cmp, ty, v, lim in checks:
        out.append(A.Instr("setp", [cmp, ty], [t, v, A.Imm(lim)]))
        out.append(A.Instr("and", ["pred"], [ok, ok, t]))
    out.append(A.Instr("bra", [], [A.Sym(slow)], _OK, True))
    return out


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        if fn.body is None:
            continue
        body = fn.body
        pos = {st.name: i for i, st in enumerate(body) if isinstance(st, A.Label)}
        done = 0
        for h, j in sorted(innermost_loops(body, pos), reverse=True):  # from the end: earlier indices stay valid
            head = body[h]
            if not isinstance(head, A.Label):
                continue
            plan = _plan(body[h : j + 1])
            if plan is None:
                continue
            n = done
            done += 1
            fast, slow, out = (f"{head.name}_wooly_fast{n}", f"{head.name}_wooly_slow{n}", f"{head.name}_wooly_exit{n}")
            back = body[j]
            assert isinstance(back, A.Instr)
            orig = body[h + 1 : j]
            fast_body: list[A.Stmt] = []
            for k, st in enumerate(orig):
                assert isinstance(st, A.Instr)
                if k in plan.wraps:
                    st = A.Instr("mov", ["b64"], [st.operands[0], plan.wraps[k]], line=st.line, col=st.col)
                fast_body.append(st)
            retarget = [A.Sym(fast)] + list(back.operands[1:])
            body[h : j + 1] = [
                head,
                *_guard(plan, slow),
                A.Label(fast),
                *fast_body,
                A.Instr("bra", list(back.mods), retarget, back.pred, False, back.line, back.col),
                A.Instr("bra", ["uni"], [A.Sym(out)]),
                A.Label(slow),
                *orig,
                A.Instr(
                    "bra",
                    list(back.mods),
                    [A.Sym(slow)] + list(back.operands[1:]),
                    back.pred,
                    False,
                    back.line,
                    back.col,
                ),
                A.Label(out),
            ]
        if done:
            fn.regs[_OK] = "pred"
            fn.regs[_TMP] = "pred"
    return module
