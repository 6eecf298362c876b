"""``wooly top``: a live view of a gpud (or a pool) in the terminal, with rich.

Per tenant: sessions, memory used / quota, shared (dedup), device share, ops/s, state, longest wait; per device:
memory in use and how busy; and the sessions. Rates are differences between two reads of gpud's admin
description (``list_sessions``, the call ``wooly ps`` makes). With no ``--server`` and no ``WOOLY_SERVER`` it finds
the embedded gpud of a running ``wooly run`` through the per-user runtime directory (``gpud-<owner pid>-*.sock``).
For ``pool://`` it shows the pool's nodes instead.
"""

from __future__ import annotations

import glob
import os
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from proto.sizes import human


class AdminError(RuntimeError):
    """gpud did not answer an admin call, or refused it: one line."""


def admin_call(server: str, token: str = "", timeout_s: float = 5.0) -> dict[str, Any]:
    """gpud's description (``list_sessions``): devices, sessions, stats, hypervisor tenants."""
    import zmq

    from proto import curve
    from proto import messages as m
    from proto.codec import ProtocolError, decode_reply, encode

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        curve.secure_client(sock, server)
    except ValueError as exc:
        sock.close(0)
        raise AdminError(str(exc)) from None
    try:
        sock.connect(server)
        sock.send_multipart(encode(m.ListSessions(rid=1, token=token)))
        if not sock.poll(int(timeout_s * 1000), zmq.POLLIN):
            raise AdminError(f"gpud at {server} did not answer")
        try:
            body, _ = decode_reply(sock.recv_multipart())
        except ProtocolError as exc:
            raise AdminError(f"gpud at {server} answered something else: {exc.message}") from None
    finally:
        sock.close(0)
    if body.kind == "error":
        raise AdminError(f"gpud refused: {body.message}")
    if body.kind != "result" or not isinstance(body.value, dict):
        raise AdminError(f"gpud at {server} answered {body.kind!r}, not its description")
    return body.value


