"""Page-locked, mapped and managed host memory (client side of NOTE [host map] in proto/messages.py).

With gpud on this host (CPU backend), host memory is a /dev/shm file mapped by both processes, so
kernels reach it: cuMemHostGetDevicePointer answers gpud's address of the same pages, and managed
memory is mapped at one address in both. With a remote gpud, host memory is plain local memory:
copies work, device access does not (CUDA_ERROR_NOT_SUPPORTED says so).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import secrets
from dataclasses import dataclass

from proto import errors as codes
from proto import messages as m
from proto.errors import CudaError
from shim.native.state import STATE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PROT_RW, MAP_SHARED, MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x3, 0x01, 0x02, 0x20, 0x100000
MAP_FAILED = ctypes.c_void_p(-1).value
PAGE = os.sysconf("SC_PAGE_SIZE")
_seq = itertools.count()


@dataclass
class HostBlock:
    host: int
    size: int  # requested size
    length: int  # mapped length (pages)
    flags: int
    device: int | None = None  # gpud's address of the same pages, when mapped
    managed: bool = False


def _mmap(length: int, fd: int = -1, at: int = 0) -> int | None:
    flags = (MAP_SHARED if fd >= 0 else MAP_PRIVATE | MAP_ANONYMOUS) | (MAP_FIXED_NOREPLACE if at else 0)
    addr = _libc.mmap(at or None, length, PROT_RW, flags, fd, 0)
    if addr in (None, MAP_FAILED):
        return None
    if at and addr != at:
        _libc.munmap(addr, length)
        return None
    return int(addr)


def _shm_path() -> str:
    from proto.host import shm_dir

    base = shm_dir()
    return os.path.join(base, f"wooly-host-{os.getpid()}-{next(_seq)}-{secrets.token_hex(8)}")


def can_map() -> bool:
    """Whether gpud can map this process's host memory: it runs on this host with the CPU backend (NOTE [host map])."""
    drv = STATE.driver()
    return bool(getattr(drv.conn, "same_host", False)) and drv.devices[0].get("backend", "cpu") == "cpu"


def allocate(size: int, flags: int, managed: bool = False) -> HostBlock:
    """Host memory of ``size`` bytes; mapped into gpud when it shares this host."""
    if size <= 0:
        raise CudaError(codes.INVALID_VALUE, "size must be > 0")
    length = (size + PAGE - 1) // PAGE * PAGE
    if not can_map():
        if managed:
            raise CudaError(codes.NOT_SUPPORTED, "cuMemAllocManaged: managed memory needs gpud on this host")
        addr = _mmap(length)
        if addr is None:
            raise CudaError(codes.OUT_OF_MEMORY, f"cannot allocate {size} bytes of host memory")
        return HostBlock(addr, size, length, flags)
    path = _shm_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, length)
        host = _mmap(length, fd)
        if host is None:
            raise CudaError(codes.OUT_OF_MEMORY, f"cannot map {size} bytes of host memory")
        conn = STATE.driver().conn
        try:
            dev = conn.call(m.HostMap(path=path, size=length, hint=host, exact=False))[0]
        except CudaError as exc:
            _libc.munmap(host, length)
            if exc.code == codes.NOT_SUPPORTED and not managed:
                addr = _mmap(length)
                if addr is None:
                    raise CudaError(codes.OUT_OF_MEMORY, f"cannot allocate {size} bytes of host memory") from None
                return HostBlock(addr, size, length, flags)
            raise
        if managed and dev != host:  # one address on both sides: move the client's mapping to gpud's
            moved = _mmap(length, fd, at=int(dev))
            _libc.munmap(host, length)
            if moved is None:
                conn.post(m.HostUnmap(addr=int(dev)))
                raise CudaError(codes.OUT_OF_MEMORY, "cuMemAllocManaged: no address free in both processes")
            host = moved
        return HostBlock(host, size, length, flags, int(dev), managed)
    finally:
        os.close(fd)
        os.unlink(path)


def release(block: HostBlock) -> None:
    if block.device is not None:
        STATE.driver().conn.post(m.HostUnmap(addr=block.device))
        STATE.driver().ctx_synchronize()  # gpud unmaps after earlier work; the pages stay until then
    _libc.munmap(block.host, block.length)
