"""gpud's listening socket: one ROUTER for every endpoint, and what guards each kind of endpoint.

- tcp: ZeroMQ CURVE unless ``--insecure`` (NOTE [curve] in proto/curve.py), and, where tenants list client keys,
  the ZAP handler that binds keys to tenants (NOTE [client keys] in gpud/zap.py);
- ipc: the socket file's directory is 0700, and the kernel's word on the peer's uid is checked too (ZeroMQ's
  ``IPC_FILTER_UID``, SO_PEERCRED underneath): gpud's own user and the ones the config lists (``ipc_uids``).
"""

from __future__ import annotations

import os
from typing import Any

import zmq

from gpud.zap import DOMAIN, ZapHandler
from proto import constants as C
from proto import curve

SEND_HWM = 100_000  # replies a peer may leave unread (NOTE [bounded daemon state] in gpud/session.py)


class ListenError(OSError):
    """An endpoint gpud cannot bind (in use, no such directory, not allowed): one line naming it."""


def open_listener(
    ctx: zmq.Context, endpoints: list[str], insecure: bool, config: Any
) -> tuple[zmq.Socket, list[str], ZapHandler | None]:
    """The ROUTER bound to ``endpoints``, the endpoints as bound, and the ZAP handler if the config binds keys."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, C.MAX_MESSAGE_BYTES)
    sock.setsockopt(zmq.RCVHWM, 0)
    # NOTE [bounded daemon state] (gpud/session.py): a peer that leaves SEND_HWM replies unread is not reading
    # at all (big replies are bounded in bytes before that: ``Server._hold``); sends never block (ROUTER_MANDATORY
    # + NOBLOCK: a full or vanished peer is an error of that peer's, not a stall of the loop)
    sock.setsockopt(zmq.SNDHWM, SEND_HWM)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    zap: ZapHandler | None = None
    if config is not None and ZapHandler.wants(config):
        zap = ZapHandler.from_config(ctx, config)
        sock.setsockopt(zmq.ZAP_DOMAIN, DOMAIN.encode())
    if any(ep.startswith("ipc://") for ep in endpoints):  # set before bind: listeners copy the socket's options
        for uid in {os.getuid(), *(config.ipc_uids if config is not None else [])}:
            sock.setsockopt(zmq.IPC_FILTER_UID, uid)
    bound: list[str] = []
    for ep in endpoints:
        secure = curve.is_tcp(ep) and not insecure
        if secure:
            curve.secure_server(sock)
        try:
            sock.bind(ep)
        except zmq.ZMQError as exc:
            sock.close(0)
            if zap is not None:
                zap.close()
            raise ListenError(f"--listen {ep}: cannot listen there ({exc.strerror})") from None
        if secure:
            curve.plain(sock)
        bound.append(sock.getsockopt_string(zmq.LAST_ENDPOINT))
    return sock, bound, zap
