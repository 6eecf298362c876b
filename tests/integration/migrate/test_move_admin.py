"""A move outside a pool: an admin asks one gpud (``move_out`` with both admin tokens) to move a live session to
another. The client's device pointers, handles and bytes stay as they were, it follows on its own, and both
nodes' figures (``wooly ps``, /metrics) say what happened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

from tests.conftest import connect, free_port, start
from tests.integration.hypervisor.test_observability import scrape
from tests.integration.migrate.test_hostile_peers import Raw

MiB = 1 << 20


def test_admin_move_keeps_pointers_and_bytes_and_is_counted() -> None:
    port = free_port()
    a = start("tcp", extra_args=["--admin-token", "ta", "--metrics-port", str(port)])
    b = start("tcp", extra_args=["--admin-token", "tb"])
    drv = None
    try:
        drv = connect(a.endpoint, timeout_s=10)
        data = np.random.default_rng(1).integers(0, 255, 8 * MiB, dtype=np.uint8)
        p = drv.mem_alloc(8 * MiB)
        drv.memcpy_htod(p, data)
        q = drv.mem_alloc(4096)
        drv.memset(q, 0x33, 1, 4096)
        drv.ctx_synchronize()
        def move_out(target_token: str) -> tuple[threading.Thread, dict]:
            """The admin's move_out answers once the move is done, which is at the session's next call."""
            out: dict = {}

            def ask() -> None:
                raw = Raw(a.endpoint)
                try:
                    out["r"] = raw.call({"kind": "move_out", "token": "ta", "session": drv.conn.session,
                                         "endpoint": b.endpoint, "target_token": target_token})
                finally:
                    raw.close()

            t = threading.Thread(target=ask)
            t.start()
            time.sleep(0.5)
            return t, out

        t, out = move_out("wrong")
        assert bytes(drv.memcpy_dtoh(q, 16)) == b"\x33" * 16  # held, the target refused, answered here
        t.join(30)
        assert out["r"]["kind"] == "error" and "admin token" in out["r"]["message"], out
        assert drv.conn.moves == 0 and drv.conn.endpoint == a.endpoint
        t, out = move_out("tb")
        got = np.frombuffer(bytes(drv.memcpy_dtoh(p, 8 * MiB)), dtype=np.uint8)  # held, moved, answered on b
        t.join(30)
        assert out["r"]["kind"] == "result", out
        assert (got == data).all() and drv.conn.moves == 1 and drv.conn.endpoint == b.endpoint
        assert bytes(drv.memcpy_dtoh(q, 16)) == b"\x33" * 16  # the same pointer, on the other node
        moved = out["r"]["value"]
        assert moved["bytes"] >= 8 * MiB + 4096, moved
        print(f"moved {moved['bytes']} bytes, pause {moved['pause_s'] * 1e3:.1f} ms")
        _, series = scrape(port)
        assert series["wooly_sessions_moved_total"] == 1 and series["wooly_moved_bytes_total"] >= 8 * MiB, series
        env = dict(os.environ, WOOLY_ADMIN_TOKEN="tb")
        ps = subprocess.run([sys.executable, "-m", "woolyhv", "ps", "--server", b.endpoint, "--json"], env=env,
                            capture_output=True, text=True, timeout=60)
        rows = json.loads(ps.stdout)["sessions"]
        assert [s["moves"] for s in rows if s["session"] == drv.conn.session] == [1], rows
    finally:
        if drv is not None:
            drv.conn.close()
        a.stop()
        b.stop()
