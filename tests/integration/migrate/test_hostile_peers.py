"""The peer calls of live migration and checkpoints (move_*, ckpt_*, restore) against a real gpud, sent by someone
who is not a peer: nothing is created without a pool order or the admin token, a checkpoint's bytes must match
their digests, a restore needs the session's token, and gpud goes on serving its clients throughout.
One checkpoint is then made by hand (with the admin token) and restored, to show what a restore re-creates."""

from __future__ import annotations

import hashlib
import secrets

import pytest
import xxhash
import zmq

from proto import constants as C
from proto import curve
from proto.codec import encode_body, unpack_body
from proto.errors import error_name
from tests.conftest import connect, start

ADMIN = "peer-admin-" + secrets.token_hex(4)
MiB = 1 << 20


@pytest.fixture(scope="module")
def gpud():
    g = start("tcp", extra_args=["--admin-token", ADMIN])
    yield g
    g.stop()


class Raw:
    def __init__(self, endpoint: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, 20_000)
        curve.secure_client(self.sock, endpoint)  # as any client of this host's gpud (its key is on this host)
        self.sock.connect(endpoint)
        self.rid = 0

    def call(self, body: dict, bulk: list | None = None) -> dict:
        self.rid += 1
        self.sock.send_multipart(encode_body(body | {"rid": self.rid}, bulk or []))
        while True:
            reply, self.bulk = unpack_body(self.sock.recv_multipart())
            if reply.get("rid") == self.rid:
                return reply

    def close(self) -> None:
        self.sock.close(0)


def _error(reply: dict) -> str:
    assert reply["kind"] == "error", reply
    return error_name(reply["code"])


def _state(session: str, tenant: str, base: int, regions: list[list[int]]) -> dict:
    return {
        "kind": "move_in",
        "rid": 0,
        "session": session,
        "tenant": tenant,
        "arena": [base, 64 << 30],
        "regions": regions,
        "modules": [],
        "globals": [],
        "functions": [],
        "streams": [],
        "events": [],
        "messages": 0,
    }


def _begin(session: str, tenant: str, state: dict, regions: list, **kw) -> dict:
    return {
        "kind": "ckpt_begin",
        "session": session,
        "tenant": tenant,
        "seq": 7,
        "restore_key": hashlib.sha256(b"the-restore-token").hexdigest(),
        "chunk": MiB,
        "state": state,
        "regions": regions,
        "blobs": [],
    } | kw


def test_moves_and_checkpoints_need_an_order_or_the_admin_token(gpud) -> None:  # type: ignore[no-untyped-def]
    raw = Raw(gpud.endpoint)
    try:
        base = (17 << 40) + (secrets.randbelow(64) << 36)
        st = _state("s-intruder", "victim", base, [[base, MiB]])
        assert _error(raw.call(st)) == "CUDA_ERROR_NOT_PERMITTED"
        assert _error(raw.call(st | {"admin_token": "wrong"})) == "CUDA_ERROR_NOT_PERMITTED"
        assert _error(raw.call(st | {"order": "a" * 32, "source": "n9"})) == "CUDA_ERROR_NOT_PERMITTED"  # in no pool
        assert (
            _error(raw.call({"kind": "move_data", "move": "nope", "addr": base, "frame": 0}, [b"x"]))
            == "CUDA_ERROR_INVALID_HANDLE"
        )
        assert _error(raw.call({"kind": "move_commit", "move": "nope", "total": 0})) == "CUDA_ERROR_INVALID_HANDLE"
        assert (
            _error(raw.call({"kind": "move_out", "session": "x", "endpoint": "tcp://127.0.0.1:1"}))
            == "CUDA_ERROR_NOT_PERMITTED"
        )
        d = xxhash.xxh3_128_digest(b"\0" * MiB)
        begin = _begin("s-intruder", "victim", st, [[base, MiB, [d]]])
        assert _error(raw.call(begin)) == "CUDA_ERROR_NOT_PERMITTED"
        assert _error(raw.call(begin | {"admin_token": "wrong"})) == "CUDA_ERROR_NOT_PERMITTED"
        assert (
            _error(raw.call({"kind": "ckpt_chunk", "ckpt": "nope", "digest": d, "frame": 0}, [b"\0"]))
            == "CUDA_ERROR_INVALID_HANDLE"
        )
        assert (
            _error(raw.call({"kind": "restore", "session": "s-intruder", "tenant": "victim", "token": "guess"}))
            == "CUDA_ERROR_NOT_FOUND"
        )
        # malformed: a chunk list that does not cover its region, a checkpoint larger than the tenant may hold
        sx = _state("s-x", "victim", base, [[base, MiB]])
        r = raw.call(_begin("s-x", "victim", sx, [[base, 3 * MiB, [d]]], admin_token=ADMIN))
        assert _error(r) == "CUDA_ERROR_INVALID_VALUE" and "chunk list" in r["message"], r
        huge = [[base, 1 << 40, [d] * (1 << 20)]]
        r = raw.call(_begin("s-x", "victim", sx, huge, admin_token=ADMIN))
        assert _error(r) == "CUDA_ERROR_OUT_OF_MEMORY", r
        # a move's pre-copy: the same rule, and only into the memory it announced, bytes checked against digests
        prep = {
            "kind": "move_prep",
            "session": "s-pre",
            "tenant": "victim",
            "arena": [base, 64 << 30],
            "regions": [[base, 2 * MiB]],
        }
        assert _error(raw.call(prep)) == "CUDA_ERROR_NOT_PERMITTED"
        assert (
            _error(
                raw.call({"kind": "move_chunk", "prep": "nope", "addr": base, "digest": d, "frame": 0}, [b"\0" * MiB])
            )
            == "CUDA_ERROR_INVALID_HANDLE"
        )
        r = raw.call(prep | {"admin_token": ADMIN})
        assert r["kind"] == "result", r
        pid = r["value"]["prep"]
        chunk = {"kind": "move_chunk", "prep": pid, "digest": d, "frame": 0}
        assert _error(raw.call(chunk | {"addr": base + 2 * MiB}, [b"\0" * MiB])) == "CUDA_ERROR_INVALID_VALUE"
        assert _error(raw.call(chunk | {"addr": base + MiB + 4096}, [b"\0" * MiB])) == "CUDA_ERROR_INVALID_VALUE"
        assert raw.call(chunk | {"addr": base}, [b"\1" * MiB])["value"] == {"kept": False}  # not what d names
        assert raw.call(chunk | {"addr": base}, [b"\0" * MiB])["value"] == {"kept": True}
    finally:
        raw.close()
    # gpud serves its clients as before
    drv = connect(gpud.endpoint)
    try:
        p = drv.mem_alloc(4096)
        drv.memcpy_htod(p, b"\x07" * 4096)
        assert bytes(drv.memcpy_dtoh(p, 4096)) == b"\x07" * 4096
    finally:
        drv.conn.close()


