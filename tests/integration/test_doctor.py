"""``wooly doctor`` on a healthy setup and on broken ones (no gpud, a wrong key, a bad setting): one line a check,
the failing one names what to do, exit status 1."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import free_port, start


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "woolyhv", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, **(env or {})),
    )


def rows(out: str) -> dict[str, tuple[str, str]]:
    got = {}
    for line in out.splitlines():
        status, name, rest = line[:4].strip(), line[6:17].strip(), line[18:]
        got[name] = (status, rest)
    return got


def test_healthy_setup_passes_every_check() -> None:
    pytest.importorskip("torch")
    g = start("tcp")
    try:
        p = doctor(env={"WOOLY_SERVER": g.endpoint})
    finally:
        g.stop()
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    r = rows(p.stdout)
    for name in ("settings", "client", "connection", "backend", "jit cache", "native", "kernel", "torch"):
        assert name in r and r[name][0] in ("ok", "warn"), (name, p.stdout)
    assert g.endpoint in r["connection"][1] and "protocol" in r["connection"][1]
    assert "launch and copy back" in r["kernel"][1] and "an op" in r["torch"][1]


def test_no_gpud_fails_fast_and_says_what_to_do() -> None:
    ep = f"tcp://127.0.0.1:{free_port()}"
    t = time.monotonic()
    p = doctor("--no-torch", env={"WOOLY_SERVER": ep})
    assert time.monotonic() - t < 15
    assert p.returncode == 1
    status, rest = rows(p.stdout)["connection"]
    assert status == "FAIL" and "CUDA_ERROR_NO_DEVICE" in rest and ep in rest and f"wooly gpud --listen {ep}" in rest


def test_wrong_key_is_named_with_its_fix() -> None:
    import zmq

    g = start("tcp")
    try:
        p = doctor("--no-torch", env={"WOOLY_SERVER": g.endpoint, "WOOLY_SERVER_KEY": zmq.curve_keypair()[0].decode()})
    finally:
        g.stop()
    assert p.returncode == 1
    status, rest = rows(p.stdout)["connection"]
    assert status == "FAIL" and "refused the handshake" in rest and "wooly keys" in rest


def test_a_bad_setting_stops_at_the_settings() -> None:
    p = doctor("--no-torch", env={"WOOLY_TIMEOUT_S": "soon"})
    assert p.returncode == 1
    assert rows(p.stdout)["settings"][0] == "FAIL" and "WOOLY_TIMEOUT_S" in p.stdout
    assert "connection" not in rows(p.stdout)
