"""Isolation between tenants: handles and memory of one are unreachable from another."""

from __future__ import annotations

import pytest

from proto.errors import CudaError
from tests.integration.hypervisor._helpers import connect, start_with_config


@pytest.fixture(scope="module")
def gpud():
    g = start_with_config("")
    yield g
    g.stop()


def test_a_tenant_cannot_touch_another_tenants_memory(gpud):
    a = connect(gpud.endpoint, tenant="a")
    b = connect(gpud.endpoint, tenant="b")
    try:
        p = a.mem_alloc(1 << 20)
        a.memset(p, 0x42, 1, 1 << 20)
        a.ctx_synchronize()
        for body in (
            {"kind": "memcpy_dtoh", "src": p, "size": 16},
            {"kind": "memcpy_dtod", "dst": p, "src": p, "size": 16},
            {"kind": "memset", "dst": p, "value": 0, "elem_size": 1, "count": 16},
            {"kind": "mem_free", "addr": p},
            {"kind": "dedup_upload", "dst": p, "size": 1 << 20, "chunk": 1 << 20, "hashes": [b"\0" * 16]},
        ):
            with pytest.raises(CudaError) as exc:
                b.conn.call(body)
            assert exc.value.code == 1, body  # CUDA_ERROR_INVALID_VALUE: not an address of this context
        s = a.stream_create()
        e = a.event_create()
        a.ctx_synchronize()
        with pytest.raises(CudaError):
            b.conn.call({"kind": "stream_synchronize", "stream": s})
        with pytest.raises(CudaError):
            b.conn.call({"kind": "event_query", "event": e})
        assert a.memcpy_dtoh(p, 16) == b"\x42" * 16  # untouched
    finally:
        a.conn.close()
        b.conn.close()


def test_out_of_bounds_kernel_is_isolated_between_tenants(gpud):
    """A kernel poking at another tenant's (deduplicated) memory: ILLEGAL_ADDRESS, sticky, nobody else hurt."""
    import struct

    import numpy as np

    from tests.integration.hypervisor._helpers import hv_state
    from tests.integration.test_kernels import POKE

    data = np.random.default_rng(5).integers(0, 256, 8 << 20, dtype=np.uint8).tobytes()
    victim = connect(gpud.endpoint, tenant="victim")
    attacker = connect(gpud.endpoint, tenant="attacker")
    try:
        secret = victim.mem_alloc(len(data))
        victim.memcpy_htod(secret, data)  # content-addressed: mapped from the shared store
        victim.ctx_synchronize()
        mine = attacker.mem_alloc(len(data))
        attacker.memcpy_htod(mine, data)  # the same content: the same physical pages
        attacker.ctx_synchronize()
        assert hv_state(victim)["physical"]["0"] == len(data)
        mod = attacker.module_load_data(POKE)
        fn = attacker.module_get_function(mod, "poke")
        attacker.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", secret))
        with pytest.raises(CudaError) as e:
            attacker.ctx_synchronize()
        assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
        with pytest.raises(CudaError):
            attacker.mem_get_info()  # sticky for the attacker's context
        assert bytes(victim.memcpy_dtoh(secret, len(data))) == data
        victim.mem_alloc(16)  # the victim is healthy
    finally:
        victim.conn.close()
        attacker.conn.close()


def test_bounds_check_allows_an_allocations_own_padding(gpud):
    """A 40-byte allocation is mapped as a whole page, as on a GPU: a kernel writing past the requested size but
    inside that page runs (numba's own tests launch 16 threads over 10-element arrays); one page further is an
    ILLEGAL_ADDRESS."""
    import struct

    from tests.integration.test_kernels import POKE

    a = connect(gpud.endpoint, tenant="padding")
    try:
        p = a.mem_alloc(40)
        mod = a.module_load_data(POKE)
        fn = a.module_get_function(mod, "poke")
        a.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", p + 60))  # past 40 bytes, same page
        a.ctx_synchronize()
        a.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", p + 4096))  # the next page
        with pytest.raises(CudaError) as e:
            a.ctx_synchronize()
        assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    finally:
        a.conn.close()


def test_freed_memory_is_out_of_bounds_at_the_next_launch(gpud):
    """The allowed ranges of a session are one cached tuple (and the JIT caches its sorted table); an allocation
    that comes or goes must be seen by the very next launch: poke p (allowed), free p, poke p again
    (ILLEGAL_ADDRESS), and in a fresh context a new allocation is pokeable at once."""
    import struct

    from tests.integration.test_kernels import POKE

    a = connect(gpud.endpoint, tenant="uaf")
    b = connect(gpud.endpoint, tenant="uaf2")
    try:
        keep = [a.mem_alloc(4096) for _ in range(50)]  # a table with more than one entry
        p = a.mem_alloc(1 << 16)
        mod = a.module_load_data(POKE)
        fn = a.module_get_function(mod, "poke")
        for _ in range(3):
            a.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", p))
        a.ctx_synchronize()
        a.mem_free(p)
        a.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", p))
        with pytest.raises(CudaError) as e:
            a.ctx_synchronize()
        assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
        assert keep
        mod = b.module_load_data(POKE)
        fn = b.module_get_function(mod, "poke")
        q = b.mem_alloc(4096)
        b.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", q))
        b.ctx_synchronize()
        r = b.mem_alloc(4096)  # comes after the table of the launch above was cached
        b.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", r))
        b.ctx_synchronize()
    finally:
        a.conn.close()
        b.conn.close()
