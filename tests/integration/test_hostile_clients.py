"""Hostile clients against a real gpud (NOTE [bounded daemon state] in gpud/session.py, NOTE [proven locality] in
gpud/shm.py): sessions and handles are bounded, a client that never reads its replies cannot grow gpud, and a
peer cannot claim to share gpud's host by repeating its host id. Other clients keep being served throughout."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import zmq

from proto import constants as C
from proto.codec import encode_body, unpack_body
from proto.errors import CudaError
from tests.conftest import connect, start
from tests.integration.test_hostile_kernels import _saxpy

CONFIG = """
[limits]
sessions = 40
sessions_per_tenant = 4
allocations = 100
reply_bytes = "8MiB"
parked_bytes = "2MiB"
"""


@pytest.fixture(scope="module")
def gpud(tmp_path_factory):
    cfg = tmp_path_factory.mktemp("cfg") / "gpud.toml"
    cfg.write_text(CONFIG)
    g = start("ipc", extra_args=["--config", str(cfg)])
    yield g
    g.stop()


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Raw:
    """A client speaking the wire by hand: what the shim would never send."""

    def __init__(self, endpoint: str, **hello: object) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVHWM, 1)  # and reads nothing it is not asked to
        self.sock.setsockopt(zmq.RCVBUF, 4096)
        self.sock.connect(endpoint)
        self.rid = 0
        body = {"kind": "hello", "protocol": C.PROTOCOL_VERSION, "client_version": "raw", "tenant": "raw", "pid": 1}
        body.update(hello)
        self.reply = self.call(body)

    def send(self, body: dict, bulk: list | None = None) -> None:
        self.rid += 1
        body["rid"] = self.rid
        self.sock.send_multipart(encode_body(body, bulk or []))

    def call(self, body: dict, bulk: list | None = None) -> dict:
        self.send(body, bulk)
        while True:
            assert self.sock.poll(20000), "gpud did not answer"
            reply, _ = unpack_body(self.sock.recv_multipart())
            if reply.get("rid") == self.rid:
                if reply["kind"] == "error":
                    raise CudaError(reply["code"], reply["message"])
                return reply

    def close(self) -> None:
        self.sock.close(0)


def test_sessions_per_tenant_are_bounded(gpud) -> None:
    held = [connect(gpud.endpoint, tenant="many") for _ in range(4)]
    try:
        with pytest.raises(CudaError) as e:
            connect(gpud.endpoint, tenant="many", connect_timeout_s=5)
        assert e.value.name == "CUDA_ERROR_NOT_PERMITTED" and "sessions_per_tenant" in e.value.message
        other = connect(gpud.endpoint, tenant="other")  # another tenant is not refused
        other.conn.close()
    finally:
        for d in held:
            d.conn.close()
    time.sleep(0.2)
    connect(gpud.endpoint, tenant="many").conn.close()  # room again once they closed


def test_allocations_per_session_are_bounded(gpud) -> None:
    d = connect(gpud.endpoint)
    try:
        for _ in range(100):
            d.mem_alloc(16)
        with pytest.raises(CudaError) as e:
            d.mem_alloc(16)
        assert e.value.name == "CUDA_ERROR_OUT_OF_MEMORY" and "limits.allocations" in e.value.message
    finally:
        d.conn.close()


def test_a_client_that_never_reads_cannot_grow_gpud(gpud) -> None:
    """600 requests for 1 MiB each whose replies are never read: gpud stops reading the session past 8 MiB of
    unsent replies and closes it past 2 MiB of waiting requests; its memory stays put, others are served."""
    raw = Raw(gpud.endpoint)
    before = _rss_mb(gpud.proc.pid)
    ptr = raw.call({"kind": "mem_alloc", "size": 1 << 20})["value"]
    for _ in range(600):
        raw.send({"kind": "memcpy_dtoh", "src": ptr, "size": 1 << 20, "stream": 0})
    time.sleep(2)
    grown = _rss_mb(gpud.proc.pid) - before
    assert grown < 100, f"gpud grew by {grown:.0f} MiB"
    other = connect(gpud.endpoint, tenant="other")
    try:
        assert np.array_equal(_saxpy(other), 2 * np.arange(4096, dtype=np.float32) + 1)
    finally:
        other.conn.close()
        raw.close()


def test_locality_cannot_be_claimed(gpud) -> None:
    """A hello repeating gpud's host id (it tells every peer) without the proof: no shared-memory staging."""
    probe = Raw(gpud.endpoint)
    host = probe.reply["host_id"]
    assert not probe.reply.get("local_proof")  # asked only of a peer claiming gpud's host
    probe.close()
    liar = Raw(gpud.endpoint, host_id=host, pid=1)
    path = liar.reply["local_proof"]  # the file it would have to create
    try:
        with pytest.raises(CudaError) as e:
            liar.call({"kind": "shm_open"})
        assert e.value.name == "CUDA_ERROR_NOT_SUPPORTED"
        with pytest.raises(CudaError) as e:  # proving without the file fails, and only one try is given
            liar.call({"kind": "prove_local"})
        assert e.value.name == "CUDA_ERROR_NOT_PERMITTED"
        assert not os.path.exists(path)
    finally:
        liar.close()
    honest = connect(gpud.endpoint)  # the shim proves it: same host, shared memory on
    try:
        assert honest.conn.same_host
    finally:
        honest.conn.close()
