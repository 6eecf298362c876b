"""Checkpoints: a session's state is kept on a standby node, so that the session outlives the death of its own.

NOTE [checkpoints]
- **Policy.** A tenant with ``checkpoint = {interval_s = 10}`` (``--tenant NAME:checkpoint=10``) has each of its
  sessions checkpointed every ``interval_s`` to a standby node the pool's controller chooses (NOTE [standby] in
  woolyhv/pool/standby.py: a placement like any other, explained by ``wooly pool explain``, never the session's
  own node). Outside a pool, or before the controller has named a standby, there is nothing to write to.
- **When.** As a move (NOTE [migration] in gpud/migrate.py): once a checkpoint is due, the session's next call is
  held with everything after it, gpud waits until the session is quiescent (streams idle, replies sent), and
  takes the snapshot: the state ``move_in`` carries (arena, allocations, modules, streams, events, errors, the
  executor's tensors) and the xxh3-128 digest of every ``CHUNK`` of its memory and tensor storages. Only chunks
  whose digest the standby does not hold are copied out. Then the held calls run; the program saw a pause of the
  quiesce, the digests and the copies. The checkpoint covers the session's first ``seq`` messages.
- **The wire.** From a thread, node to node (CURVE, as a move): ``ckpt_begin`` (state, chunk lists, module
  images); the standby answers with the digests it lacks; ``ckpt_chunk`` each (the standby checks the digest);
  ``ckpt_commit``: the standby keeps the new checkpoint and forgets chunks it no longer names. Incremental by
  content: an unchanged chunk is never sent twice, wherever in the session it sits. A standby that lacks a chunk
  the source no longer has (it restarted) makes the next checkpoint a full one.
- **The client** (NOTE [replay log] in shim/client.py) learns from its hello reply that it is checkpointed and
  keeps every message it sends, with its host data, until a reply tells it which ``seq`` the standby holds (with
  the standby's endpoint and key, and a restore token made for this session; the standby keeps only its sha256).
  When its node stops answering it sends ``restore`` with the token to the standby, which re-creates the session
  from the checkpoint (same addresses, handles, tensors) and answers with a resume token; the client says hello
  with it and re-sends the messages after ``seq``. The program sees a pause.
- **What it needs.** A checkpointed session uploads plainly: gpud does not offer it the same-host shared-memory
  ring or content-addressed uploads, whose messages name bytes outside the message (its replay log holds what
  it sent). What cannot move cannot be checkpointed either (``movable``); the reason is logged and counted.
- **Limits.** Work between the checkpoint and the death is done again (a kernel with racing float atomics may
  round differently); a reply lost on the wire with its node is not recovered; module globals get new addresses
  on the standby (as in a move); the standby holds the checkpoint in host memory (at most ``STANDBY_SHARE`` of
  it for all standbys) and does not reserve device memory for the restore: a full node refuses it
  (CUDA_ERROR_OUT_OF_MEMORY), and the program fails with that one line.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import mmap
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import zmq

from gpud import log
from gpud.errors import CudaError, codes
from gpud.migrate import WINDOW, MoveIn, MoveOut, authorise_peer, moves_of, nudge
from gpud.migrate import chunk_digest as _digest
from gpud.session import CLOSE_HOOKS, PEER_CALLS, Session
from gpud.streams import when_all
from proto import curve
from proto import messages as m
from proto.codec import encode

if TYPE_CHECKING:
    from gpud.server import Server

CHUNK = 1 << 20  # bytes per digest: the unit of "changed since the last checkpoint"
STANDBY_IDLE_S = 600.0  # a standby neither refreshed nor restored for this long is forgotten
STANDBY_SHARE = 0.5  # of this host's memory, at most, for the checkpoints it keeps for others


def policy_of(server: Server, session: Session) -> Any:
    """The session's tenant's CheckpointPolicy, or None."""
    return server.hv.tenant(session.info.tenant).policy.checkpoint


@dataclass
class Track:
    """A checkpointed session's state at its source (``session.ext["ckpt"]``)."""

    interval_s: float
    order: dict[str, Any] | None = None  # the pool's standby order: target, endpoint, server_key, token
    token: str = field(default_factory=lambda: secrets.token_hex(16))  # the client's restore token
    held: set[bytes] = field(default_factory=set)  # digests the standby holds
    seq: int = -1
    at: float = 0.0  # wall time of the last checkpoint
    due: float = 0.0  # monotonic time the next one is due
    busy: bool = False
    count: int = 0
    sent_bytes: int = 0
    pause_ms: float = 0.0
    error: str = ""

    def describe(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "standby": (self.order or {}).get("target", ""),
            "seq": self.seq,
            "at": self.at,
            "count": self.count,
            "sent_bytes": self.sent_bytes,
            "pause_ms": self.pause_ms,
            "error": self.error,
        }


