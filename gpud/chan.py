"""Framed messages between gpud's broker and its executor processes (NOTE [executors] in gpud/executors.py).

A frame is an 8-byte header (body length, number of file descriptors) and a msgpack body (msgspec's: ATen
arguments stay ``msgspec.msgpack.Ext`` from the client's message to the executor, NOTE [aten values]). File descriptors
(memfds holding bulk data, dedup chunks, new channels) ride as SCM_RIGHTS: the first 250 with the frame, the
rest in carrier frames of 250 that follow it. Bulk values travel inline when small and in
a memfd otherwise: a weight upload is written once into pages the executor adopts as the tensor's storage, and a
download comes back the same way. No pickles: a compromised executor must not be able to run code in the broker,
so the broker reads its replies as it reads a client's (bounded sizes, checked types).
"""

from __future__ import annotations

import array
import fcntl
import mmap
import os
import socket
import struct
from typing import Any

import msgspec

_HEAD = struct.Struct("<II")
_FDS_PER_MSG = 250  # SCM_MAX_FD is 253
MAX_BODY = 256 << 20
MAX_FDS = 1 << 16
INLINE = 64 << 10  # bulk values up to this size are copied into the body


def _builtin(v: Any) -> Any:
    """A subclass of a builtin type (torch's version string, an IntEnum) as that type, as msgpack-python wrote it."""
    if isinstance(v, str):
        return str(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, bytes):
        return bytes(v)
    raise NotImplementedError(f"cannot send a {type(v).__name__} to or from an executor")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_builtin)
_DECODER = msgspec.msgpack.Decoder()  # any msgpack value; a body is at most MAX_BODY bytes


class ChannelClosed(EOFError):
    """The other end is gone (or spoke out of turn: a broken frame closes the channel)."""


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Conn:
    """One end of a channel: a unix stream socket and what was read past the last frame.

    A frame goes out in one ``sendmsg`` (header, body and up to 250 descriptors), so the receiver wakes once
    per frame; descriptors past 250 follow in carrier frames (header only). Reads take what is there (up to
    64 KiB at a time) and keep the rest for the next frame."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def settimeout(self, t: float | None) -> None:
        self.sock.settimeout(t)

    def send(self, obj: Any, fds: list[int] | tuple[int, ...] = ()) -> None:
        body = _ENCODER.encode(obj)
        if len(body) > MAX_BODY:
            raise ValueError(f"channel frame of {len(body)} bytes is over {MAX_BODY}")
        fds = list(fds)
        data = memoryview(_HEAD.pack(len(body), len(fds)) + body)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds[:_FDS_PER_MSG]))] if fds else []
        sent = self.sock.sendmsg([data], anc)
        if sent < len(data):
            self.sock.sendall(data[sent:])
        for i in range(_FDS_PER_MSG, len(fds), _FDS_PER_MSG):
            part = fds[i : i + _FDS_PER_MSG]
            self.sock.sendmsg(
                [_HEAD.pack(0, len(part))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", part))]
            )

    def _fill(self, fds: list[int]) -> None:
        data, got, flags, _ = socket.recv_fds(self.sock, 65536, _FDS_PER_MSG)
        fds.extend(got)
        if flags & socket.MSG_CTRUNC:
            raise ChannelClosed("file descriptors were truncated")
        if not data:
            raise ChannelClosed("the other end closed the channel")
        self.buf += data

    def _take(self, n: int, fds: list[int]) -> bytes:
        while len(self.buf) < n:
            self._fill(fds)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def recv(self) -> tuple[Any, list[int]]:
        """One frame: (object, fds). The caller owns the fds (close them or hand them on)."""
        fds: list[int] = []
        try:
            length, nfds = _HEAD.unpack(self._take(_HEAD.size, fds))
            if length > MAX_BODY or nfds > MAX_FDS:
                raise ChannelClosed(f"oversized frame ({length} bytes, {nfds} descriptors)")
            body = self._take(length, fds)
            while len(fds) < nfds:  # carrier frames
                n, k = _HEAD.unpack(self._take(_HEAD.size, fds))
                if n or not k:
                    raise ChannelClosed("expected a descriptor carrier frame")
            if len(fds) != nfds:
                raise ChannelClosed(f"frame announced {nfds} descriptors, {len(fds)} came")
            try:
                obj = _DECODER.decode(body)
            except Exception as exc:  # noqa: BLE001 - a broken body is a broken channel
                raise ChannelClosed(f"undecodable frame: {type(exc).__name__}") from None
            return obj, fds
        except BaseException:
            _close_all(fds)
            raise


def pair() -> tuple[Conn, socket.socket]:
    """A new channel: our end, and the socket to hand to the other process (close it once handed)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return Conn(ours), theirs


# ---------------------------------------------------------------- bulk values
def memfd_with(data: Any, name: str = "wooly-bulk", seal: bool = False) -> int:
    """A memfd holding ``data``'s bytes (written with one system call per GiB, not through a mapping). Sealed
    against shrinking and growing where the receiver will map it and must not be made to fault (SIGBUS)."""
    view = memoryview(data).cast("B")
    fd = os.memfd_create(name, os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if seal else 0))
    try:
        os.ftruncate(fd, view.nbytes)
        off = 0
        while off < view.nbytes:
            off += os.pwrite(fd, view[off : off + (1 << 30)], off)
        if seal:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def pack_bulk(items: list[Any], fds: list[int], seal: bool = False) -> list[Any]:
    """Descriptors for ``items``: bytes inline, or ``[index into fds, length]`` for a memfd appended to ``fds``."""
    out: list[Any] = []
    for item in items:
        view = memoryview(item).cast("B") if not isinstance(item, bytes) else item
        n = len(view) if isinstance(view, bytes) else view.nbytes
        if n <= INLINE:
            out.append(bytes(view))
        else:
            fds.append(memfd_with(view, seal=seal))
            out.append([len(fds) - 1, n])
    return out


def unpack_bulk(descs: Any, fds: list[int], used: set[int], sealed: bool = False) -> list[Any]:
    """Buffers for descriptors from ``pack_bulk``: bytes, or a shared mapping of the memfd (writable: the executor
    adopts it as a tensor's storage; read-only and only if sealed against shrinking where the broker reads what
    an executor wrote). Descriptor fds are marked in ``used``; the caller closes all of ``fds``."""
    if not isinstance(descs, list) or len(descs) > MAX_FDS:
        raise ValueError("bulk descriptors must be a list")
    out: list[Any] = []
    for d in descs:
        if isinstance(d, bytes):
            out.append(d)
            continue
        if (
            not isinstance(d, list)
            or len(d) != 2
            or not all(type(x) is int for x in d)
            or not 0 <= d[0] < len(fds)
            or d[0] in used
            or d[1] <= 0
        ):
            raise ValueError("malformed bulk descriptor")
        fd = fds[d[0]]
        used.add(d[0])
        if sealed:
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                seals = 0
            if not seals & fcntl.F_SEAL_SHRINK:
                raise ValueError("bulk memfd is not sealed against shrinking")
        if os.fstat(fd).st_size < d[1]:
            raise ValueError("bulk memfd is shorter than announced")
        prot = mmap.PROT_READ if sealed else mmap.PROT_READ | mmap.PROT_WRITE
        out.append(mmap.mmap(fd, d[1], flags=mmap.MAP_SHARED, prot=prot))
    return out
