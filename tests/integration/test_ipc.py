"""CUDA IPC memory handles between sessions (gpud/ipc.py, NOTE [ipc] in proto/messages.py), against a real gpud.

The driver-API entry points themselves (the 64-byte handle passed by value) are exercised by
tests/integration/native/progs/ipc_prog.py."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from proto.errors import CudaError
from tests.conftest import connect, start
from tests.integration.test_kernels import POKE


@pytest.fixture(scope="module")
def gpud():
    g = start("ipc")
    yield g
    g.stop()


def test_open_read_write_close(gpud) -> None:  # noqa: ANN001
    a = connect(gpud.endpoint, tenant="t")
    b = connect(gpud.endpoint, tenant="t")
    try:
        p = a.mem_alloc(1 << 16)
        a.memcpy_htod(p, np.arange(1 << 14, dtype=np.int32).tobytes())
        h = a.ipc_get_mem_handle(p)
        assert len(h) == 64 and a.ipc_get_mem_handle(p) == h  # one handle per allocation
        q = b.ipc_open_mem_handle(h)
        assert q == p  # one address space in gpud
        got = np.frombuffer(bytes(b.memcpy_dtoh(q, 1 << 16)), np.int32)
        assert (got == np.arange(1 << 14)).all()
        fn = b.module_get_function(b.module_load_data(POKE), "poke")  # kernels of the importer may use it
        b.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", q))
        b.ctx_synchronize()
        with pytest.raises(CudaError) as e:
            b.mem_free(q)  # closed, not freed
        assert e.value.code == 1
        b.ipc_close_mem_handle(q)
        with pytest.raises(CudaError):
            b.memcpy_dtoh(q, 16)  # no longer this context's memory
        assert a.memcpy_dtoh(p, 4) != b""  # the exporter's memory is untouched by the close
        with pytest.raises(CudaError) as e:
            a.ipc_open_mem_handle(h)  # its own memory
        assert e.value.code == 201
    finally:
        a.conn.close()
        b.conn.close()


def test_freed_by_the_exporter_while_open(gpud) -> None:  # noqa: ANN001
    """The memory lives until the importer closes it; the handle stops opening at once."""
    a = connect(gpud.endpoint, tenant="t")
    b = connect(gpud.endpoint, tenant="t")
    c = connect(gpud.endpoint, tenant="t")
    try:
        p = a.mem_alloc(4096)
        a.memcpy_htod(p, b"\x5a" * 4096)
        h = a.ipc_get_mem_handle(p)
        q = b.ipc_open_mem_handle(h)
        a.mem_free(p)
        a.ctx_synchronize()
        assert bytes(b.memcpy_dtoh(q, 4096)) == b"\x5a" * 4096
        with pytest.raises(CudaError) as e:
            c.ipc_open_mem_handle(h)
        assert e.value.code == 1
        b.ipc_close_mem_handle(q)
        b.ctx_synchronize()
    finally:
        for d in (a, b, c):
            d.conn.close()


def test_bad_handles_and_other_tenants(gpud) -> None:  # noqa: ANN001
    a = connect(gpud.endpoint, tenant="t1")
    b = connect(gpud.endpoint, tenant="t2")
    try:
        p = a.mem_alloc(4096)
        with pytest.raises(CudaError):
            a.ipc_get_mem_handle(p + 16)  # not the start of an allocation
        h = a.ipc_get_mem_handle(p)
        with pytest.raises(CudaError) as e:
            b.ipc_open_mem_handle(h)  # another tenant
        assert e.value.code == 1
        with pytest.raises(CudaError) as e:
            b.ipc_open_mem_handle(bytes(64))  # not a handle
        assert e.value.code == 1
        forged = bytearray(h)
        forged[10] ^= 1
        with pytest.raises(CudaError):
            a.conn.call({"kind": "ipc_open", "handle": bytes(forged)})
        with pytest.raises(CudaError):
            b.ipc_close_mem_handle(p)  # never opened here
        b.mem_alloc(16)  # both sessions are healthy
        a.mem_alloc(16)
    finally:
        a.conn.close()
        b.conn.close()


def test_importer_closing_its_session_releases_the_memory(gpud) -> None:  # noqa: ANN001
    a = connect(gpud.endpoint, tenant="t")
    b = connect(gpud.endpoint, tenant="t")
    p = a.mem_alloc(4096)
    h = a.ipc_get_mem_handle(p)
    b.ipc_open_mem_handle(h)
    b.ipc_open_mem_handle(h)  # opened twice: one region, counted
    a.mem_free(p)
    b.conn.close()  # its opens go with it, and the memory is freed then
    a.mem_alloc(4096)
    a.ctx_synchronize()
    a.conn.close()


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="needs /proc")
def test_memory_kept_for_an_importer_goes_back_when_it_closes(gpud) -> None:  # noqa: ANN001
    """The CPU backend's allocation is an anonymous mapping: gpud's resident memory shows when it is unmapped.
    Freed by the exporter while imported, it must stay (the importer reads it); closed by the last importer, it must
    go back. (On this backend the mapping would also go when its last Python reference does, so this checks the
    lifetime, not that gpud/ipc.py calls backend.free itself.)"""
    size = 256 << 20
    a = connect(gpud.endpoint, tenant="t")
    b = connect(gpud.endpoint, tenant="t")
    try:
        base = _rss(gpud.proc.pid)
        p = a.mem_alloc(size)
        a.memset(p, 0x5A, 1, size)  # every page touched: resident
        a.ctx_synchronize()
        assert _rss(gpud.proc.pid) - base > size * 3 // 4
        q = b.ipc_open_mem_handle(a.ipc_get_mem_handle(p))
        a.mem_free(p)
        a.ctx_synchronize()
        assert _rss(gpud.proc.pid) - base > size * 3 // 4  # kept for b
        assert bytes(b.memcpy_dtoh(q + size - 16, 16)) == b"\x5a" * 16
        b.ipc_close_mem_handle(q)
        b.ctx_synchronize()
        a.ctx_synchronize()
        assert _rss(gpud.proc.pid) - base < size // 4  # unmapped
    finally:
        a.conn.close()
        b.conn.close()


def test_ipc_event_orders_another_process_stream(gpud) -> None:  # noqa: ANN001
    """NOTE [ipc events]: a stream of the importer that waits on the exporter's event sees the exporter's work done."""
    big, n = 64 << 20, 16 << 20
    a = connect(gpud.endpoint, tenant="t")
    b = connect(gpud.endpoint, tenant="t")
    other = connect(gpud.endpoint, tenant="other")
    try:
        shared = a.mem_alloc(n)
        a.memset(shared, 0, 1, n)
        x, y = a.mem_alloc(big), a.mem_alloc(big)
        a.memset(x, 0, 1, big)
        a.memset(y, 0, 1, big)
        a.ctx_synchronize()
        ev = a.event_create(0x6)  # CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING
        h = a.ipc_get_event_handle(ev)
        assert len(h) == 64 and a.ipc_get_event_handle(ev) == h
        q = b.ipc_open_mem_handle(a.ipc_get_mem_handle(shared))
        bev = b.ipc_open_event_handle(h)
        sa = a.stream_create(flags=1)
        for _ in range(30):  # delay the exporter's stream (without the wait, b reads zeros)
            a.memcpy_dtod(y, x, big, stream=sa)
        a.memset(shared, 0x5A, 1, n, stream=sa)
        a.event_record(ev, sa)
        a.synchronize_errors()  # gpud has taken the record before b's wait arrives
        sb = b.stream_create(flags=1)
        b.stream_wait_event(sb, bev)
        got = np.frombuffer(bytes(b.memcpy_dtoh(q, n, stream=sb)), dtype=np.uint8)
        assert (got == 0x5A).all()
        b.event_synchronize(bev)
        assert b.event_query(bev)
        b.event_destroy(bev)  # the importer's name for it goes; the exporter's event stays
        assert a.event_query(ev)
        with pytest.raises(CudaError) as e:
            other.ipc_open_event_handle(h)  # another tenant
        assert e.value.name == "CUDA_ERROR_INVALID_VALUE" and "another tenant" in e.value.message
        with pytest.raises(CudaError) as e:
            a.ipc_open_event_handle(h)  # its own event
        assert e.value.name == "CUDA_ERROR_INVALID_CONTEXT"
        with pytest.raises(CudaError) as e:
            b.ipc_open_event_handle(bytes(64))
        assert e.value.name == "CUDA_ERROR_INVALID_VALUE"
        plain = a.event_create(0)
        with pytest.raises(CudaError) as e:
            a.ipc_get_event_handle(plain)
        assert e.value.name == "CUDA_ERROR_INVALID_VALUE" and "CU_EVENT_INTERPROCESS" in e.value.message
        b.ipc_close_mem_handle(q)
        a.conn.close()  # the exporter ends: its handle stops opening
        with pytest.raises(CudaError) as e:
            b.ipc_open_event_handle(h)
        assert "its process has ended" in e.value.message
    finally:
        for d in (a, b, other):
            d.conn.close()
