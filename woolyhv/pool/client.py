"""Talking to the pool's controller: placements for ``WOOLY_SERVER=pool://HOST:PORT``, and the admin calls of
``wooly pool``.

NOTE [pool client]: ``pool://h1:7000,h2:7000`` names one or more controllers (the CURVE key in
``WOOLY_SERVER_KEY`` is the controllers'). The client sends ``place`` to the first that answers; a follower
redirects to the leader. The answer is ``placed`` (the node's endpoint, its CURVE key and a reservation id the
client names in its hello, so the node's agent can claim it), ``waiting`` (nothing fits yet: the reason is printed
once and the client keeps waiting until its deadline), or an error with a CUDA code. While waiting the client pings
the controller every 2 s; a controller that stops answering (it died) is left for the next one, where the request
starts over. Nothing else changes for the program: it then talks to its node as to any gpud.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import zmq

from proto import curve
from proto import errors as E
from proto.codec import ProtocolError, encode_body, unpack_body
from proto.settings import ConfigError
from proto.settings import pool_controllers as controllers
from woolyhv.pool import protocol as P
from woolyhv.pool.model import PlaceRequest

DEFAULT_MEMORY = 1 << 30


class PoolError(RuntimeError):
    def __init__(self, code: int, message: str, decision: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.decision = decision

    @property
    def name(self) -> str:
        return E.CURESULT.get(self.code, ("CUDA_ERROR_UNKNOWN", ""))[0]


@dataclass
class Placement:
    node: str
    endpoint: str
    server_key: str
    reservation: str
    decision: str
    device: int = 0


class PoolClient:
    def __init__(self, url: str, *, timeout_s: float = 5.0, token: str = "") -> None:
        self.endpoints = controllers(url) if url.startswith("pool://") else [url]
        self.timeout_s = timeout_s
        self.token = token
        self._rid = 0
        self._sock: Any = None
        self._at = ""

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def _connect(self, endpoint: str) -> Any:
        if self._sock is not None and self._at == endpoint:
            return self._sock  # a live connection to it (replies to earlier requests are told apart by rid)
        self.close()
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            curve.secure_client(sock, endpoint)
        except ValueError as exc:
            sock.close(0)
            raise PoolError(E.DEVICE_UNAVAILABLE, f"pool controller {endpoint}: {exc}") from None
        sock.connect(endpoint)
        self._sock, self._at = sock, endpoint
        return sock

    def _send(self, req: P.Request) -> int:
        self._rid += 1
        body = P.as_map(msgspec.structs.replace(req, rid=self._rid, token=req.token or self.token))
        self._sock.send_multipart(encode_body(body))
        return self._rid

    def _recv(self, rid: int, timeout_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                return None
            try:
                body, _ = unpack_body(self._sock.recv_multipart())
            except ProtocolError:
                continue
            if body.get("rid") == rid:
                return body

    def call(self, req: P.Request, endpoints: list[str] | None = None) -> dict[str, Any]:
        """One request to the first controller that answers, its answer as a map; errors become PoolError."""
        tried = []
        for ep in endpoints or self.endpoints:
            self._connect(ep)
            reply = self._recv(self._send(req), self.timeout_s)
            if reply is None:
                tried.append(ep)
                self.close()  # a fresh connection next time: this one may be to a dead peer
                continue
            answer = P.decode_answer(reply)
            if isinstance(answer, P.Error):
                raise PoolError(answer.code, answer.message, answer.decision)
            return reply
        raise PoolError(
            E.DEVICE_UNAVAILABLE, f"no pool controller answered at {', '.join(tried)} within {self.timeout_s:g} s"
        )

    def place(self, req: PlaceRequest, on_wait: Callable[[str, str], None] | None = None) -> Placement:
        """A placement for ``req``: follows redirects, waits while the controller waits, until ``req.deadline_s``."""
        deadline = time.monotonic() + req.deadline_s + self.timeout_s
        queue = list(self.endpoints)
        told = False
        last_error = ""
        while time.monotonic() < deadline:
            if not queue:
                queue = list(self.endpoints)
                time.sleep(0.2)
            ep = queue.pop(0)
            self._connect(ep)
            left = max(0.0, deadline - time.monotonic() - self.timeout_s)
            rid = self._send(P.Place(request=req.model_dump() | {"deadline_s": left}))
            reply = self._recv(rid, self.timeout_s)
            if reply is None:
                last_error = f"{ep} did not answer within {self.timeout_s:g} s"
                self.close()
                continue
            answer = P.decode_answer(reply)
            if isinstance(answer, P.Redirect):
                if answer.leader and answer.leader not in queue and answer.leader != ep:
                    queue.insert(0, answer.leader)
                last_error = f"{ep}: {answer.message or 'redirected'}"
                if not answer.leader:
                    time.sleep(0.1)  # an election is under way
                continue
            if isinstance(answer, P.Waiting):
                if on_wait is not None and not told:
                    on_wait(answer.decision, answer.reason)
                    told = True
                reply = self._wait(rid, deadline)
                if reply is None:
                    last_error = f"{ep} stopped answering while the request waited"
                    self.close()
                    continue
                answer = P.decode_answer(reply)
                if isinstance(answer, P.Redirect):
                    if answer.leader:
                        queue.insert(0, answer.leader)
                    continue
            if isinstance(answer, P.Error):
                raise PoolError(answer.code, answer.message, answer.decision)
            if isinstance(answer, P.Placed):
                return Placement(
                    node=answer.node,
                    endpoint=answer.endpoint,
                    server_key=answer.server_key,
                    reservation=answer.reservation,
                    decision=answer.decision,
                    device=answer.device,
                )
            last_error = f"{ep}: unexpected answer {reply.get('kind')!r}"
        raise PoolError(E.DEVICE_UNAVAILABLE, f"no placement from the pool within {req.deadline_s:g} s: {last_error}")

    def _wait(self, rid: int, deadline: float) -> dict[str, Any] | None:
        """The final answer to ``rid``, pinging the controller every 2 s; None when it stopped answering."""
        heard = time.monotonic()
        ping = 0
        while time.monotonic() < deadline:
            if not self._sock.poll(500, zmq.POLLIN):
                now = time.monotonic()
                if now - heard > 2.0 and not ping:
                    ping = self._send(P.Ping())
                if now - heard > 2.0 + self.timeout_s:
                    return None
                continue
            try:
                body, _ = unpack_body(self._sock.recv_multipart())
            except ProtocolError:
                continue
            heard = time.monotonic()
            if body.get("rid") == rid:
                return body
            if body.get("rid") == ping:
                ping = 0
        return None


def request_from_settings(s: Any) -> PlaceRequest:
    """The placement request of this process (WOOLY_TENANT, WOOLY_MEM or WOOLY_MODEL, WOOLY_VENDOR, WOOLY_ARCH,
    WOOLY_PRIORITY, WOOLY_PLACE_TIMEOUT_S)."""
    digests: list[str] = []
    if s.mem:
        memory, source = s.mem, "declared"
    elif s.model:
        from woolyhv.pool.estimate import EstimateError, estimate

        try:
            est = estimate(s.model, context=s.context, training=s.training)
        except EstimateError as exc:
            raise ConfigError(f"WOOLY_MODEL={s.model!r}: {exc}") from None
        memory, source, digests = est["total"], f"estimate of {s.model}", est.get("sample", [])
    else:
        memory, source = DEFAULT_MEMORY, "default (set WOOLY_MEM or WOOLY_MODEL)"
    return PlaceRequest(
        tenant=s.tenant,
        memory=memory,
        vendor=s.vendor or None,
        arch=s.arch or None,
        priority=s.priority,
        deadline_s=s.place_timeout_s,
        digests=digests[:4096],
        program=" ".join(sys.argv)[:200],
        memory_source=source[:200],
    )


def place_for_settings(s: Any) -> Placement:
    """Ask the pool in ``s.server`` (pool://...) for a node; PoolError with a CUDA code when none is given."""
    req = request_from_settings(s)
    client = PoolClient(s.server, timeout_s=min(s.connect_timeout_s, 10.0))

    def said(decision: str, reason: str) -> None:
        if not s.quiet:
            print(f"wooly: waiting for room in the pool: {reason} (wooly pool explain {decision})", file=sys.stderr)

    try:
        return client.place(req, on_wait=said)
    except PoolError as exc:
        # said here too: some libraries (numba) keep only the error code of the failing first call
        if not s.quiet:
            print(f"wooly: {exc.name}: {exc}", file=sys.stderr)
        raise
    finally:
        client.close()
