"""Mapped host memory for clients on gpud's host (NOTE [host map] in proto/messages.py).

The client creates a file in /dev/shm and maps it; gpud maps the same file (MAP_SHARED, so the same
physical pages) and registers its mapping as a region of the session: kernels and copies may then
use it, as CUDA kernels use mapped pinned memory and managed memory. CPU backend only (its device
pointers are gpud's own addresses); a GPU backend would register the pages with its driver.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from gpud.errors import CudaError, codes
from gpud.session import CLOSE_HOOKS, Region, Session, extension
from gpud.streams import when_all
from proto import messages as m
from proto.host import shm_dir

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PROT_RW = 0x1 | 0x2
MAP_SHARED = 0x01
MAP_FIXED_NOREPLACE = 0x100000
MAP_FAILED = ctypes.c_void_p(-1).value
PREFIX = "wooly-host-"


def _map(fd: int, size: int, hint: int) -> int | None:
    flags = MAP_SHARED | (MAP_FIXED_NOREPLACE if hint else 0)
    addr = _libc.mmap(hint or None, size, PROT_RW, flags, fd, 0)
    if addr in (None, MAP_FAILED):
        return None
    if hint and addr != hint:  # an old kernel without MAP_FIXED_NOREPLACE took the hint as a hint
        _libc.munmap(addr, size)
        return None
    return int(addr)


@extension("host_map")
def host_map(session: Session, msg: m.HostMap, bulk: list[Any]) -> int:
    if not session.info.local:
        raise CudaError(codes.NOT_SUPPORTED, "mapped host memory needs the client on gpud's host")
    if not session.backend.host_memory:
        raise CudaError(
            codes.NOT_SUPPORTED, f"mapped host memory is not supported by the {session.backend.kind} backend"
        )
    path = os.path.realpath(msg.path)
    if os.path.dirname(path) != os.path.realpath(shm_dir()) or not os.path.basename(path).startswith(PREFIX):
        raise CudaError(codes.INVALID_VALUE, f"host_map: {msg.path!r} is not a wooly host-memory file")
    if msg.size == 0:
        raise CudaError(codes.INVALID_VALUE, "host_map: size must be > 0")
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError as exc:
        raise CudaError(codes.INVALID_VALUE, f"host_map: {exc}") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != session.info.uid:  # NOTE [proven locality] (gpud/shm.py): only the client's own files
            raise CudaError(codes.NOT_PERMITTED, f"host_map: {msg.path!r} belongs to another user")
        if st.st_size < msg.size:
            raise CudaError(codes.INVALID_VALUE, "host_map: the file is smaller than the mapping")
        addr = _map(fd, msg.size, msg.hint)
        if addr is None and msg.hint and not msg.exact:
            addr = _map(fd, msg.size, 0)
    finally:
        os.close(fd)
    if addr is None:
        code = codes.INVALID_VALUE if msg.exact else codes.OUT_OF_MEMORY
        raise CudaError(code, f"host_map: cannot map {msg.size} bytes" + (f" at 0x{msg.hint:x}" if msg.hint else ""))
    session._add_region(Region(addr, msg.size, None))
    session.ext.setdefault("host_maps", {})[addr] = msg.size
    return addr


def _unmap_later(session: Session, addr: int, size: int) -> None:
    when_all(session.engine.tails(), lambda: _libc.munmap(addr, size))


@extension("host_unmap")
def host_unmap(session: Session, msg: m.HostUnmap, bulk: list[Any]) -> None:
    maps = session.ext.get("host_maps", {})
    size = maps.pop(msg.addr, None)
    if size is None:
        raise CudaError(codes.INVALID_VALUE, f"host_unmap: 0x{msg.addr:x} is not mapped host memory")
    session._remove_region(msg.addr)
    _unmap_later(session, msg.addr, size)


def _close(session: Session) -> None:
    for addr, size in session.ext.pop("host_maps", {}).items():
        if addr in session.regions:
            session._remove_region(addr)
        _unmap_later(session, addr, size)


CLOSE_HOOKS.append(_close)
