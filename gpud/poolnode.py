"""gpud as a pool node (``wooly gpud --join etcd://HOST:2379``): the inventory snapshot its agent publishes.

The snapshot is built on gpud's I/O loop (``Server.serve_forever`` offers one every ``interval`` seconds) from the
same tables ``wooly ps`` reads; the agent thread (woolyhv/pool/agent.py, NOTE [node agent]) only ever sees the
finished dict. What goes in is NOTE [pool keys]'s ``Inventory``: devices with their physical use and the part no
reservation covers, tenants, sessions with the reservation each claimed, the device-busy fraction since the last
snapshot, and a sample of the dedup store (NOTE [content affinity] in woolyhv/pool/placement.py).
"""

from __future__ import annotations

import platform
import time
from typing import Any

from woolyhv.pool.placement import content_sample

MAX_SESSIONS = 256


def _arch(backend: Any) -> str:
    info = backend.info()
    if backend.kind == "amd":
        return (
            str(info.name).split()[-1]
            if str(info.name).startswith("gfx")
            else f"gfx{info.compute_capability[0]}{info.compute_capability[1]}"
        )
    return f"sm_{info.compute_capability[0]}{info.compute_capability[1]}"


_TARGETS = {"cpu": [f"llvm:{platform.machine()}"], "nvidia": ["ptx", "sass"], "amd": ["amdgcn"]}


class Snapshotter:
    def __init__(self, server: Any) -> None:  # gpud.server.Server (not imported: it imports this module)
        self.server = server
        self._last_ns = 0
        self._last_at = time.monotonic()

    def __call__(self) -> dict[str, Any]:
        srv = self.server
        hv = srv.hv
        sessions = list(srv.sessions.values())
        unreserved: dict[int, int] = {}
        rows = []
        for s in sessions:
            rid = s.ext.get("pool.reservation", "")
            row = {
                "session": s.id,
                "tenant": s.info.tenant,
                "memory": s.memory_used,
                "program": s.info.program[:200],
                "reservation": rid,
                "age_s": round(time.time() - s.info.created, 1),
                "moves": int(s.ext.get("moves", 0)),
            }
            policy = hv.tenant(s.info.tenant).policy.checkpoint  # NOTE [checkpoints]
            if policy is not None:
                row["checkpoint_s"] = policy.interval_s
                t = s.ext.get("ckpt")
                if t is not None and t.seq >= 0:
                    row["checkpoint"] = {
                        "at": round(t.at, 3),
                        "seq": t.seq,
                        "standby": (t.order or {}).get("target", ""),
                        "count": t.count,
                        "bytes": t.sent_bytes,
                        "pause_ms": t.pause_ms,
                    }
            rows.append(row)
        with hv.lock:
            tenants = {
                t.name: {"sessions": len(t.sessions), "memory": t.used, "shared": t.shared}
                for t in hv.tenants.values()
                if t.sessions or t.used
            }
            device_ns = sum(t.device_ns for t in hv.tenants.values())
            store = list(hv.dedup.store)
        now = time.monotonic()
        load = max(0.0, (device_ns - self._last_ns) / 1e9 / max(now - self._last_at, 1e-3) / len(srv.backends))
        self._last_ns, self._last_at = device_ns, now
        # memory not covered by a claimed reservation (the agent knows the sizes; here: sessions without one)
        for s in sessions:
            if not s.ext.get("pool.reservation"):
                unreserved[s.backend.ordinal] = unreserved.get(s.backend.ordinal, 0) + s.memory_used
        threshold, sample = content_sample(h.hex() for _, h, _ in store)
        devices = [
            {
                "ordinal": b.ordinal,
                "vendor": b.kind,
                "name": b.info().name,
                "arch": _arch(b),
                "total": b.total_memory,
                "used": hv.physical.get(b.ordinal, 0),
                "unreserved": unreserved.get(b.ordinal, 0),
                "jit_targets": _TARGETS.get(b.kind, []),
            }
            for b in srv.backends
        ]
        cfg = hv.config.dedup
        return {
            "version": _version(),
            "devices": devices,
            "tenants": tenants,
            "sessions": rows[:MAX_SESSIONS],
            "session_count": len(rows),
            "load": round(load, 3),
            "dedup": f"{cfg.hash}:{cfg.chunk}" if cfg.enabled else "",
            "content": sample,
            "content_threshold": threshold,
            "content_bytes": sum(length for _, _, length in store),
        }


def _version() -> str:
    import gpud

    return gpud.__version__
