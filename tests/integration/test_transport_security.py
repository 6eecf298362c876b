"""NOTE [curve]: tcp is encrypted and the server authenticated; tokens and tensor bytes never cross in clear."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from proto import curve
from proto.errors import CudaError
from tests.conftest import connect, free_port, start

TOKEN = "s3cr3t-token-of-alice"
MARKER = b"WOOLY-PLAINTEXT-MARKER-" * 64


class Tap:
    """A TCP relay in front of gpud that keeps every byte both ways: what a packet capture would see."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.seen = bytearray()
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.target = target_port
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            with self.lock:
                self.seen += data
            dst.sendall(data)

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"


def _session_through(tap: Tap) -> None:
    d = connect(tap.endpoint, tenant="alice", token=TOKEN, connect_timeout_s=5)
    p = d.mem_alloc(len(MARKER))
    d.memcpy_htod(p, MARKER)
    assert bytes(d.memcpy_dtoh(p, len(MARKER))) == MARKER
    d.conn.close()
    time.sleep(0.2)


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def test_tcp_carries_no_token_or_data_in_clear(monkeypatch) -> None:
    g = start("tcp")
    try:
        tap = Tap(_port(g.endpoint))
        _session_through(tap)
        assert len(tap.seen) > len(MARKER)  # everything went through the tap
        assert TOKEN.encode() not in tap.seen and b"WOOLY-PLAINTEXT-MARKER" not in tap.seen
        assert b"CURVE" in tap.seen[:256]  # the ZMTP greeting names the mechanism
    finally:
        g.stop()
    g = start("tcp", extra_args=["--insecure"])  # the same capture without CURVE shows both: the check can fail
    monkeypatch.setenv("WOOLY_INSECURE", "1")
    try:
        tap = Tap(_port(g.endpoint))
        _session_through(tap)
        assert TOKEN.encode() in tap.seen and b"WOOLY-PLAINTEXT-MARKER" in tap.seen
    finally:
        g.stop()


def test_clients_without_the_right_server_key_are_refused(monkeypatch, tmp_path) -> None:
    g = start("tcp")
    try:
        import zmq

        monkeypatch.setenv("WOOLY_SERVER_KEY", zmq.curve_keypair()[0].decode())  # somebody else's key
        t = time.monotonic()
        with pytest.raises(CudaError) as e:
            connect(g.endpoint, connect_timeout_s=2)
        assert e.value.name == "CUDA_ERROR_DEVICE_UNAVAILABLE" and "WOOLY_SERVER_KEY" in e.value.message
        assert time.monotonic() - t < 5
        t = time.monotonic()  # with the connect probe (WOOLY_PROBE_S, what programs get): the failed handshake, at once
        with pytest.raises(CudaError) as e:
            connect(g.endpoint, connect_timeout_s=10, probe_s=1.0)
        assert "refused the handshake: WOOLY_SERVER_KEY is not its key" in e.value.message
        assert time.monotonic() - t < 1.5
        monkeypatch.setenv("WOOLY_INSECURE", "1")
        with pytest.raises(CudaError) as e:
            connect(g.endpoint, connect_timeout_s=10, probe_s=1.0)
        assert "this client speaks in clear (WOOLY_INSECURE=1) and gpud does not" in e.value.message
        monkeypatch.delenv("WOOLY_INSECURE")
        monkeypatch.delenv("WOOLY_SERVER_KEY")
        monkeypatch.setenv("WOOLY_KEY_DIR", str(tmp_path))  # a client that has no key at all: told what to set
        with pytest.raises(CudaError) as e:
            connect(g.endpoint, connect_timeout_s=2)
        assert "set WOOLY_SERVER_KEY" in e.value.message
        monkeypatch.setenv("WOOLY_INSECURE", "1")  # a client in clear: the CURVE server never answers it
        with pytest.raises(CudaError):
            connect(g.endpoint, connect_timeout_s=2)
        monkeypatch.delenv("WOOLY_INSECURE")
        monkeypatch.delenv("WOOLY_KEY_DIR")
        monkeypatch.setenv("WOOLY_SERVER_KEY", curve.server_keys()[0].decode())  # the right key, given explicitly
        connect(g.endpoint, connect_timeout_s=5).conn.close()
    finally:
        g.stop()


