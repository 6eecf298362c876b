"""``wooly ps`` shows the tenants; gpud serves Prometheus metrics."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

from tests.conftest import free_port
from tests.integration.hypervisor._helpers import connect, start_with_config

MiB = 1 << 20


def test_ps_and_metrics():
    port = free_port()
    g = start_with_config('[tenants.alice]\nquota = "1GiB"\npriority = 3\nweight = 2\n', "--metrics-port", str(port))
    d = connect(g.endpoint, tenant="alice")
    try:
        p = d.mem_alloc(8 * MiB)
        d.memset(p, 1, 1, 8 * MiB)
        d.ctx_synchronize()
        out = subprocess.run([sys.executable, "-m", "woolyhv", "ps", "--server", g.endpoint], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        row = next(line for line in out.stdout.splitlines() if line.startswith("alice "))
        assert "8.0 MiB / 1.0 GiB" in row and "awake" in row
        assert "starvation" in out.stdout
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line and not line.startswith("#")}
        assert values['wooly_tenant_memory_used_bytes{tenant="alice"}'] == 8 * MiB
        assert 'wooly_tenant_priority{tenant="alice"} 3.0' in text
        assert "wooly_sched_starvation_max_seconds" in text
    finally:
        d.conn.close()
        g.stop()
