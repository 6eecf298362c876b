"""Yield points: places where the CPU scheduler may switch from one thread of a block to the next. Two kinds of
loops get them: grid-stride loops, so that the threads of a block walk them together (NOTE [interleaved strided
loops]), and wait loops, so that a waiting thread lets the thread it waits for run (NOTE [waiting threads yield]).

NOTE [interleaved strided loops]
On the CPU the threads of a block run one after another (NOTE [CPU work-group execution] in jit/emit/cpu/__init__.py). For a
grid-stride loop (`for (i = ctaid*ntid + tid; i < n; i += ntid*nctaid)`) that order is the worst one for the
caches: consecutive threads read neighbouring elements, so one cache line serves 16 threads, but each thread first
walks the whole array with the grid as its stride (512 KiB for 131072 threads). That stride is a power of two as a
rule, so all of a thread's lines fall into one L1/L2 set and are evicted long before the next thread wants its
neighbouring element: every load misses to L3 (block reduction over 24M floats: 57 ms where numba's parallel
sequential sum takes 10).

This pass puts a *yield point* into such loops: every K iterations a thread parks (its live registers saved as at a
barrier) and the scheduler moves on to the next thread; the parked thread continues in the next round. A block then
advances through the array a few lines at a time with all its threads, and each line is read by its 16 threads
while it is still in L1 (the reduction: 57 -> 11 ms). A yield synchronises nothing: any interleaving of threads
between barriers is one a GPU may produce, and the scheduler resolves barriers and warp collectives only once no
thread is runnable (jit/emit/cpu/resolve.py), so what a program can observe is unchanged.

A loop qualifies when it is innermost (no other back edge inside it), holds no barrier or warp collective (those
already keep the block in lockstep), touches global memory, and carries a register that steps by a loop invariant
computed from %nctaid (`i += stride`, also through the chain of adds of an unrolled loop and numba's
`selp`-guarded range step). Block-stride loops (`i += ntid`) are left alone: their stride (1 KiB for 256 threads)
keeps a thread's lines in L2, and yields made a row reduction 15% slower. K is LINES_PER_YIELD divided by the
loop's global accesses per iteration, at least 1, so a thread touches about LINES_PER_YIELD lines between yields,
few enough to stay in one 8-way cache set (measured: 4 and 16 lines were slower for both the reduction and the
histogram of benchmarks/jit.py). A loop that runs fewer than K iterations never yields; the kernel still pays for
running under the scheduler (a full-grid grid-stride saxpy, one iteration per thread: 13% slower).

NOTE [waiting threads yield]
The same yield point, at every repetition, goes into wait loops: loops whose exit depends on a strong load
(`.volatile`, `.relaxed`, `.acquire`, `.cv`) or an atomic, or that back off with `nanosleep` or poll an mbarrier
(a flag set by another warp, a ticket, a CAS lock, `cuda::barrier`). The yield sits on the loop's back edge, so a
wait that is already over (a CAS that succeeds at once, as in CAS-emulated atomics) costs nothing. Without it a thread that waits for a thread of its
block that has not run yet spins forever: threads run one after another until they park, and the one it waits for
never gets its turn (a producer warp and a consumer warp synchronising through a shared-memory flag, without a
barrier). With it the waiting thread parks each time round and the others run. Waiting on another block is only guaranteed to end for blocks
that started earlier (blocks are claimed in order), as on a GPU, which does not promise that a later block ever
runs while an earlier one spins.

NOTE [implicit warp synchrony]
Code written for warps that run in lockstep (before Volta, and still what NVCC's output does for converged warps)
shares data between the lanes of a warp through memory with no barrier at all: CuPy's partition kernel has each
warp bitonic-sort its slice of global memory, lane i swapping the pairs of lane i's steps, every step reading what
the other lanes wrote in the step before; its only synchronisation is a `__any_sync`. Run thread after thread,
lane 0 did all its steps before lane 1 began, and `cupy.partition` of 20000 floats returned a wrong element
(CuPy's own tests found it). So a kernel with no block barrier that uses warp collectives or a warp-stride loop (a
loop adding 32 to a register: `for (j = lane; j < n; j += 32)`; CuPy's merge kernel has no collective) gets a
yield at the back edge of each loop that stores to global or shared memory, every time round: every lane runs one
iteration per round of the scheduler, the lanes of a warp step through their loops together, and a step's reads
see the previous step's writes of every lane, as on a GPU. (Lanes whose trip counts differ drift apart, as they
may on a GPU since Volta; code that needs more must use `__syncwarp`, a collective, which is exact here.) The
yields cost a register save per iteration, only in kernels of that shape.

Loops are not the only place where lanes hand each other data: the read of a sort's result right after its last
step (no back edge is taken on the way out), or a straight-line step (CuPy's argpartition merges the first k
indices with the next 32 lane by lane, then bitonic-sorts them, with nothing between). So in the same kernels a
load from global, shared or generic memory that a store or atomic may precede with no yield or collective in
between (a forward may-analysis over the control flow graph) gets a yield of its own, before it: every lane
finishes its writes before any lane reads. Inside a loop the back-edge yield already stands between an
iteration's stores and the next iteration's loads, so these yields fall between loops and after straight-line
steps, once per thread each time. Before them, `cupy.argpartition` of rows of 256 returned wrong indices.
"""

