"""A node that dies under a session (issue 24, no checkpoint policy): the program fails within WOOLY_TIMEOUT_S
with one clean CUDA_ERROR_DEVICE_UNAVAILABLE line, not a traceback storm."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.integration.migrate.test_drain import _sessions, _wait_line
from tests.integration.pool.conftest import run_program
from woolyhv.pool.local import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 1 << 30

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def solo(pool):  # type: ignore[no-untyped-def]
    pool.controller("a", "--claim-s", "10")
    pool.node("doomed", 2 * GiB)
    pool.wait_nodes({"doomed"})
    return pool


@pytest.mark.parametrize("script", ["torch_train.py", "numba_steps.py"])
def test_node_killed_mid_run_fails_with_one_clean_line(solo, script: str) -> None:  # type: ignore[no-untyped-def]
    env = {"STEPS": "100000", "PAUSE": "0.02", "WOOLY_TENANT": "victim", "WOOLY_TIMEOUT_S": "3"}
    proc = run_program(solo.url(), os.path.join(HERE, script), mem="256MiB", extra_env=env, background=True)
    try:
        _wait_line(proc, "READY")
        assert wait_until(lambda: [s for s in _sessions(solo) if s["tenant"] == "victim"], 15, 0.1)
        node = solo.nodes["doomed"][0]
        node.proc.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        # bring the node back for the next parametrisation
        solo.nodes["doomed"][0].stop()
        solo.node("doomed", 2 * GiB)
        solo.wait_nodes({"doomed"})
    print(f"{script}: failed {took:.2f} s after SIGKILL; stderr: {err.strip()!r}")
    assert proc.returncode == 75, (proc.returncode, out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "CUDA_ERROR_DEVICE_UNAVAILABLE" in lines[0], err
    assert took <= 3 + 2.0, took
