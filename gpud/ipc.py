"""CUDA IPC memory handles between sessions of one tenant (NOTE [ipc] in proto/messages.py).

``cuIpcGetMemHandle`` in one process turns an allocation into a 64-byte handle: a random token that gpud
remembers (a capability: whoever holds the handle may open the memory, as with CUDA). ``cuIpcOpenMemHandle`` in
another process of the same tenant adds the allocation to that session's regions, at the same address (all
sessions live in gpud's one address space), so its copies and kernels may use it; the importer is not charged for
it. ``cuIpcCloseMemHandle`` removes it. An allocation freed by its exporter while others still have it open stays
alive until the last of them closes it (or its session ends), so an importer never touches freed memory; the
handle stops opening at once.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

from gpud.errors import CudaError, codes
from gpud.session import CLOSE_HOOKS, KEEP_HOOKS, Event, Region, Session, extension
from gpud.streams import when_all
from proto import messages as m

MAGIC = b"WOOLYIPC"


@dataclass(eq=False)
class _Export:
    session: Session
    addr: int
    size: int
    allocation: Any
    token: bytes
    importers: dict[Session, int] = field(default_factory=dict)  # session -> open count
    freed: bool = False  # the exporter freed it: free when the last importer closes


_lock = threading.Lock()
_by_token: dict[bytes, _Export] = {}
_by_alloc: dict[int, _Export] = {}  # id(allocation) -> export


def _handle(e: _Export) -> bytes:
    return MAGIC + e.token + e.addr.to_bytes(8, "little") + e.size.to_bytes(8, "little") + bytes(16)  # 64 bytes


@extension("ipc_get")
def ipc_get(session: Session, msg: m.IpcGet, bulk: list[Any]) -> bytes:
    r = session.regions.get(msg.addr)
    if r is None or r.allocation is None:
        raise CudaError(
            codes.INVALID_VALUE, f"cuIpcGetMemHandle: 0x{msg.addr:x} is not the start of an allocation of this context"
        )
    with _lock:
        e = _by_alloc.get(id(r.allocation))
        if e is None:
            e = _Export(session, r.start, r.size, r.allocation, secrets.token_bytes(24))
            session.ext["ipc_exported"] = True  # its handles name this gpud: the session cannot move (NOTE [migration])
            _by_alloc[id(r.allocation)] = _by_token[e.token] = e
        return _handle(e)


@extension("ipc_open")
def ipc_open(session: Session, msg: m.IpcOpen, bulk: list[Any]) -> list[int]:
    h = msg.handle
    with _lock:
        e = _by_token.get(h[8:32]) if h[:8] == MAGIC else None
        if e is None or e.freed:
            raise CudaError(codes.INVALID_VALUE, "cuIpcOpenMemHandle: not a valid IPC handle, or its memory was freed")
        if e.session is session:
            raise CudaError(codes.INVALID_CONTEXT, "cuIpcOpenMemHandle: the memory belongs to this context already")
        if e.session.info.tenant != session.info.tenant:
            raise CudaError(codes.INVALID_VALUE, "cuIpcOpenMemHandle: the handle belongs to another tenant")
        opened = session.ext.setdefault("ipc_opened", {})
        if e.addr not in opened:
            if e.addr in session.regions:
                raise CudaError(codes.INVALID_VALUE, "cuIpcOpenMemHandle: the address is in use in this context")
            session._add_region(Region(e.addr, e.size, None))
            opened[e.addr] = e
        e.importers[session] = e.importers.get(session, 0) + 1
        return [e.addr, e.size]


def _release(session: Session, e: _Export, all_opens: bool) -> None:
    """Drop ``session``'s opens of ``e`` (one, or all); free the memory if it was waiting for that. Under _lock."""
    n = e.importers.get(session, 0) - 1
    if n > 0 and not all_opens:
        e.importers[session] = n
        return
    e.importers.pop(session, None)
    session.ext.get("ipc_opened", {}).pop(e.addr, None)
    if e.addr in session.regions:
        session._remove_region(e.addr)
    if e.freed and not e.importers:
        _by_alloc.pop(id(e.allocation), None)
        owner = e.session  # the memory may still be in use by the last work of either side
        when_all(session.engine.tails() + owner.engine.tails(), lambda: owner.backend.free(e.allocation))


