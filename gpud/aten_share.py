"""Tensors shared between the processes of one tenant: what CUDA IPC gives torch.multiprocessing.

NOTE [shared tensors]: on a GPU, a CUDA tensor sent to another process (a ``torch.multiprocessing`` queue, a
``Process`` argument: hogwild training, an A3C learner, a producer/consumer pipeline) is not copied: the receiver
maps the same device memory (``cudaIpcGetMemHandle``), and the writes of one process are seen by the other. Each
process here is a session of its own, and gpud keeps sessions apart; but the sessions of one tenant share one
executor process (NOTE [executors]), where this module lets them share a storage:

- ``wooly.share_export`` (a synchronous call, the tensor as argument) registers the tensor under a fresh random
  token and answers the token; the client pickles the token (shim/torch/misc.py ``_reduce_shared``).
- ``wooly.share_import`` (the token) in another session of the same tenant and gpud device stores an alias of the
  tensor under a new handle and describes it, as a synchronous op's result is. A token is good for one import, and
  dies with the session that made it (as a CUDA IPC handle is useless once its exporter has exited).
- Both are stamped with their scope (tenant, device ordinal) by the broker (gpud/aten.py), never by the client,
  and are refused inside batches: a token works only in a session of the tenant, on the device, that made it.
- **Memory is charged once**: to the session that made the storage (its *payer*); a session that imports it rides
  free. A pending token keeps the storage charged to its exporter (as the exporting process's caching allocator
  keeps a block that was sent until the receiver has it). When the payer lets go while others still hold the
  storage, the charge moves to one of them: it pays at its next request (between the two, the tenant's figure is
  low by that storage, for the time between two of the holder's requests). So a tenant's memory is what it holds,
  whichever of its processes holds it.
- A session holding shared storages cannot be moved to another node (NOTE [migration]): its storages would no
  longer be shared.

The registry is process-wide (one tenant per executor process; with executors off it is gpud's, and the scope
keeps tenants apart). Executors call in under ``_LOCK``; work that must happen on another executor's own thread
(charging it, releasing its pin) is posted to that executor and done at its next request (``settle``).
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

from gpud.errors import CudaError, codes

_LOCK = threading.Lock()
MAX_PENDING = 1 << 14  # tokens one session may have out that nobody has imported yet


@dataclass
class _Storage:
    nbytes: int
    payer: Any  # the executor charged for it
    holders: dict[Any, None] = field(default_factory=dict)  # executors with a handle on it, in order
    tokens: int = 0  # pending tokens naming it


@dataclass
class _Token:
    scope: tuple[str, int]
    key: Any
    tensor: Any  # keeps the storage alive until it is imported
    exporter: Any


_storages: dict[Any, _Storage] = {}
_tokens: dict[str, _Token] = {}
_posted: dict[Any, list[tuple[str, Any]]] = {}  # executor -> work for its own thread
active = False  # anything shared in this process (read without the lock: store/free skip all this otherwise)


def scope_of(kwargs: Any, what: str) -> tuple[str, int]:
    scope = kwargs.get("scope") if isinstance(kwargs, dict) else None
    if not (
        isinstance(scope, list)
        and len(scope) == 2
        and isinstance(scope[0], str)
        and type(scope[1]) is int
        and scope[1] >= 0
    ):
        raise CudaError(codes.NOT_PERMITTED, f"{what} is sent by gpud's broker only (a synchronous call)")
    return scope[0], scope[1]


def export(ex: Any, tensor: Any, key: Any, nbytes: int, scope: tuple[str, int]) -> str:
    """Register ``tensor`` (held by ``ex`` under storage ``key``) and answer its token."""
    global active
    with _LOCK:
        mine = sum(1 for t in _tokens.values() if t.exporter is ex) if len(_tokens) >= MAX_PENDING else 0
        if mine >= MAX_PENDING:
            raise CudaError(
                codes.OUT_OF_MEMORY,
                f"{MAX_PENDING} cuda tensors of this process were sent to other processes and not received yet",
            )
        token = secrets.token_hex(16)
        if nbytes:
            st = _storages.get(key)
            if st is None:
                st = _storages[key] = _Storage(nbytes, ex, {ex: None})
            st.tokens += 1
            ex.pin(key)  # the exporter keeps paying while the token is out
        _tokens[token] = _Token(scope, key if nbytes else None, tensor, ex)
        active = True
        return token


def take(ex: Any, token: Any, scope: tuple[str, int]) -> tuple[Any, Any, Any]:
    """The tensor shared under ``token`` (once): (tensor, storage key or None, exporter)."""
    if not isinstance(token, str) or len(token) > 64:
        raise CudaError(codes.INVALID_VALUE, "wooly.share_import takes the token wooly.share_export answered")
    with _LOCK:
        t = _tokens.get(token)
        if t is None or t.scope[0] != scope[0]:
            raise CudaError(
                codes.INVALID_HANDLE,
                "no cuda tensor is shared under this token on this gpud: it was received already, or the process "
                "that sent it has ended (keep the sender alive until the receiver has the tensor, as CUDA IPC "
                "needs), or the receiver talks to another gpud or is another tenant",
            )
        if t.scope[1] != scope[1]:
            raise CudaError(
                codes.INVALID_DEVICE,
                f"the cuda tensor was shared from gpud device {t.scope[1]}; this session is on device {scope[1]}",
            )
        del _tokens[token]
        return t.tensor, t.key, t.exporter


def received(ex: Any, key: Any, exporter: Any) -> None:
    """The importer holds the storage now (or failed to): the token's pin on the exporter goes."""
    if key is None:
        return
    with _LOCK:
        st = _storages.get(key)
        if st is not None:
            st.tokens -= 1
    if exporter is ex:
        ex.unpin(key)
    else:
        _post(exporter, "unpin", key)


