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
