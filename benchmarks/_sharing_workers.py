"""Client processes of ``benchmarks.sharing`` (a module of their own so ``spawn`` can import them)."""

from __future__ import annotations

import random
import time
import zlib
from typing import Any

import numpy as np

from shim.client import Connection
from shim.driver import Driver

MiB = 1 << 20


def connect(endpoint: str, tenant: str) -> Driver:
    return Driver(Connection(endpoint, tenant=tenant, timeout_s=30))


_UPLOADERS: dict[int, Any] = {}


def htod(d: Driver, dst: int, data: Any) -> None:
    """A host-to-device copy; large ones take the content-addressed path (shim/dedup.py)."""
    if hasattr(d, "dedup_stats"):  # the driver does it by itself
        d.memcpy_htod(dst, data)
        return
    from shim.dedup import MIN_DEDUP_BYTES, DedupUploader

    up = _UPLOADERS.get(id(d))
    if up is None:
        up = _UPLOADERS[id(d)] = DedupUploader.from_capabilities(d.conn.server_capabilities) or False
    view = memoryview(data).cast("B")
    if up and view.nbytes >= MIN_DEDUP_BYTES:
        up.upload(d, dst, view, 0, d.memcpy_htod)
    else:
        d.memcpy_htod(dst, view)


def dedup_stats(d: Driver) -> dict[str, int]:
    st = getattr(d, "dedup_stats", None)
    if st is None:
        up = _UPLOADERS.get(id(d))
        st = up.stats if up else None
    if st is None:
        return {"bytes_total": 0, "bytes_sent": 0}
    return {"bytes_total": st.bytes_total, "bytes_sent": st.bytes_sent}


