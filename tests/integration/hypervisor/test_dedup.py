"""VRAM dedup and copy-on-write across tenants, and reclaiming a killed tenant's shares."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from proto.errors import CudaError
from tests.integration.hypervisor._helpers import connect, hv_state, start_with_config, upload, wait_for

MiB = 1 << 20
N = 24 * MiB  # 6 chunks of 4 MiB
DATA = np.random.default_rng(7).integers(0, 256, N, dtype=np.uint8).tobytes()
PTX = os.path.join(os.path.dirname(__file__), "..", "..", "jit_golden", "cases", "nv_saxpy.ptx")


@pytest.fixture(scope="module")
def gpud():
    g = start_with_config('[dedup]\nchunk = "4MiB"\n', "--cpu-memory", str(1 << 30))
    yield g
    g.stop()


@pytest.fixture
def tenants(gpud):
    ds = [connect(gpud.endpoint, tenant=f"t{i}") for i in range(3)]
    yield ds
    for d in ds:
        d.conn.close()
    obs = connect(gpud.endpoint, tenant="observer")
    try:  # every test leaves the daemon at its baseline
        wait_for(lambda: hv_state(obs)["physical"]["0"] == 0, what="memory back to baseline")
        assert hv_state(obs)["dedup"]["chunks"] == 0
    finally:
        obs.conn.close()


def _load_all(ds):
    ptrs = []
    for d in ds:
        p = d.mem_alloc(N)
        upload(d, p, DATA)
        d.ctx_synchronize()
        ptrs.append(p)
    return ptrs


def test_identical_uploads_are_stored_once(tenants):
    ptrs = []
    for d in tenants:  # plain cuMemcpyHtoD: the driver takes the content-addressed path by itself
        p = d.mem_alloc(N)
        d.memcpy_htod(p, DATA)
        d.ctx_synchronize()
        ptrs.append(p)
    assert tenants[0].dedup_stats.bytes_sent == N
    assert tenants[1].dedup_stats.bytes_sent == 0 and tenants[2].dedup_stats.bytes_sent == 0
    st = hv_state(tenants[0])
    assert st["physical"]["0"] == N  # three tenants, one copy
    assert st["dedup"]["store_bytes"] == N
    assert all(t["shared_bytes"] == N and t["memory_used"] == N for t in st["tenants"] if t["tenant"].startswith("t"))
    for d, p in zip(tenants, ptrs, strict=True):
        assert d.memcpy_dtoh(p, N) == DATA
        assert d.mem_get_info()[0] == d.mem_get_info()[1] - N  # each tenant still sees its full use


@pytest.mark.parametrize("how", ["memset", "htod", "dtod"])
def test_a_write_is_private_to_the_writer(tenants, how):
    a, b, c = tenants
    pa, pb, pc = _load_all(tenants)
    off, n = 5 * MiB + 123, 3 * MiB  # spans two chunks
    if how == "memset":
        a.memset(pa + off, 0xEE, 1, n)
    elif how == "htod":
        a.memcpy_htod(pa + off, b"\xee" * n)
    else:
        tmp = a.mem_alloc(n)
        a.memset(tmp, 0xEE, 1, n)
        a.memcpy_dtod(pa + off, tmp, n)
    a.ctx_synchronize()
    expect = bytearray(DATA)
    expect[off : off + n] = b"\xee" * n
    assert a.memcpy_dtoh(pa, N) == bytes(expect)
    assert b.memcpy_dtoh(pb, N) == DATA
    assert c.memcpy_dtoh(pc, N) == DATA
    st = hv_state(a)
    t0 = next(t for t in st["tenants"] if t["tenant"] == "t0")
    assert t0["shared_bytes"] == N - 8 * MiB  # the two touched chunks are its own now
    assert st["dedup"]["store_bytes"] == N  # the others still share the original


def test_a_kernel_write_is_private_to_the_writer(tenants):
    a, b, _ = tenants
    try:
        mod = a.module_load_data(open(PTX, "rb").read())
        fn = a.module_get_function(mod, "saxpy")
    except CudaError as exc:
        pytest.skip(f"the PTX JIT cannot run saxpy here: {exc}")
    pa, pb, _ = _load_all(tenants)
    n = 1024
    y = a.mem_alloc(4 * n)
    a.memset(y, 0, 4, n)
    import struct

    params = fn.pack_params(
        [
            struct.pack("<Q", pa),
            struct.pack("<f", 2.0),
            struct.pack("<Q", pa),
            struct.pack("<Q", y),
            struct.pack("<i", n),
        ]
    )
    a.launch_kernel(fn, (n // 128, 1, 1), (128, 1, 1), params)
    a.ctx_synchronize()
    x = np.frombuffer(DATA[: 4 * n], dtype=np.float32)
    np.seterr(all="ignore")
    got = np.frombuffer(a.memcpy_dtoh(pa, 4 * n), dtype=np.float32)
    np.testing.assert_array_equal(got, (np.float32(2.0) * x).astype(np.float32))
    assert b.memcpy_dtoh(pb, N) == DATA


def test_double_free_and_bad_dedup_messages_fail_cleanly(tenants):
    a, b, _ = tenants
    pa, pb, _ = _load_all(tenants)
    a.mem_free(pa)
    with pytest.raises(CudaError):
        a.conn.post({"kind": "mem_free", "addr": pa})  # the driver refuses; send it raw
        a.synchronize_errors()
    with pytest.raises(CudaError):
        a.conn.call({"kind": "dedup_upload", "dst": pb, "size": N, "chunk": 4 * MiB, "hashes": [b"x" * 16] * 6})
    with pytest.raises(CudaError):  # wrong number of hashes
        p = a.mem_alloc(N)
        a.conn.call({"kind": "dedup_upload", "dst": p, "size": N, "chunk": 4 * MiB, "hashes": [b"x" * 16]})
    # A lying publish (hash of other content) is hashed again by gpud and not stored.
    q = a.mem_alloc(4 * MiB)
    a.memset(q, 1, 1, 4 * MiB)
    a.conn.post(
        {
            "kind": "dedup_publish",
            "dst": q,
            "size": 4 * MiB,
            "chunk": 4 * MiB,
            "indexes": [0],
            "hashes": [__import__("xxhash").xxh3_128_digest(DATA[: 4 * MiB])],
        }
    )
    a.ctx_synchronize()
    st = hv_state(a)["dedup"]
    assert st["publish_mismatch"] >= 1, st
    assert b.memcpy_dtoh(pb, N) == DATA


def test_killed_tenant_memory_and_shares_are_reclaimed(gpud, tenants):
    a = tenants[0]
    pa = _load_all([a])[0]
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.getcwd()!r})
        import numpy as np
        from tests.integration.hypervisor._helpers import connect, upload
        d = connect({gpud.endpoint!r}, tenant="victim")
        data = np.random.default_rng(7).integers(0, 256, {N}, dtype=np.uint8).tobytes()
        p = d.mem_alloc({N}); upload(d, p, data); d.mem_alloc(8 << 20); d.ctx_synchronize()
        print("ready", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        st = hv_state(a)
        assert st["physical"]["0"] == N + 8 * MiB  # the victim's upload is shared with ours
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_for(lambda: hv_state(a)["physical"]["0"] == N, what="the killed tenant's memory to come back")
        st = hv_state(a)
        assert not any(t["tenant"] == "victim" for t in st["tenants"])
        assert st["dedup"]["store_bytes"] == N
        assert a.memcpy_dtoh(pa, N) == DATA
    finally:
        proc.kill()


def test_a_write_before_the_shared_pages_are_mapped_keeps_the_content(tenants):
    """Regression (found by the soak): a write that unshares a range whose map is still queued."""
    a, b, _ = tenants
    for _ in range(3):
        pa = a.mem_alloc(N)
        upload(a, pa, DATA)
        a.ctx_synchronize()
        busy = b.mem_alloc(256 * MiB)
        b.memset(busy, 1, 1, 256 * MiB)  # keeps b's stream busy: the map below waits behind it
        pb = b.mem_alloc(N)
        upload(b, pb, DATA)  # all chunks held by gpud: mapped in stream order, later
        a.mem_free(pa)  # now only b's queued maps reference the chunks
        a.ctx_synchronize()
        b.memset(pb + 100, 0xAB, 1, 10)  # unshares before the maps ran
        expect = bytearray(DATA)
        expect[100:110] = b"\xab" * 10
        assert b.memcpy_dtoh(pb, N) == bytes(expect)
        b.mem_free(pb)
        b.mem_free(busy)
        b.ctx_synchronize()
