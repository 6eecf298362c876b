"""Exit-guard versioning of barrier-free thread loops.

# NOTE [exit-guard versioning]
# Almost every elementwise kernel starts with `i = ctaid*ntid + tid; if (i >= n) return;`. In the thread loop of a
# barrier-free kernel that guard makes every memory access of the body conditional, so LLVM's loop vectoriser
# if-converts it into masked loads and stores. Those are cheap with AVX-512 but microcoded on AVX2 hosts such as
# AMD Zen 1-3: there a guarded saxpy ran 4x slower vectorised than with the guard deleted (22.6 vs 5.8 ms for 8M
# elements on one Zen 3 core) and 3x slower than numba.
#
# So a kernel whose body opens with such guards runs each block in two steps:
#   1. a check loop over the block's threads computes only the straight-line prefix up to the last guard (register
#      arithmetic, special registers and `ld.param`, nothing that touches memory or has an effect) and ORs the
#      guards' exit conditions;
#   2. if no thread of the block exits at a guard (every block but the last, typically), the thread loop runs a copy
#      of the body with the guards removed, which vectorises without masks; otherwise it runs the body as written.
# Only kernels whose body after the guards is straight-line (no branch, no call) are versioned: a thread loop with
# control flow inside does not vectorise anyway, and the second copy costs compile time.
# Both copies compute exactly what the kernel says: the fast copy is taken only when removing the guards changes
# nothing for any thread of the block.
#
# Bounds-checked modules (gpud's default, NOTE [rooted bounds checks]) make every global access conditional, which
# has the same cost. So the check loop also computes the address of every load and store whose address is pure
# register arithmetic on a pointer parameter (the usual `p + 4*i`) and checks it against that parameter's
# allocation; if every thread passes, the fast copy runs those accesses unchecked. A thread that would exit at a
# guard fails its checks too (its index is out of range), which only sends that block down the slow copy, where the
# checks run per thread as always.
#
# A bounds-checked kernel with no guard at all but a straight-line body gets the same treatment (a check loop that
# only checks accesses).
#
# A guard is a predicated `bra` to a label whose first instruction is an unpredicated `ret`/`exit` (the thread exits
# when the branch is taken), or, as the last guard, a predicated `bra` over an unpredicated `ret`/`exit` to the label
# right after it (the thread exits when it is not taken; the fast copy drops both).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from jit.analysis.liveness import defs_uses
from jit.emit.cpu.loops import _Loop
from jit.emit.cpu.ranges import block_passes
from jit.lower.core import HANDLERS, FuncLowering
from jit.lower.types import I64
from jit.ptx import ast as A
from jit.ptx.ast import type_bytes

# Instructions the check loop may run for every thread of a block: register arithmetic only. Loads other than
# `ld.param` are left out (they would add memory traffic, and with bounds checks they have effects).
_PURE = frozenset(
    """
