"""VRAM dedup: identical content uploaded by several tenants is stored once, copy-on-write.

NOTE [dedup protocol]: the client cuts a large upload into fixed chunks and hashes each (xxh3-128
by default). ``dedup_upload`` names the destination and the hashes; gpud maps every chunk it
already holds and answers with the indexes it lacks. The client copies those through the ordinary
path (shared-memory ring or frames) and queues ``dedup_publish`` for them: in stream order, gpud
hashes the device bytes again and, when they match, moves them into the store so the next tenant
skips them. gpud never trusts a client's hash for bytes it receives: a chunk enters the store only
after gpud hashed it itself, so a bad client cannot plant content under someone else's hash (with
xxh3 a deliberate collision is conceivable; ``dedup.hash = "sha256"`` closes that for hostile
tenants).

NOTE [COW by the MMU]: on the CPU backend a chunk lives in a memfd, and each tenant's allocation
maps it ``MAP_PRIVATE | MAP_FIXED`` at the allocation's own address, so device pointers do not
change. A write through any path (memcpy, memset, a kernel, even through a pointer stored in
device memory) makes the kernel copy that page for the writer only: no tenant can ever see
another's write, and no write needs to be caught for correctness. Catching writes is for
*accounting*: before a copy, memset or kernel launch that may write a shared range, the range is
charged to the writer as private memory and its reference on the chunk is dropped (the pages stay
mapped; the MMU copies them lazily as they are written). Backends without such page tricks still
get the network saving: present chunks are copied from the store instead of sent.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import xxhash

from gpud import log, vmem
from gpud.errors import CudaError, codes
from gpud.session import Session, extension
from proto import messages as m

if TYPE_CHECKING:
    from gpud.hypervisor.core import Hypervisor


def digest(algo: str, data: Any) -> bytes:
    if algo == "sha256":
        return hashlib.sha256(data).digest()
    return xxhash.xxh3_128_digest(data)


@dataclass(eq=False)
class Chunk:
    key: tuple[str, bytes, int]
    mem: vmem.Memfd
    refs: int = 0

    @property
    def length(self) -> int:
        return self.key[2]


@dataclass(eq=False)
class Share:
    """One chunk-sized range of a session's allocation that maps (or will map) a store chunk."""

    start: int
    length: int
    chunk: Chunk | None  # None while a publish is still queued
    ordinal: int
    dead: bool = False  # broken by a write, or freed
    mapped: bool = False  # the chunk's pages are in place (until then the share owes the tenant its bytes)


class _SessionShares:
    def __init__(self) -> None:
        self.by_start: dict[int, Share] = {}
        self.starts: list[int] = []

    def add(self, s: Share) -> None:
        old = self.by_start.get(s.start)
        if old is not None:
            raise KeyError(s.start)
        bisect.insort(self.starts, s.start)
        self.by_start[s.start] = s

    def remove(self, s: Share) -> None:
        if self.by_start.get(s.start) is s:
            del self.by_start[s.start]
            del self.starts[bisect.bisect_left(self.starts, s.start)]

    def overlapping(self, addr: int, size: int) -> list[Share]:
        i = bisect.bisect_right(self.starts, addr) - 1
        out: list[Share] = []
        i = max(i, 0)
        while i < len(self.starts) and self.starts[i] < addr + size:
            s = self.by_start[self.starts[i]]
            if s.start + s.length > addr:
                out.append(s)
            i += 1
        return out