from __future__ import annotations

from jit.analysis.liveness import blocks, defs_uses, innermost_loops, successors
from jit.passes.sync_points import YIELD, sync_kind
from jit.ptx import ast as A

LINES_PER_YIELD = 8
_SPACES_LOCAL = ("shared", "param", "local", "const")
_MEM = ("ld", "ldu", "st", "atom", "red")
_COUNTER, _PRED = "%__wooly_yc", "%__wooly_yp"


def _grid_size_regs(fn: A.Function) -> set[str]:
    """Registers whose value depends on %nctaid (through any definition)."""
    deps: dict[str, set[str]] = {}
    direct: set[str] = set()
    for st in fn.body or []:
        if not isinstance(st, A.Instr):
            continue
        d, u = defs_uses(st)
        special = any(isinstance(o, A.Special) and o.name.startswith("nctaid") for o in st.operands)
        for r in d:
            if special:
                direct.add(r)
            deps.setdefault(r, set()).update(u)
    out = set(direct)
    changed = True
    while changed:
        changed = False
        for r, us in deps.items():
            if r not in out and us & out:
                out.add(r)
                changed = True
    return out


def _global_accesses(body: list[A.Stmt]) -> int:
    n = 0
    for st in body:
        if isinstance(st, A.Instr) and st.opcode in _MEM and not st.has(*_SPACES_LOCAL):
            n += 1
    return n


def _strided(loop: list[A.Stmt], grid: set[str]) -> bool:
    """Some loop-carried register steps by grid-size-derived loop invariants: `i += s` with s in ``grid`` and defined
    outside the loop, also through a chain of such adds (`i1 = i + s; i2 = i1 + s; i = i2 + s` of an unrolled
    loop)."""
    defs: dict[str, A.Instr] = {}
    first_def: dict[str, int] = {}
    first_use: dict[str, int] = {}
    multi: set[str] = set()  # defined more than once in the loop: not a simple induction step
    for k, st in enumerate(loop):
        if isinstance(st, A.Instr):
            d, u = defs_uses(st)
            for r in u:
                first_use.setdefault(r, k)
            for r in d:
                if r in defs:
                    multi.add(r)
                defs[r] = st
                first_def.setdefault(r, k)

    def invariant_step(o: A.Operand) -> bool:
        """A grid-size-derived loop invariant, or an in-loop `selp` of one and 0 (numba's range iterator)."""
        if not isinstance(o, A.Reg):
            return False
        if o.name not in defs:
            return o.name in grid
        ins = defs[o.name]
        return (
            ins.opcode == "selp"
            and o.name not in multi
            and len(ins.operands) == 4
            and any(isinstance(x, A.Reg) and x.name in grid and x.name not in defs for x in ins.operands[1:3])
        )

    def step(reg: str, start: str, depth: int) -> bool:
        ins = defs.get(reg)
        if ins is None or reg in multi or depth > 16:
            return False
        if ins.opcode == "mov" and len(ins.operands) == 2 and isinstance(ins.operands[1], A.Reg):
            x = ins.operands[1].name
            return x == start or step(x, start, depth + 1)
        if ins.opcode != "add" or len(ins.operands) != 3:
            return False
        a, c = ins.operands[1], ins.operands[2]
        for x, y in ((a, c), (c, a)):
            if isinstance(x, A.Reg) and invariant_step(y):
                if x.name == start or step(x.name, start, depth + 1):
                    return True
        return False

    carried = [r for r in defs if r in first_use and first_use[r] <= first_def[r]]
    return any(step(r, r, 0) for r in carried)


