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
from tests.integration.hypervisor.test_observability import dashboard_series, scrape
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
                    out["r"] = raw.call(
                        {
                            "kind": "move_out",
                            "token": "ta",
                            "session": drv.conn.session,
                            "endpoint": b.endpoint,
                            "target_token": target_token,
                        }
                    )
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
        assert series["wooly_move_failures_total"] == 1  # the refused one
        # every series of the dashboard's migration panels is one gpud exports
        assert dashboard_series("wooly_sessions_", "wooly_move", "wooly_checkpoint") <= {
            k.split("{")[0] for k in series
        }
        env = dict(os.environ, WOOLY_ADMIN_TOKEN="tb")
        ps = subprocess.run(
            [sys.executable, "-m", "woolyhv", "ps", "--server", b.endpoint, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        rows = json.loads(ps.stdout)["sessions"]
        assert [s["moves"] for s in rows if s["session"] == drv.conn.session] == [1], rows
    finally:
        if drv is not None:
            drv.conn.close()
        a.stop()
        b.stop()


def test_a_move_does_not_send_what_the_target_dedup_store_holds() -> None:
    """One base model, many adapters: the weights a session moves with are already on the target (another tenant
    uploaded them there, so its dedup store holds them); the pre-copy asks, and those chunks are not sent."""
    a = start("tcp", extra_args=["--admin-token", "ta"])
    b = start("tcp", extra_args=["--admin-token", "tb"])
    on_b = mover = None
    try:
        weights = np.random.default_rng(3).integers(0, 255, 16 * MiB, dtype=np.uint8).tobytes()
        on_b = connect(b.endpoint, tenant="other", timeout_s=10)
        pb = on_b.mem_alloc(len(weights))
        on_b.memcpy_htod(pb, weights)  # content-addressed: b's store now holds these chunks
        on_b.ctx_synchronize()
        mover = connect(a.endpoint, tenant="adapter", timeout_s=10)
        p = mover.mem_alloc(len(weights))
        mover.memcpy_htod(p, weights)
        q = mover.mem_alloc(4 * MiB)
        mover.memset(q, 0x11, 1, 4 * MiB)  # its own state: not on b
        mover.ctx_synchronize()
        raw = Raw(a.endpoint)
        raw.sock.setsockopt(__import__("zmq").RCVTIMEO, 60_000)
        try:
            r = raw.call(
                {
                    "kind": "move_out",
                    "token": "ta",
                    "session": mover.conn.session,
                    "endpoint": b.endpoint,
                    "target_token": "tb",
                }
            )  # the heartbeat's idle call lets it happen without one of ours
        finally:
            raw.close()
        assert r["kind"] == "result", r
        moved = r["value"]
        print(moved)
        assert moved["deduped_bytes"] == len(weights), moved  # not one byte of the weights crossed
        assert moved["bytes"] == 4 * MiB, moved
        assert bytes(mover.memcpy_dtoh(p, len(weights))) == weights and mover.conn.endpoint == b.endpoint
        assert bytes(mover.memcpy_dtoh(q, 64)) == b"\x11" * 64
    finally:
        for d in (on_b, mover):
            if d is not None:
                d.conn.close()
        a.stop()
        b.stop()
