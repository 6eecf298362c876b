"""The PyTorch face's daemon half: ATen op streams from ``shim.torch`` run on gpud's own torch.

NOTE [aten executor]: ``aten_batch`` messages carry many ops (NOTE [aten wire]); the I/O loop
only queues them on the session's default stream, so they run in order, after the session's
earlier driver work, on a worker thread (the I/O loop never runs an op and keeps answering
pings). ``aten_call`` is one op whose reply waits for the stream (``item()``, ``cpu()``,
data-dependent shapes, memory stats). The executor (``gpud.aten_exec``) imports torch on the
worker the first time a session sends an op, so gpud starts fast and runs where torch is absent,
answering every aten message with CUDA_ERROR_NOT_SUPPORTED. Tensors live in a per-session table
keyed by client-chosen handles; storage bytes are charged to the session through
``server.reserve_memory``/``release_memory`` (one charge per storage, shared by its views).
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import threading
from collections.abc import Sequence
from typing import Any

from gpud import chan
from gpud.errors import CudaError, codes
from gpud.session import CLOSE_HOOKS, KEEP_HOOKS, Later, Session, extension
from gpud.streams import when_all
from proto import aten as W
from proto import messages as m

_EXT = "aten"
# OpenMP threads that spin after each parallel region steal the cores a client on the same host
# needs (measured: 40 ms -> 6.5 ms per MLP step on 2 cores). Must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_torch_present: bool | None = None


def torch_present() -> bool:
    global _torch_present
    if _torch_present is None:
        _torch_present = importlib.util.find_spec("torch") is not None
    return _torch_present


def exec_device(session: Session) -> str:
    """The torch device the session's backend computes on: the CPU, or the node's GPU."""
    return session.backend.torch_device()


class _Holder:
    """Per-session slot for the ATen executor: a channel to the tenant's executor process (NOTE [executors]), or,
    with executors off, an executor inside gpud created lazily on the worker (it imports torch)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.device = exec_device(session)
        self.remote = session.server.executors.enabled
        self.executor: Any = None
        self.channel: Any = None
        self.lock = threading.Lock()
        self.closed = False
        self.drops: dict[int, Any] = {}  # with executors off: token -> what to do when that storage dies
        self.next_drop = 1

    def get(self) -> Any:
        if self.executor is None:
            with self.lock:
                if self.executor is None:
                    from gpud.aten_exec import Executor, SessionHost

                    self.executor = Executor(SessionHost(self.session), self.device)
        return self.executor

    def _channel(self) -> Any:
        if self.channel is None:
            with self.lock:
                if self.channel is None:
                    self.channel = self.session.server.executors.channel(self.session, self.device)
        return self.channel

    def request(
        self, msg: list[Any], bulk: Sequence[Any] | None = (), fds: list[int] | None = None
    ) -> tuple[list[Any], list[int]]:
        """One request to the executor process, ``bulk`` appended as descriptors (gpud/chan.py) where given; its
        error reply becomes this call's CudaError. ``fds`` (closed here) travel with it."""
        fds = fds if fds is not None else []
        try:
            if bulk is not None:
                msg = [*msg, chan.pack_bulk(list(bulk), fds)]
            reply, rfds = self._channel().request(msg, fds)
        finally:
            chan._close_all(fds)
        if reply[0] == "error":
            chan._close_all(rfds)
            code = reply[1] if len(reply) > 2 and type(reply[1]) is int else codes.UNKNOWN
            raise CudaError(code, str(reply[2])[:4000] if len(reply) > 2 else "executor error")
        return reply, rfds

    def run_batch(self, ops: list[Any], bulk: list[Any], base: int) -> None:
        if not self.remote:
            self.get().run_batch(ops, bulk, base)
            return
        _, rfds = self.request(["batch", ops], bulk[base:])
        chan._close_all(rfds)

    def run_call(self, op: list[Any], bulk: list[Any], base: int) -> tuple[Any, list[Any]]:
        if not self.remote:
            return self.get().run_call(op, bulk, base)
        reply, rfds = self.request(["call", op], bulk[base:])
        try:
            if reply[0] != "value" or len(reply) != 4:
                raise CudaError(codes.LAUNCH_FAILED, "the ATen executor answered out of turn")
            try:
                out = chan.unpack_bulk(reply[2], rfds, set(), sealed=True)
            except (ValueError, OSError) as exc:
                raise CudaError(codes.LAUNCH_FAILED, f"the ATen executor sent a bad reply: {exc}") from None
        finally:
            chan._close_all(rfds)
        return reply[1], out

    # NOTE [device memory aliases] (gpud/aten_alias.py)
    def drop_token(self, fn: Any) -> int:
        """A token the executor gives back when the storage built with it dies; ``fn`` runs then."""
        if self.remote:
            ch = self._channel()
            token: int = ch.next_token
            ch.next_token += 1
            ch.dedup[token] = fn
            return token
        with self.lock:
            token = self.next_drop
            self.next_drop += 1
            self.drops[token] = fn
        return token

    def take_token(self, token: int) -> Any:
        if self.remote:
            return self._channel().dedup.pop(token, None)
        with self.lock:
            return self.drops.pop(token, None)

    def dropped(self, token: int) -> None:
        """With executors off: a storage built with ``token`` died (a finaliser, on any thread)."""
        fn = self.take_token(token)
        if fn is not None:
            fn()

    def alias(self, op: list[Any], fd: int, length: int) -> Any:
        """Run ``wooly.alias_device`` or ``wooly.export_device`` with the memfd ``fd`` mapped shared as its bulk
        frame 0 (``fd`` -1: none)."""
        if fd < 0:
            if not self.remote:
                return self.get().run_call(op, [], 0)[0]
            reply, rfds = self.request(["call", op], [])
            chan._close_all(rfds)
            if reply[0] != "value" or len(reply) != 4:
                raise CudaError(codes.LAUNCH_FAILED, "the ATen executor answered out of turn")
            return reply[1]
        if not self.remote:
            buf = mmap.mmap(fd, length, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            value, _ = self.get().run_call(op, [buf], 0)
            return value
        reply, rfds = self.request(["call", op, [[0, length]]], None, [os.dup(fd)])
        chan._close_all(rfds)
        if reply[0] != "value" or len(reply) != 4:
            raise CudaError(codes.LAUNCH_FAILED, "the ATen executor answered out of turn")
        return reply[1]

    def close(self) -> None:
        self.closed = True
        if self.executor is not None:
            self.executor.close()
        if self.channel is not None:
            self.channel.close()
        with self.lock:
            left, self.drops = list(self.drops.values()), {}
        for fn in left:  # storages still alive when the session ended: their memory goes with it
            fn()


def _holder(session: Session) -> _Holder:
    if not torch_present():
        raise CudaError(codes.NOT_SUPPORTED, "aten ops: this gpud has no PyTorch installed")
    h = session.ext.get(_EXT)
    if h is None:
        h = session.ext[_EXT] = _Holder(session)
    return h


def _refuse_broker_ops(ops: list[Any]) -> None:
    for op in ops:
        if op[0] in W.BROKER_ONLY:
            raise CudaError(codes.NOT_PERMITTED, f"{op[0]} is gpud's own (NOTE [migration])")
        if op[0] in W.SHARE_OPS or op[0] in W.LENDING_OPS:
            raise CudaError(codes.NOT_PERMITTED, f"{op[0]} is a synchronous call")


def _scoped(session: Session, op: list[Any]) -> list[Any]:
    """NOTE [shared tensors]: a share op names the tenant and device it runs for as gpud knows them (whatever the
    client put in its keyword arguments is replaced), so a token works only where it was made."""
    if op[0] not in W.SHARE_OPS:
        return op
    return [op[0], op[1], {"scope": [session.info.tenant, session.backend.ordinal]}, op[3]]


@extension("aten_batch")
def on_aten_batch(session: Session, msg: m.AtenBatch, bulk: list[Any]) -> None:
    _refuse_broker_ops(msg.ops)
    holder = _holder(session)
    ops, base = msg.ops, msg.frame

    def run() -> None:
        if not holder.closed:
            holder.run_batch(ops, bulk, base)

    session.engine.enqueue(0, run)


@extension("aten_call")
def on_aten_call(session: Session, msg: m.AtenCall, bulk: list[Any]) -> Later:
    if msg.op[0] in W.LENDING_OPS:  # NOTE [device memory aliases]
        from gpud import aten_alias

        lend = aten_alias.call if msg.op[0] == W.OP_ALIAS_DEVICE else aten_alias.export
        marker, produce = lend(session, msg.op, _holder(session))
        return Later([marker], produce)
    if msg.op[0] in W.SHARE_OPS:
        msg = m.AtenCall(rid=msg.rid, op=_scoped(session, msg.op), frame=msg.frame)
    else:
        _refuse_broker_ops([msg.op])
    return _call(session, msg, bulk)


@extension("aten_move")
def on_aten_move(session: Session, msg: Any, bulk: list[Any]) -> Later:
    """NOTE [migration]: gpud's own move_export/move_import on the session's stream (no client can name this kind:
    it is not in proto/messages.py)."""
    return _call(session, msg, bulk, check=False)


def _call(session: Session, msg: Any, bulk: list[Any], check: bool = True) -> Later:
    holder = _holder(session)
    box: dict[str, Any] = {}

    def run() -> None:
        if holder.closed:
            return
        try:
            box["value"] = holder.run_call(msg.op, bulk, msg.frame)
        except CudaError as exc:  # this op's own error: reported by this call, not recorded
            box["error"] = exc

    marker = session.engine.enqueue(0, run)

    def produce() -> tuple[Any, list[Any]]:
        if check:
            session.check_errors()  # errors of ops queued before this one come first
        if "error" in box:
            raise box["error"]
        if "value" not in box:
            raise CudaError(codes.INVALID_CONTEXT, "aten call did not run (session closed)")
        return box["value"]

    return Later([marker], produce)


def _on_close(session: Session) -> None:
    holder = session.ext.pop(_EXT, None)
    if holder is not None:
        when_all(session.engine.tails(), holder.close)


CLOSE_HOOKS.append(_on_close)


def _keep_aliased(session: Session, allocation: Any) -> bool:
    """NOTE [device memory aliases]: an allocation a torch tensor maps outlives its cuMemFree until the tensor goes."""
    if allocation.alias is None:
        return False
    from gpud import aten_alias

    return aten_alias.keep(session, allocation)


KEEP_HOOKS.append(_keep_aliased)
