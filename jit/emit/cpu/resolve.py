"""Post-round resolution of the CPU scheduler: which parked threads may resume, warp collectives, barrier release
(see NOTE [CPU work-group execution] in jit/emit/cpu/__init__.py)."""

from __future__ import annotations

from llvmlite import ir

from jit.emit.abi import R_DONE, R_PARK, R_RPRED, R_RVAL, R_XMASK, R_XPRED
from jit.emit.cpu.env import EntryEnv
from jit.emit.cpu.loops import _Loop
from jit.emit.cpu.records import _i32
from jit.emit.cpu.warp import _Peer, _resolve_one, _signature
from jit.lower.core import FuncLowering
from jit.lower.types import I1, I32, I64
from jit.ptx import ast as A


def _warp_uniform(fl: FuncLowering, env: EntryEnv, peer: _Peer, wk: ir.Value) -> None:
    """wk[w] = the sync point every live lane of warp w is parked at, or -2 when they are not all at one point."""
    b = fl.b
    nw = b.lshr(b.add(env.nt32, _i32(31)), _i32(5))
    lw = _Loop(fl, nw, "wuni")
    cur = fl.ab.alloca(I32)
    b.store(_i32(-1), cur)
    ll = _Loop(fl, _i32(32), "wunil")
    j = b.add(b.shl(lw.i, _i32(5)), ll.i)
    yes = fl.block("wunil_in")
    b.cbranch(b.icmp_unsigned("<", j, env.nt32), yes, ll.latch)
    b.position_at_end(yes)
    pj = peer.field(j, R_PARK, I32)
    c = b.load(cur)
    live = b.icmp_signed("!=", pj, _i32(-1))
    nc = b.select(b.icmp_signed("==", c, _i32(-1)), pj, b.select(b.icmp_signed("==", c, pj), c, _i32(-2)))
    b.store(b.select(b.and_(live, b.icmp_signed("!=", c, _i32(-2))), nc, c), cur)
    ll.end()
    b.store(b.load(cur), b.gep(wk, [_i32(0), lw.i]))
    lw.end()


def _all_lanes_at(fl: FuncLowering, env: EntryEnv, peer: _Peer, t: ir.Value, k: ir.Value) -> ir.Value:
    """Every live lane of t's warp named in t's membermask is parked at k (a .sync collective may proceed)."""
    b = fl.b
    mm = peer.field(t, R_XMASK, I32)
    w0 = b.sub(t, b.and_(t, _i32(31)))
    ok = fl.ab.alloca(I1)
    b.store(ir.Constant(I1, 1), ok)
    lp = _Loop(fl, _i32(32), "ready")
    j = b.add(w0, lp.i)
    inb = b.and_(b.icmp_unsigned("<", j, env.nt32), b.trunc(b.lshr(mm, lp.i), I1))
    yes = fl.block("ready_in")
    b.cbranch(inb, yes, lp.latch)
    b.position_at_end(yes)
    pj = peer.field(j, R_PARK, I32)
    good = b.or_(b.icmp_signed("==", pj, k), b.icmp_signed("==", pj, _i32(-1)))
    b.store(b.and_(b.load(ok), good), ok)
    lp.end()
    return b.load(ok)


def _release_all(fl: FuncLowering, env: EntryEnv, peer: _Peer) -> ir.Value:
    """Resolution for kernels whose only sync points are plain barriers: after a round every live thread is parked at
    some barrier (park > 0) or has exited (park = -1), so the release is `park = park > 0 ? 0 : park` for all
    threads, a loop LLVM vectorises (the records are field arrays, NOTE [thread records]). Returns 'run another
    round': whether anybody was released."""
    b = fl.b
    hi = fl.ab.alloca(I32, name="park_max")
    b.store(_i32(0), hi)
    lp = _Loop(fl, env.nt32, "rel")
    p = peer.field(lp.i, R_PARK, I32)
    peer.store(lp.i, R_PARK, b.select(b.icmp_signed(">", p, _i32(0)), _i32(0), p))
    cur = b.load(hi)
    b.store(b.select(b.icmp_signed(">", p, cur), p, cur), hi)
    lp.end()
    return b.icmp_signed(">", b.load(hi), _i32(0))


def _any_runnable(fl: FuncLowering, env: EntryEnv, peer: _Peer) -> ir.Value:
    """Some thread is runnable after the round (park 0: it stopped at a yield point); a vectorisable loop."""
    b = fl.b
    acc = fl.ab.alloca(I32, name="runnable")
    b.store(_i32(0), acc)
    lp = _Loop(fl, env.nt32, "yld")
    p = peer.field(lp.i, R_PARK, I32)
    b.store(b.or_(b.load(acc), b.zext(b.icmp_signed("==", p, _i32(0)), I32)), acc)
    lp.end()
    return b.icmp_unsigned("!=", b.load(acc), _i32(0))