class DedupEngine:
    def __init__(self, hv: Hypervisor) -> None:
        self.hv = hv
        self.cfg = hv.config.dedup
        # The store and share tables are touched by publish on stream workers; one lock with the
        # hypervisor's counters, so there is no lock order to get wrong.
        self.lock = hv.lock
        self.store: dict[tuple[str, bytes, int], Chunk] = {}
        self.store_bytes = 0
        self.stats = {
            "chunks_hit": 0,
            "chunks_missed": 0,
            "bytes_hit": 0,
            "published": 0,
            "publish_mismatch": 0,
            "cow_breaks": 0,
            "bytes_cow": 0,
        }

    # ------------------------------------------------------------------ store
    def _ref(self, chunk: Chunk) -> None:
        chunk.refs += 1

    def _unref(self, chunk: Chunk, ordinal: int) -> None:
        chunk.refs -= 1
        if chunk.refs <= 0 and self.store.get(chunk.key) is chunk:
            del self.store[chunk.key]
            self.store_bytes -= chunk.length
            self.hv.adjust_physical(ordinal, -chunk.length)
            chunk.mem.close()  # mappings made from it keep the pages alive

    def _shares(self, session: Session) -> _SessionShares:
        sh = session.ext.get("hv.shares")
        if sh is None:
            sh = session.ext["hv.shares"] = _SessionShares()
        return sh

    @staticmethod
    def _mappable(session: Session, start: int, length: int) -> bool:
        if not session.backend.host_memory or start % vmem.PAGE:
            return False
        region = session.find(start, length, "dedup")
        if region.allocation is None or region.allocation.alias is not None:
            return False  # an alias's pages are a torch tensor's too (NOTE [device memory aliases]): never remapped
        end = start + length
        return end % vmem.PAGE == 0 or end == region.start + region.size

    def _account_shared(self, session: Session, share: Share, sign: int) -> None:
        """sign=+1: the range became shared (no longer the tenant's private memory); -1: the reverse."""
        t = session.ext.get("hv.tenant")
        if t is not None:
            t.shared += sign * share.length
        self.hv.adjust_physical(share.ordinal, -sign * share.length)

    # ------------------------------------------------------------------ writes, frees, closes
    def break_range(self, session: Session, addr: int, size: int, write: bool = True) -> None:
        """Unshare what overlaps a range about to be written (``write``) or freed."""
        sh: _SessionShares | None = session.ext.get("hv.shares")
        if sh is None or not sh.starts:
            return
        with self.lock:
            for s in sh.overlapping(addr, size):
                if write and s.chunk is not None:
                    self.stats["cow_breaks"] += 1
                    self.stats["bytes_cow"] += s.length
                self._drop(session, sh, s)

    def _drop(self, session: Session, sh: _SessionShares, s: Share) -> None:
        sh.remove(s)
        s.dead = True
        if s.chunk is not None:
            self._account_shared(session, s, -1)
            if s.mapped:
                self._unref(s.chunk, s.ordinal)
                s.chunk = None
            # else: the queued map still has to bring the bytes in; it drops the reference after.

    def release_session(self, session: Session) -> None:
        sh: _SessionShares | None = session.ext.get("hv.shares")
        if sh is None:
            return
        with self.lock:
            for s in list(sh.by_start.values()):
                self._drop(session, sh, s)

    def _sole(self, tenant: Any) -> list[list[tuple[Session, Share]]]:
        """The tenant's shares grouped by chunk, for chunks no other tenant references."""
        mine: dict[int, list[tuple[Session, Share]]] = {}
        for session in tenant.sessions.values():
            sh: _SessionShares | None = session.ext.get("hv.shares")
            for s in list(sh.by_start.values()) if sh else []:
                if s.chunk is not None:
                    mine.setdefault(id(s.chunk), []).append((session, s))
        return [pairs for pairs in mine.values() if pairs[0][1].chunk and len(pairs) >= pairs[0][1].chunk.refs]

    def sole_bytes(self, tenant: Any) -> int:
        with self.lock:
            return sum(s.length for pairs in self._sole(tenant) for _, s in pairs)

    def release_sole(self, tenant: Any) -> None:
        """Unshare the ranges whose chunk no other tenant maps (before the tenant goes to sleep)."""
        with self.lock:
            for pairs in self._sole(tenant):
                for session, s in pairs:
                    self._drop(session, session.ext["hv.shares"], s)

    def before_message(self, session: Session, msg: Any, bulk: list[Any]) -> None:
        sh: _SessionShares | None = session.ext.get("hv.shares")
        if sh is None or not sh.starts:
            return
        if isinstance(msg, m.MemFree):  # not a write: the range stops being shared
            r = session.regions.get(msg.addr)
            if r is not None and r.allocation is not None:
                self.break_range(session, r.start, r.size, write=False)
            return
        for addr, size in msg.writes(bulk):  # NOTE [wire schema]: what the message writes, declared by it
            if size == m.POINTERS:
                self._break_pointer(session, addr)
            else:
                self.break_range(session, addr, size)

    def _break_pointer(self, session: Session, ptr: int) -> None:
        """A kernel may write through any pointer it is given: unshare the allocation ``ptr`` falls in."""
        i = bisect.bisect_right(session._starts, ptr) - 1  # noqa: SLF001 - the session's own index
        if i < 0:
            return
        r = session.regions[session._starts[i]]  # noqa: SLF001
        if r.allocation is not None and ptr < r.start + r.size:
            self.break_range(session, r.start, r.size)

    # ------------------------------------------------------------------ upload and publish
    def _check(self, session: Session, dst: int, size: int, chunk: int, algo: str, n_hashes: int) -> None:
        if not self.cfg.enabled:
            raise CudaError(codes.NOT_SUPPORTED, "dedup is disabled on this gpud")
        if algo != self.cfg.hash:
            raise CudaError(codes.INVALID_VALUE, f"dedup: this gpud hashes with {self.cfg.hash}, not {algo}")
        if chunk % vmem.PAGE:
            raise CudaError(codes.INVALID_VALUE, f"dedup: chunk size {chunk} is not a multiple of {vmem.PAGE}")
        if size == 0 or n_hashes != (size + chunk - 1) // chunk:
            raise CudaError(codes.INVALID_VALUE, f"dedup: {n_hashes} hashes for {size} bytes in {chunk}-byte chunks")
        session.find(dst, size, "dedup upload")

    def upload(self, session: Session, msg: m.DedupUpload) -> list[int]:
        self._check(session, msg.dst, msg.size, msg.chunk, msg.algo, len(msg.hashes))
        sh = self._shares(session)
        missing: list[int] = []
        ordinal = session.backend.ordinal
        with self.lock:
            for i, h in enumerate(msg.hashes):
                start = msg.dst + i * msg.chunk
                length = min(msg.chunk, msg.size - i * msg.chunk)
                c = self.store.get((msg.algo, bytes(h), length))
                if c is None:
                    missing.append(i)
                    self.stats["chunks_missed"] += 1
                    continue
                self.stats["chunks_hit"] += 1
                self.stats["bytes_hit"] += length
                self._ref(c)  # held until the copy/map below has run
                if self._mappable(session, start, length):
                    share = Share(start, length, c, ordinal)
                    sh.add(share)
                    self._account_shared(session, share, +1)
                    session.engine.enqueue(msg.stream, functools.partial(self._map, share, c))
                else:

                    def copy(c: Chunk = c, start: int = start, length: int = length) -> None:
                        try:
                            session.backend.copyin_from(start, length, c.mem.addr)
                        finally:
                            with self.lock:
                                self._unref(c, ordinal)

                    session.engine.enqueue(msg.stream, copy)
        return missing

    def _map(self, share: Share, c: Chunk) -> None:
        """Runs in stream order. Maps even a share broken meanwhile: the content is owed either way,
        and the write that broke it comes after this in the stream (and is copy-on-write)."""
        with self.lock:
            try:
                vmem.map_shared_private(share.start, c.mem.fd, share.length)
            finally:
                share.mapped = True
                if share.dead:
                    self._unref(c, share.ordinal)
                    share.chunk = None

    def publish(self, session: Session, msg: m.DedupPublish) -> None:
        self._check(session, msg.dst, msg.size, msg.chunk, msg.algo, (msg.size + msg.chunk - 1) // msg.chunk)
        if len(msg.indexes) != len(msg.hashes):
            raise CudaError(codes.INVALID_VALUE, "dedup publish: indexes and hashes differ in length")
        sh = self._shares(session)
        ordinal = session.backend.ordinal
        nchunks = (msg.size + msg.chunk - 1) // msg.chunk
        with self.lock:
            for i, h in zip(msg.indexes, msg.hashes, strict=True):
                if not 0 <= i < nchunks:
                    raise CudaError(codes.INVALID_VALUE, f"dedup publish: chunk index {i} out of range")
                start = msg.dst + i * msg.chunk
                length = min(msg.chunk, msg.size - i * msg.chunk)
                if not self._mappable(session, start, length) or start in sh.by_start:
                    continue
                share = Share(start, length, None, ordinal)
                sh.add(share)
                key = (msg.algo, bytes(h), length)
                session.engine.enqueue(msg.stream, functools.partial(self._publish_one, session, share, key))

    def _publish_one(self, session: Session, share: Share, key: tuple[str, bytes, int]) -> None:
        """Runs on a stream worker, after the tenant's own copy of the bytes has landed."""
        with self.lock:
            if share.dead:
                return
            c = self.store.get(key)
        if c is not None and _device_digest(session, share.start, share.length, key[0]) != key[1]:
            # The claimed content is not what the device holds: never map over it.
            with self.lock:
                self.stats["publish_mismatch"] += 1
                self._shares(session).remove(share)
            return
        if c is None:
            mem = vmem.Memfd(share.length)
            try:
                session.backend.copyout_into(share.start, share.length, mem.addr)
                ok = digest(key[0], mem.view()) == key[1]
            except BaseException:
                mem.close()
                raise
            if not ok:
                mem.close()
                with self.lock:
                    self.stats["publish_mismatch"] += 1
                    self._shares(session).remove(share)
                log.debug("hv.dedup.mismatch", session=session.id, addr=hex(share.start))
                return
            with self.lock:
                c = self.store.get(key)
                if c is None:  # nobody published it meanwhile: ours becomes the stored copy
                    c = self.store[key] = Chunk(key, mem)
                    self.store_bytes += share.length
                    self.hv.adjust_physical(share.ordinal, share.length)
                    self.stats["published"] += 1
                    mem = None  # type: ignore[assignment]
            if mem is not None:
                mem.close()
        with self.lock:
            if self.store.get(c.key) is not c:
                # Every other reference went while this ran unlocked (the digest above): the chunk left the store
                # and its memfd is closed. The tenant's own bytes are in place; the range just stays private.
                self._shares(session).remove(share)
                return
            if share.dead:
                if c.refs == 0:
                    self._unref_unused(c, share.ordinal)
                return
            self._ref(c)
            share.chunk = c
            self._account_shared(session, share, +1)
            vmem.map_shared_private(share.start, c.mem.fd, share.length)
            share.mapped = True

    def _unref_unused(self, c: Chunk, ordinal: int) -> None:
        c.refs += 1
        self._unref(c, ordinal)

    # ------------------------------------------------------------------ description
    def describe(self) -> dict[str, Any]:
        with self.lock:
            return {"chunks": len(self.store), "store_bytes": self.store_bytes, **self.stats}


def _device_digest(session: Session, addr: int, size: int, algo: str) -> bytes:
    if session.backend.host_memory:  # device memory is ours to read in place
        return digest(algo, (ctypes.c_char * size).from_address(addr))
    return digest(algo, session.backend.copyout(addr, size))


@extension("dedup_upload")
def _on_upload(session: Session, msg: m.DedupUpload, bulk: list[Any]) -> list[int]:
    hv = session.server.hv
    return hv.dedup.upload(session, msg)


@extension("dedup_publish")
def _on_publish(session: Session, msg: m.DedupPublish, bulk: list[Any]) -> None:
    hv = session.server.hv
    hv.dedup.publish(session, msg)
