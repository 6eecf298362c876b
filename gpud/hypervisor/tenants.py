"""Tenants: the unit of policy. Every session belongs to exactly one tenant (named in its hello).

NOTE [virtual GPU memory]: a tenant sees a GPU whose total memory is its quota. Its *logical* use
is the sum of the sizes of everything it allocated (raw allocations, torch storages), whether the
bytes are private, shared through dedup, or asleep in host memory: that is what cuMemGetInfo
subtracts from the quota, so a framework sizing its caches from "free" never sees the number
change because of something another tenant did. The device's *physical* use is different: dedup'd
content counts once however many tenants map it, and slept memory does not count at all. Quotas
and the overcommit ratio are checked against logical use; device capacity against physical use.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpud.hypervisor.policy import TenantPolicy

if TYPE_CHECKING:
    from gpud.session import Session

AWAKE = "awake"
ASLEEP = "asleep"


ACCT_KEYS = ("rpcs", "batches", "bytes_in", "bytes_out", "launches", "jit_compiles", "jit_cache_hits", "jit_compile_s")


@dataclass
class Tenant:
    name: str
    policy: TenantPolicy
    quota: int  # bytes
    sessions: dict[str, Session] = field(default_factory=dict)
    used: int = 0  # logical bytes (NOTE [virtual GPU memory])
    shared: int = 0  # bytes of its allocations currently mapped from the dedup store
    state: str = AWAKE
    slept_bytes: int = 0  # bytes moved out while asleep
    last_active: float = field(default_factory=time.monotonic)
    sleeps: int = 0
    wakes: int = 0
    last_wake_s: float = 0.0
    last_sleep_s: float = 0.0
    oom_refusals: int = 0
    sessions_total: int = 0
    # scheduler figures (filled by the scheduler)
    device_ns: int = 0
    contended_ns: int = 0  # device time used while another tenant was waiting for the device
    recent_ns: float = 0.0  # exponentially decayed device time, for "share" in wooly ps
    max_wait_s: float = 0.0
    ops: int = 0
    # what a platform team bills and watches (wooly_tenant_*_total): calls, bytes over the wire and shared memory,
    # launches, JIT work charged to this tenant's module loads
    acct: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ACCT_KEYS, 0))
    core_share: Any = None  # spatial mode: its jit.cores.Share (NOTE [spatial sharing])

    @property
    def priority(self) -> int:
        return self.policy.priority

    @property
    def weight(self) -> float:
        return self.policy.weight

    def busy(self) -> bool:
        """True while any of its sessions has device work queued or running."""
        return any(s.engine.tails() for s in self.sessions.values())

    def describe(self, total_recent_ns: float) -> dict[str, Any]:
        return {
            "tenant": self.name,
            "sessions": len(self.sessions),
            "sessions_total": self.sessions_total,
            "memory_used": self.used,
            "memory_quota": self.quota,
            "shared_bytes": self.shared,
            "state": self.state,
            "slept_bytes": self.slept_bytes,
            "priority": self.priority,
            "weight": self.weight,
            "device_time_s": round(self.device_ns / 1e9, 6),
            "contended_time_s": round(self.contended_ns / 1e9, 6),
            "device_share": round(self.recent_ns / total_recent_ns, 4) if total_recent_ns > 0 else 0.0,
            "ops": self.ops,
            "accounting": {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.acct.items()},
            "max_wait_s": round(self.max_wait_s, 4),
            "sleeps": self.sleeps,
            "wakes": self.wakes,
            "last_wake_s": round(self.last_wake_s, 6),
            "oom_refusals": self.oom_refusals,
            "idle_s": round(time.monotonic() - self.last_active, 3),
            # spatial sharing: cores now, fractional share, core-seconds used, and the part of its busy time that
            # it ran at once with another tenant (its concurrency)
            **(
                {"cores": 0, "core_share": 0.0, "core_s": 0.0, "concurrency": 0.0}
                if self.core_share is None
                else {k: v for k, v in self.core_share.describe().items() if k != "busy_s"}
            ),
        }
