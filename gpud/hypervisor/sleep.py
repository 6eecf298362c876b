"""Sleep and wake: move an idle (or displaced) tenant's device memory out, and back on its next call.

NOTE [sleep]: sleeping copies each of the tenant's allocations out with the backend's
``copyout_into`` (into anonymous host memory up to ``host_budget``, into files under ``spill_dir``
beyond it) and then gives the allocation's pages back: on the CPU backend fresh anonymous pages are
mapped over the range with ``MAP_FIXED`` (the old pages go back to the OS), so the address range
stays mapped and every device pointer the tenant holds stays valid. Waking faults the pages back in one system call (``MADV_POPULATE_WRITE``) and copies the
bytes back with ``copyin_from``, in parallel pieces (memmove releases the GIL). Ranges mapped from
the dedup store are left alone while another tenant also maps them (shared weights stay put as
long as one user is awake); chunks only this tenant uses are unshared first and sleep with it. A tenant is
only put to sleep when none of its sessions has device work queued, and the wake happens on gpud's
I/O loop before the tenant's next call is handled, so no operation can see a half-restored tenant.
Both directions are plain bulk copies, measured by ``benchmarks.sharing`` (wake vs memcpy).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpud import log, vmem
from gpud.hypervisor.tenants import ASLEEP, AWAKE, Tenant

if TYPE_CHECKING:
    from gpud.backends.base import Backend
    from gpud.hypervisor.core import Hypervisor
    from gpud.session import Session

_PIECE = 16 << 20  # unit of parallel copies
_BOUNCE = 8 << 20  # bounce buffer for files


@dataclass
class Saved:
    addr: int
    size: int
    host: mmap.mmap | None = None  # in host memory ...
    host_addr: int = 0
    path: str = ""  # ... or in a spill file

    def release(self) -> None:
        if self.host is not None:
            try:
                self.host.close()
            except BufferError:
                pass
            self.host = None
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            self.path = ""


def _addr_of(mm: mmap.mmap) -> int:
    buf = (ctypes.c_char * 1).from_buffer(mm)
    addr = ctypes.addressof(buf)
    del buf
    return addr


def release_pages(backend: Backend, addr: int, size: int) -> None:
    """Give a range's device pages back while keeping its addresses (the backend's hook)."""
    backend.discard_pages(addr, size)


class SleepManager:
    def __init__(self, hv: Hypervisor) -> None:
        self.hv = hv
        self.host_used = 0
        self.spilled = 0
        self._files = 0
        self._copiers = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="gpud-wake")
        self.stats = {
            "sleeps": 0,
            "wakes": 0,
            "bytes_slept": 0,
            "bytes_spilled": 0,
            "last_wake_s": 0.0,
            "last_wake_bytes": 0,
            "last_sleep_s": 0.0,
        }

    # ------------------------------------------------------------------ helpers
    def resident_bytes(self, t: Tenant) -> int:
        """Device bytes sleeping ``t`` would free: its private memory and the chunks only it uses."""
        return max(0, t.used - t.shared + self.hv.dedup.sole_bytes(t)) if t.state == AWAKE else 0

    def _private_ranges(self, session: Session) -> list[tuple[int, int]]:
        """The session's allocation ranges minus what is mapped from the dedup store."""
        shares = session.ext.get("hv.shares")
        out: list[tuple[int, int]] = []
        for r in session.regions.values():
            if r.allocation is None or r.allocation.alias is not None:
                continue  # an alias's pages stay: the tenant's executor maps them (NOTE [device memory aliases])
            pos, end = r.start, r.start + r.size
            skip = sorted(
                (s.start, s.start + s.length)
                for s in (shares.overlapping(r.start, r.size) if shares else [])
                if s.chunk is not None
            )
            for a, b in skip:
                if a > pos:
                    out.append((pos, a - pos))
                pos = max(pos, b)
            if end > pos:
                out.append((pos, end - pos))
        return out

    def _parallel(self, jobs: list[Any]) -> None:
        for f in [self._copiers.submit(j) for j in jobs]:
            f.result()

    # ------------------------------------------------------------------ sleep
    def sleep_tenant(self, t: Tenant, reason: str = "") -> bool:
        if t.state != AWAKE or not t.policy.sleepable or t.busy():
            return False
        t0 = time.perf_counter()
        total = 0
        with self.hv.lock:
            self.hv.dedup.release_sole(t)  # chunks no other tenant uses sleep with their owner
            for session in list(t.sessions.values()):
                saved: list[Saved] = session.ext.setdefault("hv.slept", [])
                backend = session.backend
                for addr, size in self._private_ranges(session):
                    item = self._save(backend, addr, size)
                    saved.append(item)
                    release_pages(backend, addr, size)
                    total += size
                    self.hv.adjust_physical(backend.ordinal, -size)
            t.state = ASLEEP
            t.slept_bytes = total
            t.sleeps += 1
            t.last_sleep_s = time.perf_counter() - t0
        self.stats["sleeps"] += 1
        self.stats["bytes_slept"] += total
        self.stats["last_sleep_s"] = t.last_sleep_s
        log.event("hv.sleep", tenant=t.name, reason=reason, bytes=total, seconds=round(t.last_sleep_s, 4))
        return True

    def _save(self, backend: Backend, addr: int, size: int) -> Saved:
        if self.host_used + size <= self.hv.config.host_budget:
            mm = mmap.mmap(-1, vmem.page_round(size), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            item = Saved(addr, size, host=mm, host_addr=_addr_of(mm))
            jobs = [
                (lambda o=o: backend.copyout_into(addr + o, min(_PIECE, size - o), item.host_addr + o))
                for o in range(0, size, _PIECE)
            ]
            self._parallel(jobs)
            self.host_used += size
            return item
        os.makedirs(self.hv.config.spill_dir, mode=0o700, exist_ok=True)
        self._files += 1
        path = os.path.join(self.hv.config.spill_dir, f"gpud-{os.getpid()}-{self._files}.bin")
        bounce = bytearray(min(_BOUNCE, size))
        baddr = ctypes.addressof((ctypes.c_char * len(bounce)).from_buffer(bounce))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for o in range(0, size, len(bounce)):
                n = min(len(bounce), size - o)
                backend.copyout_into(addr + o, n, baddr)
                os.write(fd, memoryview(bounce)[:n])
        finally:
            os.close(fd)
        self.spilled += size
        self.stats["bytes_spilled"] += size
        return Saved(addr, size, path=path)

    # ------------------------------------------------------------------ wake
    def wake_tenant(self, t: Tenant) -> None:
        if t.state != ASLEEP:
            return
        t0 = time.perf_counter()
        total = 0
        with self.hv.lock:
            for session in list(t.sessions.values()):
                saved: list[Saved] = session.ext.pop("hv.slept", [])
                backend = session.backend
                for item in saved:
                    self._restore(backend, item)
                    total += item.size
                    self.hv.adjust_physical(backend.ordinal, item.size)
            t.state = AWAKE
            t.slept_bytes = 0
            t.wakes += 1
            t.last_wake_s = time.perf_counter() - t0
        self.stats["wakes"] += 1
        self.stats["last_wake_s"] = t.last_wake_s
        self.stats["last_wake_bytes"] = total
        log.event("hv.wake", tenant=t.name, bytes=total, seconds=round(t.last_wake_s, 4))

    def _restore(self, backend: Backend, item: Saved) -> None:
        addr, size = item.addr, item.size
        if item.host is not None:

            def piece(o: int) -> None:
                n = min(_PIECE, size - o)
                backend.populate_pages(addr + o, n)
                backend.copyin_from(addr + o, n, item.host_addr + o)

            self._parallel([(lambda o=o: piece(o)) for o in range(0, size, _PIECE)])
            self.host_used -= size
        else:
            bounce = bytearray(min(_BOUNCE, size))
            baddr = ctypes.addressof((ctypes.c_char * len(bounce)).from_buffer(bounce))
            with open(item.path, "rb", buffering=0) as f:
                for o in range(0, size, len(bounce)):
                    n = f.readinto(memoryview(bounce)[: min(len(bounce), size - o)])
                    if not n:
                        break
                    backend.copyin_from(addr + o, n, baddr)
            self.spilled -= size
        item.release()

    # ------------------------------------------------------------------ lifetime
    def forget_session(self, session: Session) -> None:
        """A session closed while asleep: its saved bytes are garbage now."""
        saved: list[Saved] = session.ext.pop("hv.slept", [])
        t: Tenant | None = session.ext.get("hv.tenant")
        for item in saved:
            if item.host is not None:
                self.host_used -= item.size
            else:
                self.spilled -= item.size
            item.release()
            # The session's free released the full size, but these bytes had already left the device.
            self.hv.adjust_physical(session.backend.ordinal, item.size)
            if t is not None:
                t.slept_bytes -= item.size

    def describe(self) -> dict[str, Any]:
        return {"host_used": self.host_used, "spilled": self.spilled, **self.stats}

    def close(self) -> None:
        self._copiers.shutdown(wait=False, cancel_futures=True)
