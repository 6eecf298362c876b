"""The device's cores divided among tenants, re-divided as they come and go (NOTE [spatial sharing]).

# NOTE [spatial sharing]
# On the CPU backend "the device" is the host's cores: a launch runs its blocks on up to one worker per core, and
# the workers claim blocks from the launch's counter (NOTE [CPU work-group execution], jit/emit/cpu/__init__.py). Tenants
# share the device spatially: the arbiter here gives each tenant with kernels running a number of cores, and each
# launch may run only that many workers. A worker reads its launch's allowance L[L_ALLOWED] before it claims the
# next chunk of blocks and leaves when its index W[W_INDEX] is not below it, so a re-division takes effect at the
# next block boundary, and nothing is ever interrupted inside a block (while tenants compete, workers claim one block
# at a time instead of a chunk). When an allowance grows, the arbiter starts the launch's idle workers. A launch
# allowed no core waits (its launching thread sleeps) until it is given one.
#
# Work arriving is divided at once (a newcomer's small kernel does not wait for a tick); work ending hands its cores
# to the others at the next tick, because the same tenant's next launch usually follows within microseconds.
#
# The division, recomputed whenever a launch starts or ends and on a 10 ms tick while tenants compete:
# 1. by effective priority class, highest first (a tenant's priority plus one level for every ``aging_s`` it has
#    waited with work and no core, so a low-priority tenant is never starved for good): a class's tenants get cores in proportion to their weights, each capped by
#    its demand (the workers its running launches can use); what a capped tenant leaves goes to the others of its
#    class (water filling), what the class leaves goes to the next class (work-conserving: an idle tenant's cores go
#    to the busy ones at once). A higher-priority tenant's launch therefore takes cores from lower ones at their
#    next block boundary;
# 2. shares are fractional (weights 3:1 on 2 cores are 1.5 : 0.5) and workers are whole, so each tick hands out
#    whole cores by largest remainder of (share + credit) and credits each tenant what it got less than its share:
#    over a few ticks every tenant gets its fraction of core-time, and a tenant whose share is below one core runs
#    on a whole core part of the time. Every tenant of the top class with work gets a core within a few ticks. Cores
#    left over go round again up to each share's ceiling, so a tenant alone runs on every core it can use whatever
#    credit it owes;
# 3. while another tenant has work, or had some within RECENT_S, workers claim one block at a time (a chunk claimed
#    while alone would hold a core for up to 64 blocks after the other tenant's next small launch arrives);
# 4. the tick is a clock, not an event: a launch ending does not wake it. A tenant's next launch follows its last
#    within microseconds, and re-dividing in that gap handed its cores to the others for the rest of the tick,
#    uncharged (measured: weights 3:1 gave 2.5:1; 2.8-2.9:1 since).
# 5. a tenant whose work ended less than RESERVE_S ago, of the busy tenants' (top effective) priority, keeps one core
#    free for its next launch: a tenant of small kernels spends most of its time between them, and a core handed
#    to another tenant's long kernel meanwhile came back only after that kernel's current block (measured: p99
#    launch-to-completion 7.6x its solo p99 beside a long kernel). The reserve costs at most RESERVE_S of one
#    core each time a tenant stops. Only between equals: a higher-priority tenant takes its cores back at the next
#    block boundary anyway (rule 1), and reserving for it would starve the lower ones in its gaps (aging, rule 1).
# Work that is not a kernel (a copy, a memset, an ATen op: one core's worth) goes through the same division as a
# launch that can use one worker (``Share.op``): it starts when its tenant has a core, and holds it until it ends.
# Each tenant's figures (cores now, core-seconds used, and the time it ran while another tenant ran too: its
# concurrency) go to `wooly ps` and the metrics.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TICK_S = 0.01
RECENT_S = 1.0  # a tenant that had work this recently still counts as a competitor (block-at-a-time claims)
RESERVE_S = 0.05  # a tenant whose work ended this recently keeps a core free for its next launch (rule 5)


class Share:
    """One tenant's claim on the cores."""

    def __init__(self, arbiter: Arbiter, name: str, weight: float, priority: int) -> None:
        self.arbiter, self.name, self.weight, self.priority = arbiter, name, weight, priority
        self.launches: list[Any] = []  # work of this tenant now running or waiting (launches, ops)
        self.cores = 0  # whole cores now
        self.target = 0.0  # fractional share now
        self.credit = 0.0  # core-ticks owed (see the NOTE)
        self.waiting_since: float | None = None  # had work and no core since (aging)
        self.core_s = 0.0  # core-seconds its work used
        self.alloc_s = 0.0  # core-seconds it was given
        self.busy_s = 0.0  # time it had work
        self.together_s = 0.0  # ... while another tenant had too
        self.last_work = -1e9  # monotonic time its last work ended

    @contextmanager
    def op(self) -> Iterator[None]:
        """Run one core's worth of work (a copy, an ATen op) when this tenant has a core (see the NOTE)."""
        w = _OneCore()
        self.arbiter.enter(self, w, quick=True)
        t = time.thread_time()
        try:
            w.wait(self.arbiter)
            yield
        finally:
            self.arbiter.leave(self, w, time.thread_time() - t)

    def describe(self) -> dict[str, Any]:
        return {
            "cores": self.cores,
            "core_share": round(self.target, 3),
            "core_s": round(self.core_s, 4),
            "given_s": round(self.alloc_s, 4),
            "busy_s": round(self.busy_s, 4),
            "concurrent_s": round(self.together_s, 4),
            "concurrency": round(self.together_s / self.busy_s, 4) if self.busy_s else 0.0,
        }