def _answers_as(endpoint: str, uid: int | None) -> bool:
    """Whether gpud answers a (malformed) message from a process running as ``uid`` (None: as we are)."""
    import os

    import zmq

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child speaks raw ZeroMQ: no files of ours to read after dropping privileges
        ok = b"0"
        try:
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            ctx = zmq.Context()
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(endpoint)
            s.send_multipart([b"\x01", b"not a message"])
            ok = b"1" if s.poll(3000) else b"0"
        finally:
            os.write(w, ok)
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    return got == b"1"


@pytest.mark.skipif(__import__("os").getuid() != 0, reason="needs root to act as another user")
def test_ipc_peers_of_other_users_are_not_heard(tmp_path) -> None:
    import os

    g = start("ipc")
    try:
        path = g.endpoint[len("ipc://") :]
        os.chmod(path, 0o777)  # the file's mode would stop them first: this checks the peer-uid filter alone
        assert _answers_as(g.endpoint, None)  # gpud's own user is answered (so a silence below means something)
        assert not _answers_as(g.endpoint, 65534)
    finally:
        g.stop()
    cfg = tmp_path / "g.toml"
    cfg.write_text("[hypervisor]\nipc_uids = [65534]\n")
    g = start("ipc", extra_args=["--config", str(cfg)])
    try:
        os.chmod(g.endpoint[len("ipc://") :], 0o777)
        assert _answers_as(g.endpoint, 65534)  # a user the operator named
    finally:
        g.stop()


def test_client_keys_bound_to_tenants(monkeypatch, tmp_path) -> None:
    """NOTE [client keys]: alice's sessions come only from alice's client keys (no token); a key bound to alice cannot
    open bob's; bob keeps his token rule."""
    server_pub = curve.server_keys()[0].decode()  # gpud's own pair (the default key directory)
    monkeypatch.setenv("WOOLY_SERVER_KEY", server_pub)
    monkeypatch.setenv("WOOLY_KEY_DIR", str(tmp_path / "keys"))
    alice_path, alice_pub = curve.make_client_keys("alice-laptop")
    other_path, _ = curve.make_client_keys("stranger")
    monkeypatch.delenv("WOOLY_KEY_DIR")
    cfg = tmp_path / "g.toml"
    cfg.write_text(f'[tenants.alice]\nkeys = ["{alice_pub.decode()}"]\n\n[tenants.bob]\ntoken = "b0b"\n')
    g = start("tcp", extra_args=["--config", str(cfg)])
    try:
        monkeypatch.setenv("WOOLY_CLIENT_KEY", alice_path)
        d = connect(g.endpoint, tenant="alice", connect_timeout_s=5)  # no token: the key is the credential
        assert d.mem_get_info()[1] > 0
        d.conn.close()
        with pytest.raises(CudaError) as e:  # alice's key cannot open bob's sessions, even with bob's token
            connect(g.endpoint, tenant="bob", token="b0b", connect_timeout_s=5)
        assert e.value.name == "CUDA_ERROR_NOT_PERMITTED" and "bound to tenant 'alice'" in e.value.message
        for path in (other_path, None):  # a stranger's key, or a fresh one: not alice
            if path is None:
                monkeypatch.delenv("WOOLY_CLIENT_KEY")
            else:
                monkeypatch.setenv("WOOLY_CLIENT_KEY", path)
            with pytest.raises(CudaError) as e:
                connect(g.endpoint, tenant="alice", connect_timeout_s=5)
            assert "client keys only" in e.value.message
        connect(g.endpoint, tenant="bob", token="b0b", connect_timeout_s=5).conn.close()  # tokens still work
    finally:
        g.stop()
