"""The codec: ``encode(msg, bulk) -> frames`` and ``decode(frames) -> (msg, bulk)``.

Frame layout of every message::

    [VERSION_FRAME + msgpack(body), bulk_0, bulk_1, ...]

The first frame starts with the 6-byte protocol version and carries the body after it: a separate
version frame would cost ~28 us per round trip (pyzmq handles each frame of a multipart message
in Python; measured by benchmarks/rpc.py). The body is the model's fields as a msgpack map (no pickle, ever: the wire is a security
boundary). Bulk payloads (copies, module images) ride as their own frames so neither side
copies them into the body; a body field ``frame`` holds the index of its bulk frame.

Both ends encode ``proto.messages`` Structs (``encode``) and decode straight into them: gpud the requests
(``decode``), the client the replies (``decode_reply``), NOTE [wire schema]. ``encode_body``/``unpack_body`` are
the same framing for plain maps: the pool's controller protocol, and tests that send what no Struct would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
import msgspec

from proto import errors
from proto import messages as m
from proto.constants import MAX_BODY_BYTES, MAX_BULK_FRAMES, VERSION_FRAME


def _plain(v: Any) -> Any:
    """msgspec values inside a plain map (an ATen value's Ext, a Struct) for msgpack."""
    if isinstance(v, msgspec.msgpack.Ext):
        return msgpack.ExtType(v.code, v.data)
    if isinstance(v, msgspec.Struct):
        return msgspec.to_builtins(v)
    raise TypeError(f"cannot encode a {type(v).__name__}")


_ENCODER = msgspec.msgpack.Encoder()
# ext values (ATen arguments, NOTE [aten values] in proto/aten.py) stay msgspec.msgpack.Ext: no hook per value
_DECODER = msgspec.msgpack.Decoder(m.Message)
_REPLY_DECODER = msgspec.msgpack.Decoder(m.Reply)


class ProtocolError(errors.CudaError):
    """A message that cannot be decoded or fails validation (CUDA_ERROR_INVALID_VALUE)."""

    def __init__(self, message: str, code: int = errors.INVALID_VALUE) -> None:
        super().__init__(code, message)


def _frame_len(frame: Any) -> int:
    if hasattr(frame, "nbytes"):
        return int(frame.nbytes)
    if hasattr(frame, "buffer"):  # zmq.Frame
        return len(frame.buffer)
    return len(frame)


def _as_bytes(frame: Any) -> bytes | memoryview:
    if hasattr(frame, "buffer"):  # zmq.Frame received with copy=False
        return frame.buffer
    return frame


def encode_body(body: dict[str, Any], bulk: Sequence[Any] = ()) -> list[Any]:
    """Encode a plain dict body (already in wire form). Used on hot paths that skip model dumps."""
    return [VERSION_FRAME + msgpack.packb(body, use_bin_type=True, default=_plain), *bulk]


def encode(msg: msgspec.Struct | dict[str, Any], bulk: Sequence[Any] = ()) -> list[Any]:
    """A message (a ``proto.messages`` Struct; a plain map goes as it is) and its bulk frames, as frames."""
    if len(bulk) > MAX_BULK_FRAMES:
        raise ProtocolError(f"too many bulk frames: {len(bulk)} > {MAX_BULK_FRAMES}")
    if isinstance(msg, dict):
        return encode_body(msg, bulk)
    return [VERSION_FRAME + _ENCODER.encode(msg), *bulk]


def _body(frames: Sequence[Any]) -> memoryview:
    """Check the version frame and limits; the body's bytes."""
    if len(frames) < 1:
        raise ProtocolError("truncated message: no frames")
    head = _as_bytes(frames[0])
    size = _frame_len(head) - len(VERSION_FRAME)
    version = bytes(head[: len(VERSION_FRAME)])
    if version != VERSION_FRAME:
        if len(version) < len(VERSION_FRAME) and VERSION_FRAME.startswith(version):
            raise ProtocolError(f"truncated message: first frame of {len(version)} bytes holds no body")
        raise ProtocolError(
            f"protocol version {version!r} does not match {VERSION_FRAME!r}",
            errors.NOT_SUPPORTED,
        )
    if size <= 0:
        raise ProtocolError("truncated message: no body after the version")
    if size > MAX_BODY_BYTES:
        raise ProtocolError(f"message body of {size} bytes exceeds the {MAX_BODY_BYTES} byte limit")
    if len(frames) - 1 > MAX_BULK_FRAMES:
        raise ProtocolError(f"too many bulk frames: {len(frames) - 1} > {MAX_BULK_FRAMES}")
    return memoryview(head)[len(VERSION_FRAME) :]


def unpack_body(frames: Sequence[Any]) -> tuple[dict[str, Any], list[Any]]:
    """Check the version frame and limits, unpack the msgpack body as a plain map (no schema)."""
    body_frame = _body(frames)
    try:
        body = msgpack.unpackb(
            body_frame,
            raw=False,
            strict_map_key=False,
        )
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(f"undecodable message body: {type(exc).__name__}: {exc}") from None
    if not isinstance(body, dict):
        raise ProtocolError(f"message body must be a map, got {type(body).__name__}")
    bulk = [_as_bytes(f) for f in frames[1:]]
    return body, bulk


def _invalid(body: memoryview, exc: Exception) -> ProtocolError:
    try:
        raw = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as err:  # msgpack raises several unrelated types on garbage
        return ProtocolError(f"undecodable message body: {type(err).__name__}: {err}")
    if not isinstance(raw, dict):
        return ProtocolError(f"message body must be a map, got {type(raw).__name__}")
    kind = raw.get("kind", "?")
    return ProtocolError(f"invalid {kind!r} message: {exc}")


def _typed(decoder: msgspec.msgpack.Decoder[Any], frames: Sequence[Any]) -> tuple[Any, list[Any]]:
    body = _body(frames)
    try:
        msg = decoder.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _invalid(body, exc) from None
    return msg, [_as_bytes(f) for f in frames[1:]]


def decode(frames: Sequence[Any]) -> tuple[Any, list[Any]]:
    """A request as its Struct and its bulk frames; ProtocolError (CUDA_ERROR_INVALID_VALUE) names what is wrong."""
    return _typed(_DECODER, frames)


def check(msg: msgspec.Struct) -> Any:
    """``msg`` as gpud will read it (its limits checked): a client fails early on what gpud would refuse."""
    try:
        return msgspec.msgpack.decode(_ENCODER.encode(msg), type=type(msg))
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"invalid {getattr(msg, 'kind', '?')!r} message: {exc}") from None


def decode_reply(frames: Sequence[Any]) -> tuple[Any, list[Any]]:
    """A reply (``proto.messages.Reply``) as its Struct and its bulk frames."""
    return _typed(_REPLY_DECODER, frames)


def request_id(frames: Sequence[Any]) -> int:
    """The ``rid`` of a request that did not decode (0 when it has none), so its error reply reaches its caller."""
    try:
        raw = msgpack.unpackb(_body(frames), raw=False, strict_map_key=False)
    except Exception:  # noqa: BLE001 - garbage: no rid
        return 0
    r = raw.get("rid") if isinstance(raw, dict) else None
    return r if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < (1 << 63) else 0
