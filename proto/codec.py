"""The codec: ``encode(msg, bulk) -> frames`` and ``decode(frames) -> (msg, bulk)``.

Frame layout of every message::

    [VERSION_FRAME + msgpack(body), bulk_0, bulk_1, ...]

The first frame starts with the 6-byte protocol version and carries the body after it: a separate
version frame would cost ~28 us per round trip (pyzmq handles each frame of a multipart message
in Python; measured by benchmarks/rpc.py). The body is the model's fields as a msgpack map (no pickle, ever: the wire is a security
boundary). Bulk payloads (copies, module images) ride as their own frames so neither side
copies them into the body; a body field ``frame`` holds the index of its bulk frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
from pydantic import BaseModel, ValidationError

from proto import errors
from proto.constants import MAX_BODY_BYTES, MAX_BULK_FRAMES, VERSION_FRAME
from proto.messages import MESSAGE_ADAPTER


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
    return [VERSION_FRAME + msgpack.packb(body, use_bin_type=True), *bulk]


def encode(msg: BaseModel, bulk: Sequence[Any] = ()) -> list[Any]:
    if len(bulk) > MAX_BULK_FRAMES:
        raise ProtocolError(f"too many bulk frames: {len(bulk)} > {MAX_BULK_FRAMES}")
    return encode_body(msg.model_dump(), bulk)


def unpack_body(frames: Sequence[Any]) -> tuple[dict[str, Any], list[Any]]:
    """Check the version frame and limits, unpack the msgpack body. No model validation."""
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
    body_frame = memoryview(head)[len(VERSION_FRAME) :]
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


def validate(body: dict[str, Any]) -> Any:
    try:
        return MESSAGE_ADAPTER.validate_python(body)
    except ValidationError as exc:
        kind = body.get("kind", "?")
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise ProtocolError(
            f"invalid {kind!r} message: {loc}: {first.get('msg')} ({exc.error_count()} error(s))"
        ) from None


def decode(frames: Sequence[Any]) -> tuple[Any, list[Any]]:
    body, bulk = unpack_body(frames)
    return validate(body), bulk
