"""The hypervisor: tenants, memory accounting against quotas and the device, and the hooks gpud calls.

gpud's server asks the hypervisor to admit a hello (token check), to reserve and release memory,
and what cuMemGetInfo answers; the session calls ``check_message`` ahead of every handler (which
wakes a sleeping tenant and breaks dedup sharing before a write, see NOTE [COW by the MMU]).
Everything here runs on gpud's I/O loop thread except ``reserve``/``release`` (also called from
stream workers by the torch face) and the dedup publish step, so the counters sit behind one lock.
"""

from __future__ import annotations

import hmac
import threading
import time
from typing import TYPE_CHECKING, Any

from gpud import log
from gpud.errors import CudaError, codes
from gpud.hypervisor.policy import HypervisorConfig
from gpud.hypervisor.tenants import ASLEEP, AWAKE, Tenant

if TYPE_CHECKING:
    from gpud.server import Server
    from gpud.session import Session


# Message kinds that touch nothing of the tenant's device state: they neither wake it nor count
# as activity (a heartbeat must not keep a tenant awake).
class Hypervisor:
    def __init__(self, server: Server, config: HypervisorConfig) -> None:
        from gpud.hypervisor.dedup import DedupEngine
        from gpud.hypervisor.scheduler import Scheduler
        from gpud.hypervisor.sleep import SleepManager

        self.server = server
        self.config = config
        self.lock = threading.RLock()
        self.tenants: dict[str, Tenant] = {}
        self.total = {b.ordinal: b.total_memory for b in server.backends}
        self.physical = {b.ordinal: 0 for b in server.backends}
        self.peak_physical = dict(self.physical)
        self.dedup = DedupEngine(self)
        self.sleep = SleepManager(self)
        self.scheduler = Scheduler(self, server.pool) if config.scheduler.enabled else None
        self.metrics: Any = None
        if config.metrics_port:
            from gpud.hypervisor.metrics import serve

            try:
                self.metrics = serve(self, config.metrics_addr, config.metrics_port)
            except OSError as exc:  # a taken port must not keep the device from serving
                log.warning("hv.metrics.unavailable", port=config.metrics_port, error=str(exc))
        self._next_idle_check = 0.0
        self._loop_thread: int | None = None  # gpud's I/O loop: the only thread that may sleep a tenant

    # ------------------------------------------------------------------ tenants and sessions
    def tenant(self, name: str) -> Tenant:
        t = self.tenants.get(name)
        if t is None:
            policy = self.config.policy(name)
            total = max(self.total.values())
            t = self.tenants[name] = Tenant(name=name, policy=policy, quota=policy.quota_bytes(total))
        return t

    def admit_admin(self, token: str) -> None:
        """Check an admin call's token (``list_sessions``): raises CUDA_ERROR_NOT_PERMITTED to refuse it."""
        need = self.config.admin_token
        if need:
            if not hmac.compare_digest(need.encode(), token.encode()):
                raise CudaError(
                    codes.NOT_PERMITTED, "wrong or missing admin token for an admin call (WOOLY_ADMIN_TOKEN)"
                )
        elif self.config.require_token:
            raise CudaError(
                codes.NOT_PERMITTED,
                "admin calls are off: this gpud requires tenant tokens and has no admin_token configured",
            )

    def admit(self, tenant: str, token: str, key_tenant: str | None = None) -> None:
        """Check a hello's tenant and token (or client key: ``key_tenant`` is the tenant the connection's key is bound
        to, '' for none, None where gpud binds no keys; NOTE [client keys]), and room for one more session (NOTE
        [bounded daemon state]); raises CUDA_ERROR_NOT_PERMITTED to refuse it."""
        lim = self.config.limits
        if len(self.server.sessions) >= lim.sessions:
            raise CudaError(codes.NOT_PERMITTED, f"gpud holds {lim.sessions} sessions, its limit (limits.sessions)")
        with self.lock:
            t = self.tenants.get(tenant)
            n = len(t.sessions) if t is not None else 0
        if n >= lim.sessions_per_tenant:
            raise CudaError(
                codes.NOT_PERMITTED, f"tenant {tenant!r} has {n} sessions, its limit (limits.sessions_per_tenant)"
            )
        self.authenticate(tenant, token, key_tenant)

    def authenticate(self, tenant: str, token: str, key_tenant: str | None = None) -> None:
        """The credential half of ``admit``: the tenant's token or client key (a moved session's client resuming it
        needs this, not room for another session)."""
        policy = self.config.tenants.get(tenant)
        if policy is None:
            if self.config.require_token:
                raise CudaError(codes.NOT_PERMITTED, f"tenant {tenant!r} is not known to this gpud")
            policy = self.config.policy(tenant)
        if key_tenant and key_tenant != tenant:
            raise CudaError(codes.NOT_PERMITTED, f"this client's key is bound to tenant {key_tenant!r}, not {tenant!r}")
        if key_tenant and key_tenant == tenant:
            return  # the handshake proved the key, and the key names the tenant
        if policy.keys and not policy.token:
            raise CudaError(
                codes.NOT_PERMITTED,
                f"tenant {tenant!r} takes sessions from its client keys only: connect "
                "over tcp with WOOLY_CLIENT_KEY set to one of them",
            )
        if (policy.token or self.config.require_token) and not hmac.compare_digest(
            policy.token.encode(), token.encode()
        ):
            raise CudaError(codes.NOT_PERMITTED, f"wrong or missing token for tenant {tenant!r}")

    def on_open(self, session: Session) -> None:
        self._loop_thread = threading.get_ident()
        with self.lock:
            t = self.tenant(session.info.tenant)
            t.sessions[session.id] = session
            t.sessions_total += 1
            t.last_active = time.monotonic()
            session.ext["hv.tenant"] = t
        if self.scheduler is not None:
            self.scheduler.attach(session, t)

    def on_close(self, session: Session) -> None:
        t: Tenant | None = session.ext.get("hv.tenant")
        if t is None:
            return
        self.dedup.release_session(session)
        self.sleep.forget_session(session)
        with self.lock:
            t.sessions.pop(session.id, None)
            if not t.sessions:
                if t.state == ASLEEP and t.slept_bytes == 0:
                    t.state = AWAKE
                if t.name not in self.config.tenants and t.used == 0:
                    # Ad-hoc tenants vanish with their last session; listed ones keep their figures.
                    self.tenants.pop(t.name, None)
                    if self.scheduler is not None:
                        self.scheduler.forget(t)

    # ------------------------------------------------------------------ memory
    def _set_physical(self, ordinal: int, value: int) -> None:
        self.physical[ordinal] = value
        if value > self.peak_physical[ordinal]:
            self.peak_physical[ordinal] = value

    def adjust_physical(self, ordinal: int, delta: int) -> None:
        with self.lock:
            self._set_physical(ordinal, self.physical[ordinal] + delta)

    def reserve(self, session: Session, size: int) -> None:
        t: Tenant = session.ext["hv.tenant"]
        dev = session.backend.ordinal
        total = self.total[dev]
        with self.lock:
            if t.used + size > t.quota:
                t.oom_refusals += 1
                raise CudaError(
                    codes.OUT_OF_MEMORY,
                    f"cannot allocate {size} bytes: tenant {t.name!r} uses {t.used} of its {t.quota} byte quota",
                )
            committed = self.committed(dev)
            limit = int(self.config.overcommit_ratio * total)
            if committed + size > limit:
                t.oom_refusals += 1
                raise CudaError(
                    codes.OUT_OF_MEMORY,
                    f"cannot allocate {size} bytes: the device's memory is committed ({committed} of {limit} bytes)",
                )
        if self.physical[dev] + size > total:
            self.make_room(t, dev, size)
        with self.lock:
            if self.physical[dev] + size > total:
                t.oom_refusals += 1
                raise CudaError(
                    codes.OUT_OF_MEMORY,
                    f"cannot allocate {size} bytes: {total - self.physical[dev]} of {total} bytes of device memory free",
                )
            t.used += size
            t.last_active = time.monotonic()
            self._set_physical(dev, self.physical[dev] + size)

    def release(self, session: Session, size: int) -> None:
        t: Tenant | None = session.ext.get("hv.tenant")
        dev = session.backend.ordinal
        with self.lock:
            if t is not None:
                t.used = max(0, t.used - size)
            self._set_physical(dev, self.physical[dev] - size)

    def committed(self, ordinal: int) -> int:
        """Memory handed out: resident on the device plus moved out by sleep (dedup'd bytes once)."""
        if len(self.total) == 1:
            return self.physical[ordinal] + sum(t.slept_bytes for t in self.tenants.values())
        # NOTE [session devices]: what slept from this device (a tenant's sessions may sit on several)
        return self.physical[ordinal] + sum(
            item.size
            for t in self.tenants.values()
            if t.slept_bytes
            for s in t.sessions.values()
            if s.backend.ordinal == ordinal
            for item in s.ext.get("hv.slept", ())
        )

    def make_room(self, requester: Tenant, ordinal: int, size: int) -> None:
        """Sleep idle lower-priority tenants until ``size`` bytes fit (priority-aware victim choice)."""
        if not requester.policy.overcommit or threading.get_ident() != self._loop_thread:
            # Only the I/O loop may put a tenant to sleep: there no message of the victim can run
            # meanwhile (NOTE [sleep]). Allocations made by stream workers (torch) do not displace.
            return
        victims = [
            t
            for t in self.tenants.values()
            if t is not requester and t.state == AWAKE and t.policy.sleepable and t.priority < requester.priority
        ]
        # Lowest priority first; among equals, the longest idle.
        victims.sort(key=lambda t: (t.priority, t.last_active))
        for v in victims:
            if self.physical[ordinal] + size <= self.total[ordinal]:
                return
            if self.sleep.sleep_tenant(v, reason=f"displaced by {requester.name}"):
                log.event("hv.displaced", victim=v.name, by=requester.name, need=size)

    def mem_info(self, session: Session) -> tuple[int, int]:
        """(free, total) as the tenant's virtual GPU reports them (NOTE [virtual GPU memory])."""
        t: Tenant = session.ext["hv.tenant"]
        dev = session.backend.ordinal
        total = self.total[dev]
        with self.lock:
            free = t.quota - t.used
            limit = int(self.config.overcommit_ratio * total)
            committed_free = limit - self.committed(dev)
            reclaimable = 0
            if t.policy.overcommit:
                reclaimable = sum(
                    self.sleep.resident_bytes(x)
                    for x in self.tenants.values()
                    if x is not t and x.state == AWAKE and x.policy.sleepable and x.priority < t.priority
                )
            physical_free = total - self.physical[dev] + reclaimable
            free = min(free, committed_free, physical_free)
        return max(0, free), t.quota

    # ------------------------------------------------------------------ per-message hook
    def check_message(self, session: Session, msg: Any, bulk: list[Any]) -> None:
        """Called by the session before every message's handler (batch members included): wakes a sleeping tenant,
        unshares deduplicated memory before a write, may refuse the message (CudaError)."""
        try:
            self.before_message(session, msg, bulk)
        except CudaError:
            raise
        except Exception as exc:  # noqa: BLE001 - client input must never take the daemon down
            raise CudaError(codes.UNKNOWN, f"hypervisor: {type(exc).__name__}: {exc}") from None

    def before_message(self, session: Session, msg: Any, bulk: list[Any]) -> None:
        if msg.passive:  # NOTE [wire schema]
            return
        t: Tenant | None = session.ext.get("hv.tenant")
        if t is None:
            return
        t.last_active = time.monotonic()
        if t.state == ASLEEP:
            self.sleep.wake_tenant(t)
        self.dedup.before_message(session, msg, bulk)

    def tick(self, now: float) -> None:
        """Periodic work on the I/O loop: idle-timeout sleeps."""
        if now < self._next_idle_check:
            return
        self._next_idle_check = now + self.config.idle_check_s
        for t in list(self.tenants.values()):
            timeout = t.policy.idle_timeout_s
            if timeout and t.state == AWAKE and t.sessions and t.policy.sleepable and now - t.last_active > timeout:
                self.sleep.sleep_tenant(t, reason="idle")

    # ------------------------------------------------------------------ description
    def capabilities(self) -> list[str]:
        caps = []
        if self.config.dedup.enabled:
            caps.append(f"dedup:{self.config.dedup.hash}:{self.config.dedup.chunk}")
        return caps

    def describe(self) -> dict[str, Any]:
        if self.scheduler is not None:
            self.scheduler.decay_recent()
        with self.lock:
            recent_total = sum(t.recent_ns for t in self.tenants.values())
            tenants = [t.describe(recent_total) for t in self.tenants.values()]
        pids = self.server.executors.pids()  # NOTE [executors]
        confined = self.server.executors.confinement()  # NOTE [executor sandbox]
        for t in tenants:
            t["executor_pid"] = pids.get(t["tenant"])
            t["executor_sandbox"] = confined.get(t["tenant"], [])
        out: dict[str, Any] = {
            "tenants": tenants,
            "physical": {str(k): v for k, v in self.physical.items()},
            "peak_physical": {str(k): v for k, v in self.peak_physical.items()},
            "dedup": self.dedup.describe(),
            "sleep": self.sleep.describe(),
        }
        if self.scheduler is not None:
            out["scheduler"] = self.scheduler.describe()
        return out

    def shutdown(self) -> None:
        self.sleep.close()
        if self.metrics is not None:
            try:
                self.metrics.shutdown()
            except Exception:  # noqa: BLE001
                pass
