"""The device's cores divided among tenants, re-divided as they come and go (NOTE [spatial sharing]).

# NOTE [spatial sharing]
# On the CPU backend "the device" is the host's cores: a launch runs its blocks on up to one worker per core, and
# the workers claim blocks from the launch's counter (NOTE [CPU work-group execution], jit/emit/cpu.py). Tenants
# share the device spatially: the arbiter here gives each tenant with kernels running a number of cores, and each
# launch may run only that many workers. A worker reads its launch's allowance L[L_ALLOWED] before it claims the
# next chunk of blocks and leaves when its index W[W_INDEX] is not below it, so a re-division takes effect at the
# next block boundary, and nothing is ever interrupted inside a block. When an allowance grows, the arbiter starts
# the launch's idle workers (``Launch.grow``). A launch allowed no core waits (its launching thread sleeps) until it
# is given one.
#
# The division, recomputed whenever a launch starts or ends and on a 10 ms tick while tenants compete:
# 1. by priority class, highest first: a class's tenants get cores in proportion to their weights, each capped by
#    its demand (the workers its running launches can use); what a capped tenant leaves goes to the others of its
#    class (water filling), what the class leaves goes to the next class (work-conserving: an idle tenant's cores go
#    to the busy ones at once). A higher-priority tenant's launch therefore takes cores from lower ones at their
#    next block boundary;
# 2. shares are fractional (weights 3:1 on 2 cores are 1.5 : 0.5) and workers are whole, so each tick hands out
#    whole cores by largest remainder of (share + credit) and credits each tenant what it got less than its share:
#    over a few ticks every tenant gets its fraction of core-time, and a tenant whose share is below one core runs
#    on a whole core part of the time. Every tenant of the top class with work gets a core within a few ticks.
# Each tenant's figures (cores now, core-seconds used, and the time it ran while another tenant ran too: its
# concurrency) go to `wooly ps` and the metrics.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

TICK_S = 0.01


class Share:
    """One tenant's claim on the cores."""

    def __init__(self, arbiter: Arbiter, name: str, weight: float, priority: int) -> None:
        self.arbiter, self.name, self.weight, self.priority = arbiter, name, weight, priority
        self.launches: list[Any] = []  # jit.runtime launches of this tenant now running
        self.cores = 0  # whole cores now
        self.target = 0.0  # fractional share now
        self.credit = 0.0
        self.core_s = 0.0  # core-seconds its workers used
        self.busy_s = 0.0  # time it had kernels running
        self.together_s = 0.0  # ... while another tenant had too

    def describe(self) -> dict[str, Any]:
        return {"cores": self.cores, "core_share": round(self.target, 3), "core_s": round(self.core_s, 4),
                "busy_s": round(self.busy_s, 4), "concurrent_s": round(self.together_s, 4),
                "concurrency": round(self.together_s / self.busy_s, 4) if self.busy_s else 0.0}


class Arbiter:
    def __init__(self, cores: int) -> None:
        self.cores = max(1, cores)
        self.lock = threading.RLock()
        self.shares: dict[str, Share] = {}
        self._last = time.monotonic()
        self._ticker: threading.Thread | None = None
        self._wake = threading.Condition(self.lock)

    def share(self, name: str, weight: float = 1.0, priority: int = 2) -> Share:
        with self.lock:
            s = self.shares.get(name)
            if s is None:
                s = self.shares[name] = Share(self, name, weight, priority)
            s.weight, s.priority = max(weight, 1e-6), priority
            return s

    # -- launches come and go
    def enter(self, share: Share, launch: Any) -> None:
        with self.lock:
            self._account()
            share.launches.append(launch)
            self._divide()

    def leave(self, share: Share, launch: Any, core_s: float) -> None:
        with self.lock:
            self._account()
            share.core_s += core_s
            if launch in share.launches:
                share.launches.remove(launch)
            self._divide()

    # -- the division (see the NOTE)
    def _account(self) -> None:
        now = time.monotonic()
        dt, self._last = now - self._last, now
        active = [s for s in self.shares.values() if s.launches]
        for s in active:
            s.busy_s += dt
            if len(active) > 1:
                s.together_s += dt

    def _divide(self, tick: bool = False) -> None:
        """Recompute shares and whole cores; ``tick``: a tick's worth of time passed, so credits move on (a launch
        coming or going re-divides without moving them)."""
        active = [s for s in self.shares.values() if s.launches]
        for s in self.shares.values():
            if not s.launches:
                s.target, s.credit, s.cores = 0.0, 0.0, 0
        left = float(self.cores)
        for prio in sorted({s.priority for s in active}, reverse=True):
            cls = [s for s in active if s.priority == prio]
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
        # whole cores by largest remainder of (share + credit); credit carries the difference to the next tick
        want = {s.name: s.target + s.credit for s in active}
        cores = {s.name: min(int(math.floor(max(want[s.name], 0.0))), int(math.ceil(s.target))) for s in active}
        spare = self.cores - sum(cores.values())
        for s in sorted(active, key=lambda s: want[s.name] - cores[s.name], reverse=True):
            if spare <= 0:
                break
            if cores[s.name] < math.ceil(s.target) and s.target > 0:
                cores[s.name] += 1
                spare -= 1
        for s in active:
            s.cores = cores[s.name]
            if tick:
                s.credit = max(-1.0, min(1.0, want[s.name] - s.cores))
            self._apply(s)
        fractional = len(active) > 1 and any(abs(s.target - round(s.target)) > 1e-6 for s in active)
        if fractional:
            self._start_ticker()

    def _apply(self, s: Share) -> None:
        """Spread the tenant's cores over its launches (oldest first) and let them grow or shrink."""
        left = s.cores
        for lc in s.launches:
            n = min(lc.demand, left)
            left -= n
            lc.allow(n)

    def _start_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="wooly-jit-cores", daemon=True)
            self._ticker.start()
        self._wake.notify()

    def _tick(self) -> None:
        with self.lock:
            while True:
                active = [s for s in self.shares.values() if s.launches]
                if len(active) < 2:
                    self._wake.wait()
                    continue
                self._wake.wait(TICK_S)
                self._account()
                self._divide(tick=True)

    def describe(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            self._account()
            return {name: s.describe() for name, s in self.shares.items()}


_ARBITER: Arbiter | None = None


def arbiter() -> Arbiter:
    global _ARBITER
    if _ARBITER is None:
        from jit.runtime import _POOL_SIZE
        _ARBITER = Arbiter(_POOL_SIZE)
    return _ARBITER
