"""Stopping running launches from outside them: deadlines and cancellation (NOTE [watchdog]).

# NOTE [watchdog]
# A kernel is native code on gpud's worker threads; nothing can stop a thread from outside. So a bounds-checked
# kernel stops itself: every branch back to an earlier point of a function (every cycle of its control flow takes
# one, whatever the loop's shape) first reads the launch's error word L[L_ERROR], and so does the worker between
# blocks. A launch that must end has that word set from outside (``stop``): its threads leave at their next
# backward branch or block boundary, and the launch returns the error. The read is a plain load of a word no thread
# writes while the launch runs well (it stays in every core's cache), a compare and a never-taken branch
# (benchmarks/jit.py's bounds-checked lines). Straight-line code needs no poll: it ends by itself.
#
# Who stops a launch:
# - its deadline (``launch(deadline_s=...)``, gpud: the tenant's max_kernel_s) -> CUDA_ERROR_LAUNCH_TIMEOUT;
# - its ``Cancel`` token (gpud: one per session), cancelled when the session closes or gpud stops, so that a
#   kernel of a client that died or of a daemon told to stop does not keep burning cores.
# Unchecked modules (trusted code) have no polls and run to their end.
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Any

from jit.emit.abi import L_ERROR
from jit.errors import CUDA_ERROR_LAUNCH_TIMEOUT

_LOCK = threading.Lock()
_HEAP: list[tuple[float, int, Any]] = []  # (deadline, sequence, Running)
_WAKE = threading.Condition(_LOCK)
_THREAD: threading.Thread | None = None
_SEQ = [0]


class Running:
    """One launch in flight: its launch context and why it was stopped, if it was."""

    __slots__ = ("lctx", "why", "done", "deadline_s")

    def __init__(self, lctx: Any, deadline_s: float | None) -> None:
        self.lctx, self.why, self.done, self.deadline_s = lctx, "", False, deadline_s

    def stop(self, code: int, why: str) -> None:
        with _LOCK:
            if self.done or self.lctx[L_ERROR]:
                return
            self.why = why
            self.lctx[L_ERROR] = code  # read by the kernel's polls (see the NOTE)


class Cancel:
    """Stops every launch started with it that is still running, and fails those started after ``cancel``."""

    def __init__(self) -> None:
        self.running: set[Running] = set()
        self.cancelled: str = ""
        self.code = CUDA_ERROR_LAUNCH_TIMEOUT

    def cancel(self, why: str, code: int = CUDA_ERROR_LAUNCH_TIMEOUT) -> None:
        with _LOCK:
            self.cancelled, self.code = why, code
            running = list(self.running)
        for r in running:
            r.stop(code, why)


def start(lctx: Any, deadline_s: float | None, cancel: Cancel | None) -> Running:
    """Register a launch about to run; ``finish`` must follow."""
    r = Running(lctx, deadline_s)
    if cancel is not None:
        with _LOCK:
            cancel.running.add(r)
            why, code = cancel.cancelled, cancel.code
        if why:
            r.stop(code, why)
    if deadline_s is not None:
        _arm(r, time.monotonic() + deadline_s)
    return r


def finish(r: Running, cancel: Cancel | None) -> None:
    with _LOCK:
        r.done = True
        if cancel is not None:
            cancel.running.discard(r)


def _arm(r: Running, when: float) -> None:
    global _THREAD
    with _LOCK:
        _SEQ[0] += 1
        heapq.heappush(_HEAP, (when, _SEQ[0], r))
        if _THREAD is None:
            _THREAD = threading.Thread(target=_watch, name="wooly-jit-watchdog", daemon=True)
            _THREAD.start()
        _WAKE.notify()


def _watch() -> None:
    while True:
        with _LOCK:
            while not _HEAP or _HEAP[0][0] > time.monotonic():
                _WAKE.wait(None if not _HEAP else max(0.0, _HEAP[0][0] - time.monotonic()))
            _, _, r = heapq.heappop(_HEAP)
        if not r.done:
            r.stop(CUDA_ERROR_LAUNCH_TIMEOUT, f"it ran longer than its limit of {r.deadline_s:g} s")
