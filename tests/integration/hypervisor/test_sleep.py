"""Sleep and wake: an idle tenant's memory leaves the device and comes back bit-exact on its next call."""

from __future__ import annotations

import numpy as np
import pytest

from tests.integration.hypervisor._helpers import connect, hv_state, start_with_config, tenant_state, upload, wait_for

MiB = 1 << 20

CONFIG = """
[hypervisor]
idle_check_s = 0.1
host_budget = "40MiB"
overcommit_ratio = 2.0

[tenants.sleepy]
idle_timeout_s = 0.4
priority = 1

[tenants.low]
priority = 0

[tenants.high]
priority = 4
"""


@pytest.fixture(scope="module")
def gpud():
    g = start_with_config(CONFIG, "--cpu-memory", str(256 * MiB))
    yield g
    g.stop()


def test_idle_tenant_sleeps_and_wakes_bit_exact(gpud):
    rng = np.random.default_rng(3)
    big = rng.integers(0, 256, 64 * MiB, dtype=np.uint8).tobytes()  # beyond the host budget: spilled
    small = rng.integers(0, 256, 3 * MiB + 17, dtype=np.uint8).tobytes()
    shared = rng.integers(0, 256, 8 * MiB, dtype=np.uint8).tobytes()
    solo = rng.integers(0, 256, 4 * MiB, dtype=np.uint8).tobytes()  # dedup'd, but nobody else has it
    d = connect(gpud.endpoint, tenant="sleepy")
    other = connect(gpud.endpoint, tenant="observer")
    try:
        p_big, p_small, p_shared = d.mem_alloc(len(big)), d.mem_alloc(len(small)), d.mem_alloc(len(shared))
        d.memcpy_htod(p_big, big)
        d.memcpy_htod(p_small, small)
        upload(d, p_shared, shared)  # dedup'd: stays in the store while the tenant sleeps
        p_solo = d.mem_alloc(len(solo))
        upload(d, p_solo, solo)  # in the store too, but only for this tenant: it sleeps with it
        q = other.mem_alloc(len(shared))
        upload(other, q, shared)
        d.ctx_synchronize()
        other.ctx_synchronize()
        before = hv_state(other)["physical"]["0"]
        wait_for(lambda: tenant_state(other, "sleepy")["state"] == "asleep", what="the tenant to fall asleep")
        st = hv_state(other)
        assert st["physical"]["0"] == before - len(big) - len(small) - len(solo)
        assert st["dedup"]["store_bytes"] == len(shared)
        assert st["sleep"]["spilled"] > 0 and st["sleep"]["host_used"] > 0
        assert d.mem_get_info()[1] - d.mem_get_info()[0] == len(big) + len(small) + len(shared) + len(solo)
        # The next real call wakes it, transparently.
        assert d.memcpy_dtoh(p_small, len(small)) == small
        t = tenant_state(other, "sleepy")
        assert t["state"] == "awake" and t["wakes"] == 1 and t["last_wake_s"] > 0
        assert d.memcpy_dtoh(p_big, len(big)) == big
        assert d.memcpy_dtoh(p_shared, len(shared)) == shared
        assert d.memcpy_dtoh(p_solo, len(solo)) == solo
        assert hv_state(other)["physical"]["0"] == before
    finally:
        d.conn.close()
        other.conn.close()


def test_higher_priority_demand_displaces_an_idle_lower_priority_tenant(gpud):
    low = connect(gpud.endpoint, tenant="low")
    high = connect(gpud.endpoint, tenant="high")
    try:
        data = np.random.default_rng(4).integers(0, 256, 150 * MiB, dtype=np.uint8).tobytes()
        p = low.mem_alloc(len(data))
        low.memcpy_htod(p, data)
        low.ctx_synchronize()
        assert high.mem_get_info()[0] == 256 * MiB  # low's memory counts as reclaimable for high
        h = high.mem_alloc(200 * MiB)  # does not fit beside low's 150 MiB: low is put to sleep
        assert tenant_state(high, "low")["state"] == "asleep"
        high.mem_free(h)
        high.ctx_synchronize()
        assert low.memcpy_dtoh(p, len(data)) == data  # woken on its next call
        assert tenant_state(high, "low")["state"] == "awake"
    finally:
        low.conn.close()
        high.conn.close()


def test_dying_while_asleep_leaves_nothing_behind(gpud):
    d = connect(gpud.endpoint, tenant="sleepy")
    obs = connect(gpud.endpoint, tenant="observer")
    try:
        p = d.mem_alloc(48 * MiB)
        d.memset(p, 9, 1, 48 * MiB)
        d.ctx_synchronize()
        wait_for(lambda: tenant_state(obs, "sleepy")["state"] == "asleep", what="sleep")
    finally:
        d.conn.close()
    wait_for(lambda: hv_state(obs)["physical"]["0"] == 0, what="baseline")
    st = hv_state(obs)
    assert st["sleep"]["host_used"] == 0 and st["sleep"]["spilled"] == 0
    obs.conn.close()
