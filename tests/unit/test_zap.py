"""gpud/zap.py's answers (NOTE [client keys]): a listed key names its tenant, an unlisted one connects without a
tenant unless keys are required, anything malformed is refused."""

from __future__ import annotations

import zmq
from zmq.utils import z85

from gpud.zap import ZapHandler


def _handler(require: bool = False) -> tuple[ZapHandler, bytes]:
    public, _ = zmq.curve_keypair()
    h = ZapHandler.__new__(ZapHandler)  # the answers alone, without the thread and socket
    h.key_tenants, h.require_keys = {public: "alice"}, require
    return h, z85.decode(public)


def _req(mechanism: bytes, *creds: bytes) -> list[bytes]:
    return [b"1.0", b"7", b"wooly", b"127.0.0.1", b"", mechanism, *creds]


def test_listed_keys_name_their_tenant_and_others_connect_without_one() -> None:
    h, raw = _handler()
    assert h._answer(_req(b"CURVE", raw))[2:5] == [b"200", b"OK", b"alice"]
    other = z85.decode(zmq.curve_keypair()[0])
    assert h._answer(_req(b"CURVE", other))[2:5] == [b"200", b"OK", b""]
    assert h._answer(_req(b"NULL"))[2] == b"200"


def test_required_keys_and_malformed_requests_are_refused() -> None:
    h, raw = _handler(require=True)
    assert h._answer(_req(b"CURVE", raw))[4] == b"alice"
    assert h._answer(_req(b"CURVE", z85.decode(zmq.curve_keypair()[0])))[2] == b"400"
    assert h._answer(_req(b"CURVE", b"short"))[2] == b"400"
    assert h._answer(_req(b"PLAIN", b"u", b"p"))[2] == b"400"
    assert h._answer([b"0.9", b"1"])[2] == b"400"
    assert h._answer([])[2] == b"400"
