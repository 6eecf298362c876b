"""pynvml inside ``wooly run`` sees the remote gpud device, not a local GPU (there is none)."""

from __future__ import annotations

import json
import os

import pytest

from shim.driver import DRIVER_VERSION
from tests.integration.native.conftest import PROGS, wooly_run

pytest.importorskip("pynvml")


def test_pynvml_sees_remote_device(wooly_gpud: str) -> None:
    from shim.client import Connection

    conn = Connection(wooly_gpud, timeout_s=10)
    try:
        remote = conn.devices[0]
    finally:
        conn.close()
    proc = wooly_run([os.path.join(PROGS, "nvml_query.py")], server=wooly_gpud)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["count"] == 1
    assert seen["name"] == remote["name"]
    assert seen["uuid"] == "GPU-" + remote["uuid"]
    assert seen["total"] == remote["total_mem"] or seen["total"] > 0
    assert seen["cc"] == list(remote["compute_capability"])
    assert seen["cuda_version"] == DRIVER_VERSION
    assert seen["used_after_alloc"] >= seen["used_before"] + (64 << 20)
    assert seen["temperature"] == "Not Supported"


def test_pynvml_without_gpud_reports_driver_not_loaded(native_lib: str) -> None:
    proc = wooly_run(
        [os.path.join(PROGS, "nvml_query.py")], server="tcp://127.0.0.1:9", env={"WOOLY_CONNECT_TIMEOUT_S": "2"}
    )
    assert proc.returncode != 0
    assert "Driver Not Loaded" in proc.stderr or "NVMLError" in proc.stderr
