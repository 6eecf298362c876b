"""Dedup for the PyTorch face: weight tensors built from shared, copy-on-write chunks.

NOTE [tensor dedup]: a large host tensor uploaded by the torch face (``shim.dedup.upload_tensor``)
arrives as chunk hashes. ``dedup_query`` (a call) answers which chunks gpud lacks and pins the rest
for the session; ``dedup_tensor`` (queued, in stream order with the session's aten ops) then
builds the tensor: a fresh anonymous region per storage, each held chunk mapped into it
``MAP_PRIVATE | MAP_FIXED`` (NOTE [COW by the MMU] in dedup.py), each sent chunk hashed by gpud,
copied into a new store chunk and mapped the same way, and ``torch.frombuffer`` over the region.
The storage is charged to the tenant through the ATen executor's table like any tensor; the bytes
it maps from the store are then credited back to the device's physical use, and debited again when
the storage dies (a ``weakref.finalize`` on the region). In-place ops on such a tensor are safe (the
MMU copies the written pages for the writer only) but are not caught for accounting: the shared
figure stays optimistic for a tensor that is later updated in place (see docs/hypervisor.md).
"""

from __future__ import annotations

import mmap
import os
import weakref
from typing import TYPE_CHECKING, Any

from gpud import vmem
from gpud.errors import CudaError, codes
from gpud.hypervisor.dedup import Chunk, digest
from gpud.session import CLOSE_HOOKS, Session, extension

if TYPE_CHECKING:
    from gpud.hypervisor.core import Hypervisor
    from proto import messages as m


def _hv(session: Session) -> Hypervisor:
    hv = session.server.hv
    if not hv.config.dedup.enabled:
        raise CudaError(codes.NOT_SUPPORTED, "dedup is disabled on this gpud")
    return hv


def _check(hv: Hypervisor, chunk: int, size: int, algo: str, n: int) -> None:
    if algo != hv.config.dedup.hash:
        raise CudaError(codes.INVALID_VALUE, f"dedup: this gpud hashes with {hv.config.dedup.hash}, not {algo}")
    if chunk % vmem.PAGE or size == 0 or n != (size + chunk - 1) // chunk:
        raise CudaError(codes.INVALID_VALUE, f"dedup: {n} hashes for {size} bytes in {chunk}-byte chunks")


def _pins(session: Session) -> dict[tuple[str, bytes, int], list[Chunk]]:
    return session.ext.setdefault("hv.pins", {})


@extension("dedup_query")
def _on_query(session: Session, msg: m.DedupQuery, bulk: list[Any]) -> list[int]:
    hv = _hv(session)
    _check(hv, msg.chunk, msg.size, msg.algo, len(msg.hashes))
    missing: list[int] = []
    pins = _pins(session)
    with hv.lock:
        if sum(len(v) for v in pins.values()) + len(msg.hashes) > 1 << 20:
            raise CudaError(codes.INVALID_VALUE, "dedup: too many pinned chunks (send the tensors you queried)")
        for i, h in enumerate(msg.hashes):
            length = min(msg.chunk, msg.size - i * msg.chunk)
            key = (msg.algo, bytes(h), length)
            c = hv.dedup.store.get(key)
            if c is None:
                missing.append(i)
                continue
            c.refs += 1
            pins.setdefault(key, []).append(c)
    return missing


