"""Progress on long work, on the client's stderr when it is a terminal (rich); silent otherwise.

``WOOLY_PROGRESS=1`` shows it even on a pipe, ``0`` never. Two kinds:

- ``transfer(total, what)``: a bar for a copy of at least ``THRESHOLD`` bytes (256 MiB: weights). The loops that
  move the bytes call ``advance(n)``; the bar lives in a thread-local, so nested copies (dedup's missing chunks,
  the shared-memory ring's slots) add to the one bar of the outer copy.
- ``waiting(what)``: a spinner that appears only if the block is still running after ``AFTER_S`` (a JIT compile of
  a big module), with the seconds elapsed.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

THRESHOLD = 256 << 20
AFTER_S = 1.0
_tls = threading.local()


def _setting() -> bool | None:
    from proto.settings import quiet_client

    return quiet_client().progress


def enabled() -> bool:
    v = _setting()
    if v is not None:
        return v
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _console() -> Any:
    from rich.console import Console

    return Console(stderr=True, force_terminal=True if _setting() else None)


@contextlib.contextmanager
def transfer(total: int, what: str) -> Iterator[None]:
    """Show a bar for ``what`` when ``total`` bytes are at least THRESHOLD (and progress is enabled)."""
    if total < THRESHOLD or getattr(_tls, "bar", None) is not None or not enabled():
        yield
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress(
        TextColumn("wooly: {task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=_console(),
        transient=True,
    )
    task = bar.add_task(what, total=total)
    _tls.bar = (bar, task)
    bar.start()
    try:
        yield
    finally:
        _tls.bar = None
        bar.stop()


def advance(n: int) -> None:
    """``n`` more bytes of the current thread's transfer are done (a no-op with no bar)."""
    cur = getattr(_tls, "bar", None)
    if cur is not None:
        cur[0].advance(cur[1], n)


@contextlib.contextmanager
def waiting(what: str, after_s: float = AFTER_S) -> Iterator[None]:
    """A spinner saying ``what`` if the block takes longer than ``after_s``."""
    if not enabled():
        yield
        return
    done = threading.Event()

    def spin() -> None:
        if done.wait(after_s):
            return
        import time

        t0 = time.monotonic() - after_s
        with _console().status(f"wooly: {what}") as status:
            while not done.wait(0.1):
                status.update(f"wooly: {what} ({time.monotonic() - t0:.0f} s)")

    t = threading.Thread(target=spin, name="wooly-progress", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join(1.0)
