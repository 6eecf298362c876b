"""Failover from checkpoints (issue 24): a node SIGKILLed under a checkpointed session; the program goes on, on
the session's standby, with results equal to an uninterrupted run.

A real etcd, a controller and two gpud nodes on loopback; the tenant ``ckpt`` has ``checkpoint=1`` (every second)
on both; programs run unmodified with ``wooly run`` against the pool."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.integration.migrate.test_drain import _sessions, _wait_line
from tests.integration.pool.conftest import WOOLY, run_program
from woolyhv.pool.local import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 1 << 30
POLICY = ("--tenant", "ckpt:checkpoint=1")

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def pair(pool):  # type: ignore[no-untyped-def]
    pool.controller("a", "--claim-s", "10")
    pool.node("n1", 4 * GiB, *POLICY)
    pool.node("n2", 4 * GiB, *POLICY)
    pool.wait_nodes({"n1", "n2"})
    return pool


def _kill_mid_run(pool, script: str, env: dict[str, str]) -> tuple[str, str, str, str]:  # type: ignore[no-untyped-def]
    """Run ``script``, SIGKILL its node once a checkpoint of it is on the standby; (stdout, stderr, source, target)."""
    proc = run_program(
        pool.url(),
        script,
        mem="256MiB",
        extra_env=env | {"WOOLY_TENANT": "ckpt", "WOOLY_TIMEOUT_S": "3"},
        background=True,
    )
    source = target = ""
    try:
        early = _wait_line(proc, "READY")
        assert wait_until(
            lambda: [s for s in _sessions(pool) if s["tenant"] == "ckpt" and s.get("checkpoint")], 30, 0.1
        ), _sessions(pool)
        row = [s for s in _sessions(pool) if s["tenant"] == "ckpt"][0]
        source, target = row["node"], row["checkpoint"]["standby"]
        assert target and target != source, row
        shown = subprocess.run(
            [*WOOLY, "pool", "sessions", "--pool", pool.url()], capture_output=True, text=True, timeout=30
        )
        assert f"ago -> {target}" in shown.stdout, shown.stdout  # where its checkpoints go, and how fresh
        pool.nodes[source][0].proc.send_signal(signal.SIGKILL)
        # the session comes back on its standby (the pool lists it there, restored once) while the program runs on
        assert wait_until(
            lambda: [
                s for s in _sessions(pool) if s["session"] == row["session"] and s["node"] == target and s["moves"] == 1
            ],
            30,
            0.1,
        ), _sessions(pool)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        if source:  # the node comes back for what follows
            pool.nodes[source][0].stop()
            pool.node(source, 4 * GiB, *POLICY)
            pool.wait_nodes({"n1", "n2"})
    assert proc.returncode == 0, err
    return "".join(early) + out, err, source, target


@pytest.mark.parametrize("script", ["torch_train.py", "numba_steps.py", "hf_train.py"])
def test_killed_node_session_resumes_from_its_checkpoint(pair, script: str) -> None:  # type: ignore[no-untyped-def]
    if script == "hf_train.py":
        pytest.importorskip("transformers")
    path = os.path.join(HERE, script)
    env = {"STEPS": "100", "PAUSE": "0.1"}
    base = run_program(pair.url(), path, mem="256MiB", extra_env=env | {"WOOLY_TENANT": "ckpt"}, timeout=300)
    assert base.returncode == 0, base.stderr
    t0 = time.monotonic()
    out, err, source, target = _kill_mid_run(pair, path, env)
    print(f"{script}: killed {source}, restored on {target}; run took {time.monotonic() - t0:.1f} s")
    want = [ln for ln in base.stdout.splitlines() if ln.startswith(("step", "checksum"))]
    got = [ln for ln in out.splitlines() if ln.startswith(("step", "checksum"))]
    assert want and got == want, (out, err)
    node_log = pair.nodes[target][0].text()
    assert "ckpt.restored" in node_log, node_log[-3000:]
