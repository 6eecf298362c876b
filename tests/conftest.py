"""Shared fixtures: real gpud processes on loopback (no mocks of our own components)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

# Tests get one code tier per compile, deterministically: optimised unless a test asks for tier="quick" or turns
# tiering on itself (tests/unit/jit/test_tiers.py). gpud processes started here inherit it.
os.environ.setdefault("WOOLY_JIT_TIERS", "0")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gpud:
    def __init__(self, endpoint: str, proc: subprocess.Popen[bytes]) -> None:
        self.endpoint = endpoint
        self.proc = proc

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start(transport: str = "tcp", extra_args: list[str] | None = None, env: dict[str, str] | None = None) -> Gpud:
    from woolyhv.launcher import start_gpud

    if transport == "tcp":
        endpoint = f"tcp://127.0.0.1:{free_port()}"
    else:
        endpoint = f"ipc:///tmp/wooly-test-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
    endpoint, proc = start_gpud(endpoint, backend="cpu", log_level="warning", extra_args=extra_args, env=env)
    return Gpud(endpoint, proc)


@pytest.fixture(scope="module", params=["tcp", "ipc"])
def gpud(request: pytest.FixtureRequest) -> Iterator[Gpud]:
    g = start(request.param)
    yield g
    g.stop()


@pytest.fixture(scope="module")
def gpud_tcp() -> Iterator[Gpud]:
    g = start("tcp")
    yield g
    g.stop()


@pytest.fixture
def driver(gpud: Gpud):
    from shim.client import Connection
    from shim.driver import Driver

    d = Driver(Connection(gpud.endpoint, timeout_s=10))
    yield d
    d.conn.close()


def connect(endpoint: str, **kw):
    from shim.client import Connection
    from shim.driver import Driver

    return Driver(Connection(endpoint, **kw))