def test_a_checkpoint_is_checked_chunk_by_chunk_and_restores_only_with_its_token(gpud) -> None:  # type: ignore[no-untyped-def]
    raw = Raw(gpud.endpoint)
    try:
        base = (40 << 40) + (secrets.randbelow(64) << 36)
        data = bytes(range(256)) * (MiB // 256)
        tail = b"\x5a" * (MiB // 2)
        d1, d2 = xxhash.xxh3_128_digest(data), xxhash.xxh3_128_digest(tail)
        regions = [[base, MiB], [base + 2 * MiB, MiB // 2]]
        st = _state("s-kept", "alice", base, regions)
        begin = _begin("s-kept", "alice", st, [[base, MiB, [d1]], [base + 2 * MiB, MiB // 2, [d2]]], admin_token=ADMIN)
        r = raw.call(begin)
        assert r["kind"] == "result", r
        ck, need = r["value"]["ckpt"], r["value"]["need"]
        assert sorted(need) == sorted([d1, d2])
        # bytes that are not what the digest names, a digest it did not ask for: refused
        assert (
            _error(raw.call({"kind": "ckpt_chunk", "ckpt": ck, "digest": d1, "frame": 0}, [tail]))
            == "CUDA_ERROR_INVALID_VALUE"
        )
        assert (
            _error(raw.call({"kind": "ckpt_chunk", "ckpt": ck, "digest": b"\1" * 16, "frame": 0}, [tail]))
            == "CUDA_ERROR_INVALID_VALUE"
        )
        assert raw.call({"kind": "ckpt_chunk", "ckpt": ck, "digest": d1, "frame": 0}, [data])["kind"] == "result"
        assert _error(raw.call({"kind": "ckpt_commit", "ckpt": ck})) == "CUDA_ERROR_INVALID_VALUE"  # d2 never came
        # again, whole
        r = raw.call(begin)
        ck = r["value"]["ckpt"]
        for dg, chunk in ((d1, data), (d2, tail)):
            assert raw.call({"kind": "ckpt_chunk", "ckpt": ck, "digest": dg, "frame": 0}, [chunk])["kind"] == "result"
        assert raw.call({"kind": "ckpt_commit", "ckpt": ck})["value"] == {"seq": 7}
        # the next checkpoint of the same content needs nothing
        assert raw.call(begin)["value"]["need"] == []
        assert (
            raw.call({"kind": "restore", "session": "s-kept", "tenant": "alice", "token": "wrong"})["kind"] == "error"
        )
        assert (
            _error(
                raw.call({"kind": "restore", "session": "s-kept", "tenant": "mallory", "token": "the-restore-token"})
            )
            == "CUDA_ERROR_NOT_PERMITTED"
        )
        r = raw.call({"kind": "restore", "session": "s-kept", "tenant": "alice", "token": "the-restore-token"})
        assert r["kind"] == "result", r
        assert r["value"]["executed"] == 7
        resume = r["value"]["resume"]
    finally:
        raw.close()
    # the client takes the session over with the resume token: same session, same addresses, same bytes
    client = Raw(gpud.endpoint)
    try:
        hello = {
            "kind": "hello",
            "protocol": C.PROTOCOL_VERSION,
            "client_version": "test",
            "tenant": "alice",
            "pid": 1,
            "host_id": "elsewhere",
            "program": "t",
            "resume": resume,
        }
        r = client.call(hello)
        assert r["kind"] == "hello_reply" and r["session"] == "s-kept", r
        got = client.call({"kind": "memcpy_dtoh", "src": base, "size": MiB})
        assert got["kind"] == "result" and bytes(client.bulk[0]) == data, got
        r = client.call({"kind": "memcpy_dtoh", "src": base + 2 * MiB, "size": MiB // 2})
        assert r["kind"] == "result" and bytes(client.bulk[0]) == tail, r
        # a resume token works once
        again = Raw(gpud.endpoint)
        try:
            assert again.call(hello)["kind"] == "error"
        finally:
            again.close()
    finally:
        client.close()