mov cvt cvta add sub mul mad mul24 mad24 sad div rem abs neg min max and or xor not cnot shl shr selp setp set slct
bfe bfi prmt popc clz brev bfind lop3 shf
""".split()
)
_MEMORY = frozenset("ld ldu st atom red cp prefetch prefetchu".split())
# Bodies up to this many statements get a second copy (compile time grows with the copy).
MAX_BODY = 2000


@dataclass
class Guard:
    index: int  # position of the guarding `bra` in the function body
    exit_if_taken: bool  # the thread exits when the branch is taken (else: when it falls through to ret/exit)


@dataclass
class ExitGuards:
    guards: list[Guard]
    skip: set[int]  # positions the fast body leaves out: the guards, and the exit a fall-through guard jumps over
    fast_body: list[A.Instr | A.Label]  # the body for a block in which no thread exits at a guard
    # what the check loop runs, in order: ("lower", instr), ("guard", instr) or ("check", instr): an access of the
    # fast body whose bounds the check loop verifies
    walk: list[tuple[str, A.Instr]] = field(default_factory=list)
    prechecked: frozenset[int] = frozenset()  # ids of those accesses
    checked_left: bool = False  # the fast body still has bounds-checked accesses


def _is_exit(st: object) -> bool:
    return isinstance(st, A.Instr) and st.opcode in ("ret", "exit") and not st.pred


def _exit_label(body: list, name: str) -> bool:
    """The label ``name`` leads (through further labels) straight to an unpredicated ret/exit."""
    for i, st in enumerate(body):
        if isinstance(st, A.Label) and st.name == name:
            for nxt in body[i + 1 :]:
                if not isinstance(nxt, A.Label):
                    return _is_exit(nxt)
            return True  # falling off the end of an entry is an exit
    return False


def _is_pure(st: A.Instr) -> bool:
    return not st.pred and (st.opcode in _PURE or st.opcode == "ld" and st.has("param"))


def _guards(body: list) -> list[Guard]:
    guards: list[Guard] = []
    for i, st in enumerate(body):
        if not isinstance(st, A.Instr):
            break  # a label: the prefix is no longer straight-line
        if st.opcode == "bra" and st.pred and st.operands and isinstance(st.operands[0], A.Sym):
            tgt = st.operands[0].name
            if _exit_label(body, tgt):
                guards.append(Guard(i, True))
                continue
            if (
                i + 2 < len(body)
                and _is_exit(body[i + 1])
                and isinstance(body[i + 2], A.Label)
                and body[i + 2].name == tgt
            ):
                guards.append(Guard(i, False))
            break
        if not _is_pure(st):
            break
    return guards


def find_exit_guards(body: list) -> ExitGuards | None:
    """The exit guards that open ``body`` (see the NOTE; possibly none), the body without them, and the check
    loop's walk over the prefix; None when the body is not straight-line after its guards."""
    if len(body) > MAX_BODY:
        return None
    guards = _guards(body)
    skip = {g.index for g in guards} | {g.index + 1 for g in guards if not g.exit_if_taken}
    fast = [st for i, st in enumerate(body) if i not in skip]
    if any(isinstance(st, A.Instr) and (st.pred or st.opcode in ("bra", "brx", "call")) for st in fast):
        return None  # a thread loop with control flow inside does not vectorise anyway: not worth a second copy
    last = guards[-1].index if guards else -1
    plan = ExitGuards(guards, skip, fast)
    plan.walk = [
        ("guard" if i in skip else "lower", st) for i, st in enumerate(body[: last + 1]) if isinstance(st, A.Instr)
    ]
    return plan


def _address(ins: A.Instr) -> A.Operand | None:
    if ins.opcode in ("ld", "st") and len(ins.operands) >= 2:
        return ins.operands[0 if ins.opcode == "st" else 1]
    return None


def _access_bytes(fl: FuncLowering, st: A.Instr) -> int:
    """Bytes one thread's load or store touches."""
    return type_bytes(fl.itype(st)) * next((int(m[1:]) for m in st.mods if m in ("v2", "v4", "v8")), 1)


def plan_prechecks(fl: FuncLowering, plan: ExitGuards) -> None:
    """Bounds-checked modules: which accesses after the guards the check loop checks for the whole block (see the
    NOTE); sets plan.walk, plan.prechecked and plan.checked_left."""
    body = fl.fn.body or []
    last = plan.guards[-1].index if plan.guards else -1
    rest = [st for i, st in enumerate(body) if i > last and i not in plan.skip]  # straight-line (find_exit_guards)
    pure: set[str] = set()
    for st in body[: last + 1]:
        if isinstance(st, A.Instr):
            pure.update(defs_uses(st)[0])
    walk, pre, left, end = list(plan.walk), set(), False, len(plan.walk)
    for st in rest:
        if not isinstance(st, A.Instr):
            continue
        defs, uses = defs_uses(st)
        a = _address(st)
        sp = fl.space(st)
        if st.opcode in _MEMORY and sp in ("global", "generic"):
            base = a.base if isinstance(a, A.Addr) else a
            if isinstance(base, A.Reg) and base.name in pure and fl.root_of(base, sp) is not None:
                walk.append(("check", st))
                pre.add(id(st))
                end = len(walk)
            elif not (a is not None and isinstance(base, (A.Sym, A.Imm))):
                left = True
        if _is_pure(st) and all(u in pure for u in uses):
            walk.append(("lower", st))
            pure.update(defs)
        else:
            pure.difference_update(defs)
    plan.walk, plan.prechecked, plan.checked_left = walk[:end], frozenset(pre), left


