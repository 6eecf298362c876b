"""Live migration (issue 24): sessions drained off a node mid-run finish with results equal to an uninterrupted run.

A real etcd, a controller and two gpud nodes on loopback (tests/integration/pool/conftest.py), programs run
unmodified with ``wooly run`` against the pool; ``wooly pool drain`` moves them while they run."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.integration.pool.conftest import WOOLY, run_program
from woolyhv.pool.local import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
NUMBA = os.path.join(HERE, "numba_steps.py")
GiB = 1 << 30

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def two(pool):  # type: ignore[no-untyped-def]
    pool.controller("a", "--claim-s", "10")
    pool.node("n1", 4 * GiB)
    pool.node("n2", 4 * GiB)
    pool.wait_nodes({"n1", "n2"})
    return pool


def _sessions(pool) -> list[dict]:  # type: ignore[no-untyped-def]
    r = pool.call({"kind": "sessions"})
    return [s for s in (r or {}).get("sessions", []) if s["session"] != "(reserved)"]


def _wait_line(proc: subprocess.Popen, word: str, timeout: float = 120) -> list[str]:
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if word in line:
            return lines
    raise AssertionError(
        f"no {word!r} from the program: {''.join(lines)} {proc.stderr.read() if proc.poll() is not None else ''}"
    )


def test_numba_program_drained_mid_run_matches_an_uninterrupted_run(two) -> None:  # type: ignore[no-untyped-def]
    env = {"STEPS": "80", "PAUSE": "0.05", "WOOLY_TENANT": "drainee"}
    base = run_program(two.url(), NUMBA, mem="256MiB", extra_env=env)
    assert base.returncode == 0, base.stderr
    want = [ln for ln in base.stdout.splitlines() if ln.startswith("checksum")]
    assert want, base.stdout

    proc = run_program(two.url(), NUMBA, mem="256MiB", extra_env=env, background=True)
    source = ""
    try:
        _wait_line(proc, "READY")
        assert wait_until(lambda: [s for s in _sessions(two) if s["tenant"] == "drainee"], 15, 0.1)
        rows = [s for s in _sessions(two) if s["tenant"] == "drainee"]
        assert len(rows) == 1, rows
        source, sid = rows[0]["node"], rows[0]["session"]
        target = ({"n1", "n2"} - {source}).pop()
        drained = subprocess.run(
            [*WOOLY, "pool", "drain", source, "--pool", two.url(), "--timeout", "60"],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert drained.returncode == 0, drained.stdout + drained.stderr
        assert f"{sid} (drainee) -> {target}" in drained.stdout, drained.stdout
        assert f"{source} is drained" in drained.stdout
        assert wait_until(lambda: [s for s in _sessions(two) if s["session"] == sid], 10, 0.1)
        moved = [s for s in _sessions(two) if s["session"] == sid]
        assert moved and moved[0]["node"] == target and moved[0]["moves"] == 1, moved
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        if source:
            subprocess.run([*WOOLY, "pool", "uncordon", source, "--pool", two.url()], capture_output=True, timeout=30)
    assert proc.returncode == 0, err
    got = [ln for ln in out.splitlines() if ln.startswith("checksum")]
    assert got == want, (out, err)
    # the move is explained like any placement, and the node logs it with its pause
    node_log = two.nodes[source][0].text()
    assert "move.done" in node_log and sid in node_log, node_log[-2000:]


def _drain_mid_run(pool, script: str, tenant: str, env: dict[str, str]) -> tuple[str, str, str]:  # type: ignore[no-untyped-def]
    """Run ``script`` through the pool, drain its node once it prints READY; (stdout, drain output, source)."""
    proc = run_program(pool.url(), script, mem="512MiB", extra_env=env | {"WOOLY_TENANT": tenant}, background=True)
    source = ""
    try:
        early = _wait_line(proc, "READY")
        assert wait_until(lambda: [s for s in _sessions(pool) if s["tenant"] == tenant], 15, 0.1)
        row = [s for s in _sessions(pool) if s["tenant"] == tenant][0]
        source, sid = row["node"], row["session"]
        target = ({"n1", "n2"} - {source}).pop()
        drained = subprocess.run(
            [*WOOLY, "pool", "drain", source, "--pool", pool.url(), "--timeout", "60"],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert drained.returncode == 0, drained.stdout + drained.stderr
        assert f"{sid} ({tenant}) -> {target}" in drained.stdout, drained.stdout
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        if source:
            subprocess.run([*WOOLY, "pool", "uncordon", source, "--pool", pool.url()], capture_output=True, timeout=30)
    assert proc.returncode == 0, err
    return "".join(early) + out, drained.stdout, source


@pytest.mark.parametrize("script", ["torch_train.py", "hf_train.py"])
def test_torch_training_drained_mid_run_has_the_same_loss_curve(two, script: str) -> None:  # type: ignore[no-untyped-def]
    if script == "hf_train.py":
        pytest.importorskip("transformers")
    path = os.path.join(HERE, script)
    env = {"STEPS": "30", "PAUSE": "0.05"}
    base = run_program(two.url(), path, mem="512MiB", extra_env=env | {"WOOLY_TENANT": "trainer"}, timeout=300)
    assert base.returncode == 0, base.stderr
    out, drained, _ = _drain_mid_run(two, path, "trainer", env)
    want = [ln for ln in base.stdout.splitlines() if ln.startswith(("step", "checksum"))]
    got = [ln for ln in out.splitlines() if ln.startswith(("step", "checksum"))]
    assert len(want) == 31 and got == want, (drained, out)


def test_cordon_with_drain_starts_a_drain(two) -> None:  # type: ignore[no-untyped-def]
    """`wooly pool cordon N --drain` is `wooly pool drain N --no-wait`: cordoned as draining; uncordon ends it."""
    try:
        r = subprocess.run(
            [*WOOLY, "pool", "cordon", "n1", "--drain", "--reason", "kernel upgrade", "--pool", two.url()],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0 and "n1 cordoned and draining: 0 session(s)" in r.stdout, r.stdout + r.stderr
        assert wait_until(
            lambda: any(
                n["node"] == "n1" and (n.get("cordon") or "").startswith("draining: kernel upgrade")
                for n in (two.call({"kind": "nodes"}) or {}).get("nodes", [])
            ),
            10,
            0.1,
        )
        st = two.call({"kind": "drain", "node": "n1", "status": True})
        assert st and st["draining"] and st["sessions"] == [], st
    finally:
        subprocess.run([*WOOLY, "pool", "uncordon", "n1", "--pool", two.url()], capture_output=True, timeout=30)
    st = two.call({"kind": "drain", "node": "n1", "status": True})
    assert st and not st["draining"], st