def resolve(fl: FuncLowering, env: EntryEnv) -> ir.Value:
    """Emit the post-round resolution; returns an i1 'run another round'.

    With yield points (NOTE [interleaved strided loops]) nothing is resolved while any thread is still runnable:
    barriers and collectives are only looked at once every live thread is parked at one of them, exactly as
    without yields, so the yields change the order threads run in and nothing else."""
    if not env.yields:
        return _resolve(fl, env)
    b = fl.b
    run = _any_runnable(fl, env, _Peer(fl, env))
    if all(sp.kind == "yield" for sp in env.fn.sync_points.values()):
        return run  # nothing to resolve: another round while anybody is runnable
    again = fl.ab.alloca(I1, name="again_y")
    b.store(ir.Constant(I1, 1), again)
    parked = fl.block("resolve_parked")
    done = fl.block("resolve_done")
    b.cbranch(run, done, parked)
    b.position_at_end(parked)
    b.store(_resolve(fl, env), again)
    b.branch(done)
    b.position_at_end(done)
    return b.load(again)


def _cases(
    fl: FuncLowering, sw: ir.Instruction, warp: list[A.SyncPoint], prefix: str
) -> list[tuple[list[A.SyncPoint], ir.Block]]:
    """One block per kind of collective (sync points whose instructions share a _signature share its resolution
    code: compile time), each a case of ``sw`` for all its sync points."""
    groups: dict[tuple[str, ...], list[A.SyncPoint]] = {}
    for sp in warp:
        groups.setdefault(_signature(sp.instr), []).append(sp)
    out = []
    for sps in groups.values():
        blk = fl.block(f"{prefix}{sps[0].id}")
        for sp in sps:
            sw.add_case(_i32(sp.id), blk)  # type: ignore[attr-defined]
        out.append((sps, blk))
    return out


def _uniform_collectives(
    fl: FuncLowering,
    env: EntryEnv,
    peer: _Peer,
    warp: list[A.SyncPoint],
    flag: ir.Value,
    end: ir.Block,
    general: ir.Block,
) -> None:
    """When every thread of the block is parked at the same warp collective (the steps of a shuffle reduction), every
    lane of every warp has arrived: resolve it for all threads in one loop with no per-thread dispatch or warp
    check, then make them all runnable. Otherwise branch to ``general``."""
    b = fl.b
    p0 = peer.field(_i32(0), R_PARK, I32)
    diff = fl.ab.alloca(I32, name="parkdiff")
    b.store(_i32(0), diff)
    lc = _Loop(fl, env.nt32, "wsame")
    b.store(b.or_(b.load(diff), b.xor(peer.field(lc.i, R_PARK, I32), p0)), diff)
    lc.end()
    sw = b.switch(b.select(b.icmp_unsigned("==", b.load(diff), _i32(0)), p0, _i32(0)), general)
    for sps, blk in _cases(fl, sw, warp, "wall"):  # one loop per kind of collective (a reduction: 8 alike shuffles)
        b.position_at_end(blk)
        lp = _Loop(fl, env.nt32, f"wall{sps[0].id}")
        _resolve_one(fl, env, peer, lp.i, sps[0], p0)
        lp.end()
        lu = _Loop(fl, env.nt32, f"wallrun{sps[0].id}")  # only now: _resolve_one reads the lanes' park states
        peer.store(lu.i, R_PARK, _i32(0))
        lu.end()
        b.store(ir.Constant(I1, 1), flag)
        b.branch(end)


