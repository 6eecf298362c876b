"""Hostile and mistaken input: every case gets a CUDA error with a message, and gpud keeps serving."""

from __future__ import annotations

import msgpack
import pytest
import zmq

from proto.codec import encode_body, unpack_body
from proto.constants import VERSION_FRAME
from proto.errors import CudaError
from tests.conftest import connect


def raw_roundtrip(endpoint: str, frames: list[bytes], timeout_ms: int = 5000) -> dict:
    from proto import curve

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    curve.secure_client(sock, endpoint)  # a hostile client that has the key: past the transport, at the decoder
    sock.connect(endpoint)
    try:
        sock.send_multipart(frames)
        assert sock.poll(timeout_ms, zmq.POLLIN), "gpud did not answer"
        body, _ = unpack_body(sock.recv_multipart())
        return body
    finally:
        sock.close(0)


def alive(endpoint: str) -> bool:
    return raw_roundtrip(endpoint, encode_body({"kind": "ping", "rid": 9}))["kind"] == "pong"


@pytest.mark.parametrize(
    "frames,code_name,fragment",
    [
        (
            [VERSION_FRAME + msgpack.packb({"kind": "launch_missiles", "rid": 1})],
            "CUDA_ERROR_INVALID_VALUE",
            "launch_missiles",
        ),
        (
            [VERSION_FRAME + msgpack.packb({"kind": "mem_alloc", "rid": 1, "size": "big"})],
            "CUDA_ERROR_INVALID_VALUE",
            "size",
        ),
        (
            [VERSION_FRAME + msgpack.packb({"kind": "mem_alloc", "rid": 1, "size": -5})],
            "CUDA_ERROR_INVALID_VALUE",
            "size",
        ),
        (
            [VERSION_FRAME + msgpack.packb({"kind": "mem_alloc", "rid": 1, "size": 1, "evil": 1})],
            "CUDA_ERROR_INVALID_VALUE",
            "evil",
        ),
        ([VERSION_FRAME + b"\xc1\xc1\xc1"], "CUDA_ERROR_INVALID_VALUE", "undecodable"),
        ([VERSION_FRAME + msgpack.packb([1, 2, 3])], "CUDA_ERROR_INVALID_VALUE", "map"),
        ([VERSION_FRAME], "CUDA_ERROR_INVALID_VALUE", "truncated"),
        ([b"WOO"], "CUDA_ERROR_INVALID_VALUE", "truncated"),
        ([b"WOOLY\x09" + msgpack.packb({"kind": "ping", "rid": 1})], "CUDA_ERROR_NOT_SUPPORTED", "version"),
        ([VERSION_FRAME + b"\x00" * (65 << 20)], "CUDA_ERROR_INVALID_VALUE", "limit"),
        (
            [
                VERSION_FRAME
                + msgpack.packb({"kind": "launch", "rid": 1, "function": 1, "grid": [1, 1], "block": [1, 1, 1]})
            ],
            "CUDA_ERROR_INVALID_VALUE",
            "grid",
        ),
    ],
)
def test_malformed_messages_get_errors(gpud, frames, code_name, fragment):
    body = raw_roundtrip(gpud.endpoint, frames)
    assert body["kind"] == "error"
    assert body["name"] == code_name
    assert fragment in body["message"]
    assert alive(gpud.endpoint)


def test_requests_without_session_are_refused(gpud):
    body = raw_roundtrip(gpud.endpoint, encode_body({"kind": "mem_alloc", "rid": 3, "size": 16}))
    assert body["kind"] == "error" and body["name"] == "CUDA_ERROR_NOT_INITIALIZED" and body["rid"] == 3


def test_bulk_frame_index_out_of_range(driver):
    ptr = driver.mem_alloc(16)
    with pytest.raises(CudaError) as e:
        driver.conn.call({"kind": "module_load", "module": 999, "frame": 3, "format": "ptx"})
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE" and "frame" in e.value.message
    driver.conn.post({"kind": "memcpy_htod", "dst": ptr, "frame": 5})  # names a frame that never came
    with pytest.raises(CudaError):
        driver.synchronize_errors()
    driver.mem_free(ptr)


def _expect(fn, name):
    with pytest.raises(CudaError) as e:
        fn()
    assert e.value.name == name, e.value
    assert e.value.message
    return e.value


