"""Prometheus metrics of a controller (``wooly controller --metrics-port``), read at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class _Collector(Collector):
    def __init__(self, ctl: Any) -> None:  # woolyhv.pool.controller.Controller, which imports this module
        self.ctl = ctl

    def collect(self) -> Iterator[Any]:
        c = self.ctl
        placements = CounterMetricFamily("wooly_pool_placements", "Placement requests by outcome", labels=["outcome"])
        for outcome in ("placed", "waited", "failed", "redirects", "conflicts"):
            placements.add_metric([outcome], c.stats[outcome])
        yield placements
        yield CounterMetricFamily("wooly_pool_requests", "Requests the controller answered", value=c.stats["requests"])
        yield GaugeMetricFamily("wooly_pool_waiting", "Placement requests waiting for room", value=len(c.pending))
        yield GaugeMetricFamily("wooly_pool_leader", "1 if this controller is the leader", value=int(c.is_leader))
        with c.view.lock:
            nodes = list(c.view.nodes.values())
        yield GaugeMetricFamily("wooly_pool_nodes", "Nodes in the pool", value=len(nodes))
        yield GaugeMetricFamily(
            "wooly_pool_nodes_cordoned", "Cordoned nodes", value=sum(v.cordon is not None for v in nodes)
        )
        free = GaugeMetricFamily("wooly_pool_free_bytes", "Placeable bytes per node", labels=["node"])
        for v in nodes[:5000]:
            free.add_metric([v.inv.node], max((v.free(d) for d in v.inv.devices), default=0))
        yield free
        lat = sorted(c.latency_ms[-1000:])
        q = GaugeMetricFamily(
            "wooly_pool_placement_latency_ms",
            "Placement latency over the last 1000 (decide + reserve)",
            labels=["quantile"],
        )
        for name, f in (("0.5", 0.5), ("0.99", 0.99)):
            q.add_metric([name], lat[min(len(lat) - 1, int(f * len(lat)))] if lat else 0.0)
        yield q


def serve(ctl: Any, port: int) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(_Collector(ctl))
    start_http_server(port, registry=registry)
    return registry
