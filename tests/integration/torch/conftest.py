"""Fixtures for the PyTorch face: one real gpud for the module, scripts run under ``wooly run``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def gpud() -> Iterator[str]:
    from woolyhv.launcher import start_gpud

    endpoint, proc = start_gpud(log_level="warning")
    yield endpoint
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("WOOLY_SERVER", None)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as gpud does: spinning OpenMP threads crawl on loaded CI boxes
    env.update(extra or {})
    return env


def run_local(script: str | Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = _env({"CUDA_VISIBLE_DEVICES": ""})
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=str(ROOT)
    )


def run_wooly(
    endpoint: str, script: str | Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    e = _env({"WOOLY_SERVER": endpoint, **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "woolyhv", "run", str(script), *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=timeout,
        cwd=str(ROOT),
    )


def losses(out: str) -> list[float]:
    return [float(line.split()[-1]) for line in out.splitlines() if line.startswith("step ") and " loss " in line]


def json_lines(out: str) -> dict[str, object]:
    result: dict[str, object] = {}
    for line in out.splitlines():
        if line.startswith("{"):
            result.update(json.loads(line))
    return result


def check(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}"
    return p.stdout
