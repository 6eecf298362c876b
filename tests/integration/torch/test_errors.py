"""Errors: unsupported ops, op failures, a vanished daemon, exit with queued work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.torch.conftest import check, run_wooly

SCRIPT = Path(__file__).parent / "scripts" / "errors.py"


@pytest.fixture(scope="module")
def ops_run(gpud: str):
    return run_wooly(gpud, SCRIPT, "ops", timeout=90)


def test_unsupported_op_names_it(ops_run) -> None:
    out = check(ops_run)
    assert "NotImplementedError: Could not run 'aten::batch_norm_stats'" in out
    assert "fused_dropout True torch.uint8" in out
    assert "share: Cowardly refusing to serialize non-leaf tensor which requires_grad" in out
    assert "share: wooly: sharing a sparse cuda tensor with another process is not" in out


def test_op_error_is_runtime_error_and_session_survives(ops_run) -> None:
    out = check(ops_run)
    assert "RuntimeError: CUDA error" in out and "aten.mm" in out and "cannot be multiplied" in out
    assert "after 2.0" in out


def test_exit_with_queued_work_is_clean(ops_run) -> None:
    assert "exiting with queued work" in check(ops_run)
    assert "Traceback" not in ops_run.stderr


def test_daemon_gone_raises_within_seconds() -> None:
    from woolyhv.launcher import start_gpud

    endpoint, proc = start_gpud(log_level="error")
    try:
        p = run_wooly(
            endpoint, SCRIPT, "daemon-gone", env={"GPUD_PID": str(proc.pid), "WOOLY_TIMEOUT_S": "2"}, timeout=60
        )
    finally:
        proc.kill()
        proc.wait(10)
    m = re.search(r"RuntimeError after ([0-9.]+)s: CUDA error", p.stdout)
    assert m, p.stdout + p.stderr
    assert float(m.group(1)) < 10