def versioned_threads(fl: FuncLowering, env, plan: ExitGuards, start_thread, lower_copy) -> None:  # type: ignore[no-untyped-def]
    """Emit the check loop, then branch to the fast copy or to the body as written. ``lower_copy(body, checked,
    copy)`` emits one set of thread loops around ``body`` at the builder's position; ``checked``: whether its global
    accesses still carry bounds checks; ``copy``: "fast" (the straight-line copy) or "slow". ``start_thread(lz, ly, lx)`` sets up a
    thread inside the three thread loops."""
    b = fl.b
    body = fl.fn.body or []
    guard_at = {id(body[g.index]): g for g in plan.guards}
    fast, slow, done = fl.block("guards_pass"), fl.block("guards_fail"), fl.block("guards_done")
    # NOTE [range pre-check] (jit/emit/cpu/ranges.py): decided for the whole block at once where it can be
    sure = block_passes(
        fl,
        env,
        plan.walk,
        {k: g.exit_if_taken for k, g in guard_at.items()},
        lambda st: _access_bytes(fl, st),
        lambda st: env.root_range(fl, fl.root_of(_address(st), fl.space(st))),
    )
    if sure is not None:
        check = fl.block("guards_check")
        b.cbranch(sure, fast, check)
        b.position_at_end(check)
    # counts "leaves at a guard or fails a check" over the block's threads, as an i64 sum: LLVM vectorises that
    # reduction on whole 64-bit lanes (an i1 "or" packs compare results into bytes; an i64 "or" becomes selects
    # that it does not vectorise)
    leave = fl.ab.alloca(I64, name="guard_exit")
    b.store(ir.Constant(I64, 0), leave)
    loops = [_Loop(fl, env.ntid[2], "gz"), _Loop(fl, env.ntid[1], "gy"), _Loop(fl, env.ntid[0], "gx")]
    start_thread(*loops)
    for kind, st in plan.walk:
        fl.cur = st
        if kind == "lower":
            HANDLERS[st.opcode](fl, st)
            continue
        if kind == "guard":
            taken = fl.get(A.Reg(st.pred), "pred")  # type: ignore[arg-type]
            if st.pred_neg:
                taken = b.not_(taken)
            out = taken if guard_at[id(st)].exit_if_taken else b.not_(taken)
        else:
            a = _address(st)
            assert a is not None
            sp = fl.space(st)
            n = _access_bytes(fl, st)
            root = fl.root_of(a, sp)
            assert root is not None
            # lo <= addr && addr + n <= hi as one compare per thread: addr - lo <= (hi - lo) - n, unsigned (an
            # address below lo wraps to more than that); `fits` (uniform) rules out ranges shorter than n and the
            # empty range (1, 0) of a parameter that is in no allowed range
            lo, hi = env.root_range(fl, root)
            span = fl.ab.sub(hi, lo)
            fits = fl.ab.and_(fl.ab.icmp_unsigned(">=", hi, lo), fl.ab.icmp_unsigned(">=", span, ir.Constant(I64, n)))
            room = fl.ab.sub(span, ir.Constant(I64, n))
            off = b.sub(b.ptrtoint(fl.addr(a, sp), I64), lo)
            out = b.or_(b.not_(fits), b.icmp_unsigned(">", off, room))
        b.store(b.add(b.load(leave), b.zext(out, I64)), leave)
    for lp in reversed(loops):
        lp.end()
    b.cbranch(b.icmp_unsigned("!=", b.load(leave), ir.Constant(I64, 0)), slow, fast)
    b.position_at_end(fast)
    fl.prechecked = plan.prechecked
    lower_copy(plan.fast_body, plan.checked_left, "fast")
    fl.prechecked = frozenset()
    b.branch(done)
    b.position_at_end(slow)
    lower_copy(body, fl.cg.bounds_check, "slow")
    b.branch(done)
    b.position_at_end(done)


__all__ = ["ExitGuards", "Guard", "MAX_BODY", "find_exit_guards", "plan_prechecks", "versioned_threads"]
