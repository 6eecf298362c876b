"""The process-wide session: one connection per process, shared by every face (driver API, torch)."""

from __future__ import annotations

import threading

from proto import errors as codes
from proto.errors import CudaError
from shim.client import Connection
from shim.driver import Driver

_lock = threading.Lock()
_driver: Driver | None = None


def driver() -> Driver:
    """The process's driver, connecting to ``WOOLY_SERVER`` on first use."""
    global _driver
    if _driver is not None and _driver.conn.alive:
        return _driver
    with _lock:
        if _driver is not None and _driver.conn.alive:
            return _driver
        if _driver is not None:  # the connection died: report it, don't silently reconnect
            raise CudaError(codes.DEVICE_UNAVAILABLE, "the connection to gpud was lost")
        from woolyhv.config import settings

        s = settings()
        if not s.server:
            raise CudaError(
                codes.NO_DEVICE,
                "no gpud to talk to: set WOOLY_SERVER=tcp://host:5555 or run the program with `wooly run`",
            )
        conn = Connection(
            s.server, tenant=s.tenant, token=s.token, timeout_s=s.timeout_s, connect_timeout_s=s.connect_timeout_s
        )
        _driver = Driver(conn)
        return _driver


def connect(endpoint: str, **kwargs) -> Driver:
    """Open a driver on an explicit endpoint and make it the process's driver."""
    global _driver
    with _lock:
        _driver = Driver(Connection(endpoint, **kwargs))
        return _driver


def current() -> Driver | None:
    return _driver
