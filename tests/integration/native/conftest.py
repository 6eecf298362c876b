"""Fixtures for the native face: programs run under a real ``wooly run``, a real ``wooly gpud``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT, free_port

PROGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs")
EXAMPLES = os.path.join(ROOT, "examples")

pytest.importorskip("cuda.bindings")


def wooly_run(
    args: list[str], server: str | None = None, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``wooly run ARGS`` as a user types it; embedded gpud unless ``server`` is given."""
    e = dict(os.environ)
    e.pop("WOOLY_SERVER", None)
    e.pop("WOOLY_NATIVE_LIBDIR", None)
    e["PYTHONPATH"] = ROOT + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"
    if server:
        e["WOOLY_SERVER"] = server
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "woolyhv", "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=e,
        cwd=ROOT,
    )


@pytest.fixture(scope="session")
def native_lib() -> str:
    """Build (or find) the native library once; skip the module when no compiler exists."""
    from shim.native import build

    try:
        return build.ensure_built()
    except build.NativeBuildError as exc:
        pytest.skip(f"native library unavailable: {exc}")


@pytest.fixture(scope="module")
def wooly_gpud(native_lib: str) -> Iterator[str]:
    """A separate ``wooly gpud`` on a free loopback port."""
    with serve_gpud() as endpoint:
        yield endpoint


@contextlib.contextmanager
def serve_gpud(*extra: str) -> Iterator[str]:
    """``wooly gpud`` (CPU backend, ``extra`` arguments) on a free loopback port, for the length of the block."""
    from woolyhv.launcher import wait_ready

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "woolyhv", "gpud", "--listen", endpoint, "--backend", "cpu", "--log-level", "warning"]
        + list(extra),
        env=e,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_ready(endpoint, proc, 60)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