class Checkpoint(MoveOut):
    """One checkpoint of a session: frozen and quiesced as a move is, then released at once; the bytes travel
    after."""

    def __init__(self, server: Server, session: Session, track: Track) -> None:
        order = track.order or {}
        super().__init__(
            server,
            session,
            str(order.get("endpoint", "")),
            str(order.get("server_key", "")),
            order=str(order.get("token", "")),
            source=getattr(server.pool_agent, "name", ""),
            node=str(order.get("target", "")),
        )
        self.track = track

    def start(self) -> None:
        self.track.busy = True
        self.armed = True
        self.session.moving = self  # NOTE [migration]: the next call freezes the session
        nudge(self.server, self.session)

    def _fail(self, reason: str) -> None:
        if self.session.moving is self:
            self._release()
        self._failed(reason)

    def _failed(self, reason: str) -> None:
        t = self.track
        t.busy, t.error = False, reason
        t.due = time.monotonic() + t.interval_s
        self.server.stats["checkpoint_failures"] = self.server.stats.get("checkpoint_failures", 0) + 1
        log.warning("ckpt.failed", session=self.session.id, standby=self.node, reason=reason)

    def _export(self, later: Any) -> None:
        from gpud.migrate import export

        s = self.session
        try:
            aten, blobs = later.produce() if later is not None else (None, [])
            state, images = export(s)
        except CudaError as exc:
            self._fail(f"session {s.id} cannot be checkpointed: {exc.message}")
            return
        state.aten, state.blobs = aten, [memoryview(b).nbytes for b in blobs]
        seq = s.messages
        held, new = self.track.held, {}
        regions, blob_lists = [], []

        def chunks(view: memoryview, private: bool) -> list[bytes]:
            out = []
            for off in range(0, view.nbytes, CHUNK):
                piece = view[off : off + CHUNK]
                d = _digest(piece)
                out.append(d)
                if d not in held and d not in new:
                    new[d] = piece if private else bytes(piece)  # live memory is copied; a snapshot is not
            return out

        for r in s.regions.values():
            if r.allocation is not None:
                view = (
                    memoryview((ctypes.c_char * r.size).from_address(r.start)).cast("B") if r.size else memoryview(b"")
                )
                regions.append([r.start, r.size, chunks(view, False)])
        for b in blobs:
            # the executor's process wrote its tensors out (a memfd, bytes): already a copy of the moment
            blob_lists.append([memoryview(b).nbytes, chunks(memoryview(b).cast("B"), isinstance(b, mmap.mmap | bytes))])
        pause = time.monotonic() - self.t_frozen
        self.track.pause_ms = round(pause * 1e3, 2)
        self._release()  # the program goes on; the checkpoint travels from here
        begin = m.CkptBegin(
            rid=1,
            order=self.order,
            source=self.source,
            session=s.id,
            tenant=s.info.tenant,
            seq=seq,
            restore_key=hashlib.sha256(self.track.token.encode()).hexdigest(),
            chunk=CHUNK,
            state=state,
            regions=regions,
            blobs=blob_lists,
        )
        threading.Thread(target=self._send, args=(begin, images, new), name="gpud-ckpt", daemon=True).start()

    # ------------------------------------------------------------------ on its own thread
    def _send(self, begin: m.CkptBegin, images: list[bytes], new: dict[bytes, bytes]) -> None:
        sent = 0
        sock = None
        try:
            sock = self._connect()
            sock.send_multipart(encode(begin, images))
            reply = self._recv(sock, 1)
            ckpt, need = str(reply["ckpt"]), list(reply["need"])
            missing = [d for d in need if d not in new]
            if missing:
                raise CudaError(
                    codes.NOT_FOUND,
                    f"the standby lacks {len(missing)} chunk(s) this node no longer has "
                    "(the next checkpoint is a full one)",
                )
            rid, outstanding = 1, []
            for d in need:
                rid += 1
                sock.send_multipart(
                    encode(m.CkptChunk(rid=rid, ckpt=ckpt, digest=d, frame=0), [new[d]]),
                    copy=False,
                )
                sent += len(new[d])
                outstanding.append(rid)
                if len(outstanding) >= WINDOW * 4:
                    self._recv(sock, outstanding.pop(0))
            for r in outstanding:
                self._recv(sock, r)
            rid += 1
            sock.send_multipart(encode(m.CkptCommit(rid=rid, ckpt=ckpt)))
            self._recv(sock, rid)
        except (CudaError, zmq.ZMQError, KeyError, TypeError, ValueError) as exc:
            why = exc.message if isinstance(exc, CudaError) else f"{type(exc).__name__}: {exc}"
            if sock is not None:
                sock.close(linger=0)
            full = isinstance(exc, CudaError) and exc.code == codes.NOT_FOUND
            self.server.call_on_loop(lambda: self._sent_failed(why, full))
            return
        sock.close(linger=200)
        digests = {d for _, _, ds in begin.regions for d in ds} | {d for _, ds in begin.blobs for d in ds}
        self.server.call_on_loop(lambda: self._committed(begin.seq, digests, sent))

    # ------------------------------------------------------------------ back on the I/O loop
    def _sent_failed(self, why: str, full: bool) -> None:
        if full:
            self.track.held = set()
        self._failed(f"the standby {self.node} did not take the checkpoint: {why}")

    def _committed(self, seq: int, digests: set[bytes], sent: int) -> None:
        t, s = self.track, self.session
        t.held, t.seq, t.at, t.busy, t.error = digests, seq, time.time(), False, ""
        t.count += 1
        t.sent_bytes += sent
        t.due = time.monotonic() + t.interval_s
        stats = self.server.stats
        stats["checkpoints"] = stats.get("checkpoints", 0) + 1
        stats["checkpoint_bytes"] = stats.get("checkpoint_bytes", 0) + sent
        stats["checkpoint_pause_s"] = stats.get("checkpoint_pause_s", 0.0) + t.pause_ms / 1e3
        order = t.order or {}
        s.ext["ckpt_ack"] = {
            "seq": seq,
            "node": order.get("target", ""),
            "endpoint": order.get("endpoint", ""),
            "server_key": order.get("server_key", ""),
            "token": t.token,
        }
        log.event(
            "ckpt.done", session=s.id, standby=self.node, seq=seq, bytes=sent, chunks=len(digests), pause_ms=t.pause_ms
        )


