"""gpud's server: one ROUTER socket, one I/O loop, sessions keyed by the client's socket identity.

The I/O loop decodes and validates every message, runs quick handlers inline, and hands device
work to the sessions' streams (a shared worker pool). Replies that wait on device work are built
back on the I/O loop once the work completes (workers post a closure and wake the loop through a
pipe), so session tables are only ever touched by the loop thread.
"""

from __future__ import annotations

import importlib
import os
import queue
import secrets
import signal
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import zmq

import gpud
from gpud import log
from gpud.backends.base import Backend
from gpud.errors import CudaError, codes
from gpud.hypervisor.policy import HypervisorConfig
from gpud.listener import ListenError, open_listener  # noqa: F401 - ListenError: gpud's callers catch it
from gpud.session import PEER_CALLS, Later, Session, SessionInfo
from gpud.streams import Marker, when_all
from proto import constants as C
from proto import messages as m
from proto.codec import ProtocolError, decode, encode, request_id
from proto.host import PROOF_PREFIX, host_id, pid_alive, shm_dir

# gpud modules that register message handlers with ``gpud.session.extension`` (imported at start;
# each imports its heavy dependencies, such as torch, lazily).
EXTENSION_MODULES = (
    "gpud.shm",
    "gpud.aten",
    "gpud.hypervisor",
    "gpud.hostmap",
    "gpud.ipc",
    "gpud.migrate",
    "gpud.checkpoint",
)

WAKE_IDENTITY = b"\x00gpud-wake"

# Requests that report pending asynchronous errors before they run (CUDA's "next API call").
_NO_ERROR_CHECK = frozenset({"batch", "ping", "bye", "list_sessions", "hello", "idle"})


