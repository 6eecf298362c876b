"""The client connection to gpud: a DEALER socket, request/reply with liveness, and the call queue.

``call()`` sends one request and waits for its reply; ``post()`` queues a call that returns
nothing (copies to the device, launches, frees ...). Queued calls are sent as one ``Batch`` at
the next ``call()``, on ``flush()``, or when the queue grows past its limits; their errors come
back with the next synchronous reply, as CUDA reports asynchronous errors.

Liveness (NOTE [liveness]): while waiting, the client pings gpud every heartbeat interval; gpud's
I/O loop answers even while device work runs. If nothing at all arrives for ``timeout_s`` the
daemon is gone: the call fails with CUDA_ERROR_DEVICE_UNAVAILABLE and the connection is marked
dead, so every later call fails at once instead of hanging. A background thread pings an idle
connection so gpud does not expire a client that is busy computing on its own.
"""

from __future__ import annotations

import atexit
import copy
import os
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import msgspec
import zmq

from proto import constants as C
from proto import curve
from proto import messages as m
from proto import settings as config
from proto.codec import ProtocolError, decode_reply, encode
from proto.errors import DEVICE_UNAVAILABLE, NO_DEVICE, NOT_INITIALIZED, CudaError
from proto.host import host_id
from shim import __version__

_CONNECTIONS: weakref.WeakSet[Connection] = weakref.WeakSet()
# NOTE [local synchronisation] in shim/shm.py: posts whose completion the client sees without asking gpud, and calls
# that queue no device work
Body = Any  # a proto.messages Struct, or a plain map (``_Raw``)


class _Raw(dict):
    """A message given as a plain map, as it goes on the wire: tests of gpud's own checks send what no Struct of
    proto/messages.py would (NOTE [wire schema]). Read and written by attribute like a Struct."""

    __getattr__ = dict.get

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


_STAGED = frozenset({"shm_htod", "shm_dtoh"})
_NO_WORK = frozenset({"ctx_synchronize", "sync", "idle", "ping", "mem_alloc", "mem_get_info", "shm_open"})
_ABANDONED: list[Connection] = []
_NOT_DRIVER_WORK = frozenset({"aten_batch", "aten_call", "ping", "idle", "hello", "mem_get_info"})


def _python_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


# Where device printf output goes: the program's stdout. A native program (NOTE [embedded
# interpreter]) replaces this with a write through its own C stdio buffer, so device lines and
# host lines keep the order the program printed them in.
write_device_output = _python_stdout


