"""Property tests of the codec: valid messages round-trip; garbage only ever raises ProtocolError."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto import messages as m
from proto.codec import ProtocolError, decode, decode_reply, encode, encode_body
from proto.constants import VERSION_FRAME
from proto.errors import CURESULT, CudaError, error_name, error_string

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
handle = st.integers(min_value=0, max_value=(1 << 63) - 1)
size = st.integers(min_value=0, max_value=1 << 48)
dim3 = st.lists(st.integers(min_value=1, max_value=(1 << 31) - 1), min_size=3, max_size=3)

messages = st.one_of(
    st.builds(m.MemAlloc, rid=handle, size=size),
    st.builds(m.MemFree, rid=handle, addr=u64),
    st.builds(m.MemcpyDtoH, rid=handle, src=u64, size=size, stream=handle),
    st.builds(
        m.Memset,
        rid=handle,
        dst=u64,
        value=st.integers(0, 0xFFFFFFFF),
        elem_size=st.sampled_from([1, 2, 4]),
        count=size,
    ),
    st.builds(
        m.Launch,
        rid=handle,
        function=handle,
        grid=dim3,
        block=dim3,
        shared_mem=st.integers(0, 1 << 30),
        stream=handle,
        params=st.binary(max_size=256),
    ),
    st.builds(m.EventRecord, rid=handle, event=handle, stream=handle),
    st.builds(m.Error, rid=handle, code=st.integers(0, 999), name=st.text(max_size=40), message=st.text(max_size=200)),
    st.builds(
        m.Result,
        rid=handle,
        value=st.one_of(st.none(), st.integers(-(1 << 63), (1 << 64) - 1), st.text(), st.lists(st.integers(0, 10))),
    ),
)


@given(messages, st.lists(st.binary(max_size=64), max_size=4))
@settings(max_examples=300, deadline=None)
def test_roundtrip(msg, bulk):
    decoded, got_bulk = (decode_reply if msg.reply else decode)(encode(msg, bulk))
    assert decoded == msg and type(decoded) is type(msg)
    assert [bytes(b) for b in got_bulk] == bulk


@given(
    st.lists(messages, min_size=0, max_size=20).map(
        lambda ms: [x for x in ms if x.kind in {"mem_free", "memset", "launch", "event_record"}]
    )
)
@settings(max_examples=100, deadline=None)
def test_batch_roundtrip(calls):
    batch = m.Batch(rid=1, calls=calls)
    decoded, _ = decode(encode(batch))
    assert decoded == batch


@given(st.lists(st.binary(max_size=200), min_size=0, max_size=5))
@settings(max_examples=500, deadline=None)
def test_garbage_frames_raise_protocol_error_only(frames):
    try:
        decode(frames)
    except ProtocolError as exc:
        assert exc.code in (1, 801) and exc.message
    # (decoding random bytes successfully is allowed only if they form a valid message)


@given(
    st.dictionaries(
        st.text(max_size=12),
        st.one_of(
            st.integers(-(1 << 63), (1 << 64) - 1),
            st.text(max_size=12),
            st.binary(max_size=12),
            st.none(),
            st.floats(allow_nan=False),
        ),
        max_size=6,
    )
)
@settings(max_examples=500, deadline=None)
def test_random_maps_raise_protocol_error_only(body):
    frames = [VERSION_FRAME + msgpack.packb(body)]
    try:
        decode(frames)
    except ProtocolError as exc:
        assert exc.message


@given(
    st.sampled_from(sorted(m.MESSAGES)),
    st.dictionaries(st.text(max_size=10), st.integers(-(1 << 63), (1 << 64) - 1), max_size=4),
)
@settings(max_examples=300, deadline=None)
def test_every_kind_with_random_fields_is_safe(kind, fields):
    frames = encode_body({"kind": kind, **fields})
    try:
        decode(frames)
    except ProtocolError:
        pass


def test_requests_and_replies_are_apart_and_a_batch_holds_only_queued_calls():
    """NOTE [wire schema]: the unions are built from the classes; gpud decodes no reply, the client no request."""
    assert {"result", "error", "hello_reply", "moved", "sync_due", "pong"} == {
        k for k, c in m.MESSAGES.items() if c.reply
    }
    with pytest.raises(ProtocolError, match="invalid 'result' message"):
        decode(encode(m.Result(rid=1, value=2)))
    with pytest.raises(ProtocolError):
        decode_reply(encode(m.MemAlloc(size=1)))
    with pytest.raises(ProtocolError, match=r"calls\[0\]"):
        decode(encode(m.Batch(calls=[m.MemAlloc(size=1)])))  # a call with a reply cannot be queued
    decode(encode(m.Batch(calls=[m.MemFree(addr=1)])))
    with pytest.raises(ProtocolError, match="invalid 'mem_alloc' message"):
        decode(encode(m.MemAlloc(size=-1)))  # a Struct is built unchecked: the decoder checks its limits
    with pytest.raises(ProtocolError, match="invalid 'launch' message"):
        decode(encode_body({"kind": "launch", "function": True, "grid": [1, 1, 1], "block": [1, 1, 1]}))  # strict


def test_version_mismatch_is_not_supported():
    with pytest.raises(ProtocolError) as e:
        decode([b"OTHER!" + msgpack.packb({"kind": "ping"})])
    assert e.value.name == "CUDA_ERROR_NOT_SUPPORTED"


def test_oversize_body_refused_before_decoding():
    with pytest.raises(ProtocolError) as e:
        decode([VERSION_FRAME + b"\x80" * ((64 << 20) + 1)])
    assert "limit" in e.value.message


def test_no_pickle_anywhere():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    for pkg in ("proto", "gpud", "shim"):
        for path in (root / pkg).rglob("*.py"):
            text = path.read_text()
            assert "import pickle" not in text and "pickle.loads" not in text, path


def test_error_table_names_and_strings():
    assert error_name(1) == "CUDA_ERROR_INVALID_VALUE" and error_string(1) == "invalid argument"
    assert error_name(700) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name(12345) == "CUDA_ERROR_12345"
    assert all(name.startswith("CUDA_") for name, _ in CURESULT.values())
    e = CudaError(719, "boom")
    assert str(e) == "CUDA_ERROR_LAUNCH_FAILED: boom" and e.sticky