def embedded_gpuds() -> list[tuple[int, str]]:
    """(owner pid, endpoint) of every embedded gpud of this user whose ``wooly run`` is alive."""
    from proto.host import pid_alive
    from woolyhv.launcher import _runtime_dir

    out = []
    for path in sorted(glob.glob(os.path.join(_runtime_dir(), "gpud-*.sock"))):
        try:
            pid = int(os.path.basename(path).split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid_alive(pid):
            out.append((pid, "ipc://" + path))
    return out


def _rate(now: dict[str, Any], before: dict[str, Any] | None, key: str, dt: float) -> float:
    if before is None or dt <= 0:
        return 0.0
    return max(0.0, (now.get(key, 0) - before.get(key, 0)) / dt)


def _tail(text: str, n: int) -> str:
    """The end of a long command line (a script's path ends in its name)."""
    return text if len(text) <= n else "…" + text[-(n - 1) :]


def frame(server: str, info: dict[str, Any], before: dict[str, Any] | None, dt: float) -> Group:
    """One screen of ``info`` (rates against ``before``, ``dt`` seconds earlier)."""
    hv = info.get("hypervisor") or {}
    prev_t = {t["tenant"]: t for t in ((before or {}).get("hypervisor") or {}).get("tenants", [])}
    head = Text(
        f"gpud {info.get('server_version', '?')} at {server}  up {info.get('uptime_s', 0):.0f} s  "
        f"{len(info.get('sessions', []))} session(s)  {time.strftime('%H:%M:%S')}",
        style="bold",
    )
    devices = Table(title="devices", title_justify="left", expand=True)
    for col in ("#", "backend", "name", "memory", "busy"):
        devices.add_column(col, justify="right" if col in ("#", "memory", "busy") else "left")
    # busy: device time the tenants used since the last screen, over the wall time between the screens
    used_s = (
        sum(
            t.get("device_time_s", 0.0) - prev_t.get(t["tenant"], {}).get("device_time_s", 0.0)
            for t in hv.get("tenants", [])
        )
        if before is not None
        else 0.0
    )
    ndev = max(len(info.get("devices", [])), 1)
    for d in info.get("devices", []):
        busy = f"{min(max(used_s, 0.0) / dt / ndev, 1.0) * 100:.0f}%" if before is not None and dt > 0 else "-"
        devices.add_row(
            str(d["ordinal"]), d["backend"], d["name"], f"{human(d['used'])} / {human(d['total_mem'])}", busy
        )
    tenants = Table(title="tenants", title_justify="left", expand=True)
    for col in (
        "tenant",
        "sess",
        "memory",
        "quota",
        "shared",
        "share",
        "cores",
        "calls/s",
        "in/s",
        "out/s",
        "state",
        "max wait",
    ):
        tenants.add_column(col, justify="left" if col in ("tenant", "state") else "right")
    for t in sorted(hv.get("tenants", []), key=lambda t: -t.get("memory_used", 0)):
        acct, before_acct = t.get("accounting", {}), prev_t.get(t["tenant"], {}).get("accounting") if before else None
        tenants.add_row(
            t["tenant"],
            str(t["sessions"]),
            human(t["memory_used"]),
            human(t["memory_quota"]) if t.get("memory_quota") else "-",
            human(t.get("shared_bytes", 0)),
            f"{t.get('device_share', 0.0) * 100:.0f}%",
            f"{t.get('core_share', 0.0):.2f}",
            f"{_rate(acct, before_acct, 'rpcs', dt):.0f}",
            human(_rate(acct, before_acct, "bytes_in", dt)),
            human(_rate(acct, before_acct, "bytes_out", dt)),
            t.get("state", ""),
            f"{t.get('max_wait_s', 0.0) * 1e3:.0f} ms",
        )
    sessions = Table(title="sessions", title_justify="left", expand=True)
    for col in ("session", "tenant", "pid", "memory", "allocs", "mods", "age", "program"):
        sessions.add_column(col, justify="right" if col in ("pid", "memory", "allocs", "mods", "age") else "left")
    for s in info.get("sessions", [])[:40]:
        sessions.add_row(
            s["session"],
            s["tenant"],
            str(s["pid"]),
            human(s["memory_used"]),
            str(s["allocations"]),
            str(s["modules"]),
            f"{s['age_s']:.0f}s",
            _tail(s["program"], 50),
        )
    return Group(head, devices, tenants, sessions)


def pool_frame(url: str, nodes: dict[str, Any]) -> Group:
    table = Table(title=f"pool {url}", title_justify="left", expand=True)
    for col in ("node", "devices", "free", "total", "sessions", "reserved", "load", "state"):
        table.add_column(col, justify="right" if col in ("free", "total", "sessions", "reserved", "load") else "left")
    for n in nodes["nodes"]:
        free = max((d["free"] for d in n["devices"]), default=0)
        table.add_row(
            n["node"],
            ",".join(f"{d['vendor']}:{d['arch']}" for d in n["devices"]),
            human(max(free, 0)),
            human(sum(d["total"] for d in n["devices"])),
            str(n["sessions"]),
            str(n["reservations"]),
            f"{n['load']:.2f}",
            f"cordoned ({n['cordon']})" if n["cordon"] else "ready",
        )
    return Group(Text(time.strftime("%H:%M:%S"), style="bold"), table)


def run(
    server: str, token: str = "", interval: float = 1.0, once: bool = False, console: Console | None = None
) -> None:
    console = console or Console()
    if server.startswith("pool://"):
        from woolyhv.pool.client import PoolClient, PoolError

        client = PoolClient(server)

        def render() -> Group:
            try:
                from woolyhv.pool import protocol as P

                return pool_frame(server, client.call(P.Nodes()))
            except PoolError as exc:
                raise AdminError(f"{exc.name}: {exc}") from None
    else:
        state: dict[str, Any] = {"info": None, "at": 0.0}

        def render() -> Group:
            info, now = admin_call(server, token), time.monotonic()
            g = frame(server, info, state["info"], now - state["at"])
            state.update(info=info, at=now)
            return g

    if once:  # one screen, its rates measured over one interval (a first sample, then the screen)
        if not server.startswith("pool://"):
            render()
            time.sleep(interval)
        console.print(render())
        return
    with Live(render(), console=console, refresh_per_second=4, screen=False) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(render())
        except KeyboardInterrupt:
            pass