class Connection:
    def __init__(
        self,
        endpoint: str,
        *,
        tenant: str = "default",
        token: str = "",
        timeout_s: float = C.SERVER_SILENCE_S,
        connect_timeout_s: float = 10.0,
        program: str = "",
        capabilities: Sequence[str] = (),
        server_key: str = "",
        reservation: str = "",
        device: int = -1,
        probe_s: float = 0.0,
        replay_log_mb: int = 1024,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._lock = threading.RLock()
        # Run before any driver-API work is queued or called (not before the torch face's own messages): set by
        # the torch face once one of its tensors aliases driver memory (NOTE [device memory aliases]), so a
        # driver call comes after the tensor ops the program issued before it, as on one CUDA stream.
        self.before_driver_work: Any = None
        # NOTE [local synchronisation]: calls and posts that may have queued device work since the last completed
        # ctx_synchronize (staged copies excepted: their completion shows in the ring's flag words)
        self.unsynced = 0
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 1000)
        self._sock.setsockopt(zmq.SNDHWM, 0)
        self._sock.setsockopt(zmq.RCVHWM, 0)
        # A send blocks only while no connection to gpud is up (none yet, or its handshake failed: a wrong
        # CURVE key): bounded, so that the call fails with DEVICE_UNAVAILABLE instead of hanging.
        self._sock.setsockopt(zmq.SNDTIMEO, int(max(timeout_s, connect_timeout_s) * 1000))
        try:
            curve.secure_client(self._sock, endpoint, server_key)  # NOTE [curve] in proto/curve.py
        except ValueError as exc:
            self._sock.close(0)
            raise CudaError(DEVICE_UNAVAILABLE, str(exc)) from None
        if probe_s > 0:
            self._probe(endpoint, probe_s)  # connects
        else:
            self._sock.connect(endpoint)
        # Blocking recv with a timeout is ~30 us cheaper per round trip than a poll in pyzmq.
        self._sock.setsockopt(zmq.RCVTIMEO, int(C.HEARTBEAT_INTERVAL_S * 1000))
        self._rid = 0
        self._pending: set[int] = set()  # rids whose caller is waiting (a nested call may read their replies)
        self._stash: dict[int, tuple[Any, list[Any]]] = {}
        self._queue: list[Body] = []
        self._qbulk: list[Any] = []
        self._qbytes = 0
        self._dead: CudaError | None = None
        self._ever_heard = False  # any reply at all on this connection: "did not answer" vs "stopped answering"
        self._closed = False
        self._last_sent = time.monotonic()
        self.pid = os.getpid()  # the process this connection belongs to (NOTE [fork] in shim/runtime.py)
        # NOTE [resume]: messages sent (pings and hellos aside), and those sent since the outermost call in flight
        # was, which a move re-sends to the new node
        self._seq = 0
        self._record: list[tuple[int, Body, Sequence[Any]]] = []
        self._moved_to = ""  # the resume token of the last move followed
        # NOTE [replay log]: a checkpointed session keeps every message since its last checkpoint
        self._replay = False
        self._replay_max = replay_log_mb << 20
        self._replay_bytes = 0
        self._replay_gap = 0  # the last message dropped from a full log: a restore needs a checkpoint past it
        self._standby: dict[str, Any] | None = None  # the last checkpoint: its seq, the standby and restore token
        self.restores = 0
        self.moves = 0
        self.on_move: list[Any] = []  # callbacks(conn) after the session moved to another node
        self._creds = (tenant, token, reservation, list(capabilities), program or " ".join(sys.argv)[:200])
        self._device = device
        self.server_key = server_key
        self.round_trips = 0
        self.batches = 0
        reply, _ = self.call(self._hello(), timeout_s=connect_timeout_s)
        self.session: str = reply.session
        self.node_devices: list[dict[str, Any]] = []  # all of gpud's devices (``wooly devices``)
        self.devices: list[dict[str, Any]] = []  # the session's view: its one device (NOTE [session devices])
        self.device = 0  # gpud's ordinal of that device
        self.usable: list[int] = []  # gpud's ordinals the tenant may open sessions on (shim/runtime.py)
        self._take_devices(reply)
        self.server_version: str = reply.server_version
        self.server_capabilities: list[str] = reply.capabilities
        self.same_host = reply.host_id == host_id() and self._prove_local(reply.local_proof)
        self.heartbeat_s = float(reply.heartbeat_s)
        self._replay = reply.checkpoint_s > 0
        _CONNECTIONS.add(self)
        self._hb = threading.Thread(target=self._heartbeat, name="wooly-heartbeat", daemon=True)
        self._hb.start()

    def _take_devices(self, reply: m.HelloReply) -> None:
        if not reply.devices:
            return
        self.node_devices = [msgspec.structs.asdict(d) for d in reply.devices]
        self.device = reply.device
        self.devices = [d for d in self.node_devices if d["ordinal"] == reply.device][:1]
        self.usable = list(reply.usable) or [d["ordinal"] for d in self.node_devices]

    def _hello(self, resume: str = "") -> m.Hello:
        tenant, token, reservation, caps, program = self._creds
        return m.Hello(
            protocol=C.PROTOCOL_VERSION,
            client_version=__version__,
            tenant=tenant,
            token=token,
            pid=os.getpid(),
            host_id=host_id(),
            program=program,
            capabilities=caps,
            reservation=reservation,
            resume=resume,
            device=-1 if resume else self._device,
        )

    def _probe(self, endpoint: str, probe_s: float) -> None:
        """Fail fast when nothing accepts a connection at ``endpoint`` within ``probe_s`` (WOOLY_PROBE_S): a
        machine with no gpud answers like one with no driver, CUDA_ERROR_NO_DEVICE at once, instead of after the
        hello's timeout; and when the encrypted handshake fails (a wrong WOOLY_SERVER_KEY), say so at once. A
        daemon that accepts but is slow to answer still gets ``connect_timeout_s``."""
        from zmq.utils.monitor import recv_monitor_message

        failed = (
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        )
        monitor = self._sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | failed)
        connected = handshake_failed = False
        try:
            self._sock.connect(endpoint)
            deadline = time.monotonic() + probe_s
            while (left := deadline - time.monotonic()) > 0 and monitor.poll(int(left * 1000) + 1, zmq.POLLIN):
                event = recv_monitor_message(monitor)["event"]
                if event == zmq.EVENT_CONNECTED:
                    connected = True
                elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    break
                elif event & failed:
                    handshake_failed = True
                    break
                if connected and not curve.is_tcp(endpoint):
                    break
        finally:
            self._sock.disable_monitor()
            monitor.close(0)
        if handshake_failed:
            self._sock.close(0)
            if config.client().insecure:
                why = (
                    "this client speaks in clear (WOOLY_INSECURE=1) and gpud does not: unset it and set "
                    "WOOLY_SERVER_KEY (`wooly keys` on gpud's host prints it)"
                )
            else:
                why = (
                    "WOOLY_SERVER_KEY is not its key (`wooly keys` on its host prints it), or gpud was started "
                    "--insecure (then set WOOLY_INSECURE=1)"
                )
            raise CudaError(DEVICE_UNAVAILABLE, f"gpud at {endpoint} refused the handshake: {why}")
        if not connected:
            self._sock.close(0)
            raise CudaError(
                NO_DEVICE,
                f"gpud at {endpoint} did not answer: nothing accepted a connection there within "
                f"{probe_s:g} s (is gpud running, and is WOOLY_SERVER its endpoint?)",
            )

    # ------------------------------------------------------------------ queue
    def post(self, body: Body, bulk: Sequence[Any] = ()) -> None:
        """Queue a call that returns nothing (a ``queued`` message). ``body.frame`` indexes ``bulk`` (0 = first)."""
        if isinstance(body, dict):
            body = _Raw(body)
        if self.before_driver_work is not None and body.kind not in _NOT_DRIVER_WORK:
            self.before_driver_work()
        with self._lock:
            if self._dead is not None:
                raise self._dead
            if bulk:
                body.frame = len(self._qbulk) + (getattr(body, "frame", 0) or 0)
                self._qbulk.extend(bulk)
                self._qbytes += sum(len(b) if isinstance(b, bytes | bytearray) else memoryview(b).nbytes for b in bulk)
            self._queue.append(body)
            if body.kind not in _STAGED:
                self.unsynced += 1
            if (
                len(self._queue) >= C.FLUSH_MAX_CALLS
                or self._qbytes >= C.FLUSH_MAX_BYTES
                or len(self._qbulk) >= C.MAX_BULK_FRAMES - 1
            ):
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._queue:
            return
        calls, bulk = self._queue, self._qbulk
        self._queue, self._qbulk, self._qbytes = [], [], 0
        self._send(m.Batch(calls=calls), bulk)
        self.batches += 1

    # ------------------------------------------------------------------ request/reply
    def _send(self, body: Body, bulk: Sequence[Any] = ()) -> None:
        kind = body.kind
        if kind != "ping" and kind != "hello":
            self._seq += 1
            if self._replay:
                self._log(body, bulk)
            elif self._pending:  # NOTE [resume]: a move can only happen under a call in flight
                self._record.append((self._seq, body, bulk))
        try:
            self._sock.send_multipart(encode(body, bulk), copy=not bulk)
        except zmq.ZMQError as exc:
            hint = (
                " (no connection came up: is the daemon running, and is WOOLY_SERVER_KEY its key?)"
                if isinstance(exc, zmq.Again)
                else ""
            )
            self._dead = CudaError(DEVICE_UNAVAILABLE, f"cannot send to gpud at {self.endpoint}: {exc}{hint}")
            raise self._dead from None
        self._last_sent = time.monotonic()

    def call(self, body: Body, bulk: Sequence[Any] = (), *, timeout_s: float | None = None) -> tuple[Any, list[Any]]:
        """Send a request and wait for its reply: returns (value, bulk frames) or raises CudaError."""
        if isinstance(body, dict):
            body = _Raw(body)
        if self.before_driver_work is not None and body.kind not in _NOT_DRIVER_WORK:
            self.before_driver_work()
        with self._lock:
            if self._dead is not None:
                raise self._dead
            self._flush_locked()
            self._rid += 1
            rid = body.rid = self._rid
            self._pending.add(rid)
            kind = body.kind
            before = self.unsynced
            if kind not in _NO_WORK:
                self.unsynced += 1
            try:
                self._send(body, bulk)
                self.round_trips += 1
                if timeout_s is None:
                    got = self._wait(rid, self.timeout_s)
                else:
                    got = self._wait(rid, timeout_s, deadline=time.monotonic() + timeout_s)
                if kind == "ctx_synchronize":
                    self.unsynced -= before  # what was sent before it is done; what a nested call sent is not
                return got
            finally:
                self._pending.discard(rid)
                self._stash.pop(rid, None)
                if not self._pending and not self._replay:
                    self._record.clear()  # NOTE [resume]: everything sent so far ran where it was sent

    def _wait(self, rid: int, timeout_s: float, deadline: float | None = None) -> tuple[Any, list[Any]]:
        """Wait for the reply to ``rid``. Silence for ``timeout_s`` means gpud is gone; an explicit ``deadline``
        (a caller's own timeout) ends the wait even while gpud still answers pings.

        NOTE [nested calls]: the wait can run Python code on this thread (a garbage-collected tensor's
        finaliser frees its handle, which may flush or even call), and the lock is re-entrant, so a nested
        call may read the reply meant for an outer one: it keeps such replies in ``_stash`` for their owner
        instead of dropping them (dropping it left the outer call waiting forever, kept alive by pongs)."""
        last_heard = time.monotonic()
        heard = False  # anything at all from gpud: a silent one is reported as gone, below
        while True:
            if deadline is not None and time.monotonic() > deadline and heard:
                self._dead = CudaError(
                    DEVICE_UNAVAILABLE,
                    f"gpud at {self.endpoint} did not answer within "
                    f"{timeout_s:.1f} s (it answers pings: busy, or the reply was lost)",
                )
                raise self._dead
            got = self._stash.pop(rid, None)
            if got is None:
                try:
                    frames = self._sock.recv_multipart()
                except zmq.Again:
                    frames = None
                if frames is not None:
                    last_heard = time.monotonic()
                    heard = self._ever_heard = True
                    try:
                        body, bulk = decode_reply(frames)
                    except ProtocolError as exc:
                        self._dead = CudaError(exc.code, f"gpud sent an undecodable reply: {exc.message}")
                        raise self._dead from None
                    self._aside(body)
                    other = body.rid
                    if other != rid:
                        if other in self._pending:
                            self._stash[other] = (body, bulk)
                        continue  # a pong, or the reply to a request abandoned earlier
                    got = (body, bulk)
            if got is not None:
                body, bulk = got
                kind = body.kind
                if kind == "moved":
                    self._standby = None  # the session's checkpoints start again where it goes
                    self._follow(body)  # NOTE [resume]: the session is on another node now; ask it there
                    last_heard = time.monotonic()
                    continue
                if kind == "error":
                    raise CudaError(body.code, body.message)
                if kind == "hello_reply":
                    return body, bulk
                if kind == "pong":  # the answer to a ping call (gpud echoes its rid; a heartbeat's ping has none)
                    return None, bulk
                if kind != "result":
                    continue  # a nudge that reused the rid: not an answer
                return body.value, bulk
            now = time.monotonic()
            if now - last_heard > timeout_s or (deadline is not None and now > deadline):
                if self._ever_heard:  # it answered before: it died, hung or the network went
                    detail = f"stopped answering (no reply in {timeout_s:.1f} s): the daemon or its host went away"
                    if self._replay:  # NOTE [replay log]: bring the session back from its checkpoint
                        why = self._failover()
                        if not why:
                            last_heard = time.monotonic()
                            if any(getattr(b, "rid", 0) == rid for _, b, _ in self._record):
                                continue  # re-sent: its reply comes from the restored session
                            # it ran before the checkpoint and its reply went down with the node: the session
                            # goes on, this call reports it (re-running it could do twice what it did)
                            raise CudaError(
                                DEVICE_UNAVAILABLE,
                                f"gpud at {self.endpoint}: the session was restored "
                                "from its checkpoint, but the reply to this call was lost with its node",
                            )
                        detail += f"; restoring it from its checkpoint failed: {why}"
                else:
                    hint = " (or is WOOLY_SERVER_KEY not its key?)" if curve.is_tcp(self.endpoint) else ""
                    detail = f"did not answer (no reply in {timeout_s:.1f} s); is the daemon running{hint}?"
                self._dead = CudaError(DEVICE_UNAVAILABLE, f"gpud at {self.endpoint} {detail}")
                raise self._dead
            self._send(m.Ping())

    def _aside(self, body: Any) -> None:
        """What any reply may carry besides its answer: device output, and the checkpoint the standby holds."""
        out = getattr(body, "output", "")
        if out:
            write_device_output(out)
        ck = getattr(body, "ckpt", None)
        if ck:
            self._checkpointed(ck)

    # NOTE [resume]
    # A session moves to another node (NOTE [migration] in gpud/migrate.py) at a synchronisation point: the node
    # holds the first call that arrives once a move is due, moves the session, and answers that call (and anything
    # sent after it) with ``moved``: where the session is now, a one-time resume token, and how many of this
    # connection's messages ran there (``executed``). The connection opens a socket to the new node, says hello
    # with the token (the same session, handles and device pointers), re-sends the messages after ``executed`` (the
    # call in flight and whatever a nested call sent after it, kept in ``_record`` while a call is in flight), and
    # the call goes on waiting for its reply. The program sees a pause. Later ``moved`` answers of the old node to
    # messages that were re-sent are ignored (same token).
    def _follow(self, body: m.Moved) -> None:
        resume = body.resume
        if not resume or resume == self._moved_to:
            return
        endpoint, key = body.endpoint, body.server_key
        executed = body.executed
        resend = [e for e in self._record if e[0] > executed]
        sock = self._ctx.socket(zmq.DEALER)
        for opt in (zmq.LINGER, zmq.SNDHWM, zmq.RCVHWM, zmq.SNDTIMEO, zmq.RCVTIMEO):
            sock.setsockopt(opt, self._sock.getsockopt(opt))
        try:
            curve.secure_client(sock, endpoint, key)
        except ValueError as exc:
            sock.close(0)
            self._dead = CudaError(
                DEVICE_UNAVAILABLE, f"the session moved to {endpoint}, which cannot be reached: {exc}"
            )
            raise self._dead from None
        sock.connect(endpoint)
        old, self._sock = self._sock, sock
        old.close(0)
        self._moved_to = resume
        self.endpoint, self.server_key = endpoint, key
        self._rid += 1
        rid = self._rid
        self._pending.add(rid)
        try:
            hello = self._hello(resume)
            hello.rid = rid
            self._send(hello)
            reply, _ = self._wait(rid, self.timeout_s)
        finally:
            self._pending.discard(rid)
        if reply.session != self.session:
            self._dead = CudaError(
                DEVICE_UNAVAILABLE, f"the session moved to {endpoint}, which took it as {reply.session!r}"
            )
            raise self._dead
        self.server_capabilities = reply.capabilities
        self._take_devices(reply)
        self.moves += 1
        self._seq = executed
        self._record = []
        for _, b, bulk in resend:
            self._send(b, bulk)
        self.same_host = reply.host_id == host_id() and self._prove_local(reply.local_proof)
        for cb in list(self.on_move):
            cb(self)

    # NOTE [replay log]
    # A session whose tenant has a checkpoint policy (NOTE [checkpoints] in gpud/checkpoint.py) is told so in its
    # hello reply. Its connection then keeps every message it sends (pings and hellos aside), with copies of the
    # host data they carry, numbered as gpud counts them. A reply may say that the standby holds a checkpoint
    # covering the first ``seq`` messages (with the standby's endpoint and key and this session's restore token):
    # the log drops what that covers. When gpud stops answering, the connection asks the standby to restore the
    # session, follows it there as after a move (NOTE [resume]) and re-sends the messages after ``seq``: the call
    # in flight goes on waiting for its reply. The log is bounded (WOOLY_REPLAY_LOG_MB): when full it drops its
    # oldest messages, and until a checkpoint covers them the session cannot be restored (the call fails with
    # CUDA_ERROR_DEVICE_UNAVAILABLE saying so).
    def _log(self, body: Body, bulk: Sequence[Any]) -> None:
        kept = [b if isinstance(b, bytes) else bytes(b) for b in bulk]  # the program may reuse its buffers
        self._record.append((self._seq, copy.copy(body), kept))
        self._replay_bytes += sum(len(b) for b in kept)
        while self._replay_bytes > self._replay_max and len(self._record) > 1:
            seq, _, old = self._record.pop(0)
            self._replay_bytes -= sum(len(b) for b in old)
            self._replay_gap = seq

    def _checkpointed(self, ck: dict[str, Any]) -> None:
        try:
            seq = int(ck["seq"])
        except (KeyError, TypeError, ValueError):
            return
        self._standby = ck
        keep = [e for e in self._record if e[0] > seq]
        if len(keep) != len(self._record):
            self._record = keep
            self._replay_bytes = sum(len(b) for e in keep for b in e[2])
        if self._replay_gap <= seq:
            self._replay_gap = 0

    def _failover(self) -> str:
        """Restore the session from its last checkpoint on its standby: '' when it is back, else why not."""
        ck = self._standby
        if ck is None:
            return "no checkpoint was taken yet"
        if self._replay_gap:
            return (
                f"the calls since the last one outgrew WOOLY_REPLAY_LOG_MB={self._replay_max >> 20}, so it cannot "
                "be brought up to date"
            )
        endpoint, key, node = str(ck.get("endpoint", "")), str(ck.get("server_key", "")), str(ck.get("node", ""))
        tenant = self._creds[0]
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            curve.secure_client(sock, endpoint, key)
            sock.connect(endpoint)
            sock.send_multipart(
                encode(m.Restore(rid=1, session=self.session, tenant=tenant, token=str(ck.get("token", ""))))
            )
            deadline = time.monotonic() + max(RESTORE_TIMEOUT_S, self.timeout_s)
            reply: Any = None
            while reply is None and time.monotonic() < deadline:
                if not sock.poll(200):
                    continue
                body, _ = decode_reply(sock.recv_multipart())
                if body.rid == 1:
                    reply = body
        except (zmq.ZMQError, ValueError, ProtocolError) as exc:
            return f"its standby {node} at {endpoint} could not be asked to restore it: {exc}"
        finally:
            sock.close(0)
        if reply is None:
            return f"its standby {node} at {endpoint} did not restore it within {RESTORE_TIMEOUT_S:.0f} s"
        if reply.kind == "error":
            return f"its standby {node} could not restore it: {reply.message}"
        value = reply.value if reply.kind == "result" and isinstance(reply.value, dict) else {}
        self._standby = None
        try:
            self._follow(
                m.Moved(
                    resume=str(value.get("resume", "")),
                    endpoint=endpoint,
                    server_key=key,
                    executed=int(value.get("executed", 0)),
                )
            )
        except CudaError as exc:
            return f"the restored session on {node} did not take it back: {exc.message}"
        self.restores += 1
        return ""

    def _prove_local(self, path: str) -> bool:
        """NOTE [proven locality] (gpud/shm.py): create the file gpud named, so that it knows this client shares its
        host. Only a fresh file of the expected name in this host's shared-memory directory is ever created."""
        import os

        from proto.host import PROOF_PREFIX, shm_dir

        name = os.path.basename(path)
        if os.path.dirname(path) != shm_dir() or not name.startswith(PROOF_PREFIX) or "/" in name or len(name) > 64:
            return False
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        except OSError:
            return False
        try:
            self.call(m.ProveLocal())
            return True
        except CudaError:
            return False
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass

    # ------------------------------------------------------------------ lifetime
    def _heartbeat(self) -> None:
        while not self._closed:
            time.sleep(self.heartbeat_s)
            if self._closed or self._dead is not None:
                return
            if self._lock.acquire(blocking=False):  # no call in flight (each holds the lock)
                try:
                    if self._closed or self._dead is not None:
                        continue
                    if self._sync_due():
                        self.call(m.Idle())  # NOTE [migration]: a move or checkpoint waits for a call
                    elif time.monotonic() - self._last_sent >= self.heartbeat_s:
                        self._send(m.Ping())
                except CudaError:
                    return
                finally:
                    self._lock.release()

    def _sync_due(self) -> bool:
        """Read what gpud sent while no call waited (under the lock): its output, checkpoint notes, and whether it
        asked for a call (``sync_due``). Anything else is a pong or the reply to an abandoned request."""
        due = False
        while True:
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return due
            try:
                body, _ = decode_reply(frames)
            except ProtocolError:
                continue
            self._aside(body)
            due = due or body.kind == "sync_due"

    def quiet(self) -> bool:
        """True when nothing but staged copies was sent since the last completed ctx_synchronize and gpud asks for
        no call (NOTE [local synchronisation]); the caller holds the lock."""
        if self._dead is not None:
            raise self._dead
        return not self.unsynced and not self._queue and not self._replay and not self._sync_due()

    @property
    def alive(self) -> bool:
        return self._dead is None and not self._closed

    def abandon(self) -> None:
        """In a forked child: forget this (the parent's) connection without touching its socket, which the parent
        still uses; nothing is sent and the socket is never closed here (NOTE [fork] in shim/runtime.py)."""
        self._closed = True
        self._dead = CudaError(NOT_INITIALIZED, "this connection belongs to the parent process")
        _CONNECTIONS.discard(self)
        _ABANDONED.append(self)  # never garbage-collected (and so never closed) in this process

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                if self._dead is None:
                    self._flush_locked()
                    self.call(m.Bye(), timeout_s=2.0)
            except Exception:  # noqa: BLE001 - whatever the goodbye met, the socket closes (an open one blocks exit)
                pass
            finally:
                self._closed = True
                self._sock.close(linger=500)


RESTORE_TIMEOUT_S = 120.0  # NOTE [replay log]: how long a standby may take to re-create a session


def lost() -> CudaError | None:
    """The error of a connection whose gpud went away (CUDA_ERROR_DEVICE_UNAVAILABLE), if any: the session's device
    state is gone with it. ``wooly run`` turns a program's uncaught exception into one line when this is set."""
    for conn in list(_CONNECTIONS):
        dead = conn._dead
        if dead is not None and dead.code == DEVICE_UNAVAILABLE:
            return dead
    return None


@atexit.register
def _close_all() -> None:
    for conn in list(_CONNECTIONS):
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - never fail interpreter exit
            pass
