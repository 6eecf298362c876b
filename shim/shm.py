"""Client side of the same-host staging ring (NOTE [shm staging] in proto/messages.py).

Large copies are cut into slot-sized chunks. For a copy to the device the client fills slot k+1
while gpud drains slot k, so the two memcpys overlap; for a copy to the host gpud fills the next
slots while the client empties the current one. A slot is reused only after gpud has written its
completion ``seq`` into the slot's flag word.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from typing import Any

import numpy as np

from proto import errors as codes
from proto import messages as m
from proto.errors import CudaError
from shim import progress

ERROR_BIT = 1 << 63
MIN_SHM_BYTES = 256 << 10  # below this the inline frame path is as fast
SPIN_S = 0.0005  # a wait polls the flag word this long before it sleeps (a sleep lasts ~60 us, not 20)


class RingGone(Exception):
    """The session moved to another gpud since this ring was opened: the ring is the old node's."""


class StagingRing:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.epoch = getattr(conn, "moves", 0)
        info, _ = conn.call(m.ShmOpen())
        self.slots = int(info["slots"])
        self.slot_size = int(info["slot_size"])
        header = int(info["header"])
        fd = os.open(info["path"], os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            self.mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)  # gpud made the pages
        finally:
            os.close(fd)
        try:
            os.unlink(info["path"])  # nothing else needs the name; no leftovers if either side dies
        except OSError:
            pass
        self.flags = np.frombuffer(self.mm, dtype=np.uint64, count=self.slots)
        self._base = np.frombuffer(self.mm, dtype=np.uint8).ctypes.data + header
        self._issued = [0] * self.slots  # seq last issued per slot
        self._seq = 0
        self._next = 0
        self.lock = threading.Lock()

    def _addr(self, slot: int) -> int:
        return self._base + slot * self.slot_size

    def _wait(self, slot: int) -> None:
        """Wait until gpud has finished the last operation issued on ``slot``."""
        want = self._issued[slot]
        if want == 0:
            return
        spins = 0
        t0 = time.monotonic()
        next_check = t0 + 1.0
        while True:
            v = int(self.flags[slot])
            if v & ~ERROR_BIT == want:
                if v & ERROR_BIT:
                    self._issued[slot] = 0
                    self.conn.call(m.Sync())  # raises the pending error
                    raise CudaError(codes.UNKNOWN, "staged copy failed")
                return
            spins += 1
            now = time.monotonic()
            if now - t0 > SPIN_S:  # a copy of a slot takes ~0.1 ms: yield the core while it runs, sleep after
                time.sleep(0.00002 if now - t0 < 0.01 else 0.0005)
            elif spins > 16:
                time.sleep(0)
            if now > next_check:
                next_check = now + 1.0
                self.conn.call(m.Ping())  # proves gpud alive (errors show in the flag word)

    def _take(self) -> tuple[int, int]:
        slot = self._next
        self._next = (slot + 1) % self.slots
        self._wait(slot)
        self._seq += 1
        self._issued[slot] = self._seq
        return slot, self._seq

    # A staged copy holds the connection for its whole length: its posts name this ring, which exists only on the
    # gpud that made it, so no call of another thread (or of the heartbeat) may let the session move mid-copy
    # (NOTE [migration] in gpud/migrate.py: a session moves at a call); the liveness check in ``_wait`` is a ping,
    # which never holds a session. After a move the driver opens a new ring, or copies inline.
    def htod(self, dst: int, src_addr: int, size: int, stream: int) -> None:
        with self.lock, self.conn._lock:
            self._current()
            self._htod(dst, src_addr, size, stream)

    def dtoh(self, src: int, size: int, dst_addr: int, stream: int) -> None:
        with self.lock, self.conn._lock:
            self._current()
            self._dtoh(src, size, dst_addr, stream)

    # NOTE [local synchronisation]
    # cuMemcpyHtoD from pageable memory followed by cuCtxSynchronize is the commonest pattern there is, and the
    # synchronise costs a round trip (~80 us on loopback: more than copying a MiB). When everything the connection
    # sent since its last completed ctx_synchronize is a staged copy (``Connection.unsynced`` counts the rest: every
    # post, every call that may queue device work), the copies' completion is in the ring's flag words, which gpud
    # writes after the copy ran in stream order, with the error bit when it failed. ``synchronize`` then waits for
    # every slot issued and returns: the same guarantee as the call, from shared memory. Anything else outstanding
    # (a launch, an event, an ATen batch), a replay log (NOTE [replay log] in shim/client.py), or a ``sync_due`` from
    # gpud (a move or checkpoint waits for a call, NOTE [migration] in gpud/migrate.py) makes it a real call.
    def synchronize(self) -> bool:
        """Complete a ctx_synchronize locally when only staged copies are outstanding; False: make the call."""
        with self.lock, self.conn._lock:
            if getattr(self.conn, "moves", 0) != self.epoch or not self.conn.quiet():
                return False
            for slot in range(self.slots):
                self._wait(slot)
            return True

    def _current(self) -> None:
        if getattr(self.conn, "moves", 0) != self.epoch:
            raise RingGone

    def _htod(self, dst: int, src_addr: int, size: int, stream: int) -> None:
        off = 0
        while off < size:
            n = min(self.slot_size, size - off)
            slot, seq = self._take()
            ctypes.memmove(self._addr(slot), src_addr + off, n)
            self.conn.post(m.ShmHtoD(dst=dst + off, slot=slot, size=n, seq=seq, stream=stream))
            self.conn.flush()
            off += n
            progress.advance(n)

    def _dtoh(self, src: int, size: int, dst_addr: int, stream: int) -> None:
        chunks = [(off, min(self.slot_size, size - off)) for off in range(0, size, self.slot_size)]
        inflight: list[tuple[int, int, int, int]] = []  # (slot, seq, off, n)
        i = 0
        while i < len(chunks) or inflight:
            while i < len(chunks) and len(inflight) < self.slots:
                off, n = chunks[i]
                slot, seq = self._take()
                self.conn.post(m.ShmDtoH(src=src + off, slot=slot, size=n, seq=seq, stream=stream))
                inflight.append((slot, seq, off, n))
                i += 1
            self.conn.flush()
            slot, seq, off, n = inflight.pop(0)
            self._wait(slot)
            ctypes.memmove(dst_addr + off, self._addr(slot), n)

    def close(self) -> None:
        del self.flags
        try:
            self.mm.close()
        except BufferError:
            pass