def test_invalid_handles_and_pointers(driver):
    conn = driver.conn
    ptr = driver.mem_alloc(4096)
    # copies that overrun an allocation, or name no allocation
    _expect(lambda: conn.call({"kind": "memcpy_dtoh", "src": ptr + 4000, "size": 200}), "CUDA_ERROR_INVALID_VALUE")
    _expect(lambda: conn.call({"kind": "memcpy_dtoh", "src": 0xDEAD0000, "size": 8}), "CUDA_ERROR_INVALID_VALUE")
    conn.post({"kind": "memcpy_dtod", "dst": ptr, "src": ptr + 4090, "size": 16})
    _expect(driver.synchronize_errors, "CUDA_ERROR_INVALID_VALUE")
    conn.post({"kind": "memset", "dst": ptr + 1, "value": 0, "elem_size": 4, "count": 1})  # misaligned
    _expect(driver.synchronize_errors, "CUDA_ERROR_INVALID_VALUE")
    # unknown streams, events, modules, functions
    _expect(lambda: conn.call({"kind": "stream_synchronize", "stream": 12345}), "CUDA_ERROR_INVALID_HANDLE")
    _expect(lambda: conn.call({"kind": "event_query", "event": 777}), "CUDA_ERROR_INVALID_HANDLE")
    _expect(
        lambda: conn.call({"kind": "module_get_function", "module": 4242, "name": "k", "function": 99}),
        "CUDA_ERROR_INVALID_HANDLE",
    )
    conn.post({"kind": "launch", "function": 31337, "grid": [1, 1, 1], "block": [1, 1, 1]})
    _expect(driver.synchronize_errors, "CUDA_ERROR_INVALID_HANDLE")
    conn.post({"kind": "stream_create", "stream": 3})  # reserved handle
    _expect(driver.synchronize_errors, "CUDA_ERROR_INVALID_VALUE")
    # double free: the client library catches it locally, gpud catches it on the wire
    driver.mem_free(ptr)
    _expect(lambda: driver.mem_free(ptr), "CUDA_ERROR_INVALID_VALUE")
    conn.post({"kind": "mem_free", "addr": ptr})
    _expect(driver.synchronize_errors, "CUDA_ERROR_INVALID_VALUE")
    # freed memory can no longer be read
    _expect(lambda: conn.call({"kind": "memcpy_dtoh", "src": ptr, "size": 8}), "CUDA_ERROR_INVALID_VALUE")
    _expect(lambda: driver.mem_alloc(0), "CUDA_ERROR_INVALID_VALUE")
    _expect(lambda: conn.call({"kind": "mem_alloc", "size": 1 << 47}), "CUDA_ERROR_OUT_OF_MEMORY")
    # the session still works
    p2 = driver.mem_alloc(8)
    driver.memcpy_htod(p2, b"12345678")
    assert bytes(driver.memcpy_dtoh(p2, 8)) == b"12345678"


def test_sessions_cannot_touch_each_other(gpud):
    a = connect(gpud.endpoint)
    b = connect(gpud.endpoint)
    try:
        pa = a.mem_alloc(64)
        a.memcpy_htod(pa, b"A" * 64)
        a.ctx_synchronize()
        _expect(lambda: b.conn.call({"kind": "memcpy_dtoh", "src": pa, "size": 64}), "CUDA_ERROR_INVALID_VALUE")
        b.conn.post({"kind": "memset", "dst": pa, "value": 0, "elem_size": 1, "count": 64})
        b.conn.post({"kind": "mem_free", "addr": pa})
        _expect(b.synchronize_errors, "CUDA_ERROR_INVALID_VALUE")
        stream = a.stream_create()
        a.ctx_synchronize()
        _expect(lambda: b.conn.call({"kind": "stream_synchronize", "stream": stream}), "CUDA_ERROR_INVALID_HANDLE")
        assert bytes(a.memcpy_dtoh(pa, 64)) == b"A" * 64
    finally:
        a.conn.close()
        b.conn.close()


def test_launch_without_module_support_names_the_call(driver):
    ptx = b".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n ret;\n}\n"
    try:
        mod = driver.module_load_data(ptx)
    except CudaError as exc:  # a build without the JIT says so by name
        assert exc.name in ("CUDA_ERROR_NOT_SUPPORTED",)
        return
    fn = driver.module_get_function(mod, "k")
    _expect(lambda: driver.module_get_function(mod, "nope"), "CUDA_ERROR_NOT_FOUND")
    driver.launch_kernel(fn, (1, 1, 1), (32, 1, 1), b"")
    driver.ctx_synchronize()
    _expect(lambda: driver.launch_kernel(fn, (1, 1, 1), (2048, 1, 1), b""), "CUDA_ERROR_INVALID_VALUE")