# ---------------------------------------------------------------------- the source's side: when
class Checkpointer:
    """Starts each checkpointed session's checkpoints when due; keeps the pool's standby orders."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.orders: dict[str, dict[str, Any]] = {}  # session id -> standby order (NOTE [standby])

    def set_orders(self, orders: dict[str, dict[str, Any]]) -> None:
        self.orders = orders

    def track(self, s: Session) -> Track | None:
        t = s.ext.get("ckpt")
        if t is None:
            policy = policy_of(self.server, s)
            if policy is None:
                return None
            t = s.ext["ckpt"] = Track(interval_s=policy.interval_s, due=time.monotonic() + min(policy.interval_s, 1.0))
        return t

    def tick(self) -> None:
        now = time.monotonic()
        for s in list(self.server.sessions.values()):
            if s.closed or s.moving is not None:
                continue
            t = self.track(s)
            if t is None:
                continue
            order = self.orders.get(s.id)
            if order != t.order:
                if (order or {}).get("target") != (t.order or {}).get("target"):
                    t.held = set()  # a new standby holds nothing yet
                t.order = order
            if order is None or t.busy or now < t.due or s.messages == t.seq:
                continue  # no standby yet, one in flight, not due, or nothing ran since the last one
            Checkpoint(self.server, s, t).start()

    def dropped(self, s: Session) -> None:
        """The session ended here (closed or moved): its standby forgets it (best effort, from a thread)."""
        t = s.ext.get("ckpt")
        if not isinstance(t, Track) or t.order is None or t.seq < 0:
            return
        order, source = t.order, getattr(self.server.pool_agent, "name", "")

        def send() -> None:
            sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 2000)
            try:
                curve.secure_client(sock, str(order.get("endpoint", "")), str(order.get("server_key", "")))
                sock.connect(str(order.get("endpoint", "")))
                sock.send_multipart(encode(m.CkptDrop(session=s.id, source=source, order=str(order.get("token", "")))))
            except (zmq.ZMQError, ValueError):
                pass
            finally:
                sock.close()

        threading.Thread(target=send, name="gpud-ckpt-drop", daemon=True).start()


def checkpointer_of(server: Server) -> Checkpointer:
    if getattr(server, "checkpoints", None) is None:
        server.checkpoints = Checkpointer(server)
    return server.checkpoints


def _closed(s: Session) -> None:
    cp = getattr(s.server, "checkpoints", None)
    if cp is not None:
        cp.dropped(s)


CLOSE_HOOKS.append(_closed)


# ---------------------------------------------------------------------- the standby's side
@dataclass
class Standby:
    session: str
    tenant: str
    source: str
    order: str
    seq: int
    restore_key: str
    chunk: int
    state: m.MoveIn
    images: list[bytes]
    regions: list[list[Any]]
    blobs: list[list[Any]]
    chunks: dict[bytes, bytes]
    updated: float = field(default_factory=time.monotonic)

    @property
    def nbytes(self) -> int:
        return sum(len(c) for c in self.chunks.values()) + sum(len(i) for i in self.images)


@dataclass
class _Incoming:
    peer: bytes
    begin: m.CkptBegin
    images: list[bytes]
    need: set[bytes]
    got: dict[bytes, bytes] = field(default_factory=dict)


class Standbys:
    """The checkpoints this gpud keeps for sessions of other nodes, and their restores."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.kept: dict[str, Standby] = {}  # session id -> its latest checkpoint
        self.incoming: dict[str, _Incoming] = {}
        try:
            self.limit = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * STANDBY_SHARE)
        except (ValueError, OSError):
            self.limit = 8 << 30

    def on_ckpt_begin(self, identity: bytes, rid: int, msg: m.CkptBegin, bulk: list[Any]) -> dict[str, Any]:
        authorise_peer(self.server, "standby", msg.session, msg.tenant, msg.source, msg.order, msg.admin_token)
        if msg.state.session != msg.session or msg.state.tenant != msg.tenant:
            raise CudaError(codes.INVALID_VALUE, "ckpt_begin: the state is of another session")
        listed: set[bytes] = set()
        total = 0
        for entry in msg.regions:
            start, size, ds = entry
            if not (isinstance(size, int) and isinstance(ds, list)) or len(ds) != -(-size // msg.chunk):
                raise CudaError(codes.INVALID_VALUE, "ckpt_begin: a region's chunk list does not match its size")
            total += size
            listed.update(ds)
        for entry in msg.blobs:
            size, ds = entry
            if not (isinstance(size, int) and isinstance(ds, list)) or len(ds) != -(-size // msg.chunk):
                raise CudaError(codes.INVALID_VALUE, "ckpt_begin: a storage's chunk list does not match its size")
            total += size
            listed.update(ds)
        if not all(isinstance(d, bytes) and len(d) == 16 for d in listed):
            raise CudaError(codes.INVALID_VALUE, "ckpt_begin: a digest is not 16 bytes")
        quota = self.server.hv.tenant(msg.tenant).quota
        others = sum(k.nbytes for sid, k in self.kept.items() if sid != msg.session)
        if total > quota or others + total > self.limit:
            raise CudaError(
                codes.OUT_OF_MEMORY,
                f"ckpt_begin: {total} bytes do not fit the standby (tenant quota "
                f"{quota}, {self.limit - others} left for checkpoints)",
            )
        old = self.kept.get(msg.session)
        have = old.chunks if old is not None and old.source == msg.source else {}
        need = {d for d in listed if d not in have}
        ck = secrets.token_hex(8)
        for other, inc in list(self.incoming.items()):
            if inc.begin.session == msg.session:
                del self.incoming[other]  # a newer checkpoint of the session replaces one that never committed
        self.incoming[ck] = _Incoming(identity, msg, [bytes(b) for b in bulk], need)
        return {"ckpt": ck, "need": sorted(need)}

    def on_ckpt_chunk(self, identity: bytes, rid: int, msg: m.CkptChunk, bulk: list[Any]) -> dict[str, Any]:
        inc = self.incoming.get(msg.ckpt)
        if inc is None or inc.peer != identity:
            raise CudaError(codes.INVALID_HANDLE, f"no checkpoint {msg.ckpt!r} from this peer")
        if msg.digest not in inc.need or msg.frame >= len(bulk):
            raise CudaError(codes.INVALID_VALUE, "ckpt_chunk: a chunk the checkpoint did not ask for")
        data = bytes(bulk[msg.frame])
        if len(data) > inc.begin.chunk or _digest(data) != msg.digest:
            raise CudaError(codes.INVALID_VALUE, "ckpt_chunk: the bytes do not match their digest")
        inc.got[msg.digest] = data
        return {}

    def on_ckpt_commit(self, identity: bytes, rid: int, msg: m.CkptCommit, bulk: list[Any]) -> dict[str, Any]:
        inc = self.incoming.get(msg.ckpt)
        if inc is None or inc.peer != identity:
            raise CudaError(codes.INVALID_HANDLE, f"no checkpoint {msg.ckpt!r} from this peer")
        del self.incoming[msg.ckpt]
        if inc.need - set(inc.got):
            raise CudaError(codes.INVALID_VALUE, f"ckpt_commit: {len(inc.need - set(inc.got))} chunk(s) never came")
        b = inc.begin
        old = self.kept.get(b.session)
        have = old.chunks if old is not None and old.source == b.source else {}
        chunks: dict[bytes, bytes] = {}
        for lists in ([e[2] for e in b.regions], [e[1] for e in b.blobs]):
            for ds in lists:
                for d in ds:
                    chunks[d] = inc.got.get(d) or have[d]
        self.kept[b.session] = Standby(
            b.session,
            b.tenant,
            b.source,
            b.order,
            b.seq,
            b.restore_key,
            b.chunk,
            b.state,
            inc.images,
            [list(e) for e in b.regions],
            [list(e) for e in b.blobs],
            chunks,
        )
        log.event("ckpt.kept", session=b.session, source=b.source, seq=b.seq, chunks=len(chunks), new=len(inc.got))
        return {"seq": b.seq}

    def on_ckpt_drop(self, identity: bytes, rid: int, msg: m.CkptDrop, bulk: list[Any]) -> None:
        k = self.kept.get(msg.session)
        if k is not None and k.source == msg.source and hmac.compare_digest(k.order.encode(), msg.order.encode()):
            del self.kept[msg.session]
            log.event("ckpt.dropped", session=msg.session, source=msg.source)
        return None

    def on_restore(self, identity: bytes, rid: int, msg: m.Restore, bulk: list[Any]) -> None:
        k = self.kept.get(msg.session)
        key = hashlib.sha256(msg.token.encode()).hexdigest()
        if k is None or not hmac.compare_digest(k.restore_key.encode(), key.encode()):
            raise CudaError(
                codes.NOT_FOUND, f"restore: this node keeps no checkpoint of session {msg.session!r} under that token"
            )
        if k.tenant != msg.tenant:
            raise CudaError(codes.NOT_PERMITTED, "restore: the checkpoint belongs to another tenant")
        if any(s.id == k.session for s in self.server.sessions.values()):
            raise CudaError(codes.INVALID_VALUE, f"restore: session {k.session} is here already")
        del self.kept[msg.session]
        state = msgspec.structs.replace(k.state, messages=k.seq, reservation="")
        mi = MoveIn(self.server, state, k.images)
        try:
            for start, size, ds in k.regions:
                for i, d in enumerate(ds):
                    piece = k.chunks[d]
                    mi.write(start + i * k.chunk, piece[: min(k.chunk, size - i * k.chunk)])
            for index, (size, ds) in enumerate(k.blobs):
                for i, d in enumerate(ds):
                    mi.write_blob(index, i * k.chunk, k.chunks[d][: min(k.chunk, size - i * k.chunk)])
        except CudaError:
            mi.abort("its checkpoint did not fit")
            raise
        moves = moves_of(self.server)
        t0 = time.monotonic()

        def settled(token: str, error: CudaError | None) -> None:
            if error is not None:
                mi.abort("its tensors did not load here")
                self.server._error(identity, rid, error, None)
                return
            stats = self.server.stats
            stats["sessions_restored"] = stats.get("sessions_restored", 0) + 1
            mi.session.ext["restored_from"] = {"source": k.source, "seq": k.seq, "at": time.time()}
            log.event(
                "ckpt.restored",
                session=k.session,
                source=k.source,
                seq=k.seq,
                bytes=mi.received,
                ms=round((time.monotonic() - t0) * 1e3, 1),
            )
            self.server._reply(identity, rid, {"resume": token, "executed": k.seq}, [], None)

        def loaded() -> None:
            if mi.ready.error is not None:
                mi.abort("its modules did not load here")
                self.server._error(identity, rid, mi.ready.error, None)
                return
            moves.settle(mi, settled)

        when_all([mi.ready], lambda: self.server.call_on_loop(loaded))

    def expire(self) -> None:
        now = time.monotonic()
        for sid, k in list(self.kept.items()):
            if now - k.updated > STANDBY_IDLE_S:
                del self.kept[sid]
                log.event("ckpt.expired", session=sid, source=k.source)


def standbys_of(server: Server) -> Standbys:
    if getattr(server, "standbys", None) is None:
        server.standbys = Standbys(server)
    return server.standbys


def _peer(kind: str) -> None:
    PEER_CALLS[kind] = lambda server, identity, rid, msg, bulk: getattr(standbys_of(server), "on_" + kind)(
        identity, rid, msg, bulk
    )


for _kind in ("ckpt_begin", "ckpt_chunk", "ckpt_commit", "ckpt_drop", "restore"):
    _peer(_kind)
PEER_CALLS["pool_standby"] = lambda server, orders: checkpointer_of(server).set_orders(orders)