def model_layers(total: int, layer: int = 10 * MiB, seed: int = 1234) -> list[bytes]:
    """The same pseudo-random "model" in every process: ``total`` bytes in ``layer``-byte tensors."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, min(layer, total - o), dtype=np.uint8).tobytes() for o in range(0, total, layer)]


def load_model(endpoint: str, tenant: str, total: int, barrier: Any, out: Any) -> None:
    layers = model_layers(total)
    d = connect(endpoint, tenant)
    t0 = time.perf_counter()
    ptrs = []
    for data in layers:
        p = d.mem_alloc(len(data))
        htod(d, p, data)
        ptrs.append(p)
    d.ctx_synchronize()
    dt = time.perf_counter() - t0
    ok = all(zlib.crc32(d.memcpy_dtoh(p, len(x))) == zlib.crc32(x) for p, x in zip(ptrs[:3], layers[:3], strict=True))
    out.put({"tenant": tenant, "seconds": dt, "ok": ok, **dedup_stats(d)})
    barrier.wait()  # stay loaded until the parent has measured
    d.conn.close()


def saturate(endpoint: str, tenant: str, seconds: float, barrier: Any, out: Any, nbytes: int = 32 * MiB) -> None:
    """Keep the device busy with memsets, one batch always queued ahead; report ops done."""
    d = connect(endpoint, tenant)
    p = d.mem_alloc(nbytes)
    evs = [d.event_create() for _ in range(4)]  # up to 3 batches queued ahead: stays backlogged
    d.ctx_synchronize()
    barrier.wait()
    deadline = time.monotonic() + seconds
    n = i = 0
    while time.monotonic() < deadline:
        for _ in range(4):
            d.memset(p, n & 0xFF, 1, nbytes)
            n += 1
        d.event_record(evs[i % 4])
        i += 1
        if i > 3:
            d.event_synchronize(evs[i % 4])
    d.ctx_synchronize()
    out.put((tenant, n))
    d.conn.close()


def _mismatch(tenant: str, p: int, got: bytes, want: bytes, hist: list[str]) -> str:
    diff = [i for i in range(0, len(want), 4096) if got[i : i + 4096] != want[i : i + 4096]]
    return (
        f"{tenant}: read-back mismatch at 0x{p:x} ({len(want)} bytes, {len(diff)} pages differ, first at "
        f"{diff[0] if diff else -1}; history {hist[-6:]})"
    )


def soak(
    endpoint: str, tenant: str, seconds: float, seed: int, out: Any, pause_every: int = 0, max_live: int = 24
) -> None:
    """Random mix of allocations, shared and private uploads, writes, copies and read-backs, all verified.
    ``pause_every``: go idle for a second every that many ops (so an idle timeout puts us to sleep)."""
    rng = random.Random(seed)
    shared = model_layers(16 * MiB, layer=4 * MiB, seed=99)  # the same in every client: dedup'd
    errors: list[str] = []
    ops = 0
    d = connect(endpoint, tenant)
    live: list[tuple[int, bytes]] = []
    history: dict[int, list[str]] = {}  # what happened to each live allocation (for error reports)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            r = rng.random()
            if pause_every and ops and ops % pause_every == 0:
                time.sleep(1.0)
            if len(live) >= max_live:
                r = 0.99  # free one: keeps each client's memory bounded
            try:
                if r < 0.25 or not live:
                    data = (
                        shared[rng.randrange(len(shared))]
                        if rng.random() < 0.5
                        else rng.randbytes(rng.randrange(1, 3 * MiB))
                    )
                    p = d.mem_alloc(len(data))
                    htod(d, p, data)
                    live.append((p, data))
                    history[p] = [f"alloc {len(data)} {'shared' if data in shared else 'own'}"]
                elif r < 0.45:
                    i = rng.randrange(len(live))
                    p, data = live[i]
                    off = rng.randrange(len(data))
                    n = rng.randrange(1, len(data) - off + 1)
                    v = rng.randrange(256)
                    d.memset(p + off, v, 1, n)
                    history.setdefault(p, []).append(f"memset {off}+{n}")
                    live[i] = (p, data[:off] + bytes([v]) * n + data[off + n :])
                elif r < 0.6:
                    i, j = rng.randrange(len(live)), rng.randrange(len(live))
                    (pa, a), (pb, b) = live[i], live[j]
                    n = min(len(a), len(b))
                    d.memcpy_dtod(pa, pb, n)
                    history.setdefault(pa, []).append(f"dtod from 0x{pb:x} {n}")
                    live[i] = (pa, b[:n] + a[n:])
                elif r < 0.85:
                    p, data = live[rng.randrange(len(live))]
                    got = bytes(d.memcpy_dtoh(p, len(data)))
                    if got != data:
                        errors.append(_mismatch(tenant, p, got, data, history.get(p, [])))
                else:
                    p, _ = live.pop(rng.randrange(len(live)))
                    d.mem_free(p)
                ops += 1
            except Exception as exc:  # noqa: BLE001 - every error counts, none stops the soak
                errors.append(f"{tenant}: {type(exc).__name__}: {exc}")
                if len(errors) > 20:
                    break
        for p, data in live:
            got = bytes(d.memcpy_dtoh(p, len(data)))
            if got != data:
                errors.append("final " + _mismatch(tenant, p, got, data, history.get(p, [])))
    finally:
        out.put({"tenant": tenant, "ops": ops, "errors": errors})
        d.conn.close()


def torch_soak(endpoint: str, tenant: str, seconds: float, seed: int, out: Any) -> None:
    """The PyTorch face's share of the soak: random tensor work on "cuda" (in the tenant's executor process, NOTE
    [executors]), every result checked bit for bit against the same work done on the local CPU."""
    import os

    os.environ.update(WOOLY_SERVER=endpoint, WOOLY_TENANT=tenant, WOOLY_TIMEOUT_S="30")
    from shim.torch import apply

    apply()
    import torch

    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    live: list[tuple[Any, Any]] = []  # (cuda tensor, its expected value on the CPU)
    errors: list[str] = []
    ops = 0

    def check(dev: Any, host: Any, what: str) -> None:
        got = dev.cpu()
        same = (got == host) | (got.isnan() & host.isnan())  # bit for bit; products that overflowed are NaN on both
        if not bool(same.all()):
            errors.append(f"{tenant}: {what}: {int((~same).sum())} of {host.numel()} values differ")

    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and len(errors) <= 20:
            r = rng.random()
            try:
                if r < 0.25 or len(live) < 2:
                    host = torch.randn(rng.randrange(1, 1 << 16), generator=gen)
                    live.append((host.to("cuda"), host))
                elif r < 0.5:
                    (a, ha), (b, hb) = rng.sample(live, 2)
                    n = min(a.numel(), b.numel())
                    live.append((a[:n] * b[:n] + 1.5, ha[:n] * hb[:n] + 1.5))
                elif r < 0.65:
                    a, ha = live[rng.randrange(len(live))]
                    idx = torch.randint(0, ha.numel(), (64,), generator=gen)
                    live.append((a[idx.to("cuda")].cumsum(0), ha[idx].cumsum(0)))
                elif r < 0.75:
                    a, ha = live[rng.randrange(len(live))]
                    a.mul_(0.5)
                    ha.mul_(0.5)
                elif r < 0.9:
                    a, ha = live[rng.randrange(len(live))]
                    check(a, ha, "read back")
                else:
                    live.pop(rng.randrange(len(live)))
                if len(live) > 32:
                    live.pop(0)
                ops += 1
            except Exception as exc:  # noqa: BLE001 - every error counts, none stops the soak
                errors.append(f"{tenant}: {type(exc).__name__}: {str(exc)[:300]}")
        for a, ha in live:
            check(a, ha, "final read back")
    finally:
        out.put({"tenant": tenant, "ops": ops, "errors": errors})


# A kernel whose cost is all compute: each thread runs an LCG for ``iters`` rounds (NOTE [spatial sharing] lines).
BURN = b""".version 7.0
.target sm_80
.address_size 64
.visible .entry burn(.param .u64 o, .param .u32 n)
{
  .reg .b32 %r<6>; .reg .b64 %rd<4>; .reg .pred %p;
  ld.param.u32 %r1, [n]; mov.u32 %r2, 0; mov.u32 %r3, %tid.x;
$L: mad.lo.u32 %r3, %r3, 1664525, 1013904223; add.u32 %r2, %r2, 1; setp.lt.u32 %p, %r2, %r1; @%p bra $L;
  ld.param.u64 %rd1, [o]; mov.u32 %r4, %ctaid.x; mul.wide.u32 %rd2, %r4, 4; add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r3;
  ret;
}
"""


def burn(
    endpoint: str,
    tenant: str,
    seconds: float,
    blocks: int,
    iters: int,
    barrier: Any,
    out: Any,
    ahead: bool = False,
    linger_s: float = 0.0,
) -> None:
    """Launch ``burn`` (``blocks`` blocks of 32 threads) back to back for ``seconds`` (``ahead``: one launch queued
    behind the running one); report each launch's (start, end) wall-clock times."""
    import struct

    d = connect(endpoint, tenant)
    o = d.mem_alloc(4 * max(blocks, 1))
    fn = d.module_get_function(d.module_load_data(BURN), "burn")
    params = fn.pack_params([struct.pack("<Q", o), struct.pack("<I", iters)])
    d.launch_kernel(fn, (1, 1, 1), (32, 1, 1), params)  # compiled and warm
    d.ctx_synchronize()
    if barrier is not None:
        barrier.wait()
    spans = []
    end = time.time() + seconds
    if ahead:  # saturating: one launch always queued behind the running one (no gap between launches)
        evs = [d.event_create() for _ in range(2)]
        starts = []
        i = 0
        while time.time() < end:
            starts.append(time.time())
            d.launch_kernel(fn, (blocks, 1, 1), (32, 1, 1), params)
            d.event_record(evs[i % 2])
            if i >= 1:
                d.event_synchronize(evs[(i - 1) % 2])
                spans.append((starts[i - 1], time.time()))
            i += 1
        d.ctx_synchronize()
        spans.append((starts[-1], time.time()))
    else:  # latency-bound: launch, wait, again
        while time.time() < end:
            t = time.time()
            d.launch_kernel(fn, (blocks, 1, 1), (32, 1, 1), params)
            d.ctx_synchronize()
            spans.append((t, time.time()))
    out.put((tenant, spans))
    time.sleep(linger_s)  # a tenant that stops submitting need not be a process that exits (its teardown is CPU)
    d.conn.close()
