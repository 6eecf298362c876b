"""The pool controller's wire protocol (woolyhv/pool/protocol.py): a request is checked against its Struct in one
step, and every bad one is a ProtocolError naming what is wrong; the answers that steer a placement decode to
Structs, listings stay maps."""

from __future__ import annotations

import pytest

from proto.codec import ProtocolError
from woolyhv.pool import protocol as P


def test_requests_round_trip_through_their_maps() -> None:
    for req in (
        P.Nodes(),
        P.Explain(id="0123abcd"),
        P.Cordon(node="n1", reason="disk"),
        P.Uncordon(node="n1"),
        P.Drain(node="n1", status=True),
        P.Quota(tenant="team-a", bytes=8 << 30),
        P.Quota(tenant="team-a", bytes=None),
        P.Place(request={"memory": 1 << 30}),
    ):
        assert P.decode_request(P.as_map(req)) == req


@pytest.mark.parametrize(
    "body,needle",
    [
        ({"kind": "nope"}, "unknown request kind 'nope'"),
        ({}, "unknown request kind None"),
        ({"kind": "nodes", "extra": 1}, "unknown field `extra`"),
        ({"kind": "cordon"}, "missing required field `node`"),
        ({"kind": "cordon", "node": "../etc"}, "$.node"),
        ({"kind": "cordon", "node": {"a": 1}}, "Expected `str`"),
        ({"kind": "explain", "id": "x" * 65}, "length <= 64"),
        ({"kind": "quota", "tenant": "t", "bytes": -1}, ">= 0"),
        ({"kind": "quota", "tenant": "t", "bytes": "lots"}, "$.bytes"),
        ({"kind": "drain", "node": "n", "reason": "r" * 501}, "length <= 500"),
        ({"kind": "place", "request": "x"}, "Expected `object`"),
        ({"kind": "ping", "rid": -1}, ">= 0"),
    ],
)
def test_bad_requests_are_refused_naming_the_field(body: dict, needle: str) -> None:
    with pytest.raises(ProtocolError) as exc:
        P.decode_request(body)
    assert needle in str(exc.value), str(exc.value)


def test_answers() -> None:
    placed = P.decode_answer(
        {"kind": "placed", "rid": 3, "node": "n", "endpoint": "e", "reservation": "r", "decision": "d"}
    )
    assert isinstance(placed, P.Placed) and placed.node == "n" and placed.device == 0
    listing = {"kind": "nodes", "nodes": [], "ignored": {}}
    assert P.decode_answer(listing) is listing
    with pytest.raises(ProtocolError, match="invalid placed answer"):
        P.decode_answer({"kind": "placed", "node": "n"})