class _OneCore:
    """A unit of work that uses one core: runs while allowed one."""

    demand = 1
    __slots__ = ("allowed", "event")

    def __init__(self) -> None:
        self.allowed = 0
        self.event: threading.Event | None = None  # made only when it has to wait

    def allow(self, n: int, contended: bool = False) -> None:  # (under the arbiter's lock)
        self.allowed = n
        if n >= 1 and self.event is not None:
            self.event.set()

    def wait(self, arbiter: Arbiter) -> None:
        with arbiter.lock:
            if self.allowed >= 1:
                return
            self.event = threading.Event()
        while not self.event.wait(0.05):
            pass


class Arbiter:
    def __init__(self, cores: int, aging_s: float = 0.25) -> None:
        self.cores = max(1, cores)
        self.aging_s = aging_s
        self.lock = threading.RLock()
        self.shares: dict[str, Share] = {}
        self._last = time.monotonic()
        self._ticker: threading.Thread | None = None
        self._idle = False  # the ticker waits for work (rather than for its next tick)
        self._wake = threading.Condition(self.lock)

    def share(self, name: str, weight: float = 1.0, priority: int = 2) -> Share:
        with self.lock:
            s = self.shares.get(name)
            if s is None:
                s = self.shares[name] = Share(self, name, weight, priority)
            s.weight, s.priority = max(weight, 1e-6), priority
            return s

    # -- work comes and goes
    def enter(self, share: Share, launch: Any, quick: bool = False) -> None:
        """Work begins. ``quick`` (one core's worth): when no other tenant has work and this one has a core to spare
        there is nothing to divide, and the op just runs (a tenant alone pays ~3 us per op, not ~15)."""
        with self.lock:
            self._account()
            if quick:
                need = 1 + sum(lc.demand for lc in share.launches)
                if need <= self.cores and not any(o.launches for o in self.shares.values() if o is not share):
                    share.launches.append(launch)
                    share.cores = max(share.cores, need)
                    share.target = float(share.cores)
                    launch.allow(1)
                    return
            share.launches.append(launch)
            self._divide()

    def leave(self, share: Share, launch: Any, core_s: float) -> None:
        """Work ended. Its cores go to the others at the next tick, not at once: a tenant's next launch usually
        follows within microseconds, and growing another tenant's launch only to shrink it again at its next block
        boundary would hand it a chunk of blocks' worth of cores every time."""
        with self.lock:
            self._account()
            share.core_s += core_s
            share.last_work = time.monotonic()
            if launch in share.launches:
                share.launches.remove(launch)
            if not share.launches:
                share.target, share.cores = 0.0, 0
            if any(o.launches for o in self.shares.values()):
                self._start_ticker()  # the others get what it leaves at the next tick

    # -- the division (see the NOTE)
    def _account(self) -> None:
        now = time.monotonic()
        dt, self._last = now - self._last, now
        active = [s for s in self.shares.values() if s.launches]
        for s in active:
            s.busy_s += dt
            if len(active) > 1:
                s.together_s += dt
            # what it was owed over dt: its share less the whole cores it had
            s.credit = max(-2.0, min(2.0, s.credit + (s.target - s.cores) * dt / TICK_S))
            s.alloc_s += s.cores * dt

    def _effective(self, s: Share, now: float) -> int:
        if s.waiting_since is None:
            return s.priority
        return s.priority + int((now - s.waiting_since) / self.aging_s)

    def _divide(self) -> None:
        """Recompute the shares and hand out whole cores by (share + credit), largest remainder first."""
        now = time.monotonic()
        active = [s for s in self.shares.values() if s.launches]
        for s in self.shares.values():
            if not s.launches:  # (its credit stays: a tenant between two launches keeps what it is owed)
                s.target, s.cores, s.waiting_since = 0.0, 0, None
        eff = {s.name: self._effective(s, now) for s in active}
        # rule 5: a core stays free for each tenant between two launches (work ended within RESERVE_S) of the busy
        # tenants' (top) priority, so its next small kernel starts at once instead of after a block of another
        # tenant's long kernel; the rest stays work-conserving, and RESERVE_S later the core is used
        top = max(eff.values(), default=0)
        reserve = (
            min(
                self.cores - 1,
                sum(
                    1
                    for s in self.shares.values()
                    if not s.launches and now - s.last_work < RESERVE_S and s.priority == top
                ),
            )
            if active
            else 0
        )
        left = float(self.cores - max(reserve, 0))
        for prio in sorted(set(eff.values()), reverse=True):
            cls = [s for s in active if eff[s.name] == prio]
            demand = {s.name: float(sum(lc.demand for lc in s.launches)) for s in cls}
            open_ = list(cls)
            for s in cls:
                s.target = 0.0
            while open_ and left > 1e-9:  # water filling by weight, capped by demand
                w = sum(s.weight for s in open_)
                capped = [s for s in open_ if demand[s.name] - s.target <= left * s.weight / w]
                if not capped:
                    for s in open_:
                        s.target += left * s.weight / w
                    left = 0.0
                    break
                for s in capped:
                    give = demand[s.name] - s.target
                    s.target += give
                    left -= give
                    open_.remove(s)
        want = {s.name: s.target + s.credit for s in active}
        cores = {s.name: min(int(math.floor(max(want[s.name], 0.0))), int(math.ceil(s.target))) for s in active}
        spare = self.cores - sum(cores.values())
        while spare > 0:  # by largest remainder, one core a pass, up to each share's ceiling (a tenant alone that
            given = False  # owes credit still gets every core it can use)
            for s in sorted(active, key=lambda s: want[s.name] - cores[s.name], reverse=True):
                if spare > 0 and cores[s.name] < math.ceil(s.target):
                    cores[s.name] += 1
                    spare -= 1
                    given = True
            if not given:
                break
        # Contended while another tenant has work or had some within RECENT_S: its next launch is likely to come
        # while ours runs, and our workers must then be at most one block from handing a core over (a chunk of 64
        # blocks claimed while alone made a small kernel of the other tenant wait for all 64: p99 5.9x its solo).
        contended = sum(1 for o in self.shares.values() if o.launches or now - o.last_work < RECENT_S) > 1
        for s in active:
            s.cores = cores[s.name]
            if s.cores == 0:
                s.waiting_since = s.waiting_since or now
            else:
                s.waiting_since = None
            self._apply(s, contended)
        if len(active) > 1 or reserve > 0:
            self._start_ticker()

    def _apply(self, s: Share, contended: bool) -> None:
        """Spread the tenant's cores over its work (oldest first), so launches grow or shrink."""
        left = s.cores
        for lc in s.launches:
            n = min(lc.demand, left)
            left -= n
            lc.allow(n, contended)

    def _start_ticker(self) -> None:
        """Make sure the ticker runs. It is woken only from idleness: waking a ticking one would re-divide at once
        (a tenant between two launches would lose its cores to the others for the rest of the tick, uncharged:
        measured, weights 3:1 gave 2.5:1)."""
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="wooly-jit-cores", daemon=True)
            self._ticker.start()
        if self._idle:
            self._wake.notify()

    def _tick(self) -> None:
        with self.lock:
            while True:
                self._wake.wait(TICK_S)
                self._account()
                self._divide()
                if not any(s.launches for s in self.shares.values()):
                    self._idle = True
                    self._wake.wait()  # idle until work comes (enter/leave notify)
                    self._idle = False

    def describe(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            self._account()
            return {name: s.describe() for name, s in self.shares.items()}


_ARBITER: Arbiter | None = None


def arbiter() -> Arbiter:
    """The process's arbiter over the JIT's worker pool (one per process: the cores are the process's)."""
    global _ARBITER
    if _ARBITER is None:
        from jit.runtime import _POOL_SIZE

        _ARBITER = Arbiter(_POOL_SIZE)
    return _ARBITER
