"""Prometheus metrics: a collector that reads the hypervisor's figures at scrape time.

Served on ``--metrics-port`` (config ``metrics_port``) by prometheus-client's HTTP server thread.
Scrapes read counters without stopping gpud's I/O loop; values may be a few microseconds apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gpud.hypervisor.core import Hypervisor


class _Collector(Collector):
    def __init__(self, hv: Hypervisor) -> None:
        self.hv = hv

    def collect(self) -> Iterator[Any]:
        hv = self.hv
        if hv.scheduler is not None:
            hv.scheduler.decay_recent()
        info = hv.describe()
        tl = ["tenant"]
        g = {
            "sessions": GaugeMetricFamily("wooly_tenant_sessions", "Live sessions of the tenant", labels=tl),
            "memory_used": GaugeMetricFamily(
                "wooly_tenant_memory_used_bytes", "Logical device memory in use", labels=tl
            ),
            "memory_quota": GaugeMetricFamily(
                "wooly_tenant_memory_quota_bytes", "Memory quota (virtual GPU total)", labels=tl
            ),
            "shared_bytes": GaugeMetricFamily(
                "wooly_tenant_shared_bytes", "Bytes mapped from the dedup store", labels=tl
            ),
            "slept_bytes": GaugeMetricFamily("wooly_tenant_slept_bytes", "Bytes moved out while asleep", labels=tl),
            "device_share": GaugeMetricFamily(
                "wooly_tenant_device_share", "Recent share of device time (0..1)", labels=tl
            ),
            "priority": GaugeMetricFamily("wooly_tenant_priority", "Scheduling priority (0..4)", labels=tl),
            "max_wait_s": GaugeMetricFamily("wooly_tenant_max_wait_seconds", "Longest wait for the device", labels=tl),
            "last_wake_s": GaugeMetricFamily("wooly_tenant_last_wake_seconds", "Duration of the last wake", labels=tl),
            "core_share": GaugeMetricFamily(
                "wooly_tenant_core_share", "Cores the tenant's share is now (spatial sharing)", labels=tl
            ),
            "concurrency": GaugeMetricFamily(
                "wooly_tenant_concurrency",
                "Part of its busy time the tenant ran at once with another (0..1)",
                labels=tl,
            ),
        }
        awake = GaugeMetricFamily("wooly_tenant_awake", "1 when awake, 0 when asleep", labels=tl)
        c: dict[str, CounterMetricFamily] = {
            "device_time_s": CounterMetricFamily("wooly_tenant_device_seconds", "Device time used", labels=tl),
            "contended_time_s": CounterMetricFamily(
                "wooly_tenant_contended_device_seconds", "Device time used while another tenant waited", labels=tl
            ),
            "ops": CounterMetricFamily("wooly_tenant_ops", "Device operations run", labels=tl),
            "core_s": CounterMetricFamily(
                "wooly_tenant_core_seconds", "Core-seconds its kernels and ops used", labels=tl
            ),
            "sleeps": CounterMetricFamily("wooly_tenant_sleeps", "Times put to sleep", labels=tl),
            "wakes": CounterMetricFamily("wooly_tenant_wakes", "Times woken", labels=tl),
            "oom_refusals": CounterMetricFamily("wooly_tenant_oom_refusals", "Allocations refused", labels=tl),
        }
        acct = {  # Tenant.acct: what a platform team bills and watches
            "rpcs": CounterMetricFamily(
                "wooly_tenant_rpcs", "Driver/ATen calls (each call of a batch counts)", labels=tl
            ),
            "batches": CounterMetricFamily("wooly_tenant_batches", "Batches of queued calls", labels=tl),
            "bytes_in": CounterMetricFamily(
                "wooly_tenant_bytes_in", "Bytes sent to gpud (frames and shared memory)", labels=tl
            ),
            "bytes_out": CounterMetricFamily("wooly_tenant_bytes_out", "Bytes sent back to the client", labels=tl),
            "launches": CounterMetricFamily("wooly_tenant_kernel_launches", "Kernel launches", labels=tl),
            "jit_compiles": CounterMetricFamily("wooly_tenant_jit_compiles", "PTX modules compiled for it", labels=tl),
            "jit_cache_hits": CounterMetricFamily(
                "wooly_tenant_jit_cache_hits", "PTX modules found compiled", labels=tl
            ),
            "jit_compile_s": CounterMetricFamily(
                "wooly_tenant_jit_compile_seconds", "Seconds of JIT compiles", labels=tl
            ),
        }
        for t in info["tenants"]:
            for key, fam in g.items():
                fam.add_metric([t["tenant"]], float(t[key]))
            for key, counter in c.items():
                counter.add_metric([t["tenant"]], float(t[key]))
            for key, total in acct.items():
                total.add_metric([t["tenant"]], float(t["accounting"].get(key, 0)))
            awake.add_metric([t["tenant"]], 1.0 if t["state"] == "awake" else 0.0)
        yield from g.values()
        yield awake
        yield from c.values()
        yield from acct.values()
        phys = GaugeMetricFamily("wooly_device_memory_used_bytes", "Physical device memory in use", labels=["device"])
        total = GaugeMetricFamily("wooly_device_memory_total_bytes", "Device memory", labels=["device"])  # type: ignore[assignment]
        for dev, v in info["physical"].items():
            phys.add_metric([dev], float(v))
            total.add_metric([dev], float(hv.total[int(dev)]))
        yield phys
        yield total
        d = info["dedup"]
        yield GaugeMetricFamily(
            "wooly_dedup_store_bytes", "Unique bytes held by the dedup store", value=d["store_bytes"]
        )
        yield GaugeMetricFamily("wooly_dedup_chunks", "Chunks in the dedup store", value=d["chunks"])
        yield CounterMetricFamily("wooly_dedup_hit_bytes", "Upload bytes found in the store", value=d["bytes_hit"])
        yield CounterMetricFamily("wooly_dedup_cow_bytes", "Shared bytes unshared by writes", value=d["bytes_cow"])
        s = info["sleep"]
        yield GaugeMetricFamily("wooly_sleep_host_bytes", "Slept memory in host RAM", value=s["host_used"])
        yield GaugeMetricFamily("wooly_sleep_spilled_bytes", "Slept memory in spill files", value=s["spilled"])
        sch = info.get("scheduler")
        if sch is not None:
            yield GaugeMetricFamily(
                "wooly_sched_starvation_max_seconds",
                "Longest wait of any ready work",
                value=sch["starvation_max_wait_s"],
            )
            yield GaugeMetricFamily(
                "wooly_sched_starvation_p99_seconds",
                "99th percentile wait of ready work",
                value=sch["starvation_p99_wait_s"],
            )
            yield GaugeMetricFamily("wooly_sched_waiting", "Ready work waiting for the device", value=sch["waiting"])
        st = dict(getattr(hv.server, "stats", {}))  # NOTE [migration], NOTE [checkpoints]
        for name, key, doc in (
            ("wooly_sessions_moved", "sessions_moved", "Sessions moved live to another node"),
            ("wooly_moved_bytes", "moved_bytes", "Bytes of session memory moved to other nodes"),
            ("wooly_move_pause_seconds", "move_pause_s", "Time moved sessions were held (sum of pauses)"),
            ("wooly_move_failures", "move_failures", "Moves that failed (the session stayed)"),
            ("wooly_checkpoints", "checkpoints", "Checkpoints written to standbys"),
            ("wooly_checkpoint_bytes", "checkpoint_bytes", "Changed bytes sent to standbys"),
            ("wooly_checkpoint_pause_seconds", "checkpoint_pause_s", "Time sessions were held for checkpoints"),
            ("wooly_checkpoint_failures", "checkpoint_failures", "Checkpoints not taken or not kept"),
            ("wooly_sessions_restored", "sessions_restored", "Sessions of a lost node restored here"),
        ):
            yield CounterMetricFamily(name, doc, value=float(st.get(key, 0)))
        standbys = getattr(hv.server, "standbys", None)
        yield GaugeMetricFamily(
            "wooly_standby_bytes",
            "Checkpoint bytes this node keeps for other nodes' sessions",
            value=float(sum(k.nbytes for k in list(standbys.kept.values())) if standbys else 0),
        )
        agent = getattr(hv.server, "pool_agent", None)
        if agent is not None:  # NOTE [node agent] (woolyhv/pool/agent.py)
            yield GaugeMetricFamily(
                "wooly_pool_node_joined", "1 while this gpud holds its pool lease", value=int(agent.joined.is_set())
            )
            yield CounterMetricFamily(
                "wooly_pool_node_errors", "etcd calls of the pool agent that failed", value=agent.errors
            )
            yield GaugeMetricFamily(
                "wooly_pool_node_pool_sessions",
                "Sessions that claimed a pool reservation",
                value=sum(1 for s in list(hv.server.sessions.values()) if s.ext.get("pool.reservation")),
            )


def serve(hv: Hypervisor, addr: str, port: int) -> Any:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(hv))
    result = start_http_server(port, addr=addr, registry=registry)
    return result[0] if isinstance(result, tuple) else result
