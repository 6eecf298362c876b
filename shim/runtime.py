"""The process-wide session: one connection per process, shared by every face (driver API, torch)."""

from __future__ import annotations

import os
import threading

from proto import errors as codes
from proto.errors import CudaError
from shim.client import Connection
from shim.driver import Driver

_lock = threading.Lock()
_driver: Driver | None = None
_forked_from: int | None = None  # set in a child forked after its parent connected
_absent: CudaError | None = None  # no gpud accepted a connection: every later first use fails the same, at once


def _after_fork_in_child() -> None:
    """NOTE [fork]: a child forked after its parent connected inherits the parent's ZeroMQ socket and session,
    but not the threads that serve them; using them would corrupt the parent's session or hang. So the child
    drops them unused and, like a child of a real CUDA process, gets CUDA_ERROR_NOT_INITIALIZED from every call
    (numba turns that into "CUDA initialized before forking"). A child forked before any connection connects on
    its own. Fork-started workers that never call CUDA (PyTorch DataLoader workers) are not affected."""
    global _driver, _forked_from, _lock
    _lock = threading.Lock()  # another thread may have held it at fork time
    if _driver is not None:
        _forked_from = _driver.conn.pid
        _driver.conn.abandon()
        _driver = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def driver() -> Driver:
    """The process's driver, connecting to ``WOOLY_SERVER`` on first use."""
    global _driver, _absent
    if _driver is not None and _driver.conn.alive:
        return _driver
    if _forked_from is not None:
        raise CudaError(
            codes.NOT_INITIALIZED,
            f"CUDA was initialised in process {_forked_from} before it forked this process; a forked child cannot"
            " use its parent's CUDA session: start child processes with the 'spawn' method",
        )
    with _lock:
        if _driver is not None and _driver.conn.alive:
            return _driver
        if _driver is not None:  # the connection died: report it, don't silently reconnect
            raise CudaError(codes.DEVICE_UNAVAILABLE, "the connection to gpud was lost")
        if _absent is not None:
            raise _absent
        from proto.settings import ConfigError
        from proto.settings import client as settings

        try:
            s = settings()
        except ConfigError as exc:
            raise CudaError(codes.NOT_INITIALIZED, str(exc)) from None
        if not s.server:
            raise CudaError(
                codes.NO_DEVICE,
                "no gpud to talk to: set WOOLY_SERVER=tcp://host:5555 or run the program with `wooly run`",
            )
        endpoint, server_key, reservation, device = s.server, "", "", requested_device(s.device)
        if s.server.startswith("pool://"):  # NOTE [pool client] (woolyhv/pool/client.py)
            from woolyhv.pool.client import PoolError, place_for_settings

            try:
                placed = place_for_settings(s)
            except PoolError as exc:
                raise CudaError(exc.code, f"pool {s.server}: {exc}") from None
            except ConfigError as exc:
                raise CudaError(codes.NOT_INITIALIZED, str(exc)) from None
            endpoint, server_key, reservation = placed.endpoint, placed.server_key, placed.reservation
            device = placed.device  # the device the reservation was made on
        try:
            conn = Connection(
                endpoint,
                tenant=s.tenant,
                token=s.token,
                timeout_s=s.timeout_s,
                connect_timeout_s=s.connect_timeout_s,
                server_key=server_key,
                reservation=reservation,
                device=device,
                probe_s=s.probe_s,
                replay_log_mb=s.replay_log_mb,
            )
        except CudaError as exc:
            if exc.code == codes.NO_DEVICE:  # nothing listens: like cuInit without a driver, for good
                _absent = exc
            raise
        _driver = Driver(conn)
        return _driver


def requested_device(setting: int) -> int:
    """NOTE [session devices] (gpud/server.py): the gpud device a program asks for: ``WOOLY_DEVICE``, else the first
    entry of ``CUDA_VISIBLE_DEVICES`` when it is an ordinal (a script written for a multi-GPU machine that picks its
    GPU that way gets that device of gpud), else -1 (gpud places the session). Not for the embedded gpud of
    ``wooly run``: it inherited CUDA_VISIBLE_DEVICES, and its own driver has already applied it."""
    if setting >= 0:
        return setting
    from proto.settings import internal

    if internal("WOOLY_EMBEDDED") == "1":
        return -1
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) <= 1023 else -1


def connect(endpoint: str, **kwargs) -> Driver:
    """Open a driver on an explicit endpoint and make it the process's driver."""
    global _driver
    with _lock:
        _driver = Driver(Connection(endpoint, **kwargs))
        return _driver


def current() -> Driver | None:
    return _driver