def rides(ex: Any, key: Any) -> bool:
    """``ex`` stores a tensor of storage ``key`` it did not hold: True when another holder pays for it."""
    with _LOCK:
        st = _storages.get(key)
        if st is None:
            return False
        st.holders[ex] = None
        if st.payer is None or st.payer is ex:
            st.payer = ex
            return False
        return True


def leave(ex: Any, key: Any) -> None:
    """``ex`` dropped its last handle on storage ``key`` (its charge, if it paid, is already returned)."""
    with _LOCK:
        st = _storages.get(key)
        if st is None:
            return
        st.holders.pop(ex, None)
        if st.payer is ex:
            st.payer = next(iter(st.holders), None)
            if st.payer is not None and not st.payer.share_closed:
                _posted.setdefault(st.payer, []).append(("owe", key))
        if not st.holders and not st.tokens:
            del _storages[key]


def settle(ex: Any) -> None:
    """Work posted to ``ex`` by other executors, on its own thread at the start of a request."""
    with _LOCK:
        work = _posted.pop(ex, None)
    if not work:
        return
    for i, (what, key) in enumerate(work):
        if what == "unpin":
            ex.unpin(key)
            continue
        with _LOCK:
            st = _storages.get(key)
            due = st.nbytes if st is not None and st.payer is ex else 0
        if due:
            try:
                ex.take_charge(key, due)
            except CudaError:
                with _LOCK:  # owed still: asked again at the next request
                    _posted.setdefault(ex, [])[:0] = work[i:]
                raise


def close(ex: Any) -> list[Any]:
    """``ex``'s session ends, before its handles are freed: its tokens die, nothing is posted to it any more.
    Answers the storage keys whose pins ``ex`` must drop (its tokens', and the received ones posted to it)."""
    unpin: list[Any] = []
    with _LOCK:
        ex.share_closed = True
        for token in [k for k, t in _tokens.items() if t.exporter is ex]:
            t = _tokens.pop(token)
            st = _storages.get(t.key)
            if st is not None:
                st.tokens -= 1
                unpin.append(t.key)
        unpin += [key for what, key in _posted.pop(ex, []) if what == "unpin"]
    return unpin


def size_of(key: Any) -> int:
    with _LOCK:
        st = _storages.get(key)
        return st.nbytes if st is not None else 0


def is_shared(key: Any) -> bool:
    with _LOCK:
        return key in _storages


def holds_shared(ex: Any) -> bool:
    with _LOCK:
        return any(ex in st.holders for st in _storages.values()) or any(t.exporter is ex for t in _tokens.values())


def _post(ex: Any, what: str, key: Any) -> None:
    with _LOCK:
        if not ex.share_closed:
            _posted.setdefault(ex, []).append((what, key))
