"""Server side of the same-host staging ring (see NOTE [shm staging] in proto/messages.py)."""

from __future__ import annotations

import mmap
import os
import secrets
import stat
from typing import Any

import numpy as np

from gpud.errors import CudaError, codes
from gpud.session import CLOSE_HOOKS, INLINE_BYTES, Session, extension
from proto import messages as m
from proto.host import shm_dir

SLOTS = 16
SLOT_SIZE = 2 << 20
HEADER = 4096
ERROR_BIT = 1 << 63


# NOTE [proven locality]
# Same-host privileges (staging rings in shared memory, mapped host memory, sessions expired by their pid's death)
# go to a client that proves it runs on gpud's host, never to one that claims it: a hello's host id is no proof
# (gpud's reply tells every peer its own). When a hello claims gpud's host id, the reply names a fresh file in the
# shared-memory directory (``local_proof``, 128 random bits); the client creates it (O_EXCL, mode 0600) and sends
# ``prove_local``. gpud lstat()s the name it made up: a regular file, not a link, is proof that the peer writes to
# this host's /dev/shm, and its owner is the peer's user id, which host memory mapping then checks each file
# against. A remote peer cannot create the file; a local one of another user cannot pass for this one. One try per
# session: the name is forgotten after it.
@extension("prove_local")
def prove_local(session: Session, msg: m.ProveLocal, bulk: list[Any]) -> bool:
    path = session.ext.pop("local_proof", None)
    if path is None:
        raise CudaError(codes.NOT_PERMITTED, "prove_local: no proof was asked of this session (or it was tried)")
    try:
        st = os.lstat(path)
    except OSError:
        raise CudaError(codes.NOT_PERMITTED, "prove_local: the file was not created on gpud's host") from None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        raise CudaError(codes.NOT_PERMITTED, "prove_local: not a plain file")
    try:
        os.unlink(path)
    except OSError:
        pass  # another user's file in a sticky directory: its owner removes it
    session.info.local, session.info.uid = True, st.st_uid
    return True


class Staging:
    def __init__(self) -> None:
        self.path = os.path.join(shm_dir(), f"wooly-{os.getpid()}-{secrets.token_hex(16)}")
        size = HEADER + SLOTS * SLOT_SIZE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.flags = np.frombuffer(self.mm, dtype=np.uint64, count=SLOTS)
        base = np.frombuffer(self.mm, dtype=np.uint8)
        base[HEADER:] = 0  # the ring's pages exist from the start: no copy pays for their first touch (~0.25 ms/MiB)
        self.base = base.ctypes.data

    def slot_addr(self, slot: int) -> int:
        return self.base + HEADER + slot * SLOT_SIZE

    def close(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass
        del self.flags
        try:
            self.mm.close()
        except BufferError:
            pass


def _staging(session: Session) -> Staging:
    st = session.ext.get("shm")
    if st is None:
        raise CudaError(codes.INVALID_VALUE, "no staging area: send shm_open first")
    return st


@extension("shm_open")
def shm_open(session: Session, msg: m.ShmOpen, bulk: list[Any]) -> dict[str, Any]:
    if not session.info.local:
        raise CudaError(codes.NOT_SUPPORTED, "shared-memory staging is only for clients on gpud's host")
    st = session.ext.get("shm")
    if st is None:
        st = session.ext["shm"] = Staging()
    return {"path": st.path, "slots": SLOTS, "slot_size": SLOT_SIZE, "header": HEADER}


def _enqueue_staged(session: Session, msg: m.ShmHtoD | m.ShmDtoH, device_addr: int, what: str, copy) -> None:
    """Validate a staged copy and queue it; the slot's flag word reports completion or failure."""
    st = _staging(session)
    if msg.slot >= SLOTS:
        raise CudaError(codes.INVALID_VALUE, f"staging slot {msg.slot} out of range ({SLOTS} slots)")
    try:
        if msg.size > SLOT_SIZE:
            raise CudaError(codes.INVALID_VALUE, f"staged copy of {msg.size} bytes exceeds the {SLOT_SIZE}-byte slot")
        session.find(device_addr, msg.size, what)
    except CudaError:
        st.flags[msg.slot] = msg.seq | ERROR_BIT  # the client waits on this word: never leave it hanging
        raise
    slot_addr = st.slot_addr(msg.slot)
    session.charge("bytes_in" if what == "cuMemcpyHtoD" else "bytes_out", msg.size)

    def run() -> None:
        ok = False
        try:
            copy(device_addr, msg.size, slot_addr)
            ok = True
        finally:
            st.flags[msg.slot] = msg.seq if ok else msg.seq | ERROR_BIT

    session.engine.enqueue(msg.stream, run, inline=msg.size <= INLINE_BYTES)


@extension("shm_htod")
def shm_htod(session: Session, msg: m.ShmHtoD, bulk: list[Any]) -> None:
    _enqueue_staged(session, msg, msg.dst, "cuMemcpyHtoD", session.backend.copyin_from)


@extension("shm_dtoh")
def shm_dtoh(session: Session, msg: m.ShmDtoH, bulk: list[Any]) -> None:
    _enqueue_staged(session, msg, msg.src, "cuMemcpyDtoH", session.backend.copyout_into)


def _close(session: Session) -> None:
    st = session.ext.pop("shm", None)
    if st is not None:
        # In-flight copies may still touch the ring: unmap once the session's streams drain.
        from gpud.streams import when_all

        when_all(session.engine.tails(), st.close)


CLOSE_HOOKS.append(_close)