@extension("dedup_tensor")
def _on_tensor(session: Session, msg: m.DedupTensor, bulk: list[Any]) -> None:
    from gpud.aten import _holder

    hv = _hv(session)
    _check(hv, msg.chunk, msg.size, msg.algo, len(msg.hashes))
    if len(msg.frames) != len(msg.hashes):
        raise CudaError(codes.INVALID_VALUE, "dedup tensor: one frame index per chunk (-1 = held by gpud)")
    holder = _holder(session)
    pins = _pins(session)
    plan: list[tuple[int, int, tuple[str, bytes, int], Chunk | None, Any]] = []
    with hv.lock:
        try:
            for i, (h, f) in enumerate(zip(msg.hashes, msg.frames, strict=True)):
                off = i * msg.chunk
                length = min(msg.chunk, msg.size - off)
                key = (msg.algo, bytes(h), length)
                if f < 0:
                    got = pins.get(key)
                    if not got:
                        raise CudaError(codes.INVALID_VALUE, f"dedup tensor: chunk {i} was neither sent nor pinned")
                    plan.append((off, length, key, got.pop(), None))
                    if not got:
                        del pins[key]
                else:
                    if f >= len(bulk) or memoryview(bulk[f]).nbytes != length:
                        raise CudaError(
                            codes.INVALID_VALUE, f"dedup tensor: frame {f} is missing or not {length} bytes"
                        )
                    plan.append((off, length, key, None, bulk[f]))
        except CudaError:
            _unpin_plan(hv, session, plan)
            raise
    session.engine.enqueue(0, lambda: _build(hv, session, holder, msg, plan))


def _unpin_plan(hv: Hypervisor, session: Session, plan: list[Any]) -> None:
    _unref(hv, session.backend.ordinal, [p[3] for p in plan if p[3] is not None])


