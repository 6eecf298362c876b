"""The device scheduler: weighted fair sharing of device time between tenants, by priority, at op boundaries.

NOTE [scheduling]: every session's streams hand their drain loop to the scheduler (a "gate" on the
session's StreamEngine) instead of straight to the worker pool. The scheduler keeps a queue of
ready stream drains per tenant and time-slices the device between tenants the way a GPU
time-slices contexts: one tenant *holds* the device at a time and may run up to ``slots`` of its
streams concurrently (its streams overlap as CUDA promises); when another tenant is waiting, the
holder's streams stop at their next op boundary, and once the holder's running ops have finished
the device goes to the tenant picked by:

1. the highest *effective* priority: the tenant's priority (0..4) plus one level for every
   ``aging_s`` its oldest ready item has waited, so a low-priority tenant cannot starve: after
   at most ~(4 / 1) x aging_s it outranks everyone;
2. among equals, the lowest virtual time (device time / weight: weighted fair queueing). A tenant
   that was idle re-enters at the smallest virtual time among busy tenants, so idleness does not
   bank credit.

A running drain keeps going with its next op while no other tenant is waiting, so a lone tenant
pays no switching cost (work-conserving), and contending tenants interleave op by op. Device time
is charged per op; the starvation figure is the longest and the 99th percentile wait from "ready"
to "running".
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from gpud import log

if TYPE_CHECKING:
    from gpud.hypervisor.core import Hypervisor
    from gpud.hypervisor.tenants import Tenant
    from gpud.session import Session

_RECENT_TAU_S = 10.0  # time constant of the "recent device share" shown by wooly ps
_WAITS_KEPT = 20000


class TenantGate:
    """What a session's StreamEngine sees (``engine.gate``): submit a drain, run an op, charge it, yield?"""

    __slots__ = ("sched", "tenant", "share")

    def __init__(self, sched: Scheduler, tenant: Tenant, share: Any = None) -> None:
        self.sched = sched
        self.tenant = tenant
        self.share = share  # spatial mode: the tenant's jit.cores.Share (NOTE [spatial sharing])

    def submit(self, fn: Callable[[], Any]) -> None:
        if self.share is not None:  # spatial: streams of every tenant run at once, on their tenants' cores
            self.sched.submit_spatial(self.tenant, fn)
            return
        self.sched.submit(self.tenant, fn)

    def run(self, fn: Callable[[], Any]) -> None:
        """Run one op: a kernel launch takes its cores itself (``fn.spatial``), any other op one core's worth."""
        if self.share is None or getattr(fn, "spatial", False):
            fn()
            return
        with self.share.op():
            fn()

    def charge(self, ns: int) -> None:
        self.sched.charge(self.tenant, ns)

    def should_yield(self) -> bool:
        if self.share is not None:
            return False  # spatial: nobody holds the device; cores change hands between blocks and ops
        ready = self.sched.ready  # read without the lock: a stale answer costs one op of latency
        return len(ready) > (1 if self.tenant.name in ready else 0)