_STRONG_LOAD = ("volatile", "relaxed", "acquire", "sc", "cv")


def _waits(ins: A.Instr) -> bool:
    """An instruction whose result can change because another thread acts: a strong load or an atomic."""
    return ins.opcode in ("ld", "ldu") and ins.has(*_STRONG_LOAD) or ins.opcode == "atom"


def _spins(loop: list[A.Stmt], h: int, pos: dict[str, int]) -> bool:
    """A wait loop: a branch that leaves or repeats the loop depends, through the loop's own instructions, on a
    strong load or an atomic (`while (*(volatile int *)flag == 0);`, a CAS lock, `cuda::atomic_ref::load`), or
    the loop backs off with `nanosleep`."""
    defs: dict[str, list[A.Instr]] = {}
    preds: list[str] = []
    last = len(loop) - 1
    for k, st in enumerate(loop):
        if not isinstance(st, A.Instr):
            continue
        if st.opcode == "nanosleep" or st.opcode == "mbarrier" and st.has("test_wait", "try_wait"):
            return True  # backs off, or polls an mbarrier (NOTE [mbarrier], jit/lower/ops_mbarrier.py)
        for d in defs_uses(st)[0]:
            defs.setdefault(d, []).append(st)
        if st.opcode == "bra" and st.pred and st.operands and isinstance(st.operands[0], A.Sym):
            tgt = pos.get(st.operands[0].name)
            if k == last or tgt is None or not h <= tgt <= h + last:
                preds.append(st.pred)
    seen: set[str] = set()
    while preds:
        r = preds.pop()
        if r in seen:
            continue
        seen.add(r)
        for ins in defs.get(r, []):
            if _waits(ins):
                return True
            preds += defs_uses(ins)[1]
    return False


_STORES = ("st", "atom", "red")


def _warp_stride(loop: list[A.Stmt]) -> bool:
    """The loop adds the warp size to a register (`j += 32`, also as the chain of an unrolled loop): lanes sharing
    a loop's work."""
    return any(
        isinstance(st, A.Instr)
        and st.opcode == "add"
        and len(st.operands) == 3
        and isinstance(st.operands[2], A.Imm)
        and st.operands[2].value == 32
        for st in loop
    )


def _warp_synchronous(body: list[A.Stmt], loops: list[tuple[int, int]]) -> bool:
    """NOTE [implicit warp synchrony]: no block barrier, and warp collectives or a warp-stride loop."""
    kinds = {sync_kind(st) for st in body if isinstance(st, A.Instr)}
    if "bar" in kinds:
        return False
    return "warp" in kinds or any(_warp_stride(body[h : j + 1]) for h, j in loops)


def _back_edges(body: list[A.Stmt], pos: dict[str, int]) -> list[tuple[int, int]]:
    """(header, back edge) of every loop, inner and outer: a branch to a label at or before it."""
    out = []
    for j, st in enumerate(body):
        if isinstance(st, A.Instr) and st.opcode == "bra" and st.operands and isinstance(st.operands[0], A.Sym):
            h = pos.get(st.operands[0].name)
            if h is not None and h <= j:
                out.append((h, j))
    return out


def _stores_shared_or_global(loop: list[A.Stmt]) -> bool:
    return any(isinstance(st, A.Instr) and st.opcode in _STORES and not _private(st) for st in loop)


_LOADS = ("ld", "ldu")


def _private(ins: A.Instr) -> bool:
    """An access no other lane can see, or a constant."""
    return ins.has("param", "local", "const")