def _build(hv: Hypervisor, session: Session, holder: Any, msg: m.DedupTensor, plan: list[Any]) -> None:
    """On the session's stream: assemble the region, wrap it as a tensor, hand it to the executor."""
    if holder.closed:
        _unpin_plan(hv, session, plan)
        return
    if holder.remote:
        _build_remote(hv, session, holder, msg, plan)
        return
    import torch

    from gpud.aten_exec import dtype_of

    ordinal = session.backend.ordinal
    length_total = vmem.page_round(msg.size)
    region = mmap.mmap(-1, length_total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = torch.frombuffer(region, dtype=torch.uint8, count=msg.size) if msg.size else torch.empty(0)
    addr = base.data_ptr()
    shared: list[tuple[Chunk, int]] = []  # references now owned by the region
    pending = [p[3] for p in plan if p[3] is not None]  # pinned references not yet mapped
    try:
        for off, length, key, chunk, data in plan:
            if chunk is None:
                chunk = _publish(hv, key, data, ordinal)
                if chunk is None:  # gpud's own hash disagrees: copied, not stored
                    vmem_copy(addr + off, data)
                    continue
            else:
                pending.remove(chunk)
                _hit(hv, length)
            shared.append((chunk, length))
            vmem.map_shared_private(addr + off, chunk.mem.fd, length)
        t = base.view(dtype_of(msg.dtype)).reshape(list(msg.shape))
        holder.get().store(msg.handle, t)  # charges the storage to the tenant (may raise OUT_OF_MEMORY)
    except BaseException:
        _unref(hv, ordinal, [c for c, _ in shared] + pending)
        raise
    tenant = _credit(hv, session, shared)
    weakref.finalize(region, _release, hv, tenant, ordinal, shared)


def _build_remote(hv: Hypervisor, session: Session, holder: Any, msg: m.DedupTensor, plan: list[Any]) -> None:
    """The same in the tenant's executor process (NOTE [executors]): the store's memfds travel to it and it maps
    them copy-on-write; the storage's token comes back with a reply when the storage dies."""
    from functools import partial

    from gpud import chan

    ordinal = session.backend.ordinal
    shared: list[tuple[Chunk, int]] = []
    pending = [p[3] for p in plan if p[3] is not None]
    fds: list[int] = []
    items: list[list[int]] = []
    try:
        for off, length, key, chunk, data in plan:
            if chunk is None:
                chunk = _publish(hv, key, data, ordinal)
                if chunk is None:  # gpud's own hash disagrees: a one-off memfd, not stored
                    fds.append(chan.memfd_with(data))
                    items.append([off, length, len(fds) - 1])
                    continue
            else:
                pending.remove(chunk)
                _hit(hv, length)
            shared.append((chunk, length))
            fds.append(os.dup(chunk.mem.fd))
            items.append([off, length, len(fds) - 1])
        ch = holder._channel()  # noqa: SLF001
    except BaseException:
        chan._close_all(fds)
        _unref(hv, ordinal, [c for c, _ in shared] + pending)
        raise
    token = ch.next_token
    ch.next_token += 1
    # Until the tenant is credited, a dead storage (or executor) only gives its chunk references back.
    ch.dedup[token] = partial(_unref, hv, ordinal, [c for c, _ in shared])
    try:
        _, rfds = holder.request(["dedup", token, msg.handle, msg.dtype, list(msg.shape), msg.size, items], None, fds)
    except BaseException:
        undo = ch.dedup.pop(token, None)
        if undo is not None:
            undo()
        raise
    chan._close_all(rfds)
    if token in ch.dedup:  # still alive (a storage freed at once came back dropped with the reply)
        tenant = _credit(hv, session, shared)
        ch.dedup[token] = partial(_release, hv, tenant, ordinal, shared)


def _unref(hv: Hypervisor, ordinal: int, chunks: list[Chunk]) -> None:
    with hv.lock:
        for chunk in chunks:
            hv.dedup._unref(chunk, ordinal)  # noqa: SLF001


def _publish(hv: Hypervisor, key: tuple[str, bytes, int], data: Any, ordinal: int) -> Chunk | None:
    """The store's chunk for ``data`` (one reference taken), made if new; None if gpud's hash disagrees."""
    if digest(key[0], data) != key[1]:  # gpud's own hash: a wrong claim is not stored
        return None
    length = key[2]
    with hv.lock:
        chunk = hv.dedup.store.get(key)
        if chunk is not None:
            chunk.refs += 1
            return chunk
    mem = vmem.Memfd(length)
    mem.view()[:] = data
    with hv.lock:
        chunk = hv.dedup.store.get(key)
        if chunk is None:
            chunk = hv.dedup.store[key] = Chunk(key, mem, refs=1)
            hv.dedup.store_bytes += length
            hv.adjust_physical(ordinal, length)
            hv.dedup.stats["published"] += 1
            return chunk
        chunk.refs += 1
    mem.close()
    return chunk


def _hit(hv: Hypervisor, length: int) -> None:
    with hv.lock:
        hv.dedup.stats["chunks_hit"] += 1
        hv.dedup.stats["bytes_hit"] += length


def _credit(hv: Hypervisor, session: Session, shared: list[tuple[Chunk, int]]) -> Any:
    """The storage is charged to the tenant in full; the bytes it maps from the store are credited back to the
    device's physical use (and to the tenant's shared figure) until it dies."""
    tenant = session.ext.get("hv.tenant")
    nbytes = sum(n for _, n in shared)
    with hv.lock:
        if tenant is not None:
            tenant.shared += nbytes
        hv.adjust_physical(session.backend.ordinal, -nbytes)
    return tenant


def _release(hv: Hypervisor, tenant: Any, ordinal: int, shared: list[tuple[Chunk, int]]) -> None:
    """The storage died: its shared ranges become the tenant's again just before the executor releases it."""
    with hv.lock:
        nbytes = sum(n for _, n in shared)
        if tenant is not None:
            tenant.shared -= nbytes
        hv.adjust_physical(ordinal, nbytes)
        for chunk, _ in shared:
            hv.dedup._unref(chunk, ordinal)  # noqa: SLF001


def vmem_copy(addr: int, data: Any) -> None:
    import ctypes

    view = memoryview(data).cast("B")
    src = (
        (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        if view.readonly
        else (ctypes.c_char * view.nbytes).from_buffer(view)
    )
    ctypes.memmove(addr, src, view.nbytes)


def _close(session: Session) -> None:
    pins = session.ext.pop("hv.pins", None)
    if not pins:
        return
    _unref(session.server.hv, session.backend.ordinal, [c for chunks in pins.values() for c in chunks])


CLOSE_HOOKS.append(_close)
