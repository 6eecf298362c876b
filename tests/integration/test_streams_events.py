"""Streams run in order and concurrently; events record, wait and time real work."""

from __future__ import annotations

import numpy as np
import pytest

from proto.errors import CudaError

BIG = 64 << 20


def _alloc_touched(driver):
    """An allocation whose pages are committed (the CPU backend commits lazily, like first touch)."""
    p = driver.mem_alloc(BIG)
    driver.memset(p, 0, 1, BIG)
    return p


def _busy(driver, stream, a, b, reps):
    for _ in range(reps):
        driver.memcpy_dtod(b, a, BIG, stream=stream)


def test_event_timing_measures_work(driver):
    a, b = _alloc_touched(driver), _alloc_touched(driver)
    s = driver.stream_create()
    e0, e1, e2 = driver.event_create(), driver.event_create(), driver.event_create()
    driver.event_record(e0, s)
    _busy(driver, s, a, b, 2)
    driver.event_record(e1, s)
    _busy(driver, s, a, b, 8)
    driver.event_record(e2, s)
    driver.event_synchronize(e2)
    short = driver.event_elapsed_time(e0, e1)
    long = driver.event_elapsed_time(e1, e2)
    assert short > 0 and long > short  # 8 copies take longer than 2
    assert driver.event_query(e2)
    for h in (e0, e1, e2):
        driver.event_destroy(h)
    driver.stream_destroy(s)
    driver.mem_free(a)
    driver.mem_free(b)


def test_event_query_not_ready_then_ready(driver):
    a, b = driver.mem_alloc(BIG), driver.mem_alloc(BIG)
    s = driver.stream_create()
    e = driver.event_create()
    _busy(driver, s, a, b, 20)
    driver.event_record(e, s)
    assert driver.event_query(e) is False or driver.stream_query(s)  # long work is rarely done yet
    driver.stream_synchronize(s)
    assert driver.event_query(e) is True
    assert driver.stream_query(s) is True


def test_stream_wait_event_orders_across_streams(driver):
    n = 16 << 20
    a, b = driver.mem_alloc(n), driver.mem_alloc(n)
    s1 = driver.stream_create(flags=1)
    s2 = driver.stream_create(flags=1)
    e = driver.event_create()
    big1, big2 = driver.mem_alloc(BIG), driver.mem_alloc(BIG)
    _busy(driver, s1, big1, big2, 6)  # delay s1
    driver.memset(a, 0x5A, 1, n, stream=s1)
    driver.event_record(e, s1)
    driver.stream_wait_event(s2, e)
    driver.memcpy_dtod(b, a, n, stream=s2)
    got = np.frombuffer(bytes(driver.memcpy_dtoh(b, n, stream=s2)), dtype=np.uint8)
    assert (got == 0x5A).all()


def test_streams_run_concurrently(driver):
    """Short work on one stream completes while long work on another is still running."""
    a, b = _alloc_touched(driver), _alloc_touched(driver)
    small = driver.mem_alloc(4096)
    s1, s2 = driver.stream_create(flags=1), driver.stream_create(flags=1)
    e1, e2 = driver.event_create(), driver.event_create()
    driver.ctx_synchronize()
    _busy(driver, s1, a, b, 40)  # hundreds of ms of copying
    driver.event_record(e1, s1)
    driver.memset(small, 3, 1, 4096, stream=s2)
    driver.event_record(e2, s2)
    driver.event_synchronize(e2)
    assert driver.event_query(e1) is False, "stream 2 waited for stream 1: streams are not concurrent"
    assert bytes(driver.memcpy_dtoh(small, 4, stream=s2)) == b"\x03" * 4
    driver.event_synchronize(e1)


def test_legacy_default_stream_synchronises_blocking_streams(driver):
    n = 8 << 20
    a, b = driver.mem_alloc(n), driver.mem_alloc(n)
    s = driver.stream_create()  # blocking stream
    big1, big2 = driver.mem_alloc(BIG), driver.mem_alloc(BIG)
    _busy(driver, s, big1, big2, 4)
    driver.memset(a, 7, 1, n, stream=s)
    driver.memcpy_dtod(b, a, n, stream=0)  # waits for s's earlier work
    got = np.frombuffer(bytes(driver.memcpy_dtoh(b, n)), dtype=np.uint8)
    assert (got == 7).all()


def test_elapsed_time_errors(driver):
    e1 = driver.event_create()
    e2 = driver.event_create(flags=2)  # CU_EVENT_DISABLE_TIMING
    with pytest.raises(CudaError) as err:
        driver.event_elapsed_time(e1, e1)
    assert err.value.name == "CUDA_ERROR_INVALID_HANDLE"  # never recorded
    driver.event_record(e1)
    driver.event_record(e2)
    driver.ctx_synchronize()
    with pytest.raises(CudaError) as err:
        driver.event_elapsed_time(e1, e2)
    assert err.value.name == "CUDA_ERROR_INVALID_HANDLE"
