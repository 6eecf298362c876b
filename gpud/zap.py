"""Client keys bound to tenants: gpud's ZAP handler (ZeroMQ's authentication protocol, RFC 27).

NOTE [client keys]: a tcp listener speaks CURVE (NOTE [curve] in proto/curve.py), so each connection's client public
key is proven by the handshake. A tenant whose policy lists keys (``[tenants.alice] keys = ["<z85>", ...]``; a
client's pair comes from ``wooly keys --client NAME`` and is used through ``WOOLY_CLIENT_KEY``) takes sessions only
from connections made with one of them, and needs no token from them. libzmq asks this handler about every new
connection of gpud's socket; it answers with the key's tenant as the connection's User-Id (or none), which the
socket attaches to every message of that connection, and ``Server._hello`` compares it with the tenant the hello
names. A key listed for no tenant still connects (tenants without keys keep their token rules); ``require_keys``
refuses such connections in the handshake. ipc connections (NULL mechanism) are answered without a User-Id: their
guard is the peer uid (``ipc_uids``).
"""

from __future__ import annotations

import threading
from typing import Any

import zmq
from zmq.utils import z85

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
DOMAIN = "wooly"


class ZapHandler:
    def __init__(self, ctx: zmq.Context, key_tenants: dict[bytes, str], require_keys: bool) -> None:
        self.key_tenants = key_tenants  # z85 public key -> tenant
        self.require_keys = require_keys
        self.sock = ctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(ZAP_ENDPOINT)  # before gpud's listener binds: no connection goes unasked
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="gpud-zap", daemon=True)
        self.thread.start()

    @staticmethod
    def wants(config: Any) -> bool:
        return bool(config.require_keys or any(p.keys for p in config.tenants.values()))

    @classmethod
    def from_config(cls, ctx: zmq.Context, config: Any) -> ZapHandler:
        key_tenants = {k.encode(): name for name, p in config.tenants.items() for k in p.keys}
        return cls(ctx, key_tenants, config.require_keys)

    def _answer(self, frames: list[bytes]) -> list[bytes]:
        if len(frames) < 6 or frames[0] != b"1.0":
            return [b"1.0", frames[1] if len(frames) > 1 else b"", b"400", b"malformed ZAP request", b"", b""]
        _, request_id, _, _, _, mechanism, *credentials = frames
        if mechanism == b"CURVE" and credentials and len(credentials[0]) == 32:
            tenant = self.key_tenants.get(z85.encode(credentials[0]))
            if tenant is not None:
                return [b"1.0", request_id, b"200", b"OK", tenant.encode(), b""]
            if self.require_keys:
                return [b"1.0", request_id, b"400", b"client key not listed for any tenant", b"", b""]
            return [b"1.0", request_id, b"200", b"OK", b"", b""]
        if mechanism == b"NULL":  # ipc (and tcp --insecure): no key to bind; the listener's own rules apply
            return [b"1.0", request_id, b"200", b"OK", b"", b""]
        return [b"1.0", request_id, b"400", b"unsupported mechanism", b"", b""]

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                if not poller.poll(200):
                    continue
                frames = self.sock.recv_multipart()
                try:
                    reply = self._answer(frames)
                except Exception:  # noqa: BLE001 - a request the handler cannot read is refused, never fatal
                    reply = [b"1.0", frames[1] if len(frames) > 1 else b"", b"500", b"internal error", b"", b""]
                self.sock.send_multipart(reply)
            except zmq.ZMQError:
                if self._stop.is_set():
                    return

    def close(self) -> None:
        self._stop.set()
        self.thread.join(1.0)
        self.sock.close(0)


def user_id(frame: Any) -> str:
    """The tenant the connection's key is bound to ('' for none), from a received message frame."""
    try:
        return frame.get("User-Id") or ""
    except (AttributeError, zmq.ZMQError):
        return ""