def test_staged_copies_reject_bad_slots_and_ranges(driver):
    if not driver.conn.same_host:
        pytest.skip("staging ring is same-host only")
    ptr = driver.mem_alloc(4096)
    info, _ = driver.conn.call({"kind": "shm_open"})
    driver.conn.post({"kind": "shm_htod", "dst": ptr, "slot": info["slots"], "size": 16, "seq": 1})
    _expect(driver.synchronize_errors, "CUDA_ERROR_INVALID_VALUE")
    driver.conn.post({"kind": "shm_htod", "dst": ptr + 4000, "slot": 0, "size": 200, "seq": 2})
    _expect(driver.synchronize_errors, "CUDA_ERROR_INVALID_VALUE")
    driver.conn.post({"kind": "shm_dtoh", "src": ptr, "slot": 1, "size": info["slot_size"] + 1, "seq": 3})
    _expect(driver.synchronize_errors, "CUDA_ERROR_INVALID_VALUE")
    # a big copy through the ring still works afterwards, and an overrun is caught on the client
    data = bytes(range(256)) * 4096
    big = driver.mem_alloc(len(data))
    driver.memcpy_htod(big, data)
    assert bytes(driver.memcpy_dtoh(big, len(data))) == data
    _expect(lambda: driver.memcpy_dtoh(big + 1, len(data)), "CUDA_ERROR_INVALID_VALUE")


def test_vendor_library_operations_stay_inside_the_session(gpud):
    """fft_exec, blas_geam, rand_generate and solver sent straight to gpud (past the client's own checks): an extent outside
    the session's allocations, or one inside another session's, is CUDA_ERROR_INVALID_VALUE and nothing is written."""
    from proto import messages as m

    a, b = connect(gpud.endpoint), connect(gpud.endpoint)
    try:
        mine = a.mem_alloc(4096)
        theirs = b.mem_alloc(4096)
        b.memset(theirs, 0x5A, 1, 4096)
        b.ctx_synchronize()
        bad = [
            m.FftExec(type=0x29, rank=1, n=[1024], idata=mine, odata=theirs),  # another session's memory
            m.FftExec(type=0x29, rank=1, n=[1024], idata=mine, odata=mine),  # 8 KiB over a 4 KiB allocation
            m.FftExec(type=0x29, rank=3, n=[1 << 20, 1 << 20, 1 << 10], idata=mine, odata=mine),  # 2**50 elements
            m.BlasGeam(trans_a=0, trans_b=0, m=16, n=16, type="f32", a=mine, lda=16, b=mine, ldb=16, c=theirs, ldc=16),
            m.BlasGeam(trans_a=0, trans_b=0, m=64, n=64, type="f32", a=mine, lda=64, b=mine, ldb=64, c=mine, ldc=64),
            m.RandGenerate(dist="uniform", dtype="f32", out=theirs, n=16),
            m.RandGenerate(dist="uniform", dtype="f32", out=mine, n=2048),
            m.RandGenerate(dist="normal", dtype="u32", out=mine, n=2),  # no such pairing
            m.SolverCall(op="getrf", dtype="f64", m=4, n=4, a=mine, lda=4, ipiv=theirs, info=mine),  # pivots there
            m.SolverCall(op="potrf", dtype="f64", m=32, n=32, a=mine, lda=32),  # 8 KiB over a 4 KiB allocation
            m.SolverCall(op="getrs", dtype="f32", m=4, n=4, k=1, a=mine, lda=2, ipiv=mine, b=mine, ldb=4),  # lda < n
            m.SolverCall(op="gesvd", dtype="f64", m=4, n=4, jobu="A", jobvt="N", a=mine, lda=4, w=mine, u=0, ldu=4),
        ]
        for msg in bad:
            a.conn.post(msg)
            unsupported = msg.kind == "rand_generate" and msg.dtype == "u32"
            _expect(a.synchronize_errors, "CUDA_ERROR_NOT_SUPPORTED" if unsupported else "CUDA_ERROR_INVALID_VALUE")
        assert bytes(b.memcpy_dtoh(theirs, 4096)) == b"\x5a" * 4096  # the other session's memory is untouched
        a.conn.post(m.RandGenerate(dist="uniform", dtype="f32", out=mine, n=1024))  # and gpud still serves
        a.ctx_synchronize()
    finally:
        a.conn.close()
        b.conn.close()
