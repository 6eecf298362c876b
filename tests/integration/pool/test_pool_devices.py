"""A pool node with two devices (NOTE [session devices] in gpud/server.py): the controller reserves memory on one
device of the node, and the session the program opens there runs on that device, not on the node's first one."""

from __future__ import annotations

import pytest

from shim.client import Connection
from tests.integration.pool.conftest import run_program
from woolyhv.pool.client import PoolClient
from woolyhv.pool.model import PlaceRequest
from woolyhv.top import admin_call

MiB = 1 << 20

pytestmark = pytest.mark.timeout(600)

PROBE = """
import torch
x = torch.ones(1024, device="cuda")
print("device", torch.cuda.get_device_properties(0).pci_device_id, "count", torch.cuda.device_count(), float(x.sum()))
"""


def test_a_reservation_runs_on_the_device_it_was_made_on(pool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pool.controller("a", "--claim-s", "3")
    node_ep = pool.node("duo", 512 * MiB, "--cpu-devices", "2")
    pool.wait_nodes({"duo"})
    pc = PoolClient(pool.url(), timeout_s=5.0)
    try:
        first = pc.place(PlaceRequest(tenant="t-dev", memory=300 * MiB, deadline_s=20.0, program="holder"))
    finally:
        pc.close()
    assert first.node == "duo"
    held = Connection(
        first.endpoint, tenant="t-dev", server_key=first.server_key, reservation=first.reservation, device=first.device
    )
    try:
        assert held.device == first.device
        (row,) = [s for s in admin_call(node_ep)["sessions"] if s["session"] == held.session]
        assert row["device"] == first.device
        # 300 MiB of one 512 MiB device is reserved: a second 300 MiB program fits only on the other device
        script = tmp_path / "probe.py"
        script.write_text(PROBE)
        r = run_program(pool.url(), str(script), mem="300MiB", extra_env={"WOOLY_TENANT": "t-dev2"})
        assert r.returncode == 0, r.stderr[-3000:]
        other = 1 - first.device
        assert f"device {other} count 1 1024.0" in r.stdout, r.stdout + r.stderr[-2000:]
    finally:
        held.close()
