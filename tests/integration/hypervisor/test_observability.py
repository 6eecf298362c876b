"""``wooly ps`` shows the tenants; gpud serves Prometheus metrics."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

from tests.conftest import free_port
from tests.integration.hypervisor._helpers import connect, start_with_config
from tests.integration.test_kernels import POKE

MiB = 1 << 20


def scrape(port: int) -> tuple[str, dict[str, float]]:
    """gpud's /metrics: the text and {series{labels}: value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return text, {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def dashboard_series(*prefixes: str) -> set[str]:
    """The metric names containers/grafana/woolyhv.json's panels query, of the given prefixes."""
    import json
    import os
    import re

    from tests.conftest import ROOT

    with open(os.path.join(ROOT, "containers", "grafana", "woolyhv.json")) as f:
        dash = json.load(f)
    names = {n for p in dash["panels"] for t in p["targets"] for n in re.findall(r"wooly_[a-z_]+", t["expr"])}
    return {n for n in names if n.startswith(prefixes)}


def test_accounting_counts_calls_bytes_launches_and_jit_work():
    import struct

    port = free_port()
    g = start_with_config('[tenants.bob]\nquota = "1GiB"\n', "--metrics-port", str(port))
    d = connect(g.endpoint, tenant="bob")
    try:
        p = d.mem_alloc(4 * MiB)
        d.memcpy_htod(p, b"\1" * (3 * MiB))
        d.memcpy_dtoh(p, 2 * MiB)
        mod = d.module_load_data(POKE)
        fn = d.module_get_function(mod, "poke")
        for _ in range(5):
            d.launch_kernel(fn, (1, 1, 1), (1, 1, 1), fn.pack_params([struct.pack("<Q", p)]))
        d.ctx_synchronize()
        d.module_load_data(POKE)  # the same PTX again: found compiled
        v = scrape(port)[1]
        t = '{tenant="bob"}'
        assert v[f"wooly_tenant_kernel_launches_total{t}"] == 5
        assert v[f"wooly_tenant_bytes_in_total{t}"] >= 3 * MiB and v[f"wooly_tenant_bytes_out_total{t}"] >= 2 * MiB
        assert v[f"wooly_tenant_rpcs_total{t}"] >= 10 and v[f"wooly_tenant_batches_total{t}"] >= 1
        assert v[f"wooly_tenant_jit_compiles_total{t}"] + v[f"wooly_tenant_jit_cache_hits_total{t}"] == 2
        assert v[f"wooly_tenant_jit_cache_hits_total{t}"] >= 1
        # every gpud series the Grafana dashboard plots is one gpud exports
        exported = {k.split("{")[0] for k in v}
        assert dashboard_series("wooly_tenant_", "wooly_device_", "wooly_dedup_") <= exported
    finally:
        d.conn.close()
        g.stop()


def test_ps_and_metrics():
    port = free_port()
    g = start_with_config('[tenants.alice]\nquota = "1GiB"\npriority = 3\nweight = 2\n', "--metrics-port", str(port))
    d = connect(g.endpoint, tenant="alice")
    try:
        p = d.mem_alloc(8 * MiB)
        d.memset(p, 1, 1, 8 * MiB)
        d.ctx_synchronize()
        out = subprocess.run(
            [sys.executable, "-m", "woolyhv", "ps", "--server", g.endpoint], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        row = next(line for line in out.stdout.splitlines() if line.startswith("alice "))
        assert "8.0 MiB / 1.0 GiB" in row and "awake" in row
        assert "starvation" in out.stdout
        text, values = scrape(port)
        assert values['wooly_tenant_memory_used_bytes{tenant="alice"}'] == 8 * MiB
        assert 'wooly_tenant_priority{tenant="alice"} 3.0' in text
        assert "wooly_sched_starvation_max_seconds" in text
    finally:
        d.conn.close()
        g.stop()
