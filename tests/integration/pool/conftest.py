"""A real pool on loopback: etcd (Debian's etcd-server), ``wooly controller`` processes and ``wooly gpud --join``
nodes (CPU backend). CI installs etcd (.ci/run sets WOOLY_REQUIRE_ETCD=1, so a missing etcd fails there instead of
skipping)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.conftest import free_port
from woolyhv.pool.local import LocalEtcd, etcd_binary, wait_until

TTL = 2


@pytest.fixture(scope="module")
def etcd() -> Iterator[LocalEtcd]:
    if etcd_binary() is None:
        if os.environ.get("WOOLY_REQUIRE_ETCD") == "1":
            pytest.fail("etcd is not installed (apt-get install etcd-server)")
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    with LocalEtcd() as e:
        yield e


class Proc:
    def __init__(self, cmd: list[str], log: str, env: dict[str, str] | None = None) -> None:
        self.log_path = log
        self.logf = open(log, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()

    def text(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()


WOOLY = [sys.executable, "-m", "woolyhv"]


class Pool:
    """Controllers and nodes of one test module, stopped at its end."""

    def __init__(self, etcd: LocalEtcd, tmp: str) -> None:
        self.etcd = etcd
        self.tmp = tmp
        self.controllers: dict[str, tuple[Proc, str]] = {}
        self.nodes: dict[str, tuple[Proc, str]] = {}

    def controller(self, name: str, *args: str) -> str:
        ep = f"tcp://127.0.0.1:{free_port()}"
        p = Proc(
            [*WOOLY, "controller", "--etcd", self.etcd.url, "--listen", ep, "--ttl", str(TTL), *args],
            os.path.join(self.tmp, f"controller-{name}.log"),
        )
        self.controllers[name] = (p, ep)
        assert wait_until(lambda: self.call({"kind": "ping"}, ep) is not None or p.proc.poll() is not None, 20), (
            p.text()
        )
        assert p.proc.poll() is None, p.text()
        return ep

    def node(self, name: str, memory: int, *args: str) -> str:
        ep = f"tcp://127.0.0.1:{free_port()}"
        p = Proc(
            [
                sys.executable,
                "-m",
                "gpud",
                "--listen",
                ep,
                "--backend",
                "cpu",
                "--log-level",
                "info",
                "--cpu-memory",
                str(memory),
                "--join",
                self.etcd.url,
                "--node-name",
                name,
                "--pool-ttl",
                str(TTL),
                *args,
            ],
            os.path.join(self.tmp, f"node-{name}.log"),
        )
        self.nodes[name] = (p, ep)
        return ep

    def url(self, *names: str) -> str:
        eps = [self.controllers[n][1] for n in (names or list(self.controllers))]
        return "pool://" + ",".join(e[len("tcp://") :] for e in eps)

    def call(self, body: dict, endpoint: str | None = None) -> dict | None:
        """A request written as its map (checked by the protocol's own decoder), to the pool; None on an error."""
        from woolyhv.pool import protocol as P
        from woolyhv.pool.client import PoolClient, PoolError

        c = PoolClient(endpoint or self.url(), timeout_s=2.0)
        try:
            return c.call(P.decode_request(body))
        except PoolError:
            return None
        finally:
            c.close()

    def node_names(self) -> set[str]:
        r = self.call({"kind": "nodes"})
        return {n["node"] for n in r["nodes"]} if r else set()

    def wait_nodes(self, names: set[str], timeout: float = 30) -> None:
        got = wait_until(lambda: self.node_names() == names, timeout, 0.1)
        assert got, f"pool has {self.node_names()}, expected {names}"

    def stop(self) -> None:
        for p, _ in list(self.nodes.values()) + list(self.controllers.values()):
            p.stop()


@pytest.fixture(scope="module")
def pool(etcd: LocalEtcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    p = Pool(etcd, str(tmp_path_factory.mktemp("pool")))
    yield p
    p.stop()


def run_program(
    pool_url: str,
    script: str,
    *,
    mem: str,
    timeout: float = 120,
    extra_env: dict[str, str] | None = None,
    background: bool = False,
):  # type: ignore[no-untyped-def]
    env = dict(os.environ, WOOLY_SERVER=pool_url, WOOLY_MEM=mem, WOOLY_PLACE_TIMEOUT_S="60")
    env.update(extra_env or {})
    cmd = [*WOOLY, "run", script]
    if background:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def elapsed_since(t0: float) -> float:
    return time.monotonic() - t0
