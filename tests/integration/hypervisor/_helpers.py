"""Helpers for the hypervisor tests: a real gpud per test module, started with a config file."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from tests.conftest import Gpud, connect, start

# Tenants the scheduling tests contend with: weights 1 and 3, priorities 4 and 0.
TENANTS = """
[tenants.w1]
weight = 1

[tenants.w3]
weight = 3

[tenants.hi]
priority = 4

[tenants.lo]
priority = 0
"""


def start_with_config(toml: str, *extra: str, transport: str = "ipc") -> Gpud:
    fd, path = tempfile.mkstemp(suffix=".toml", prefix="wooly-hv-test-")
    with os.fdopen(fd, "w") as f:
        f.write(toml)
    return start(transport, extra_args=["--config", path, *extra])


def hv_state(driver: Any) -> dict[str, Any]:
    return driver.conn.call({"kind": "list_sessions"})[0]["hypervisor"]


def tenant_state(driver: Any, name: str) -> dict[str, Any] | None:
    for t in hv_state(driver)["tenants"]:
        if t["tenant"] == name:
            return t
    return None


def wait_for(pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def upload(d: Any, dst: int, data: bytes, stream: int = 0) -> None:
    """A host-to-device copy through the content-addressed path."""
    from shim.dedup import DedupUploader

    up = DedupUploader.from_capabilities(d.conn.server_capabilities)
    assert up is not None, "gpud does not advertise dedup"
    up.upload(d, dst, memoryview(data), stream, d.memcpy_htod)


__all__ = ["TENANTS", "connect", "hv_state", "start_with_config", "tenant_state", "upload", "wait_for"]


def saturate(
    endpoint: str,
    tenant: str,
    seconds: float,
    nbytes: int = 32 << 20,
    depth: int = 4,
    barrier: Any = None,
    out: Any = None,
) -> int:
    """Keep gpud busy with memsets for ``seconds``, always one batch queued ahead. Returns ops done."""
    d = connect(endpoint, tenant=tenant)
    p = d.mem_alloc(nbytes)
    evs = [d.event_create() for _ in range(4)]  # up to 3 batches queued ahead: stays backlogged
    d.ctx_synchronize()
    if barrier is not None:
        barrier.wait()  # every worker connected: start together
    deadline = time.monotonic() + seconds
    n = i = 0
    while time.monotonic() < deadline:
        for _ in range(depth):
            d.memset(p, n & 0xFF, 1, nbytes)
            n += 1
        d.event_record(evs[i % 4])
        i += 1
        if i > 3:
            d.event_synchronize(evs[i % 4])
    d.ctx_synchronize()
    d.conn.close()
    if out is not None:
        out.put((tenant, n))
    return n