def _yield_before_shared_reads(body: list[A.Stmt]) -> list[int]:
    """NOTE [implicit warp synchrony]: the loads that a store or atomic to global, shared or generic memory may
    precede with no yield or collective in between, on some path; a yield before each of them (returned in
    increasing order) is the first on its paths, so it cleans them all."""
    bl, label_block, _ = blocks(body)
    succ = successors(bl, label_block, body)
    dirty_in = [False] * len(bl)
    inserts: set[int] = set()

    def walk(b: int, dirty: bool, record: bool) -> bool:
        for i in bl[b]:
            st = body[i]
            if not isinstance(st, A.Instr):
                continue
            if sync_kind(st):
                dirty = False
            elif st.opcode in _LOADS and not _private(st):
                if dirty:
                    if record:
                        inserts.add(i)
                    dirty = False
            elif st.opcode in _STORES and not _private(st):
                dirty = True
        return dirty

    work = list(range(len(bl)))
    while work:
        b = work.pop()
        out = walk(b, dirty_in[b], False)
        for s in succ[b]:
            if out and not dirty_in[s]:
                dirty_in[s] = True
                work.append(s)
    for b in range(len(bl)):
        walk(b, dirty_in[b], True)
    return sorted(inserts)


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        if fn.body is None or not fn.is_entry:
            continue
        body = fn.body
        grid: set[str] | None = None
        inserts: list[tuple[int, int]] = []  # (position, K): after a loop's header label, every K-th time round;
        #                                       K = 0: at its back edge, every time round (a wait loop)
        pos = {st.name: i for i, st in enumerate(body) if isinstance(st, A.Label)}
        loops = _back_edges(body, pos)
        lockstep = _warp_synchronous(body, loops)
        if lockstep:  # NOTE [implicit warp synchrony]
            inserts += [(j, 0) for h, j in loops if _stores_shared_or_global(body[h : j + 1])]
        for h, j in innermost_loops(body, pos):
            loop = body[h : j + 1]
            if any(isinstance(st, A.Instr) and sync_kind(st) for st in loop):
                continue
            if _spins(loop, h, pos):  # NOTE [waiting threads yield]
                inserts.append((j, 0))
                continue
            m = _global_accesses(loop)
            if not m:
                continue
            if grid is None:
                grid = _grid_size_regs(fn)
            if _strided(loop, grid):
                inserts.append((h + 1, max(1, LINES_PER_YIELD // m)))
        if not inserts and not lockstep:
            continue
        counted = any(k for _, k in inserts)
        if counted:
            fn.regs[_COUNTER] = "u32"
            fn.regs[_PRED] = "pred"
        c, p = A.Reg(_COUNTER), A.Reg(_PRED)
        for n, (at, k) in enumerate(sorted(set(inserts), reverse=True)):
            skip = f"$wooly_yield_skip{n}"
            if k == 0:  # before the back edge `[@p] bra head` of a wait loop: yield when it is taken
                br = body[at]
                assert isinstance(br, A.Instr)
                # nanosleep: the OS thread yields too, in cooperative launches (NOTE [grid sync], jit/emit/cpu/grid.py)
                wait = [A.Instr("nanosleep", ["u32"], [A.Imm(0)]), A.Instr(YIELD, [], [])]
                if br.pred is None:
                    body[at:at] = wait
                else:
                    body[at : at + 1] = [
                        A.Instr("bra", [], [A.Sym(skip)], br.pred, not br.pred_neg, br.line, br.col),
                        *wait,
                        A.Instr("bra", [], list(br.operands), None, False, br.line, br.col),
                        A.Label(skip),
                    ]
                continue
            body[at:at] = [  # counts down: `dec; jne` where counting up took `inc; cmp; jb`
                A.Instr("sub", ["u32"], [c, c, A.Imm(1)]),
                A.Instr("setp", ["ne", "u32"], [p, c, A.Imm(0)]),
                A.Instr("bra", [], [A.Sym(skip)], _PRED),
                A.Instr(YIELD, [], []),
                A.Instr("mov", ["u32"], [c, A.Imm(k)]),
                A.Label(skip),
            ]
        if counted:  # a loop shorter than its K never yields (the first one entered; later ones take the residue)
            body.insert(0, A.Instr("mov", ["u32"], [c, A.Imm(min(k for _, k in inserts if k))]))
        if lockstep:  # after the back-edge yields, which clean the loops' paths
            for at in reversed(_yield_before_shared_reads(body)):
                body.insert(at, A.Instr(YIELD, [], []))
    return module