class Scheduler:
    def __init__(self, hv: Hypervisor, pool: ThreadPoolExecutor) -> None:
        self.hv = hv
        self.pool = pool
        self.slots = hv.config.scheduler.slots
        self.aging_s = hv.config.scheduler.aging_s
        # NOTE [spatial sharing] (jit/cores.py), where the device can be divided; time slicing elsewhere
        self.spatial = hv.config.scheduler.mode == "spatial" and all(b.divides_cores for b in hv.server.backends)
        self.lock = threading.Lock()
        self.ready: dict[str, deque[tuple[Callable[[], Any], float]]] = {}
        self.tenants: dict[str, Tenant] = {}
        self.vtime: dict[str, float] = {}
        self.outstanding: dict[str, int] = {}  # queued + running items per tenant
        self.waiting = 0  # items queued
        self.running = 0  # ops of the holder running now
        self.holder: str | None = None
        self.waits: deque[float] = deque(maxlen=_WAITS_KEPT)
        self.max_wait_s = 0.0
        self.dispatched = 0

    def attach(self, session: Session, tenant: Tenant) -> None:
        with self.lock:
            self.tenants[tenant.name] = tenant
            self.vtime.setdefault(tenant.name, 0.0)
        share = None
        if self.spatial:
            share = session.backend.new_share(tenant.name, tenant.weight, tenant.priority, self.aging_s)
            tenant.core_share = share
        session.engine.gate = TenantGate(self, tenant, share)

    def submit_spatial(self, tenant: Tenant, fn: Callable[[], Any]) -> None:
        """Spatial mode: the drain runs now; its ops wait for their tenant's cores (TenantGate.run)."""
        with self.lock:
            name = tenant.name
            self.tenants[name] = tenant
            self.outstanding[name] = self.outstanding.get(name, 0) + 1
            self.running += 1
            self.dispatched += 1
        self._start(name, fn)

    def _start(self, name: str, fn: Callable[[], Any]) -> bool:
        """Run a counted drain on the pool; False when gpud is stopping (the pool is shut down)."""
        try:
            self.pool.submit(self._run, name, fn)
            return True
        except RuntimeError:
            with self.lock:
                self.running -= 1
                self.outstanding[name] -= 1
            return False

    def forget(self, tenant: Tenant) -> None:
        """A tenant left for good: drop its bookkeeping once it has nothing queued or running."""
        with self.lock:
            if not self.outstanding.get(tenant.name):
                self.tenants.pop(tenant.name, None)
                self.vtime.pop(tenant.name, None)
                self.outstanding.pop(tenant.name, None)

    # ------------------------------------------------------------------ queueing
    def submit(self, tenant: Tenant, fn: Callable[[], Any]) -> None:
        now = time.monotonic()
        with self.lock:
            name = tenant.name
            self.tenants[name] = tenant
            self.vtime.setdefault(name, 0.0)
            if not self.outstanding.get(name):
                # Idle -> busy: re-enter at the busy tenants' virtual time (no credit for idleness).
                busy = [self.vtime[n] for n, k in self.outstanding.items() if k and n != name]
                if busy:
                    self.vtime[name] = max(self.vtime[name], min(busy))
            self.outstanding[name] = self.outstanding.get(name, 0) + 1
            q = self.ready.get(name)
            if q is None:
                q = self.ready[name] = deque()
            q.append((fn, now))
            self.waiting += 1
        self._dispatch()

    def _pick(self, now: float) -> str:
        best, best_key = "", (-math.inf, math.inf)
        for name, q in self.ready.items():
            t = self.tenants[name]
            aged = int((now - q[0][1]) / self.aging_s)
            key = (t.priority + aged, self.vtime[name])
            if key[0] > best_key[0] or (key[0] == best_key[0] and key[1] < best_key[1]):
                best, best_key = name, key
        return best

    def _dispatch(self) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                if self.running > 0:
                    # The holder may start more of its own streams, unless a switch is pending.
                    name = self.holder or ""
                    if self.running >= self.slots or name not in self.ready or len(self.ready) > 1:
                        return
                else:
                    if not self.ready:
                        self.holder = None
                        return
                    name = self.holder = self._pick(now)
                q = self.ready[name]
                fn, t_ready = q.popleft()
                if not q:
                    del self.ready[name]
                self.waiting -= 1
                self.running += 1
                self.dispatched += 1
                wait = now - t_ready
                self.waits.append(wait)
                t = self.tenants[name]
                if wait > t.max_wait_s:
                    t.max_wait_s = wait
                if wait > self.max_wait_s:
                    self.max_wait_s = wait
            if not self._start(name, fn):
                return

    def _run(self, name: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a drain never raises; if it does, keep the counts right
            log.warning("hv.sched.crash", error=f"{type(exc).__name__}: {exc}")
        finally:
            with self.lock:
                self.running -= 1
                self.outstanding[name] -= 1
            if not self.spatial:
                self._dispatch()

    def charge(self, tenant: Tenant, ns: int) -> None:
        with self.lock:
            tenant.device_ns += ns
            tenant.ops += 1
            self.vtime[tenant.name] += ns / tenant.weight
            if self.spatial:
                if any(k for n, k in self.outstanding.items() if n != tenant.name):
                    tenant.contended_ns += ns  # another tenant had work meanwhile
            elif len(self.ready) > (1 if tenant.name in self.ready else 0):
                tenant.contended_ns += ns  # another tenant was waiting: this time was a choice

    # ------------------------------------------------------------------ figures
    def decay_recent(self) -> None:
        """Fold device time charged since the last call into the decayed "recent" figure."""
        now = time.monotonic()
        with self.lock:
            for t in self.tenants.values():
                last_at, last_ns = getattr(t, "_recent_mark", (now, 0))
                t.recent_ns = t.recent_ns * math.exp(-(now - last_at) / _RECENT_TAU_S) + (t.device_ns - last_ns)
                t._recent_mark = (now, t.device_ns)  # type: ignore[attr-defined]

    def describe(self) -> dict[str, Any]:
        with self.lock:
            waits = sorted(self.waits)
        p99 = waits[min(len(waits) - 1, int(0.99 * len(waits)))] if waits else 0.0
        return {
            "mode": "spatial" if self.spatial else "timeslice",
            "slots": self.slots,
            "running": self.running,
            "waiting": self.waiting,
            "dispatched": self.dispatched,
            "starvation_max_wait_s": round(self.max_wait_s, 4),
            "starvation_p99_wait_s": round(p99, 4),
        }