class Server:
    def __init__(
        self,
        endpoints: list[str],
        backends: list[Backend],
        *,
        session_expiry_s: float = C.SESSION_EXPIRY_S,
        local_expiry_s: float = 60.0,
        workers: int | None = None,
        hypervisor: HypervisorConfig | None = None,
        insecure: bool = False,
    ) -> None:
        if not backends:
            raise ValueError("gpud needs at least one backend")
        for name in EXTENSION_MODULES:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name != name:
                    raise
        self.endpoints = endpoints
        self.backends = backends
        self.session_expiry_s = session_expiry_s
        self.local_expiry_s = local_expiry_s
        self.host_id = host_id()
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.sock, self.bound, self.zap = open_listener(self.ctx, endpoints, insecure, hypervisor)
        self.insecure = insecure
        self.pool = ThreadPoolExecutor(
            max_workers=workers or max(8, 2 * (os.cpu_count() or 2)), thread_name_prefix="gpud-stream"
        )
        self.sessions: dict[bytes, Session] = {}
        # NOTE [wake-ups]: the I/O loop blocks in recv on the ROUTER alone (a poll over several
        # sockets costs ~30 us per message in pyzmq). Other threads wake it by sending a frame to
        # the same ROUTER over inproc from an internal DEALER with a reserved identity.
        self._loop_calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        wake_ep = f"inproc://gpud-wake-{id(self)}"
        self.sock.bind(wake_ep)
        self.sock.setsockopt(zmq.RCVTIMEO, 250)
        self._wake = self.ctx.socket(zmq.DEALER)
        self._wake.setsockopt(zmq.IDENTITY, WAKE_IDENTITY)
        self._wake.setsockopt(zmq.LINGER, 0)
        self._wake.connect(wake_ep)
        self._wake_lock = threading.Lock()
        self._stop = threading.Event()
        self._parked: set[Session] = set()  # sessions with requests waiting (NOTE [bounded daemon state])
        self.started = time.time()
        # Small messages are cheaper to receive as bytes; big bulk frames arrive over shared memory
        # from same-host clients, so the remaining copy=True cost is confined to remote uploads.
        self._copy_small = self.zap is None  # with client keys, a hello's frames carry its connection's User-Id
        self.stats: dict[str, float] = {"requests": 0, "errors": 0, "sessions_opened": 0, "sessions_expired": 0}
        # Tenants, quotas, dedup, scheduling, sleep (gpud/hypervisor); ``hypervisor`` is its config.
        from gpud.hypervisor import Hypervisor, load

        self.hv = Hypervisor(self, hypervisor if hypervisor is not None else load())
        from gpud.executors import Executors

        self.executors = Executors(self.hv)  # NOTE [executors]: no process until a tenant's first ATen op
        self.pool_agent: Any = None  # NOTE [node agent] (woolyhv/pool/agent.py), set by join_pool
        self.moves: Any = None  # gpud.migrate.Moves, made at the first move (NOTE [migration])
        self.forwards: dict[bytes, Any] = {}  # identity -> gpud.migrate.Forward, of sessions that moved away
        self.checkpoints: Any = None  # gpud.checkpoint.Checkpointer, made at the pool's first standby orders
        self.standbys: Any = None  # gpud.checkpoint.Standbys: checkpoints kept here for other nodes' sessions
        self._snapshot: Callable[[], dict[str, Any]] | None = None

    def join_pool(self, agent: Any) -> None:
        """Publish this gpud to a pool through ``agent`` (a woolyhv.pool.agent.NodeAgent): it gets an inventory
        snapshot from the I/O loop every ``agent.interval`` seconds."""
        from gpud.poolnode import Snapshotter

        self._snapshot = Snapshotter(self)
        agent.offer(self._snapshot())
        self.pool_agent = agent
        # NOTE [drain]: the pool's move orders for this node's sessions (gpud/migrate.py moves them)
        agent.on_move = lambda order, report: self.call_on_loop(lambda: PEER_CALLS["pool_move"](self, order, report))
        # NOTE [checkpoints]: the standby the pool chose for each checkpointed session of this node
        agent.on_standby = lambda orders: self.call_on_loop(lambda: PEER_CALLS["pool_standby"](self, orders))
        agent.start()

    # ------------------------------------------------------------------ helpers for sessions
    def call_on_loop(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O loop thread (safe from any thread)."""
        self._loop_calls.put(fn)
        self._poke()

    def _poke(self) -> None:
        with self._wake_lock:
            try:
                self._wake.send(b"", zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # closed at shutdown, or the loop already has wake-ups queued

    def run_async(self, fn: Callable[[], Any]) -> Marker:
        marker = Marker()

        def job() -> None:
            try:
                fn()
            except CudaError as exc:
                marker.complete(exc)
                return
            except Exception as exc:  # noqa: BLE001
                marker.complete(CudaError(codes.UNKNOWN, f"{type(exc).__name__}: {exc}"))
                return
            marker.complete()

        self.pool.submit(job)
        return marker

    # Memory is the hypervisor's to account (tenants' quotas, dedup'd bytes counted once).
    def reserve_memory(self, session: Session, size: int) -> None:
        self.hv.reserve(session, size)

    def release_memory(self, session: Session, size: int) -> None:
        self.hv.release(session, size)

    def mem_info(self, session: Session) -> tuple[int, int]:
        return self.hv.mem_info(session)

    # ------------------------------------------------------------------ sending
    def _send(self, identity: bytes, frames: list[Any], session: Session | None = None) -> None:
        try:
            # zero-copy only pays for big frames; small ones are cheaper copied
            big = sum(len(f) for f in frames[1:] if len(f) > 65536) if len(frames) > 1 else 0
            if big and session is not None:  # counted until zmq has written it (NOTE [bounded daemon state])
                tracker = self.sock.send_multipart([identity, *frames], flags=zmq.NOBLOCK, copy=False, track=True)
                session.outbound.append((tracker, big))
            else:
                self.sock.send_multipart([identity, *frames], flags=zmq.NOBLOCK, copy=not big)
        except zmq.Again:  # SEND_HWM replies unread
            s = session or self.sessions.get(identity)
            log.warning("send.peer-not-reading", session=s.id if s else "-")
            if s is not None:
                self.close_session(s, "not-reading-replies")
        except zmq.ZMQError as exc:  # the peer is gone (EHOSTUNREACH)
            log.debug("send.failed", error=str(exc))

    def _reply(self, identity: bytes, rid: int, value: Any, bulk: list[Any], session: Session | None) -> None:
        out = session.take_output() if session is not None else ""
        if bulk and session is not None:
            session.charge(
                "bytes_out", sum(len(b) if isinstance(b, bytes | bytearray) else memoryview(b).nbytes for b in bulk)
            )
        reply = m.Result(rid=rid, value=value, output=out)
        if session is not None and "ckpt_ack" in session.ext:  # NOTE [checkpoints]: the client may trim its log
            reply.ckpt = session.ext.pop("ckpt_ack")
        self._send(identity, encode(reply, bulk), session)

    def _hold(self, session: Session, frames: list[Any]) -> bool:
        """Whether ``session``'s request must wait because it has not read its replies (NOTE [bounded daemon
        state]); if so it is parked, or the session closed once too much waits."""
        if session.outbound:
            session.outbound = [(t, n) for t, n in session.outbound if not t.done]
        if not session.parked and sum(n for _, n in session.outbound) <= self.hv.config.limits.reply_bytes:
            return False
        session.parked.append(frames)
        session.parked_bytes += sum(len(f) for f in frames)
        self._parked.add(session)
        if session.parked_bytes > self.hv.config.limits.parked_bytes:
            log.warning("session.not-reading", session=session.id, unsent=sum(n for _, n in session.outbound))
            self.close_session(session, "not-reading-replies")
        return True

    def _unpark(self) -> None:
        """Serve the parked requests of sessions that have read enough of their replies since."""
        for s in list(self._parked):
            if s.closed:
                self._parked.discard(s)
                continue
            s.outbound = [(t, n) for t, n in s.outbound if not t.done]
            while s.parked and sum(n for _, n in s.outbound) <= self.hv.config.limits.reply_bytes:
                frames = s.parked.pop(0)
                s.parked_bytes -= sum(len(f) for f in frames)
                self.handle(frames, unparked=True)
            if not s.parked:
                self._parked.discard(s)

    def _error(self, identity: bytes, rid: int, exc: CudaError, session: Session | None) -> None:
        self.stats["errors"] += 1
        out = session.take_output() if session is not None else ""
        self._send(
            identity, encode(m.Error(rid=rid, code=exc.code, name=exc.name, message=exc.message[:65000], output=out))
        )

    # ------------------------------------------------------------------ request handling
    def handle(self, frames: list[Any], unparked: bool = False) -> None:
        identity = bytes(frames[0].buffer) if hasattr(frames[0], "buffer") else frames[0]
        if identity == WAKE_IDENTITY:
            return
        session = self.sessions.get(identity)
        if session is not None:
            session.last_seen = time.monotonic()
            if not unparked and session.moving is None and self._hold(session, frames):
                return
        try:
            msg, bulk = decode(frames[1:])
        except ProtocolError as exc:
            log.debug("request.invalid", error=exc.message)
            if session is not None:
                session.messages += 1  # it counts as sent (NOTE [resume]: the client numbers what it sends)
            self._error(identity, request_id(frames[1:]), exc, session)
            return
        rid = msg.rid
        kind = msg.kind
        if kind != "ping" and kind != "hello":
            if session is not None:
                mv = session.moving
                if mv is not None and (mv.frozen or (rid and mv.armed)):  # NOTE [migration]: a call freezes it
                    mv.held.append(frames)
                    if not mv.frozen:
                        mv.freeze()
                    return
                session.messages += 1
            elif identity in self.forwards:  # the session moved: tell the client where (NOTE [migration])
                if rid:
                    self._send(identity, encode(self.forwards[identity].reply(rid)))
                return
        self.stats["requests"] += 1
        if session is not None:  # accounting (wooly_tenant_*_total): calls and the bytes that came with them
            calls = getattr(msg, "calls", None) if kind == "batch" else None
            session.charge("rpcs", len(calls) if calls is not None else 1)
            if calls is not None:
                session.charge("batches")
            if bulk:
                session.charge("bytes_in", sum(len(b) for b in bulk))
        try:
            if kind == "hello":
                from gpud.zap import user_id

                self._hello(identity, msg, user_id(frames[1]) if self.zap is not None else None)
                return
            if kind == "ping":
                self._send(identity, encode(m.Pong(rid=rid)))
                return
            if kind == "list_sessions":
                self.hv.admit_admin(msg.token)
                self._reply(identity, rid, self.describe(), [], session)
                return
            if kind in PEER_CALLS:  # NOTE [migration]: a peer gpud, or an admin's move_out
                value = PEER_CALLS[kind](self, identity, rid, msg, bulk)
                if value is not None:
                    self._reply(identity, rid, value, [], None)
                return
            if session is None:
                raise CudaError(
                    codes.NOT_INITIALIZED, "no session for this connection: send hello first (was it expired?)"
                )
            if kind == "bye":
                self.close_session(session, "bye")
                self._reply(identity, rid, None, [], None)
                return
            if kind not in _NO_ERROR_CHECK:
                session.check_errors()
            result = session.handle(msg, bulk)
        except CudaError as exc:
            if kind != "batch":
                self._error(identity, rid, exc, session)
            elif session is not None:
                session.record_error(exc)
            return
        if kind == "batch":
            return
        if isinstance(result, Later):
            self._defer(identity, rid, session, result)
        else:
            self._reply(identity, rid, result, [], session)

    def _defer(self, identity: bytes, rid: int, session: Session, later: Later) -> None:
        def finish() -> None:
            session.deferred -= 1
            try:
                value, bulk = later.produce()
            except CudaError as exc:
                self._error(identity, rid, exc, session)
                return
            self._reply(identity, rid, value, bulk, session)

        session.deferred += 1
        if all(mk.done for mk in later.markers):
            finish()  # already complete (e.g. a copy that ran inline): answer now
            return
        when_all(later.markers, lambda: self.call_on_loop(finish))

    def _hello(self, identity: bytes, msg: m.Hello, key_tenant: str | None = None) -> None:
        if msg.protocol != C.PROTOCOL_VERSION:
            raise CudaError(
                codes.NOT_SUPPORTED,
                f"client speaks protocol {msg.protocol}, this gpud speaks {C.PROTOCOL_VERSION}: upgrade the older side",
            )
        old = self.sessions.get(identity)
        if old is not None:
            self.close_session(old, "rehello")
        claims_local = bool(msg.host_id) and msg.host_id == self.host_id
        if msg.resume:  # NOTE [migration]: the client of a session that moved here takes it over
            self.hv.authenticate(msg.tenant, msg.token, key_tenant)
            session = PEER_CALLS["resume"](self, identity, 0, msg, [])
            self.sessions.pop(session.identity, None)
            session.identity = identity
            session.info.pid, session.info.host_id = msg.pid, msg.host_id
            session.last_seen = time.monotonic()
            sid = session.id
            log.event("session.resumed", session=sid, tenant=msg.tenant, pid=msg.pid)
        else:
            sid = uuid.uuid4().hex[:12]
            self.hv.admit(msg.tenant, msg.token, key_tenant)
            # NOTE [proven locality] (gpud/shm.py): a claim is not proof; the session is local once it proves it
            info = SessionInfo(tenant=msg.tenant, pid=msg.pid, host_id=msg.host_id, program=msg.program, local=False)
            backend, why = self.place_device(msg.device, msg.tenant)
            session = Session(self, sid, identity, info, backend)
            if msg.reservation:
                session.ext["pool.reservation"] = msg.reservation  # claimed by the pool agent (NOTE [node agent])
        proof = ""
        if claims_local:
            proof = session.ext["local_proof"] = os.path.join(shm_dir(), PROOF_PREFIX + secrets.token_hex(16))
        self.sessions[identity] = session
        if not msg.resume:
            self.hv.on_open(session)
            self.stats["sessions_opened"] += 1
            log.event(
                "session.open",
                session=sid,
                tenant=msg.tenant,
                pid=msg.pid,
                claims_local=claims_local,
                program=msg.program,
                device=session.backend.ordinal,
                why=why,
            )
        caps = self.capabilities()
        ckpt = self.hv.tenant(msg.tenant).policy.checkpoint
        if ckpt is not None:  # NOTE [checkpoints]: its replay log must hold every byte it uploads
            caps = [c for c in caps if c != "shm" and not c.startswith("dedup")]
        reply = m.HelloReply(
            rid=msg.rid,
            session=sid,
            protocol=C.PROTOCOL_VERSION,
            server_version=gpud.__version__,
            host_id=self.host_id,
            heartbeat_s=C.HEARTBEAT_INTERVAL_S,
            capabilities=caps,
            devices=[b.info() for b in self.backends],
            device=session.backend.ordinal,
            usable=self.usable_devices(msg.tenant),
            local_proof=proof,
            checkpoint_s=ckpt.interval_s if ckpt is not None else 0.0,
        )
        self._send(identity, encode(reply))

    def usable_devices(self, tenant: str) -> list[int]:
        """The ordinals a tenant may open sessions on (its policy's ``devices``, else every device): the devices a
        program of that tenant sees (NOTE [devices of a program] in shim/runtime.py)."""
        allowed = self.hv.config.policy(tenant).devices if tenant else None
        return [b.ordinal for b in self.backends if allowed is None or b.ordinal in allowed]

    def place_device(self, want: int = -1, tenant: str = "") -> tuple[Backend, str]:
        """NOTE [session devices]: the device a new session (or one moving in) runs on, and why.

        A session runs on one device, as a CUDA program started with CUDA_VISIBLE_DEVICES=N does: its client sees
        that device as its first (ordinal 0 in its own numbering; ``DeviceInfo.ordinal`` keeps gpud's; a PyTorch
        program opens a session per further device it uses, NOTE [devices of a program] in shim/runtime.py). A
        client may ask for one (``WOOLY_DEVICE``, its first ``CUDA_VISIBLE_DEVICES`` entry, or the device a pool
        reservation was made on); a device gpud does not have is CUDA's invalid-device error at hello. Otherwise
        gpud places it on the device with the most free memory (what is resident there, dedup'd bytes once), then the
        fewest sessions, then the lowest ordinal: tenants spread over a node's GPUs instead of piling onto the first
        one. A tenant policy's ``devices`` narrows the choice (asking for another is CUDA_ERROR_NOT_PERMITTED).
        Before this, every session ran on the first device, whatever the pool's reservation or the program said."""
        allowed = self.hv.config.policy(tenant).devices if tenant else None
        if want >= 0:
            for b in self.backends:
                if b.ordinal == want:
                    if allowed is not None and want not in allowed:
                        raise CudaError(
                            codes.NOT_PERMITTED,
                            f"device {want} was asked for, tenant {tenant!r} may use devices {sorted(allowed)} only",
                        )
                    return b, "asked for"
            n = len(self.backends)
            raise CudaError(
                codes.INVALID_DEVICE,
                f"device {want} was asked for, this gpud has {n} device(s) (ordinals 0 to {n - 1})",
            )
        candidates = [b for b in self.backends if allowed is None or b.ordinal in allowed]
        if not candidates:
            raise CudaError(
                codes.INVALID_DEVICE,
                f"tenant {tenant!r} may use devices {sorted(allowed or [])}, none of which this gpud has "
                f"(ordinals 0 to {len(self.backends) - 1})",
            )
        if len(candidates) == 1:
            return candidates[0], "the only device" if len(self.backends) == 1 else "the tenant's only device"
        sessions: dict[int, int] = {}
        for s in self.sessions.values():
            sessions[s.backend.ordinal] = sessions.get(s.backend.ordinal, 0) + 1
        if self.moves is not None:
            for mi in self.moves.incoming.values():
                sessions[mi.session.backend.ordinal] = sessions.get(mi.session.backend.ordinal, 0) + 1
        free = {b.ordinal: b.total_memory - self.hv.physical[b.ordinal] for b in self.backends}
        best = min(candidates, key=lambda b: (-free[b.ordinal], sessions.get(b.ordinal, 0), b.ordinal))
        return best, f"most free memory ({free[best.ordinal]} bytes), {sessions.get(best.ordinal, 0)} session(s) there"

    def capabilities(self) -> list[str]:
        from gpud.session import EXTENSIONS

        caps = ["driver", "ptx"]
        if "shm_open" in EXTENSIONS:
            caps.append("shm")
        if "aten_batch" in EXTENSIONS:
            caps.append("aten")
        caps += self.hv.capabilities()
        return caps

    def close_session(self, session: Session, reason: str) -> None:
        if session.closed:
            return
        session.closed = True
        self.sessions.pop(session.identity, None)
        used = session.memory_used
        session.free_all()
        log.event("session.close", session=session.id, reason=reason, freed=used)

    def describe(self) -> dict[str, Any]:
        return {
            "server_version": gpud.__version__,
            "endpoints": self.bound,
            "uptime_s": round(time.time() - self.started, 3),
            "devices": [
                {
                    "ordinal": b.ordinal,
                    "name": b.info().name,
                    "backend": b.kind,
                    "total_mem": b.total_memory,
                    "used": self.hv.physical[b.ordinal],
                }
                for b in self.backends
            ],
            "sessions": [s.describe() for s in self.sessions.values()],
            "stats": dict(self.stats),
            "hypervisor": self.hv.describe(),
        }

    def _expire(self) -> None:
        if self.moves is not None:
            self.moves.expire()
        if self.checkpoints is not None:
            self.checkpoints.tick()
        if self.standbys is not None:
            self.standbys.expire()
        now = time.monotonic()
        for s in list(self.sessions.values()):
            idle = now - s.last_seen
            if s.info.local:
                dead = not pid_alive(s.info.pid) or idle > self.local_expiry_s
            else:
                dead = idle > self.session_expiry_s
            if dead:
                self.stats["sessions_expired"] += 1
                self.close_session(s, "expired" if idle > 1.0 else "client-gone")

    # ------------------------------------------------------------------ loop
    def stop(self) -> None:
        self._stop.set()
        self._poke()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def serve_forever(self, owner_pid: int | None = None) -> None:
        log.event("gpud.listen", endpoints=",".join(self.bound), devices=",".join(b.info().name for b in self.backends))
        next_check = time.monotonic() + 0.25
        next_offer = 0.0
        # A zombie owner still answers kill(pid, 0); being re-parented is the reliable sign.
        owner_is_parent = owner_pid is not None and os.getppid() == owner_pid
        try:
            while not self._stop.is_set():
                try:
                    frames = self.sock.recv_multipart(copy=self._copy_small)  # type: ignore[call-overload]  # a bool: pyzmq's stubs want a literal
                except zmq.Again:
                    frames = None
                if frames is not None:
                    try:
                        self.handle(frames)
                    except Exception as exc:  # noqa: BLE001 - a client must never crash the daemon
                        log.warning("request.crash", error=f"{type(exc).__name__}: {exc}")
                while True:
                    try:
                        fn = self._loop_calls.get_nowait()
                    except queue.Empty:
                        break
                    try:
                        fn()
                    except Exception as exc:  # noqa: BLE001
                        log.warning("loop.call.crash", error=f"{type(exc).__name__}: {exc}")
                if self._parked:
                    self._unpark()
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + 0.25
                    self._expire()
                    self.hv.tick(now)
                    if self.pool_agent is not None and now >= next_offer and self._snapshot is not None:
                        next_offer = now + self.pool_agent.interval
                        self.pool_agent.offer(self._snapshot())
                    if owner_pid is not None and (
                        not pid_alive(owner_pid) or (owner_is_parent and os.getppid() != owner_pid)
                    ):
                        log.event("gpud.owner-gone", pid=owner_pid)
                        break
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        if self.pool_agent is not None:
            self.pool_agent.stop()  # leave the pool at once, not after the lease's TTL
        for s in list(self.sessions.values()):
            self.close_session(s, "shutdown")
        self.hv.shutdown()
        self.executors.close()
        if self.zap is not None:
            self.zap.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self._wake_lock:
            self._wake.close(0)
        self.sock.close(0)
        for ep in self.bound:
            if ep.startswith("ipc://"):
                try:
                    os.unlink(ep[len("ipc://") :])
                except OSError:
                    pass
        log.event("gpud.stopped")
