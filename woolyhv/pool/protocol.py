"""The pool controller's wire protocol: every request a client sends and the answers that steer a placement, as
msgspec Structs tagged by ``kind`` (the bytes are msgpack maps, as proto/messages.py's are).

A request is decoded and checked in one step (``decode_request``): an unknown kind, an unknown field, a missing one
or a value out of its range is a ProtocolError naming it, before any handler runs. The listing answers (nodes,
sessions, decision, status, drain) are maps of display rows for ``wooly pool`` and are built by their handlers.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from proto.codec import ProtocolError

Name = Annotated[str, Meta(min_length=1, max_length=253, pattern=r"^[^/]*$")]  # a node or tenant: one etcd key part
Reason = Annotated[str, Meta(max_length=500)]


class _Msg(msgspec.Struct, tag_field="kind", forbid_unknown_fields=True, kw_only=True):
    rid: Annotated[int, Meta(ge=0, le=(1 << 63) - 1)] = 0


class _Req(_Msg, kw_only=True):
    token: Annotated[str, Meta(max_length=4096)] = ""  # the admin token, for the calls that need it


class Place(_Req, tag="place", kw_only=True):
    """A placement request; ``request`` is a PlaceRequest (woolyhv/pool/model.py), validated by the controller."""

    request: dict[str, Any]


class Nodes(_Req, tag="nodes", kw_only=True):
    pass


class Sessions(_Req, tag="sessions", kw_only=True):
    pass


class Status(_Req, tag="status", kw_only=True):
    pass


class Ping(_Req, tag="ping", kw_only=True):
    pass


class Explain(_Req, tag="explain", kw_only=True):
    id: Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[^/]*$")]


class Cordon(_Req, tag="cordon", kw_only=True):
    node: Name
    reason: Reason = ""


class Uncordon(_Req, tag="uncordon", kw_only=True):
    node: Name


class Drain(_Req, tag="drain", kw_only=True):
    """Start draining ``node``, or with ``status`` report how far its drain got (NOTE [drain])."""

    node: Name
    reason: Reason = ""
    status: bool = False


class Quota(_Req, tag="quota", kw_only=True):
    """A tenant's pool-wide quota in bytes; None removes it."""

    tenant: Name
    bytes: Annotated[int, Meta(ge=0)] | None


Request = Place | Nodes | Sessions | Status | Ping | Explain | Cordon | Uncordon | Drain | Quota
KINDS = sorted(c.__struct_config__.tag for c in Request.__args__)  # type: ignore[attr-defined]


def decode_request(body: dict[str, Any]) -> Request:
    """A request map off the wire, checked against its Struct."""
    kind = body.get("kind")
    if kind not in KINDS:
        raise ProtocolError(f"unknown request kind {kind!r} (expected one of {', '.join(KINDS)})")
    try:
        return msgspec.convert(body, Request)  # type: ignore[arg-type]
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"invalid {kind} request: {exc}") from None


# ---------------------------------------------------------------- the answers that steer a placement


class Error(_Msg, tag="error", kw_only=True):
    code: int
    name: str
    message: str
    decision: str = ""


class Redirect(_Msg, tag="redirect", kw_only=True):
    """Ask ``leader`` instead ("" while an election is under way)."""

    leader: str = ""
    message: str = ""


class Waiting(_Msg, tag="waiting", kw_only=True):
    """The request fits nowhere yet: the final answer follows; ``decision`` explains why (``wooly pool explain``)."""

    decision: str
    reason: str = ""


class Placed(_Msg, tag="placed", kw_only=True):
    node: str
    endpoint: str
    server_key: str = ""
    reservation: str
    decision: str
    device: int = 0


class Ok(_Msg, tag="ok", kw_only=True):
    pass


class Pong(_Msg, tag="pong", kw_only=True):
    is_leader: bool = False


Steering = Error | Redirect | Waiting | Placed | Ok | Pong
_STEERING = {c.__struct_config__.tag for c in Steering.__args__}  # type: ignore[attr-defined]


def decode_answer(body: dict[str, Any]) -> Steering | dict[str, Any]:
    """An answer off the wire: a Struct for the kinds above (checked), the map itself for a listing."""
    if body.get("kind") not in _STEERING:
        return body
    try:
        return msgspec.convert(body, Steering, strict=False)  # type: ignore[arg-type]
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"invalid {body.get('kind')} answer from the controller: {exc}") from None


def as_map(msg: msgspec.Struct) -> dict[str, Any]:
    """A Struct as the map the wire carries (``kind`` included)."""
    out: dict[str, Any] = msgspec.to_builtins(msg)
    return out
