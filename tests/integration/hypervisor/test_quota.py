"""Quotas, the virtual GPU's memory figures, tokens and overcommit, against a real gpud."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from proto.errors import CudaError
from tests.integration.hypervisor._helpers import connect, hv_state, start_with_config, tenant_state

MiB = 1 << 20

CONFIG = """
[hypervisor]
overcommit_ratio = 1.0

[tenants.small]
quota = "64MiB"

[tenants.half]
quota = 0.5

[tenants.secret]
quota = "16MiB"
token = "open-sesame"
"""


@pytest.fixture(scope="module")
def gpud():
    g = start_with_config(CONFIG, "--cpu-memory", str(512 * MiB))
    yield g
    g.stop()


def test_mem_get_info_reports_quota_and_quota_minus_use(gpud):
    d = connect(gpud.endpoint, tenant="small")
    try:
        assert d.mem_get_info() == (64 * MiB, 64 * MiB)
        p = d.mem_alloc(40 * MiB)
        assert d.mem_get_info() == (24 * MiB, 64 * MiB)
        with pytest.raises(CudaError) as exc:
            d.mem_alloc(30 * MiB)
        assert exc.value.code == 2  # CUDA_ERROR_OUT_OF_MEMORY
        assert "quota" in str(exc.value)
        # The refusal changed nothing: the same figures, and the quota's remainder still fits.
        assert d.mem_get_info() == (24 * MiB, 64 * MiB)
        q = d.mem_alloc(24 * MiB)
        assert d.mem_get_info() == (0, 64 * MiB)
        d.mem_free(q)
        d.mem_free(p)
        d.ctx_synchronize()
        assert d.mem_get_info() == (64 * MiB, 64 * MiB)
    finally:
        d.conn.close()


def test_quota_is_per_tenant_and_shared_by_its_sessions(gpud):
    a1 = connect(gpud.endpoint, tenant="small")
    a2 = connect(gpud.endpoint, tenant="small")
    b = connect(gpud.endpoint, tenant="half")
    try:
        a1.mem_alloc(50 * MiB)
        with pytest.raises(CudaError):
            a2.mem_alloc(20 * MiB)  # the tenant's quota, not the session's
        assert a2.mem_get_info() == (14 * MiB, 64 * MiB)
        assert b.mem_get_info() == (256 * MiB, 256 * MiB)  # another tenant: unaffected
        b.mem_alloc(200 * MiB)
        t = tenant_state(b, "small")
        assert t is not None and t["sessions"] == 2 and t["memory_used"] == 50 * MiB and t["oom_refusals"] >= 1
    finally:
        for d in (a1, a2, b):
            d.conn.close()


def test_fraction_quota_and_device_capacity(gpud):
    b = connect(gpud.endpoint, tenant="half")
    c = connect(gpud.endpoint, tenant="adhoc")  # not listed: the default policy (the whole device)
    try:
        assert c.mem_get_info()[1] == 512 * MiB
        b.mem_alloc(256 * MiB)
        free, total = c.mem_get_info()
        assert total == 512 * MiB and free == 256 * MiB  # the device's remainder bounds "free" too
        c.mem_alloc(200 * MiB)
        with pytest.raises(CudaError) as exc:
            c.mem_alloc(100 * MiB)
        assert exc.value.code == 2
    finally:
        b.conn.close()
        c.conn.close()


def test_token_is_checked(gpud):
    with pytest.raises(CudaError) as exc:
        connect(gpud.endpoint, tenant="secret", token="wrong")
    assert exc.value.code == 800  # CUDA_ERROR_NOT_PERMITTED
    d = connect(gpud.endpoint, tenant="secret", token="open-sesame")
    try:
        assert d.mem_get_info() == (16 * MiB, 16 * MiB)
    finally:
        d.conn.close()


def test_memory_returns_to_baseline_after_clients_leave(gpud):
    obs = connect(gpud.endpoint, tenant="observer")
    try:
        state = hv_state(obs)
        assert state["physical"]["0"] == 0
        assert all(t["memory_used"] == 0 for t in state["tenants"])
    finally:
        obs.conn.close()


def _ps(endpoint: str, token: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "WOOLY_ADMIN_TOKEN"}
    if token is not None:
        env["WOOLY_ADMIN_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "woolyhv", "ps", "--server", endpoint, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_admin_calls_need_the_admin_token() -> None:
    """`wooly ps` (list_sessions) names every tenant, pid and program: with tokens required it needs the admin token."""
    g = start_with_config(
        '[hypervisor]\nrequire_token = true\nadmin_token = "root-of-trust"\n[tenants.alice]\ntoken = "a"\n',
        transport="tcp",
    )
    try:
        d = connect(g.endpoint, tenant="alice", token="a")
        for token in (None, "wrong", "a"):
            p = _ps(g.endpoint, token)
            assert p.returncode == 1 and "wrong or missing admin token" in p.stderr and "alice" not in p.stdout
        p = _ps(g.endpoint, "root-of-trust")
        assert p.returncode == 0, p.stderr
        assert [s["tenant"] for s in json.loads(p.stdout)["sessions"]] == ["alice"]
        d.conn.close()
    finally:
        g.stop()
    g = start_with_config("[hypervisor]\nrequire_token = true\n", transport="tcp")
    try:
        p = _ps(g.endpoint, "anything")
        assert p.returncode == 1 and "admin calls are off" in p.stderr
    finally:
        g.stop()
