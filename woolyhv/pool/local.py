"""A throwaway etcd on loopback (a temporary data directory, free ports): what the pool's tests, its benchmark
and a laptop trying the pool out start. It runs Debian's (or any) ``etcd`` binary found on PATH (or in
``WOOLY_ETCD_BIN``); nothing here stands in for etcd."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from proto import settings
from woolyhv.pool.store import Store, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def etcd_binary() -> str | None:
    return settings.gpud().etcd_bin or shutil.which("etcd")


class LocalEtcd:
    """``with LocalEtcd() as etcd: etcd.url`` -> ``etcd://127.0.0.1:PORT``; stopped and deleted on exit."""

    def __init__(self, name: str = "wooly-local") -> None:
        binary = etcd_binary()
        if binary is None:
            raise FileNotFoundError("etcd is not installed (Debian: apt-get install etcd-server)")
        self.dir = tempfile.mkdtemp(prefix="wooly-etcd-")
        self.port, peer = free_port(), free_port()
        self.url = f"etcd://127.0.0.1:{self.port}"
        self.log = open(os.path.join(self.dir, "etcd.log"), "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                binary,
                "--name",
                name,
                "--data-dir",
                os.path.join(self.dir, "data"),
                "--listen-client-urls",
                f"http://127.0.0.1:{self.port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{self.port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"{name}=http://127.0.0.1:{peer}",
                "--log-level",
                "warn",
                "--quota-backend-bytes",
                str(2 << 30),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(Store(self.url, timeout_s=1.0), 30.0)
        except Exception:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalEtcd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(check, timeout_s: float, interval_s: float = 0.05):  # type: ignore[no-untyped-def]
    """Poll ``check()`` until it returns something true (returned) or ``timeout_s`` passes (None)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval_s)
