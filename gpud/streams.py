"""CUDA stream semantics for backends whose operations are synchronous (the CPU backend).

Each stream is a FIFO of operations; a shared pool of worker threads drains the streams, one
operation of a stream at a time, so a stream is in order and different streams run
concurrently. An operation may depend on ``Marker``s (completion of work on other streams: the
legacy default stream's implicit synchronisation, ``cuStreamWaitEvent``). A worker never blocks
on a dependency: a stream whose head is not ready parks itself on the marker's callback list,
so no number of waiting streams can starve the pool.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpud.errors import CudaError, codes


class Marker:
    """Completion of one enqueued operation: a time stamp, an error, and callbacks."""

    __slots__ = ("_lock", "done", "error", "t_ns", "_callbacks", "_event")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.done = False
        self.error: CudaError | None = None
        self.t_ns = 0
        self._callbacks: list[Callable[[], None]] = []
        self._event: threading.Event | None = None

    def complete(self, error: CudaError | None = None) -> None:
        with self._lock:
            self.t_ns = time.perf_counter_ns()
            self.error = error
            self.done = True
            callbacks, self._callbacks = self._callbacks, []
            ev = self._event
        if ev is not None:
            ev.set()
        for cb in callbacks:
            cb()

    def add_callback(self, cb: Callable[[], None]) -> None:
        with self._lock:
            if not self.done:
                self._callbacks.append(cb)
                return
        cb()

    def wait(self, timeout: float | None = None) -> bool:
        with self._lock:
            if self.done:
                return True
            if self._event is None:
                self._event = threading.Event()
            ev = self._event
        return ev.wait(timeout)


def completed_marker() -> Marker:
    m = Marker()
    m.complete()
    return m


def when_all(markers: list[Marker], cb: Callable[[], None]) -> None:
    """Call ``cb`` once every marker is done (immediately if they already are)."""
    pending = [m for m in markers if not m.done]
    if not pending:
        cb()
        return
    count = [len(pending)]
    lock = threading.Lock()

    def one() -> None:
        with lock:
            count[0] -= 1
            last = count[0] == 0
        if last:
            cb()

    for m in pending:
        m.add_callback(one)


class _Op:
    __slots__ = ("fn", "deps", "marker")

    def __init__(self, fn: Callable[[], Any], deps: list[Marker], marker: Marker) -> None:
        self.fn = fn
        self.deps = deps
        self.marker = marker


class Stream:
    def __init__(self, engine: StreamEngine, handle: int, blocking: bool, priority: int = 0) -> None:
        self.engine = engine
        self.handle = handle
        self.blocking = blocking
        self.priority = priority
        self._ops: deque[_Op] = deque()
        self._lock = threading.Lock()
        self._active = False
        self.tail: Marker = completed_marker()
        self.destroyed = False

    def submit(self, fn: Callable[[], Any], deps: list[Marker] | None = None) -> Marker:
        marker = Marker()
        op = _Op(fn, [d for d in (deps or []) if not d.done], marker)
        with self._lock:
            self._ops.append(op)
            self.tail = marker
            start = not self._active
            if start:
                self._active = True
        if start:
            self._kick()
        return marker

    def idle(self) -> bool:
        return self.tail.done

    def _kick(self) -> None:
        """Schedule this stream's drain: on the pool, or through the device scheduler's gate."""
        gate = self.engine.gate
        if gate is None:
            self.engine.pool.submit(self._drain)
        else:
            gate.submit(self._drain)

    def _drain(self) -> None:
        gate = self.engine.gate  # NOTE [scheduling] in gpud/hypervisor/scheduler.py
        while True:
            with self._lock:
                if not self._ops:
                    self._active = False
                    return
                op = self._ops[0]
                pending = [d for d in op.deps if not d.done]
                if pending:
                    op.deps = pending
                    # Park: resume this stream when its head's dependency completes.
                    pending[0].add_callback(self._kick)
                    return
                self._ops.popleft()
            error: CudaError | None = None
            t0 = time.perf_counter_ns() if gate is not None else 0
            try:
                if gate is not None:
                    gate.run(op.fn)  # NOTE [spatial sharing] (jit/cores.py): on the tenant's cores
                else:
                    op.fn()
            except CudaError as exc:
                error = exc
            except Exception as exc:  # noqa: BLE001 - an operation must never kill a worker
                error = CudaError(codes.UNKNOWN, f"{type(exc).__name__}: {exc}")
            if error is not None and self.engine.on_error is not None:
                self.engine.on_error(error)
            op.marker.complete(error)
            if gate is not None:
                gate.charge(time.perf_counter_ns() - t0)
                if gate.should_yield():  # others are ready: give the device back at this op boundary
                    with self._lock:
                        if not self._ops:
                            self._active = False
                            return
                    self._kick()
                    return


class StreamEngine:
    """Streams of one session. Handle 0 is the legacy default stream."""

    def __init__(self, pool: ThreadPoolExecutor, on_error: Callable[[CudaError], None] | None = None) -> None:
        self.pool = pool
        self.on_error = on_error
        # The device scheduler's view of this session (gpud/hypervisor/scheduler.py), or None.
        self.gate: Any = None
        self.streams: dict[int, Stream] = {0: Stream(self, 0, blocking=True)}
        self._retired: list[Marker] = []  # tails of destroyed streams, still owed to synchronize

    def create(self, handle: int, flags: int = 0, priority: int = 0) -> Stream:
        if handle in self.streams:
            raise CudaError(codes.INVALID_HANDLE, f"stream handle {handle} is already in use")
        # CU_STREAM_NON_BLOCKING = 1: no implicit synchronisation with the legacy default stream.
        s = Stream(self, handle, blocking=not (flags & 1), priority=priority)
        self.streams[handle] = s
        return s

    def get(self, handle: int) -> Stream:
        s = self.streams.get(handle)
        if s is None:
            if handle == 2:  # CU_STREAM_PER_THREAD: created on first use, never synchronises implicitly
                s = self.streams[2] = Stream(self, 2, blocking=False)
                return s
            raise CudaError(codes.INVALID_HANDLE, f"invalid stream handle {handle}")
        return s

    def destroy(self, handle: int) -> None:
        if handle in (0, 2):
            raise CudaError(codes.INVALID_HANDLE, "the default stream cannot be destroyed")
        s = self.streams.pop(handle, None)
        if s is None:
            raise CudaError(codes.INVALID_HANDLE, f"invalid stream handle {handle}")
        s.destroyed = True  # queued work still completes, as in CUDA
        if not s.tail.done:
            self._retired.append(s.tail)

    def enqueue(
        self, handle: int, fn: Callable[[], Any], deps: list[Marker] | None = None, *, inline: bool = False
    ) -> Marker:
        """Queue ``fn`` on a stream. ``inline=True`` marks a short operation (a small copy) that
        may run right here when nothing it must wait for is pending, saving two thread hand-offs."""
        s = self.get(handle)
        deps = list(deps or [])
        # Legacy default stream semantics: stream 0 waits for all blocking streams, and blocking
        # streams wait for stream 0.
        if handle == 0:
            deps.extend(o.tail for h, o in self.streams.items() if h != 0 and o.blocking and not o.tail.done)
        elif s.blocking:
            t0 = self.streams[0].tail
            if not t0.done:
                deps.append(t0)
        if inline and s.tail.done and all(d.done for d in deps):
            return self._run_inline(s, fn)
        return s.submit(fn, deps)

    def _run_inline(self, s: Stream, fn: Callable[[], Any]) -> Marker:
        marker = Marker()
        s.tail = marker
        error: CudaError | None = None
        try:
            fn()
        except CudaError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001
            error = CudaError(codes.UNKNOWN, f"{type(exc).__name__}: {exc}")
        if error is not None and self.on_error is not None:
            self.on_error(error)
        marker.complete(error)
        return marker

    def tails(self) -> list[Marker]:
        self._retired = [m for m in self._retired if not m.done]
        return [s.tail for s in self.streams.values() if not s.tail.done] + self._retired
