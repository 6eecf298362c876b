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

import ctypes
import ctypes.util
import mmap
import os

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