@extension("ipc_close")
def ipc_close(session: Session, msg: m.IpcClose, bulk: list[Any]) -> None:
    with _lock:
        e = session.ext.get("ipc_opened", {}).get(msg.addr)
        if e is None:
            raise CudaError(
                codes.INVALID_VALUE, f"cuIpcCloseMemHandle: 0x{msg.addr:x} was not opened from an IPC handle"
            )
        _release(session, e, all_opens=False)


def _keep(session: Session, allocation: Any) -> bool:
    """The exporter frees an allocation: the handle stops opening; the memory stays while others have it open."""
    with _lock:
        e = _by_alloc.get(id(allocation))
        if e is None:
            return False
        _by_token.pop(e.token, None)
        e.freed = True
        if e.importers:
            return True
        _by_alloc.pop(id(allocation), None)
        return False


def _close(session: Session) -> None:
    with _lock:
        for e in list(session.ext.get("ipc_opened", {}).values()):
            _release(session, e, all_opens=True)


# NOTE [ipc events]: cuIpcGetEventHandle of an event created with CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING
# gives a 64-byte handle (a random token, as for memory); cuIpcOpenEventHandle in another session of the same tenant
# makes a handle of that session name the same gpud event, so a record on either side is what a wait, query or
# synchronise on the other sees (markers work across sessions' streams). The token stops opening when its exporting
# session ends; an opened event lives on until the importer destroys it. A wait on it holds only the importer's
# own stream, and only a session of the exporter's tenant can open it.
EMAGIC = b"WOOLYEVT"
_CU_EVENT_DISABLE_TIMING, _CU_EVENT_INTERPROCESS = 0x2, 0x4
_events: dict[bytes, tuple[Session, Event]] = {}


@extension("ipc_event_get")
def ipc_event_get(session: Session, msg: m.IpcEventGet, bulk: list[Any]) -> bytes:
    ev = session._event(msg.event)
    if not ev.flags & _CU_EVENT_INTERPROCESS or not ev.flags & _CU_EVENT_DISABLE_TIMING:
        raise CudaError(
            codes.INVALID_VALUE,
            "cuIpcGetEventHandle: the event was not created with CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING",
        )
    with _lock:
        if not ev.ipc_token:
            ev.ipc_token = secrets.token_bytes(24)
            _events[ev.ipc_token] = (session, ev)
            session.ext.setdefault("ipc_event_tokens", []).append(ev.ipc_token)
            session.ext["ipc_exported"] = True  # its handles name this gpud: the session cannot move
        return EMAGIC + ev.ipc_token + bytes(32)


@extension("ipc_event_open")
def ipc_event_open(session: Session, msg: m.IpcEventOpen, bulk: list[Any]) -> None:
    h = msg.handle
    with _lock:
        found = _events.get(h[8:32]) if h[:8] == EMAGIC and not any(h[32:]) else None
        if found is None:
            raise CudaError(
                codes.INVALID_VALUE, "cuIpcOpenEventHandle: not a valid IPC event handle, or its process has ended"
            )
        owner, ev = found
        if owner is session:
            raise CudaError(codes.INVALID_CONTEXT, "cuIpcOpenEventHandle: the event belongs to this context already")
        if owner.info.tenant != session.info.tenant:
            raise CudaError(codes.INVALID_VALUE, "cuIpcOpenEventHandle: the handle belongs to another tenant")
    if msg.event in session.events:
        raise CudaError(codes.INVALID_HANDLE, f"event handle {msg.event} is already in use")
    session.room(len(session.events), "events")
    session.events[msg.event] = ev


def _close_events(session: Session) -> None:
    with _lock:
        for token in session.ext.get("ipc_event_tokens", ()):
            _events.pop(token, None)


KEEP_HOOKS.append(_keep)
CLOSE_HOOKS.append(_close)
CLOSE_HOOKS.append(_close_events)
