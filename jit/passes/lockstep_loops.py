"""Lockstep grid-stride loops: grid-stride loops that carry values (sums, maxima) in kernels that go on after them
(CPU target).

NOTE [lockstep grid-stride loops]
The commonest reduction kernel first has every thread fold a grid-stride slice of the input into registers, then
combines the threads' values with shuffles and barriers:

    acc = 0; i = ctaid*ntid + tid;
    while (i < n) { acc += x[i]; i += stride; }     // L
    ... shfl.down, bar.sync, shared memory ...      // X

NOTE [fused grid-stride loops] runs a kernel that is nothing but such a loop, carrying nothing but `i`, as one loop
over the block's elements. Here L carries `acc` and X synchronises, so the block runs under the scheduler
(NOTE [CPU work-group execution]) and L gets yield points (NOTE [interleaved strided loops]): every thread runs 8
elements, saves its registers, and the next thread's turn begins. A turn is one chain of dependent adds, and the
turns do not overlap: the reduction of benchmarks/jit.py ran at 2x numba's sequential sum.

This pass finds such loops and brackets them with two yield points, F before and G after. A block whose threads
all stand at F (every thread has run its prologue; the scheduler checks the records at the start of a round) runs
the loop for all of them at once (jit/emit/cpu/lockstep.py):

    for (lo = c; lo < n; lo += stride)                     // c = ctaid.x * ntid.x
        for (t = 0; t < min(ntid.x, n - lo); ++t)          // vectorised: acc[t] is a field of the thread records
            { i = lo + t; acc[t] = acc[t] + x[i]; }

then sets every thread's `i` to its exit value and parks it at G, from where each thread goes on alone. Each
thread's values still see its own elements in its own order, so every float sum is bit for bit the one the thread
computes on its own; between threads any order is one a GPU may produce (L holds no synchronisation, no atomic and
no strong access). A block that does not qualify at run time (threads not all at F, a 2-D block, `i` not
c + tid.x, a range guard) resumes its threads at F and runs L the usual way.

Recognised, between F and G:
* the plain loop: pure instructions (the setup), then a one-block loop `{ C; i += s; @(i < n) bra }` with `s` and
  `n` not written in the loop. It is a do-while, entered by threads for which the prologue found i < n: the probe
  checks that i < n for every thread, and the thread then runs T = ceil((n - i) / s) iterations;
* the shape LLVM's runtime unroller gives it (NVVM, so numba-cuda and nvcc), with a prologue loop for the
  remainder:

      tm1 = <trip count - 1>                          // before F (its computation may branch)
      F: r = (tm1 + 1) & (U-1); @(r == 0) bra K       // the setup
      R: { C; i += s; r -= 1; @(r != 0) bra R }
      K: @(tm1 < U-1) bra X
      M: { C; C; ... (U copies); @(i < n) bra M }
      X: G

  The copies in M are proved to be U applications of R's C by symbolic evaluation: every register and memory
  access of both as hash-consed terms over the values at the loop head, compared for the iteration variable, the
  carried registers and the stores in order. The probe then checks tm1 = T - 1 for every thread, computing T
  itself: then R runs T mod U iterations and M (T - T mod U) / U rounds of U, T in all, in order. How tm1 was
  computed does not matter.

C holds only pure instructions and non-volatile loads and stores (no atomic, fence, call, barrier, collective or
.local access). The carried registers (read before written in C) must have the same value on both ways into the
loops, as must the registers C only reads; those must moreover be the same for every thread of the block (the
probe checks). The emitter also requires that every register live at G is carried, `i`, or left untouched since F.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from jit.analysis.liveness import defs_uses, innermost_loops
from jit.analysis.symbolic import Eval, Term, add_of, imm_of, invariant, op_of
from jit.passes.fused_loops import _PURE, _WIDTH, _touches_local
from jit.passes.sync_points import YIELD
from jit.ptx import ast as A

MAX_UNROLL = 16


@dataclass
class LockstepLoop:
    """What jit/emit/cpu/lockstep.py needs. ``setup`` is run after resuming at F (pure, no branch); ``body`` is
    one iteration C (including the step of ``iv``)."""

    enter: A.Instr  # the yield point F
    leave: A.Instr  # the yield point G
    setup: list[A.Instr]
    body: list[A.Instr]
    iv: str
    step: A.Operand
    bound: A.Operand | None  # None (epilogue shape): n is what the threads' trip counts say
    inclusive: bool
    width: int
    signed: bool
    carried: list[str]  # registers C reads before writing them and writes: one per thread, in the records
    invariants: list[str]  # registers C reads and never writes, besides iv, and n: the same in every thread
    written: set[str]  # every register written between F and G
    trip: str | None = None  # unrolled shape: the register holding the trip count - 1 at F
    unroll: int = 1
    early: bool = False  # nothing before F can matter to C run earlier (NOTE [lockstep block groups])


def _pure(ins: A.Instr) -> bool:
    return ins.opcode in _PURE and not ins.pred and not _touches_local(ins) and ins.opcode not in ("addc", "subc")


def _mem(ins: A.Instr) -> bool:
    """A plain load or store C may hold."""
    if ins.opcode not in ("ld", "st") or ins.pred or _touches_local(ins):
        return False
    strong = ins.has("volatile", "relaxed", "acquire", "release", "mmio", "cv")
    return not strong and not ins.has("shared", "param", "const") or ins.opcode == "ld" and ins.has("param", "const")


def _single_block(body: list[A.Stmt], h: int, j: int) -> list[A.Instr] | None:
    """The instructions of loop body[h..j] (label, straight-line body, `@p bra head`) without its back edge."""
    back = body[j]
    if not isinstance(body[h], A.Label) or not isinstance(back, A.Instr) or back.pred is None or back.pred_neg:
        return None
    instrs = body[h + 1 : j]
    if not all(isinstance(st, A.Instr) and (_pure(st) or _mem(st)) for st in instrs):
        return None
    return instrs  # type: ignore[return-value]


def _pure_run(body: list[A.Stmt], end: int) -> int:
    """Start of the run of pure instructions ending before ``end``."""
    k = end
    while k > 0 and isinstance(body[k - 1], A.Instr) and _pure(body[k - 1]):  # type: ignore[arg-type]
        k -= 1
    return k


def _cond_bra(st: A.Stmt) -> tuple[str, str] | None:
    """(predicate, target) of `@p bra target`."""
    if (
        isinstance(st, A.Instr)
        and st.opcode == "bra"
        and st.pred
        and not st.pred_neg
        and st.operands
        and isinstance(st.operands[0], A.Sym)
    ):
        return st.pred, st.operands[0].name
    return None


def _needed(instrs: list[A.Instr], outs: set[str]) -> list[A.Instr]:
    """The instructions that stores or the final values of ``outs`` depend on (a backward slice)."""
    want = set(outs)
    keep: list[A.Instr] = []
    for ins in reversed(instrs):
        d, u = defs_uses(ins)
        if ins.opcode == "st" or want & set(d):
            keep.append(ins)
            want -= set(d)
            want |= set(u)
    return keep[::-1]


def _exposed(instrs: list[A.Instr]) -> tuple[list[str], set[str]]:
    """(registers read before written, registers written)."""
    written: set[str] = set()
    exposed: list[str] = []
    for ins in instrs:
        d, u = defs_uses(ins)
        exposed += [r for r in u if r not in written and r not in exposed]
        written.update(d)
    return exposed, written


def _test(t: Term, iv_out: Term) -> tuple[Term, bool, int, bool] | None:
    """The loop test `iv_out < n` (or <=, or n > iv_out ...): (n, inclusive, width, signed)."""
    s = op_of(t, "setp")
    if s is None or len(s[1]) != 2:
        return None
    mods, (a, c) = s
    ty = next((m for m in mods if m in _WIDTH), None)
    cmp = next((m for m in mods if m in ("lt", "le", "gt", "ge")), None)
    if ty is None or cmp is None or any(m in ("and", "or", "xor") for m in mods):
        return None
    if cmp in ("lt", "le") and a == iv_out:
        n = c
    elif cmp in ("gt", "ge") and c == iv_out:
        n = a
    else:
        return None
    width, signed = _WIDTH[ty]
    return n, cmp in ("le", "ge"), width, signed


def _operand(t: Term) -> A.Operand:
    return A.Reg(t[1]) if t[0] == "in" else t[1]


@dataclass
class _Shape:
    """Where the pieces of one of the three shapes are: F goes at ``f``, G at ``g``; ``c_src`` is the loop (or the
    remainder loop) whose body is C; ``inner`` the labels only the region may jump to."""

    f: int
    g: int
    b0: list[A.Instr]  # pure, from F to the first branch
    pre: list[A.Instr]  # pure, after it, up to the first loop (the way the first loop is entered)
    c_src: list[A.Instr]
    inner: set[str]
    kind: str  # plain | prolog | epilogue
    other: list[A.Instr] | None = None  # the main loop M (unrolled shapes)
    mid: list[A.Instr] | None = None  # K, between the loops
    skips: tuple[str, str] | None = None  # predicates of the branch in B0 and of the one in K
    c_pred: str | None = None  # predicate of C's loop back edge
    m_pred: str | None = None  # predicate of M's back edge


def _loop_at(body: list[A.Stmt], loops: dict[int, int], j: int) -> tuple[int, list[A.Instr]] | None:
    """The one-block loop whose back edge is body[j]: (header index, its instructions)."""
    h = next((hh for hh, jj in loops.items() if jj == j), None)
    if h is None:
        return None
    got = _single_block(body, h, j)
    return None if got is None else (h, got)


def _before(body: list[A.Stmt], k: int, target: str | None = None) -> tuple[int, tuple[str, str]] | None:
    """body[..k) ends with pure instructions after `@p bra target`: (index of that branch, (p, target))."""
    s = _pure_run(body, k)
    cb = _cond_bra(body[s - 1]) if s > 0 else None
    if cb is None or target is not None and cb[1] != target:
        return None
    return s - 1, cb


def _shapes(body: list[A.Stmt], h: int, j: int, loops: dict[int, int]) -> list[_Shape]:
    """The shapes body[h..j] can end: as the plain loop, as M after R (prolog) or as R after M (epilogue)."""
    last = _single_block(body, h, j)
    if last is None:
        return []
    after = body[j + 1] if j + 1 < len(body) else None
    x_label = after.name if isinstance(after, A.Label) else None
    pred = body[j].pred  # type: ignore[union-attr]
    out: list[_Shape] = []
    k = _before(body, h, x_label) if x_label else None  # K: `@p bra X` just before the last loop
    kl = _pure_run(body, k[0]) - 1 if k is not None else -1
    if k is not None and kl >= 1 and isinstance(body[kl], A.Label):
        mid = body[kl + 1 : k[0]]
        first = _loop_at(body, loops, kl - 1)
        if first is not None:
            fh, f_instrs = first
            entry = _before(body, fh, body[kl].name)  # type: ignore[union-attr]
            if entry is not None:
                f = _pure_run(body, entry[0])
                b0, pre = body[f : entry[0]], body[entry[0] + 1 : fh]
                inner = {body[fh].name, body[kl].name, body[h].name}  # type: ignore[union-attr]
                skips = (entry[1][0], k[1][0])
                first_pred = body[kl - 1].pred  # type: ignore[union-attr]
                out.append(
                    _Shape(
                        f,
                        j + 1,
                        b0,
                        pre,
                        f_instrs,
                        inner,
                        "prolog",
                        last,
                        mid,
                        skips,  # type: ignore
                        first_pred,
                        pred,
                    )
                )
                out.append(
                    _Shape(
                        f,
                        j + 1,
                        b0,
                        pre,
                        last,
                        inner,
                        "epilogue",
                        f_instrs,
                        mid,
                        skips,  # type: ignore
                        pred,
                        first_pred,
                    )
                )
    f = _pure_run(body, h)
    out.append(
        _Shape(
            f,
            j + 1,
            body[f:h],
            [],
            last,
            {body[h].name},
            "plain",
            c_pred=pred,  # type: ignore
            m_pred=pred,
        )
    )
    return out


def _match(fn: A.Function, body: list[A.Stmt], sh: _Shape) -> LockstepLoop | None:
    for k, st in enumerate(body):  # nothing outside jumps into the region
        if isinstance(st, A.Instr) and st.opcode == "brx":
            return None
        if _target(st) in sh.inner and not sh.f <= k < sh.g:
            return None
    region = [st for st in body[sh.f : sh.g] if isinstance(st, A.Instr)]
    if any(st.opcode == "bra" and not _cond_bra(st) for st in region):
        return None
    written = {r for st in region for r in defs_uses(st)[0]}
    setup = sh.b0 + sh.pre
    ev = Eval().run(sh.c_src)
    counter = _counter(ev, sh.c_pred, 1) if sh.kind != "plain" else None
    if sh.kind != "plain" and counter is None:
        return None
    exposed, c_written = _exposed(sh.c_src)
    iv = n_term = None
    inclusive, width, signed = False, 0, False
    if sh.kind != "epilogue":  # the iteration variable: what the last loop's back edge compares
        mev = Eval().run(sh.other if sh.kind == "prolog" else sh.c_src)  # type: ignore[arg-type]
        for r in sorted(mev.state):
            cand = _test(mev.state.get(sh.m_pred), mev.state[r]) if sh.m_pred else None  # type: ignore[arg-type]
            if cand is not None and mev.state[r] != ("in", r):
                iv = r
                n_term, inclusive, width, signed = cand
                break
    else:  # the register stepped by an invariant that addresses memory (a count steps too, but addresses nothing)
        addr = {r for ins in sh.c_src if ins.opcode in ("ld", "st") for r in _address_regs(sh.c_src, ins)}
        cands = [
            r
            for r in exposed
            if r in addr
            and r != counter
            and (st := add_of(ev.state.get(r), ("in", r))) is not None
            and invariant(st, written)
        ]
        cands.sort(key=lambda r: imm_of(add_of(ev.state.get(r), ("in", r))) is not None)  # a register step first
        if cands and (ty := fn.regs.get(cands[0])) in _WIDTH:
            iv = cands[0]
            width, signed = _WIDTH[ty]  # type: ignore[index]
    if iv is None:
        return None
    step_t = add_of(ev.state.get(iv), ("in", iv))
    if step_t is None or not invariant(step_t, written) or n_term is not None and not invariant(n_term, written):
        return None
    if (ty := fn.regs.get(iv)) is None or ty not in _WIDTH or _WIDTH[ty][0] != width:
        return None
    carried = [r for r in exposed if r in c_written and r not in (iv, counter)]
    c_exec = _needed(sh.c_src, set(carried) | {iv})  # C: what iv, the carried registers and the stores need
    ex2, cw = _exposed(c_exec)
    if counter in ex2 or not all(r in cw for r in carried):
        return None
    invariants = [r for r in ex2 if r not in cw and r != iv]
    if isinstance(n_term, tuple) and n_term[0] == "in" and n_term[1] not in invariants:
        invariants.append(n_term[1])  # the fused loop's bound is thread 0's: every thread's must be the same
    set_by_setup = {r for st in setup for r in defs_uses(st)[0]}
    if any(r in written and r not in set_by_setup for r in invariants):
        return None
    trip, unroll = None, 1
    if sh.kind != "plain":
        got = _unrolled(sh, counter, [iv, *carried], invariants, written)  # type: ignore[arg-type]
        if got is None:
            return None
        trip, unroll = got
    return LockstepLoop(
        A.Instr(YIELD, [], []),
        A.Instr(YIELD, [], []),
        copy.deepcopy(setup),
        copy.deepcopy(c_exec),
        iv,
        _operand(step_t),
        _operand(n_term) if n_term is not None else None,
        inclusive,
        width,
        signed,
        carried,
        invariants,
        written,
        trip,
        unroll,
    )


def _address_regs(instrs: list[A.Instr], mem: A.Instr) -> set[str]:
    """Registers the address of ``mem`` is computed from (within ``instrs``, before it)."""
    k = instrs.index(mem)
    a = mem.operands[1] if mem.opcode == "ld" else mem.operands[0]
    todo = [a.base.name] if isinstance(a, A.Addr) and isinstance(a.base, A.Reg) else []
    seen: set[str] = set()
    while todo:
        r = todo.pop()
        if r in seen:
            continue
        seen.add(r)
        for ins in reversed(instrs[:k]):
            d, u = defs_uses(ins)
            if r in d:
                todo += u
                break
    return seen


def _target(st: A.Stmt) -> str | None:
    if isinstance(st, A.Instr) and st.opcode == "bra" and st.operands and isinstance(st.operands[0], A.Sym):
        return st.operands[0].name
    return None


def _counter(ev: Eval, pred: str | None, by: int) -> str | None:
    """The countdown register of a loop: `r -= by` (or `r += -by`) with the back edge taken while r != 0."""
    t = op_of(ev.state.get(pred), "setp") if pred else None  # type: ignore[arg-type]
    if t is None or "ne" not in t[0] or len(t[1]) != 2 or imm_of(t[1][1]) != 0:
        return None
    for r, v in ev.state.items():
        if v == t[1][0]:
            d = add_of(v, ("in", r))
            s = op_of(v, "sub")
            if d is not None and imm_of(d) == -by or s is not None and s[1][0] == ("in", r) and imm_of(s[1][1]) == by:
                return r
    return None


def _unrolled(
    sh: _Shape, counter: str, outs: list[str], invariants: list[str], written: set[str]
) -> tuple[str, int] | None:
    """Check the unrolled shapes of NOTE [lockstep grid-stride loops]: (the trip count - 1 register, U)."""
    assert sh.other is not None and sh.mid is not None and sh.skips is not None
    mev = Eval().run(sh.other)
    chain = Eval()
    unroll = 0
    while unroll < MAX_UNROLL:  # M = U copies of C
        chain.run(sh.c_src)
        unroll += 1
        if all(chain.state.get(r) == mev.state.get(r) for r in outs):
            break
    else:
        return None
    if unroll < 2 or unroll & (unroll - 1) or chain.effects != mev.effects:
        return None
    s_b0 = Eval().run(sh.b0)
    s_in = Eval().run(sh.b0 + sh.pre)  # entering the first loop
    # iv, the carried registers and the invariants have the same values whichever way the first loop is left
    if any(s_in.state.get(r, ("in", r)) != s_b0.state.get(r, ("in", r)) for r in [*outs, *invariants]):
        return None
    if not all(_pure(st) for st in sh.mid) or any(r in [*outs, *invariants] for st in sh.mid for r in defs_uses(st)[0]):
        return None
    r0 = s_b0.state.get(counter)  # the remainder count: (tm1 + 1) & (U-1)
    a = op_of(r0, "and") if r0 is not None else None
    if a is None or len(a[1]) != 2 or imm_of(a[1][1]) != unroll - 1:
        return None
    inc = op_of(a[1][0], "add")
    if inc is None or len(inc[1]) != 2 or imm_of(inc[1][1]) != 1 or inc[1][0][0] != "in":
        return None
    tm1 = inc[1][0][1]
    if tm1 in written:
        return None
    zero = ("op", A.Imm(0))
    small = ("in", tm1), ("op", A.Imm(unroll - 1))  # tm1 < U-1, unsigned: fewer than U iterations, no main loop

    def is_setp(t: Term, cmp: str, args: tuple[Term, Term], unsigned: bool = False) -> bool:
        p = op_of(t, "setp")
        return (
            p is not None
            and cmp in p[0]
            and p[1] == args
            and (not unsigned or any(m in ("u64", "u32", "b64", "b32") for m in p[0]))
        )

    kev = Eval().run(sh.mid)
    if sh.kind == "prolog":  # B0: @(r == 0) bra K; R; K: @(tm1 < U-1) bra X; M (tested on i < n)
        if counter in {r for st in sh.pre for r in defs_uses(st)[0]}:
            return None
        if not is_setp(s_b0.state.get(sh.skips[0]), "eq", (r0, zero)):
            return None
        if not is_setp(kev.state.get(sh.skips[1]), "lt", (small[0], small[1]), True):
            return None
        return tm1, unroll
    # epilogue: B0: @(tm1 < U-1) bra K; M counted down from T - r by U; K: @(r == 0) bra X; R
    if not is_setp(s_b0.state.get(sh.skips[0]), "lt", (small[0], small[1]), True):
        return None
    m_counter = _counter(mev, sh.m_pred, unroll)
    if m_counter is None or m_counter in outs:
        return None
    start = op_of(s_in.state.get(m_counter), "sub")  # T - r = (tm1 + 1) - r
    if start is None or start[1] != (a[1][0], r0):
        return None
    if counter in {r for st in [*sh.pre, *sh.other, *sh.mid] for r in defs_uses(st)[0]}:
        return None
    if not is_setp(kev.state.get(sh.skips[1]), "eq", (("in", counter), zero)):
        return None
    return tm1, unroll


def _runs_early(body: list[A.Stmt], f: int) -> bool:
    """Whether a block's run of C may be moved before everything the block does up to F: nothing there writes
    global memory or synchronises with other blocks (a store, atomic, reduction, fence or call), and F is in no
    loop, so that a block reaches F once."""
    pos = {st.name: i for i, st in enumerate(body) if isinstance(st, A.Label)}
    for k, st in enumerate(body):
        if not isinstance(st, A.Instr):
            continue
        if k < f and (
            st.opcode in ("atom", "red", "membar", "fence", "call", "cp", "mbarrier")
            or st.opcode == "st"
            and not st.has("shared", "local")
        ):
            return False
        t = _target(st)
        if t is not None and k >= f and pos.get(t, f + 1) <= f:
            return False
    return True


def plan(fn: A.Function) -> tuple[int, int, LockstepLoop] | None:
    body = fn.body or []
    if not fn.is_entry or fn.fused is not None or not body:
        return None
    pos = {st.name: i for i, st in enumerate(body) if isinstance(st, A.Label)}
    loops = dict(innermost_loops(body, pos))
    for h, j in sorted(loops.items(), key=lambda hj: hj[1]):
        for sh in _shapes(body, h, j, loops):
            got = _match(fn, body, sh)
            if got is not None:
                return sh.f, sh.g, got
    return None


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        got = plan(fn)
        if got is None:
            continue
        f, g, lp = got
        assert fn.body is not None
        lp.early = _runs_early(fn.body, f)
        fn.body[g:g] = [lp.leave]
        fn.body[f:f] = [lp.enter]
        fn.lockstep = lp
    return module