def _resolve(fl: FuncLowering, env: EntryEnv) -> ir.Value:
    """The resolution proper, when every live thread is parked at a barrier or collective.

    A warp collective resolves once every live lane of its membermask is parked at it (activemask: at once);
    otherwise barrier waiters are released; if neither makes progress, blocked collectives resolve with the
    lanes that did arrive (divergent code that could never converge; on a GPU that is undefined)."""
    b = fl.b
    peer = _Peer(fl, env)
    if env.barrier_only:
        return _release_all(fl, env, peer)
    flag = fl.ab.alloca(I1, name="again")
    b.store(ir.Constant(I1, 0), flag)
    warp = [sp for sp in env.fn.sync_points.values() if sp.kind == "warp"]
    bars = [sp for sp in env.fn.sync_points.values() if sp.kind == "bar"]
    end = fl.block("resolve_end")
    release = fl.block("bar_release")
    if warp:
        force = fl.ab.alloca(I1, name="force")
        blocked = fl.ab.alloca(I1, name="blocked")
        wk = fl.ab.alloca(ir.ArrayType(I32, 32), name="wk")
        b.store(ir.Constant(I1, 0), force)
        wstart = fl.block("wstart")
        _uniform_collectives(fl, env, peer, warp, flag, end, wstart)
        b.position_at_end(wstart)
        b.store(ir.Constant(I1, 0), blocked)
        _warp_uniform(fl, env, peer, wk)
        lp = _Loop(fl, env.nt32, "wres")
        park = peer.field(lp.i, R_PARK, I32)
        sw = b.switch(park, lp.latch)
        for sps, blk in _cases(fl, sw, warp, "wres"):
            b.position_at_end(blk)
            do = fl.block(f"wdo{sps[0].id}")
            if sps[0].instr.opcode != "activemask":
                uni = b.icmp_signed("==", b.load(b.gep(wk, [_i32(0), b.lshr(lp.i, _i32(5))])), park)
                fast = b.or_(uni, b.load(force))
                check = fl.block(f"wchk{sps[0].id}")
                b.cbranch(fast, do, check)
                b.position_at_end(check)
                ready = _all_lanes_at(fl, env, peer, lp.i, park)
                wait = fl.block(f"wwait{sps[0].id}")
                b.cbranch(ready, do, wait)
                b.position_at_end(wait)
                b.store(ir.Constant(I1, 1), blocked)
                b.branch(lp.latch)
            else:
                b.branch(do)
            b.position_at_end(do)
            _resolve_one(fl, env, peer, lp.i, sps[0], park)
            peer.store(lp.i, R_DONE, _i32(1))
            b.store(ir.Constant(I1, 1), flag)
            b.branch(lp.latch)
        b.position_at_end(lp.body)  # (switch already terminates body)
        lp.end()
        unpark = fl.block("wunpark")
        b.cbranch(b.load(flag), unpark, release)
        b.position_at_end(unpark)
        # resolved threads become runnable. Stores without a branch: the loop then vectorises without masked
        # stores (NOTE [masked vectors] in jit/emit/cpu/loops.py)
        lu = _Loop(fl, env.nt32, "wun")
        done = peer.field(lu.i, R_DONE, I32)
        was = peer.field(lu.i, R_PARK, I32)
        peer.store(lu.i, R_PARK, b.select(b.icmp_unsigned("!=", done, _i32(0)), _i32(0), was))
        peer.store(lu.i, R_DONE, _i32(0))
        lu.end()
        b.branch(end)
    else:
        b.branch(release)
    b.position_at_end(release)
    reds = [sp.id for sp in bars if sp.instr.has("red")]
    cnt = andv = orv = None
    if reds:  # bar.red: popc / and / or of the predicates of every thread arriving at the barrier
        acc = [fl.ab.alloca(I32) for _ in range(3)]
        for a, v in zip(acc, (0, 1, 0), strict=True):
            b.store(_i32(v), a)
        lr = _Loop(fl, env.nt32, "redc")
        park = peer.field(lr.i, R_PARK, I32)
        is_red = b.icmp_unsigned("==", park, _i32(reds[0]))
        for k in reds[1:]:
            is_red = b.or_(is_red, b.icmp_unsigned("==", park, _i32(k)))
        pv = b.select(is_red, b.and_(peer.field(lr.i, R_XPRED, I32), _i32(1)), _i32(0))
        b.store(b.add(b.load(acc[0]), pv), acc[0])
        b.store(b.and_(b.load(acc[1]), b.select(is_red, pv, _i32(1))), acc[1])
        b.store(b.or_(b.load(acc[2]), pv), acc[2])
        lr.end()
        cnt, andv, orv = (b.load(a) for a in acc)
    if bars and cnt is None:  # barrier waiters become runnable, without a branch (see "wun" above)
        lb = _Loop(fl, env.nt32, "rel")
        park = peer.field(lb.i, R_PARK, I32)
        waits = b.icmp_unsigned("==", park, _i32(bars[0].id))
        for sp in bars[1:]:
            waits = b.or_(waits, b.icmp_unsigned("==", park, _i32(sp.id)))
        peer.store(lb.i, R_PARK, b.select(waits, _i32(0), park))
        b.store(b.or_(b.load(flag), waits), flag)
        lb.end()
    elif bars:
        lb = _Loop(fl, env.nt32, "rel")
        park = peer.field(lb.i, R_PARK, I32)
        yes = fl.block("rel_yes")
        swb = b.switch(park, lb.latch)
        for sp in bars:
            swb.add_case(_i32(sp.id), yes)
        b.position_at_end(yes)
        peer.store(lb.i, R_PARK, _i32(0))
        if cnt is not None:
            peer.store(lb.i, R_RVAL, b.zext(cnt, I64))
            peer.store(lb.i, R_RPRED, b.or_(andv, b.shl(orv, _i32(1))))
        b.store(ir.Constant(I1, 1), flag)
        b.branch(lb.latch)
        b.position_at_end(lb.body)
        lb.end()
    if warp:  # nothing moved but collectives are blocked: resolve them with the lanes that arrived
        stuck = b.and_(b.not_(b.load(flag)), b.and_(b.load(blocked), b.not_(b.load(force))))
        retry = fl.block("wforce")
        b.cbranch(stuck, retry, end)
        b.position_at_end(retry)
        b.store(ir.Constant(I1, 1), force)
        b.branch(wstart)
    else:
        b.branch(end)
    b.position_at_end(end)
    return b.load(flag)
