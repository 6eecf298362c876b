"""The process-wide session: one connection per process, shared by every face (driver API, torch)."""

from __future__ import annotations

import os
import threading
from typing import Any

from proto import errors as codes
from proto.errors import CudaError
from shim.client import Connection
from shim.driver import HANDLE_SHIFT, Driver

_lock = threading.Lock()
_driver: Driver | None = None
_forked_from: int | None = None  # set in a child forked after its parent connected
_absent: CudaError | None = None  # no gpud accepted a connection: every later first use fails the same, at once
_visible: list[int] | None = None  # gpud's ordinal of the program's cuda:0, cuda:1 ... (NOTE [devices of a program])
_more: dict[int, Driver] = {}  # the sessions of cuda:1, cuda:2 ... once used


def _after_fork_in_child() -> None:
    """NOTE [fork]: a child forked after its parent connected inherits the parent's ZeroMQ socket and session,
    but not the threads that serve them; using them would corrupt the parent's session or hang. So the child
    drops them unused and, like a child of a real CUDA process, gets CUDA_ERROR_NOT_INITIALIZED from every call
    (numba turns that into "CUDA initialized before forking"). A child forked before any connection connects on
    its own. Fork-started workers that never call CUDA (PyTorch DataLoader workers) are not affected."""
    global _driver, _forked_from, _lock, _visible
    _lock = threading.Lock()  # another thread may have held it at fork time
    if _driver is not None:
        _forked_from = _driver.conn.pid
        _driver.conn.abandon()
        _driver = None
    for d in _more.values():
        d.conn.abandon()
    _more.clear()
    _visible = None


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
            conn = _connection(s, endpoint, server_key, device, reservation)
        except CudaError as exc:
            if exc.code == codes.NO_DEVICE:  # nothing listens: like cuInit without a driver, for good
                _absent = exc
            raise
        _driver = Driver(conn)
        if device < 0 and not s.server.startswith("pool://"):
            # the processes this one starts number devices as it does (a real machine's children see the same
            # cuda:0): a tensor sent to a child is on the same device there (NOTE [shared tensors])
            os.environ["WOOLY_PARENT_DEVICE"] = str(conn.device)
        return _driver


def _connection(s: Any, endpoint: str, server_key: str, device: int, reservation: str = "") -> Connection:
    """A session for this process's settings ``s`` on ``device`` (-1: gpud places it)."""
    return Connection(
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


def requested_device(setting: int) -> int:
    """NOTE [session devices] (gpud/server.py): the gpud device a program asks for: ``WOOLY_DEVICE``, else the first
    entry of ``CUDA_VISIBLE_DEVICES`` when it is an ordinal (a script written for a multi-GPU machine that picks its
    GPU that way gets that device of gpud), else the device its parent process was placed on (children number
    devices as their parent), else -1 (gpud places the session). Not for the embedded gpud of
    ``wooly run``: it inherited CUDA_VISIBLE_DEVICES, and its own driver has already applied it."""
    if setting >= 0:
        return setting
    from proto.settings import internal

    parent = internal("WOOLY_PARENT_DEVICE")
    parent_device = int(parent) if parent.isdigit() and int(parent) <= 1023 else -1
    if internal("WOOLY_EMBEDDED") == "1":
        return parent_device
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) <= 1023 else parent_device


