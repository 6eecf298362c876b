"""Driver-API round trips against a real gpud over tcp and ipc, data checked byte for byte."""

from __future__ import annotations

import numpy as np
import pytest

from proto.errors import CudaError

SIZES = [1, 7, 4096, 65537, (1 << 20) + 3, 20 << 20]  # small inline frames and the shm ring


@pytest.mark.parametrize("size", SIZES)
def test_htod_dtoh_roundtrip(driver, size):
    rng = np.random.default_rng(size)
    data = rng.integers(0, 256, size, dtype=np.uint8)
    ptr = driver.mem_alloc(size)
    driver.memcpy_htod(ptr, data)
    back = np.frombuffer(bytes(driver.memcpy_dtoh(ptr, size)), dtype=np.uint8)
    assert np.array_equal(back, data)
    out = np.zeros(size, dtype=np.uint8)
    driver.memcpy_dtoh(ptr, size, out=out)
    assert np.array_equal(out, data)
    driver.mem_free(ptr)


def test_partial_and_offset_copies(driver):
    ptr = driver.mem_alloc(1024)
    driver.memset(ptr, 0, 1, 1024)
    driver.memcpy_htod(ptr + 100, b"hello world")
    got = bytes(driver.memcpy_dtoh(ptr + 95, 20))
    assert got == b"\0" * 5 + b"hello world" + b"\0" * 4
    driver.mem_free(ptr)


def test_dtod_and_memsets(driver):
    n = 1 << 16
    a = driver.mem_alloc(4 * n)
    b = driver.mem_alloc(4 * n)
    driver.memset(a, 0xDEADBEEF, 4, n)
    driver.memcpy_dtod(b, a, 4 * n)
    got = np.frombuffer(bytes(driver.memcpy_dtoh(b, 4 * n)), dtype=np.uint32)
    assert (got == 0xDEADBEEF).all()
    driver.memset(b + 2, 0xABCD, 2, 10)
    got16 = np.frombuffer(bytes(driver.memcpy_dtoh(b, 32)), dtype=np.uint16)
    assert list(got16[:2]) == [0xBEEF, 0xABCD] and (got16[2:11] == 0xABCD).all() and got16[11] == 0xDEAD
    driver.memset(b, 0x7F, 1, 3)
    assert bytes(driver.memcpy_dtoh(b, 4)) == b"\x7f\x7f\x7f\xab"
    driver.mem_free(a)
    driver.mem_free(b)


def test_mem_get_info_tracks_allocations(driver):
    free0, total = driver.mem_get_info()
    assert 0 < free0 <= total
    ptr = driver.mem_alloc(64 << 20)
    free1, _ = driver.mem_get_info()
    assert free0 - free1 >= 64 << 20
    assert driver.mem_get_address_range(ptr + 12345) == (ptr, 64 << 20)
    driver.mem_free(ptr)
    free2, _ = driver.mem_get_info()
    assert free2 >= free1 + (64 << 20) - (1 << 20)


def test_async_copies_in_stream_order(driver):
    s = driver.stream_create()
    n = 4 << 20
    a = driver.mem_alloc(n)
    b = driver.mem_alloc(n)
    for i in range(5):
        driver.memset(a, i, 1, n, stream=s)
        driver.memcpy_dtod(b, a, n, stream=s)
    got = np.frombuffer(bytes(driver.memcpy_dtoh(b, n, stream=s)), dtype=np.uint8)
    assert (got == 4).all()
    driver.stream_synchronize(s)
    assert driver.stream_query(s)
    driver.stream_destroy(s)


def test_device_facts_cached_and_consistent(driver):
    assert driver.device_get_count() == 1
    name = driver.device_get_name(0)
    assert "CPU" in name
    assert driver.device_compute_capability(0) == (8, 0)
    assert driver.device_get_attribute(10) == 32  # warp size
    assert driver.device_get_attribute(1) == 1024  # max threads per block
    before = driver.conn.round_trips
    for attr in range(1, 100):
        driver.device_get_attribute(attr)
    assert driver.conn.round_trips == before  # answered from the hello reply
    with pytest.raises(CudaError) as e:
        driver.device_get_name(3)
    assert e.value.name == "CUDA_ERROR_INVALID_DEVICE"


def test_a_synchronize_after_staged_copies_waits_on_the_ring_not_on_a_round_trip(driver):
    """NOTE [local synchronisation] (shim/shm.py): copy-then-synchronise costs no round trip when only staged copies
    are outstanding, and still is a call when anything else was queued."""
    n = 4 << 20
    rng = np.random.default_rng(3)
    ptr = driver.mem_alloc(n)
    driver.memcpy_htod(ptr, rng.integers(0, 256, n, dtype=np.uint8))  # first upload: content-addressed, calls
    driver.ctx_synchronize()
    ring = driver._staging()
    if ring is None:
        pytest.skip("no same-host staging ring on this transport")
    data = rng.integers(0, 256, n, dtype=np.uint8)
    driver.memcpy_htod(ptr, data)
    before = driver.conn.round_trips
    driver.ctx_synchronize()
    assert driver.conn.round_trips == before
    assert all(int(ring.flags[s]) == ring._issued[s] for s in range(ring.slots))  # every staged copy ran
    other = driver.mem_alloc(64)
    driver.memcpy_dtod(other, ptr + n - 64, 64)  # queued work the ring knows nothing of: a real call
    before = driver.conn.round_trips
    driver.ctx_synchronize()
    assert driver.conn.round_trips == before + 1
    driver.ctx_synchronize()  # nothing outstanding at all
    assert driver.conn.round_trips == before + 1
    assert bytes(driver.memcpy_dtoh(other, 64)) == data[-64:].tobytes()
    out = np.zeros(n, dtype=np.uint8)
    driver.memcpy_dtoh(ptr, n, out=out)
    assert np.array_equal(out, data)
