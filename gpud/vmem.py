"""Page-table tricks for the CPU backend, where a device pointer is an address in gpud's own memory.

- ``map_shared_private(addr, fd, length)``: put a file's pages (a dedup chunk held in a memfd) at
  ``addr`` with ``MAP_PRIVATE | MAP_FIXED``. Reads see the file; the first write to a page gives
  the writer a private copy of that page (NOTE [COW by the MMU] in dedup.py).
- ``remap_anonymous(addr, length)``: fresh zero pages at the same addresses; the old pages (private
  or a dedup chunk's) go back to the OS (sleep.py). ``discard`` is the ``MADV_DONTNEED`` variant
  for ranges that are not page aligned at both ends.
- ``populate(addr, length)``: ``MADV_POPULATE_WRITE``, fault the pages in with one system call
  before a bulk copy (wake), instead of one page fault per 4 KiB.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import mmap
import os
import random
import threading

PAGE = mmap.PAGESIZE
_MAP_FAILED = ctypes.c_void_p(-1).value
MADV_DONTNEED = 4
MADV_POPULATE_WRITE = 23

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.madvise.restype = ctypes.c_int
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def page_round(n: int) -> int:
    return (n + PAGE - 1) // PAGE * PAGE


def map_shared_private(addr: int, fd: int, length: int) -> None:
    if addr % PAGE:
        raise ValueError(f"0x{addr:x} is not page aligned")
    n = page_round(length)
    flags = mmap.MAP_PRIVATE | 0x10  # MAP_FIXED
    got = _libc.mmap(addr, n, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, 0)
    if got == _MAP_FAILED or got != addr:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap(MAP_FIXED) at 0x{addr:x}: {os.strerror(err)}")


def adopt_shared(addr: int, fd: int, length: int) -> None:
    """Put a page-aligned range's current bytes into file ``fd`` (``length`` bytes, already that long) and map
    the file ``MAP_SHARED`` over the same addresses: the range keeps its content and addresses, and whoever else
    maps the file shares its pages from now on (NOTE [device memory aliases] in gpud/aten_alias.py). The caller
    makes sure nothing writes the range meanwhile."""
    if addr % PAGE:
        raise ValueError(f"0x{addr:x} is not page aligned")
    n = page_round(length)
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    tmp = _libc.mmap(None, n, rw, mmap.MAP_SHARED, fd, 0)
    if tmp == _MAP_FAILED or tmp is None:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of a {n}-byte file: {os.strerror(err)}")
    try:
        ctypes.memmove(tmp, addr, n)
    finally:
        _libc.munmap(ctypes.c_void_p(tmp), ctypes.c_size_t(n))
    map_shared(addr, fd, n)


def map_shared(addr: int, fd: int, length: int) -> None:
    """Map file ``fd`` ``MAP_SHARED`` over a page-aligned range (what was there goes)."""
    n = page_round(length)
    got = _libc.mmap(addr, n, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | 0x10, fd, 0)  # MAP_FIXED
    if got == _MAP_FAILED or got != addr:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap(MAP_SHARED|MAP_FIXED) at 0x{addr:x}: {os.strerror(err)}")


def remap_anonymous(addr: int, length: int) -> None:
    """Replace a page-aligned range with fresh zero pages (``MAP_FIXED``): whatever backed it (private
    pages, or a file's pages) is released, and the addresses stay valid."""
    if addr % PAGE:
        raise ValueError(f"0x{addr:x} is not page aligned")
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x10  # MAP_FIXED
    got = _libc.mmap(addr, page_round(length), mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if got == _MAP_FAILED or got != addr:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap(MAP_FIXED|MAP_ANONYMOUS) at 0x{addr:x}: {os.strerror(err)}")


def discard(addr: int, length: int) -> None:
    """Drop the pages of a page-aligned range (partial pages at either end are left alone)."""
    start = page_round(addr)
    end = (addr + length) // PAGE * PAGE
    if end > start and _libc.madvise(start, end - start, MADV_DONTNEED) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"madvise(DONTNEED) at 0x{start:x}: {os.strerror(err)}")


def populate(addr: int, length: int) -> bool:
    start = addr // PAGE * PAGE
    end = page_round(addr + length)
    return _libc.madvise(start, end - start, MADV_POPULATE_WRITE) == 0


class Memfd:
    """An anonymous in-memory file holding one dedup chunk, with a shared mapping to fill and read it."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.fd = os.memfd_create("wooly-dedup", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, page_round(length))
            self.mm = mmap.mmap(self.fd, page_round(length), flags=mmap.MAP_SHARED)
        except BaseException:
            os.close(self.fd)
            raise
        self._buf = (ctypes.c_char * page_round(length)).from_buffer(self.mm)
        self.addr = ctypes.addressof(self._buf)

    def view(self) -> memoryview:
        return memoryview(self.mm)[: self.length]

    def close(self) -> None:
        del self._buf
        try:
            self.mm.close()
        except BufferError:
            pass  # a view is still alive; the mapping goes with it
        try:
            os.close(self.fd)
        except OSError:
            pass


# NOTE [session arenas]
# On the CPU backend a device pointer is an address in gpud's own memory. For a session to move to another node
# with its pointers still valid (NOTE [migration] in gpud/migrate.py), its allocations must sit where the target
# can put them at the same addresses. So every session reserves one range of address space of its own, an
# *arena*: ``ARENA_SIZE`` bytes at a random slot of the ``[ARENA_LO, ARENA_HI)`` window, reserved PROT_NONE and
# MAP_NORESERVE (no memory, no commit charge; only page-table bookkeeping), with MAP_FIXED_NOREPLACE so that it
# never lands on anything of this process. The window lies far below where the kernel places ordinary mappings
# (top-down from near 2^47) and below where it loads a position-independent executable (the interpreter, from about
# 0x5555_5555_4000 plus a random offset) with its heap right above it (a slot near 0x557000000000 once collided
# with the target's heap and a move failed: "mmap at 0x557000000000: File exists"), so a slot free here is almost
# always free on another gpud too; the target reserves the same range with MAP_FIXED_NOREPLACE and refuses the move if it cannot (the pool
# then tries another node). Allocations are carved first-fit inside the arena, page aligned, and committed with
# MAP_FIXED over the reservation; a free puts PROT_NONE pages back, which also returns the memory at once.
PROT_NONE = 0
MAP_NORESERVE = 0x4000
MAP_FIXED_NOREPLACE = 0x100000
ARENA_SIZE = 1 << 36  # 64 GiB of address space per session
ARENA_LO = 1 << 44  # 16 TiB
ARENA_HI = 0x5000_0000_0000  # 80 TiB: below a PIE executable and its heap


def _mmap_at(addr: int, length: int, prot: int, flags: int) -> int:
    got = _libc.mmap(addr, length, prot, flags, -1, 0)
    if got == _MAP_FAILED or got is None:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap at 0x{addr:x}+{length}: {os.strerror(err)}")
    return got


class Arena:
    """One session's reserved address range and the allocations inside it (NOTE [session arenas])."""

    def __init__(self, base: int | None = None, size: int = ARENA_SIZE) -> None:
        self.size = size
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE
        if base is not None:
            got = _mmap_at(base, size, PROT_NONE, flags)
            if got != base:  # a kernel without MAP_FIXED_NOREPLACE took it as a hint
                _libc.munmap(ctypes.c_void_p(got), ctypes.c_size_t(size))
                raise OSError(17, f"the address range 0x{base:x}+{size} is taken in this process")
            self.base = base
        else:
            slots = (ARENA_HI - ARENA_LO) // size
            for _ in range(64):
                want = ARENA_LO + random.randrange(slots) * size
                try:
                    got = _mmap_at(want, size, PROT_NONE, flags)
                except OSError:
                    continue
                if got == want:
                    self.base = want
                    break
                _libc.munmap(ctypes.c_void_p(got), ctypes.c_size_t(size))
            else:
                raise OSError(12, "no free slot for a session arena")
        self._free: list[list[int]] = [[self.base, size]]  # sorted [start, length] extents
        self.live: dict[int, int] = {}  # start -> length of each allocation
        self._lock = threading.Lock()
        self._closing = False

    def __contains__(self, addr: int) -> bool:
        return self.base <= addr < self.base + self.size

    def alloc(self, size: int) -> int:
        n = page_round(max(size, 1))
        with self._lock:
            for ext in self._free:
                if ext[1] >= n:
                    addr = ext[0]
                    ext[0] += n
                    ext[1] -= n
                    if not ext[1]:
                        self._free.remove(ext)
                    break
            else:
                raise MemoryError(f"this session's arena ({self.size >> 30} GiB of address space) is full")
            self.live[addr] = n
        self._commit(addr, n)
        return addr

    def alloc_at(self, addr: int, size: int) -> int:
        """Allocate exactly ``[addr, addr+size)`` (a session moving in keeps its addresses)."""
        n = page_round(max(size, 1))
        if addr % PAGE or addr not in self or addr + n > self.base + self.size:
            raise ValueError(f"0x{addr:x}+{size} is not a page-aligned range of this arena")
        with self._lock:
            for i, ext in enumerate(self._free):
                if ext[0] <= addr and addr + n <= ext[0] + ext[1]:
                    before, after = addr - ext[0], ext[0] + ext[1] - (addr + n)
                    repl = ([[ext[0], before]] if before else []) + ([[addr + n, after]] if after else [])
                    self._free[i : i + 1] = repl
                    break
            else:
                raise ValueError(f"0x{addr:x}+{size} overlaps an allocation of this arena")
            self.live[addr] = n
        self._commit(addr, n)
        return addr

    def read_live(self, start: int, off: int, n: int) -> bytes | None:
        """A copy of ``n`` bytes at ``off`` in the allocation at ``start`` if it is still live, else None: read while
        the session runs (a move's pre-copy, NOTE [migration]) under the lock a free takes, so the pages stay."""
        with self._lock:
            if self.live.get(start, -1) < off + n:
                return None
            return ctypes.string_at(start + off, n)

    def _commit(self, addr: int, n: int) -> None:
        try:
            _mmap_at(addr, n, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x10)
        except OSError:
            self.free(addr)
            raise

    def free(self, addr: int) -> None:
        with self._lock:
            n = self.live.pop(addr)
            # PROT_NONE, no reserve: the pages (private copies, or a dedup chunk's) go back to the OS now.
            _mmap_at(addr, n, PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE | 0x10)
            i = bisect.bisect_left(self._free, [addr, 0])
            self._free.insert(i, [addr, n])
            if i + 1 < len(self._free) and addr + n == self._free[i + 1][0]:  # merge with the next extent
                self._free[i][1] += self._free.pop(i + 1)[1]
            if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == addr:  # and with the previous one
                self._free[i - 1][1] += self._free.pop(i)[1]
            done = self._closing and not self.live
        if done:
            self._unmap()

    def close(self) -> None:
        """Give the range back once its last allocation is freed (one kept alive by an IPC importer may outlive
        the session)."""
        with self._lock:
            self._closing = True
            done = not self.live
        if done:
            self._unmap()

    def _unmap(self) -> None:
        if self.size:
            _libc.munmap(ctypes.c_void_p(self.base), ctypes.c_size_t(self.size))
            self.size = 0