def visible() -> list[int]:
    """NOTE [devices of a program]: the program's CUDA devices, as gpud's ordinals: ``visible()[i]`` is ``cuda:i``.

    A session runs on one device (NOTE [session devices] in gpud/server.py); a program that uses several (``cuda:1``,
    ``DataParallel``) has one session per device it touches, opened on first use (``device_driver``), all of the
    same tenant on the same gpud. ``cuda:0`` is the process's session (the device gpud placed it on, or the one it
    asked for); the others follow in gpud's order, as ``CUDA_VISIBLE_DEVICES=2,0,1`` renumbers a real machine's:
    - ``CUDA_VISIBLE_DEVICES`` listing ordinals: those, in that order, up to the first that gpud lacks or the tenant
      may not use (CUDA stops at the first invalid entry too);
    - ``WOOLY_DEVICE=N``, or a pool placement (a reservation is for one device): that device only;
    - otherwise every device the tenant may use (its policy's ``devices``, gpud's ``usable`` in the hello reply).
    Devices are never shared out behind the program's back: each session is placed, counted and isolated as any
    other, and tensors move between them through the client (a copy between devices is a download and an upload).

    Every face counts the same devices: torch (``torch.cuda.device_count()``), the driver API and the runtime on it
    (``cuDeviceGetCount``, numba's ``cuda.gpus``, ``cudaSetDevice``) and NVML. A device is described from the hello
    reply (``device_info``: no session is opened to read its name or attributes); its session opens when the program
    first does work there. In the driver face a call goes to the session of the current context's device, or of the
    device that made the stream, event, module or function it names (each driver numbers its handles from its own
    base, ``HANDLE_SHIFT`` in shim/driver.py) or that holds the memory it names (unified addressing: a copy from
    device 1's memory needs no device-1 context). A library (``cuLibraryLoadData``, what the CUDA runtime and
    cuda.core load) is context-independent: used on another device it is loaded there too. Peer access is
    refused (``cuDeviceCanAccessPeer`` says 0): kernels of one session cannot reach another's memory, and
    ``cuMemcpyPeer`` or a ``cudaMemcpyDefault`` copy between devices goes through this process."""
    global _visible
    if _visible is not None:
        return _visible
    conn = driver().conn
    from proto.settings import client as settings
    from proto.settings import internal

    s = settings()
    usable = [o for o in conn.usable if any(d["ordinal"] == o for d in conn.node_devices)]
    order = [conn.device]
    vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    entries = [e.strip() for e in vis.split(",")] if vis.strip() and internal("WOOLY_EMBEDDED") != "1" else []
    if s.server.startswith("pool://") or s.device >= 0:
        pass
    elif entries and entries[0].isdigit():
        for e in entries[1:]:
            if not e.isdigit() or int(e) not in usable or int(e) in order:
                break
            order.append(int(e))
    else:
        order += [o for o in usable if o != conn.device]
    _visible = order[:16]  # (the C++ device guard counts at most 16: shim/torch/device.py MAX_DEVICES_AT_START)
    return _visible


def device_driver(index: int) -> Driver:
    """The driver of the program's ``cuda:index`` (NOTE [devices of a program]); ``cuda:0``'s is ``driver()``."""
    if index == 0:
        return driver()
    d = _more.get(index)
    if d is not None:
        if not d.conn.alive:
            raise CudaError(codes.DEVICE_UNAVAILABLE, f"the connection to gpud for cuda:{index} was lost")
        return d
    order = visible()
    if not 0 <= index < len(order):
        raise CudaError(
            codes.INVALID_DEVICE,
            f"invalid device ordinal: cuda:{index} was asked for, this program has {len(order)} device(s)",
        )
    base = driver()
    with _lock:
        d = _more.get(index)
        if d is None:
            from proto.settings import client as settings

            s = settings()
            d = _more[index] = Driver(_connection(s, base.conn.endpoint, base.conn.server_key, order[index]), index)
        return d


def device_info(index: int) -> dict[str, Any]:
    """The description of the program's ``cuda:index`` (name, memory, attributes) from the hello reply, without
    opening a session for it (NOTE [devices of a program])."""
    order = visible()
    if not 0 <= index < len(order):
        raise CudaError(
            codes.INVALID_DEVICE, f"device ordinal {index} out of range (this program has {len(order)} device(s))"
        )
    if index == 0:
        return driver().devices[0]
    d = _more.get(index)
    if d is not None and d.conn.alive:
        return d.devices[0]
    for desc in driver().conn.node_devices:
        if desc["ordinal"] == order[index]:
            return desc
    raise CudaError(codes.INVALID_DEVICE, f"gpud lists no device {order[index]}")


def opened() -> list[Driver]:
    """The drivers of the devices this program has used so far, ``cuda:0``'s first."""
    out = [_driver] if _driver is not None else []
    return out + [_more[i] for i in sorted(_more)]


def driver_of_handle(handle: int) -> Driver | None:
    """The driver whose stream, event, module or function ``handle`` is (None: not one a driver made)."""
    index = int(handle) >> HANDLE_SHIFT
    if index == 0:
        return _driver
    return _more.get(index)


def driver_of_pointer(ptr: int) -> Driver | None:
    """The driver of the device whose allocation holds ``ptr`` (None: no device's)."""
    for d in opened():
        if d.is_device_pointer(ptr):
            return d
    return None


def connect(endpoint: str, **kwargs) -> Driver:
    """Open a driver on an explicit endpoint and make it the process's driver."""
    global _driver
    with _lock:
        _driver = Driver(Connection(endpoint, **kwargs))
        return _driver


def current() -> Driver | None:
    return _driver
