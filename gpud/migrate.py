"""Live migration: a session moves to another gpud with its handles and device pointers, and its program sees a pause.

NOTE [migration]
- **When.** A move is asked for (``move_out`` from an admin, or the pool's move order for a draining node, NOTE
  [drain] in woolyhv/pool/drain.py) and happens at the session's next synchronisation point: queued work (batches)
  still runs, and the session's next *call* (anything the client waits on) is held with everything after it;
  gpud waits until the replies it owes are sent and the session's streams are idle, and moves what is left. A
  client busy on its own CPU moves at its next call. The drained node keeps serving the session until it has
  moved; a move that fails (the target refuses, the network) lets the held requests run here as if nothing
  happened.
- **What moves** (``export``): the session's arena (NOTE [session arenas]: its allocations at the same
  addresses), every allocation's bytes, node to node (never through the client or the controller), its modules
  (by image: a target that translated the same PTX before takes it from its JIT cache), their globals' contents,
  function, stream and event handles (events already recorded move as completed, with their time stamps), and the
  pending and sticky errors. Client-owned handle ids are kept, so the program's handles stay valid.
- **The wire.** The source opens a connection to the target as a client would (CURVE with the target's key),
  sends ``move_in`` (the state and the module images), then ``move_data`` messages of up to ``CHUNK`` bytes read
  straight from the session's pages (zero copy, ``WINDOW`` in flight), then ``move_commit``. The target checks
  the move is real before it creates anything: a pool order in etcd naming it as the target, or, outside a pool,
  its own admin token. It answers the commit with a random resume token.
- **The client** (NOTE [resume] in shim/client.py) gets ``moved`` (the target's endpoint and key, the resume
  token, and how many of its messages ran here) in answer to the request that was held, reconnects, says hello
  with the token, re-sends the messages that did not run here, and goes on. This gpud keeps a forwarding note
  for the old connection for ``FORWARD_S`` so a client that was idle during the move learns it at its next call.
- **What cannot move yet** (``movable`` says which and why, and the move is refused, not half done): PyTorch
  tensors (they live in the tenant's executor), host memory mapped into gpud, memory shared over CUDA IPC, a
  sleeping session, and backends without session arenas (NVIDIA: VMM ranges are designed, not built).
"""

from __future__ import annotations

import bisect
import ctypes
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import xxhash
import zmq

from gpud import log
from gpud.errors import CudaError, codes
from gpud.session import EXTENSIONS, PEER_CALLS, Event, Region, Session, SessionInfo
from gpud.streams import Marker, when_all
from proto import aten as W
from proto import curve
from proto import messages as m
from proto.codec import ProtocolError, decode_reply, encode, request_id

if TYPE_CHECKING:
    from gpud.server import Server

CHUNK = 32 << 20  # bytes per move_data message
WINDOW = 4  # move_data messages in flight
PRE_CHUNK = 4 << 20  # bytes per pre-copied chunk (and per digest compared at the freeze)
PRE_WINDOW = 8  # move_chunk messages in flight
HAVE_BATCH = 16  # chunks asked about at once (move_have)
PREP_S = 600.0  # how long a target keeps pre-copied chunks no move_in claimed
FORWARD_S = 600.0  # how long a moved session's old connection is answered with ``moved``
PEER_TIMEOUT_S = 30.0  # silence from the target that fails a move
ARRIVAL_S = 30.0  # how long a session that moved in waits for its client


def chunk_digest(view: Any) -> bytes:
    """xxh3-128 of a chunk: what pre-copies, checkpoints and the dedup store compare (16 bytes)."""
    return xxhash.xxh3_128_digest(view)


def movable(session: Session) -> str:
    """'' when the session can move now; otherwise why not, in words."""
    if session.arena is None and any(r.allocation is not None for r in session.regions.values()):
        return f"the {session.backend.kind} backend has no session arenas (its device pointers cannot be kept)"
    if session.ext.get("host_maps"):
        return "it has host memory mapped into gpud (cuMemHostRegister/cuMemHostAlloc with DEVICEMAP)"
    if session.ext.get("ipc_opened"):
        return "it has another process's memory open (CUDA IPC)"
    if session.ext.get("ipc_exported"):
        return "it handed out CUDA IPC handles to its memory (they name this node)"
    if session.ext.get("aten.aliases"):
        return "a torch tensor maps its device memory (torch.from_dlpack: NOTE [device memory aliases])"
    if session.ext.get("hv.slept"):
        return "it is asleep (its memory is in the spill store)"
    if session.closed:
        return "it has closed"
    return ""


def nudge(server: Server, session: Session) -> None:
    """Tell an idle client that its session waits for its next call (``sync_due``): its heartbeat answers with an
    ``idle`` call, so a move or checkpoint of a client busy on its own CPU happens now, not at its next call."""
    server._send(session.identity, encode(m.SyncDue()), session)


@dataclass
class Forward:
    endpoint: str
    server_key: str
    resume: str
    executed: int
    node: str
    until: float = field(default_factory=lambda: time.monotonic() + FORWARD_S)

    def reply(self, rid: int) -> m.Moved:
        return m.Moved(
            rid=rid,
            endpoint=self.endpoint,
            server_key=self.server_key,
            resume=self.resume,
            executed=self.executed,
            node=self.node,
        )


class MoveOut:
    """One session leaving this gpud (NOTE [migration]). ``done(ok, detail)`` is called on the I/O loop."""

    def __init__(
        self,
        server: Server,
        session: Session,
        endpoint: str,
        server_key: str,
        *,
        order: str = "",
        source: str = "",
        admin_token: str = "",
        node: str = "",
        reservation: str = "",
        done: Callable[[bool, dict[str, Any]], None] | None = None,
    ) -> None:
        self.server = server
        self.session = session
        self.endpoint = endpoint
        self.server_key = server_key
        self.order = order
        self.source = source
        self.admin_token = admin_token
        self.node = node
        self.reservation = reservation
        self.done = done
        self.held: list[list[Any]] = []
        self.frozen = False
        self.armed = False  # the next call freezes the session (once the pre-copy is done)
        self.sock: zmq.Socket | None = None  # to the target, opened by the pre-copy
        self.prep = ""
        self.pre_bytes = 0
        self.deduped_bytes = 0  # pre-copy chunks the target took from its own dedup store
        self.t0 = time.monotonic()
        self.t_frozen = 0.0
        self.bytes = 0

    # ------------------------------------------------------------------ on the I/O loop
    def start(self) -> None:
        why = movable(self.session)
        if why:
            self._finish(False, {"error": f"session {self.session.id} cannot move: {why}"})
            return
        s = self.session
        s.moving = self
        log.event("move.start", session=s.id, target=self.endpoint)
        regions = [(r.start, r.size) for r in s.regions.values() if r.allocation is not None]
        arena = [s.arena.base, s.arena.size] if s.arena is not None else [0, 0]
        threading.Thread(
            target=self._precopy, args=(s.arena, arena, regions), name="gpud-move-pre", daemon=True
        ).start()

    def _arm(self) -> None:
        """Pre-copied: the session's next call freezes it (and an idle client is asked for one)."""
        if self.session.closed:
            self._finish(False, {"error": "the session closed before it could move"})
            return
        self.armed = True
        nudge(self.server, self.session)

    def freeze(self) -> None:
        """The session's first call since the move was asked for arrived (and is held): move it now."""
        self.frozen = True
        self._quiesce()

    def _quiesce(self) -> None:
        s = self.session
        if s.closed:
            self._finish(False, {"error": "the session closed before it could move"})
            return
        tails = s.engine.tails()
        if tails:
            when_all(tails, lambda: self.server.call_on_loop(self._quiesce))
            return
        if s.deferred or s.loads_in_flight or s.parked:
            threading.Timer(0.005, lambda: self.server.call_on_loop(self._quiesce)).start()
            return
        why = movable(s)  # again: a request that arrived before the freeze may have changed it
        if why:
            self._fail(f"session {s.id} cannot move: {why}")
            return
        self.t_frozen = time.monotonic()
        if s.ext.get("aten") is None:
            self._export(None)
            return
        # PyTorch tensors: the tenant's executor writes them out on the session's stream (gpud/aten_exec.py)
        later = EXTENSIONS["aten_move"](s, _AtenOp([W.OP_MOVE_EXPORT, [], {}, []]), [])
        when_all(later.markers, lambda: self.server.call_on_loop(lambda: self._export(later)))

    def _export(self, later: Any) -> None:
        s = self.session
        try:
            aten, blobs = later.produce() if later is not None else (None, [])
            header, images = export(s)
        except CudaError as exc:
            self._fail(f"session {s.id} cannot move: {exc.message}")
            return
        header.order, header.source, header.admin_token = self.order, self.source, self.admin_token
        header.reservation, header.aten, header.blobs = self.reservation, aten, [memoryview(b).nbytes for b in blobs]
        regions = [(r.start, r.size) for r in s.regions.values() if r.allocation is not None]
        threading.Thread(
            target=self._transfer, args=(header, images, regions, blobs), name="gpud-move", daemon=True
        ).start()

    def _release(self) -> None:
        """The session runs here again: the requests held since the freeze run, in order, as if nothing happened."""
        self.session.moving = None
        self.frozen = False
        held, self.held = self.held, []
        for frames in held:
            self.server.handle(frames, unparked=True)

    def _fail(self, reason: str) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
            self.sock = None
        log.warning("move.failed", session=self.session.id, target=self.endpoint, reason=reason)
        self.server.stats["move_failures"] = self.server.stats.get("move_failures", 0) + 1
        self._release()
        self._finish(False, {"error": reason})

    def _moved(self, resume: str) -> None:
        s = self.session
        fwd = Forward(self.endpoint, self.server_key, resume, s.messages, self.node)
        self.server.forwards[s.identity] = fwd
        pause = time.monotonic() - self.t_frozen
        for frames in self.held:
            rid = request_id(frames[1:])  # held frames decoded once already
            if rid:
                self.server._send(s.identity, encode(fwd.reply(rid)))
        self.held = []
        s.moving = None
        self.server.close_session(s, "moved")
        self.server.stats["sessions_moved"] = self.server.stats.get("sessions_moved", 0) + 1
        self.server.stats["moved_bytes"] = self.server.stats.get("moved_bytes", 0) + self.pre_bytes + self.bytes
        self.server.stats["move_pause_s"] = self.server.stats.get("move_pause_s", 0.0) + pause
        log.event(
            "move.done",
            session=s.id,
            target=self.endpoint,
            bytes=self.pre_bytes + self.bytes,
            pause_bytes=self.bytes,
            pause_ms=round(pause * 1e3, 1),
        )
        self._finish(
            True,
            {
                "session": s.id,
                "bytes": self.pre_bytes + self.bytes,
                "pause_bytes": self.bytes,
                "deduped_bytes": self.deduped_bytes,
                "pause_s": round(pause, 4),
                "total_s": round(time.monotonic() - self.t0, 4),
                "target": self.endpoint,
            },
        )

    def _finish(self, ok: bool, detail: dict[str, Any]) -> None:
        if self.done is not None:
            self.done(ok, detail)

    # ------------------------------------------------------------------ on its own thread
    def _connect(self) -> zmq.Socket:
        return peer_socket(self.endpoint, self.server_key)

    def _precopy(self, arena: Any, span: list[int], regions: list[tuple[int, int]]) -> None:
        """While the session runs: its memory to the target in ``PRE_CHUNK`` pieces, each with its digest. A chunk
        written meanwhile is sent again at the freeze (its digest then differs); one freed meanwhile is skipped."""
        try:
            sock = self.sock = self._connect()
            sock.send_multipart(
                encode(
                    m.MovePrep(
                        rid=1,
                        order=self.order,
                        source=self.source,
                        admin_token=self.admin_token,
                        session=self.session.id,
                        tenant=self.session.info.tenant,
                        arena=span,
                        regions=[list(r) for r in regions],
                    )
                )
            )
            self.prep = str(self._recv(sock, 1)["prep"])
            rid, outstanding = 1, []
            todo = [
                (start + off, min(PRE_CHUNK, size - off))
                for start, size in (regions if arena is not None else [])
                for off in range(0, size, PRE_CHUNK)
            ]
            starts = sorted(start for start, _ in regions)
            for i in range(0, len(todo), HAVE_BATCH):
                batch = []
                for addr, n in todo[i : i + HAVE_BATCH]:
                    start = starts[bisect.bisect_right(starts, addr) - 1]
                    data = None if self.session.closed else arena.read_live(start, addr - start, n)
                    if data is not None:
                        batch.append((addr, n, chunk_digest(data), data))
                if not batch:
                    continue
                # chunks the target's dedup store holds (a base model's weights, say) are not sent
                rid += 1
                sock.send_multipart(
                    encode(m.MoveHave(rid=rid, prep=self.prep, chunks=[[a, n, d] for a, n, d, _ in batch]))
                )
                held = (list(self._recv(sock, rid).get("held", [])) + [False] * len(batch))[: len(batch)]
                for (addr, n, d, data), have in zip(batch, held, strict=True):
                    if have:
                        self.deduped_bytes += n
                        continue
                    rid += 1
                    sock.send_multipart(
                        encode(
                            m.MoveChunk(rid=rid, prep=self.prep, addr=addr, digest=d, frame=0),
                            [data],
                        ),
                        copy=False,
                    )
                    outstanding.append(rid)
                    self.pre_bytes += n
                    if len(outstanding) >= PRE_WINDOW:
                        self._recv(sock, outstanding.pop(0))
            for r in outstanding:
                self._recv(sock, r)
        except (CudaError, zmq.ZMQError, KeyError, TypeError, ValueError) as exc:
            why = exc.message if isinstance(exc, CudaError) else f"{type(exc).__name__}: {exc}"
            self.server.call_on_loop(lambda: self._fail(f"the target {self.endpoint} did not take the session: {why}"))
            return
        self.server.call_on_loop(self._arm)

    def _transfer(
        self, header: m.MoveIn, images: list[bytes], regions: list[tuple[int, int]], blobs: list[Any]
    ) -> None:
        move = ""
        sock = self.sock
        try:
            if sock is None:
                sock = self.sock = self._connect()
            digests = []
            for start, size in regions:  # the session is quiescent: what it holds now, chunk by chunk
                ds = []
                for off in range(0, size, PRE_CHUNK):
                    n = min(PRE_CHUNK, size - off)
                    ds.append(chunk_digest(memoryview((ctypes.c_char * n).from_address(start + off)).cast("B")))
                digests.append([start, size, ds])
            rid = 1000
            sock.send_multipart(
                encode(msgspec.structs.replace(header, rid=rid, prep=self.prep, digests=digests), images)
            )
            reply = self._recv(sock, rid)
            move = reply["move"]
            outstanding: list[int] = []
            for addr, size in reply.get("need", []):  # what the pre-copy did not bring, or brought stale
                off = 0
                while off < size:
                    n = min(CHUNK, size - off)
                    view = memoryview((ctypes.c_char * n).from_address(addr + off)).cast("B")
                    rid += 1
                    sock.send_multipart(
                        encode(m.MoveData(rid=rid, move=move, addr=addr + off, frame=0), [view]),
                        copy=False,
                    )
                    outstanding.append(rid)
                    self.bytes += n
                    off += n
                    if len(outstanding) >= WINDOW:
                        self._recv(sock, outstanding.pop(0))
            for index, blob in enumerate(blobs):
                view = memoryview(blob).cast("B")
                for off in range(0, view.nbytes, CHUNK):
                    piece = view[off : off + CHUNK]
                    rid += 1
                    sock.send_multipart(
                        encode(
                            m.MoveBlob(rid=rid, move=move, index=index, offset=off, frame=0),
                            [piece],
                        ),
                        copy=False,
                    )
                    outstanding.append(rid)
                    self.bytes += piece.nbytes
                    if len(outstanding) >= WINDOW:
                        self._recv(sock, outstanding.pop(0))
            for r in outstanding:
                self._recv(sock, r)
            rid += 1
            total = sum(size for _, size in regions) + sum(memoryview(b).nbytes for b in blobs)
            sock.send_multipart(encode(m.MoveCommit(rid=rid, move=move, total=total)))
            resume = self._recv(sock, rid)["resume"]
        except (CudaError, zmq.ZMQError, KeyError, TypeError, ValueError) as exc:
            why = exc.message if isinstance(exc, CudaError) else f"{type(exc).__name__}: {exc}"
            if move and sock is not None:
                try:
                    sock.send_multipart(encode(m.MoveAbort(move=move)), flags=zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
            if sock is not None:
                sock.close(linger=200)
            self.server.call_on_loop(lambda: self._fail(f"the target {self.endpoint} did not take the session: {why}"))
            return
        sock.close(linger=1000)
        self.server.call_on_loop(lambda: self._moved(resume))

    @staticmethod
    def _recv(sock: zmq.Socket, rid: int) -> dict[str, Any]:
        while True:
            try:
                frames = sock.recv_multipart()
            except zmq.Again:
                raise CudaError(codes.DEVICE_UNAVAILABLE, f"no answer in {PEER_TIMEOUT_S:.0f} s") from None
            try:
                body, _ = decode_reply(frames)
            except ProtocolError:
                continue  # not an answer of a gpud
            if body.rid != rid:
                continue
            if body.kind == "error":
                raise CudaError(body.code, body.message)
            return (body.value if body.kind == "result" else None) or {}


@dataclass
class _AtenOp:
    """An ``aten_move`` call gpud makes itself on a session's stream (NOTE [migration]; not a wire message)."""

    op: list[Any]
    frame: int = 0
    kind: str = "aten_move"
    passive: bool = True  # gpud's own, not the tenant's activity (NOTE [wire schema])

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        return []  # it reads the tensors out


def export(s: Session) -> tuple[m.MoveIn, list[bytes]]:
    """The state of a quiesced session, as a ``move_in`` body and its bulk frames (module images, globals)."""
    images: list[bytes] = []
    modules, globals_, handle_of = [], [], {}
    for h, mod in s.modules.items():
        image, fmt = s.module_images[h]
        modules.append([h, fmt, len(images)])
        images.append(image)
        handle_of[id(mod)] = h
        for name, (addr, size) in mod.globals.items():
            if size:
                globals_.append([h, name, len(images)])
                images.append(bytes(s.backend.copyout(addr, size)))
    functions = []
    for h, fn in s.functions.items():
        mh = handle_of.get(id(getattr(fn, "module", None)))
        if mh is None:
            raise CudaError(codes.INVALID_HANDLE, f"function handle {h} belongs to no module of the session")
        functions.append([h, mh, fn.name])
    streams = [[h, 0 if st.blocking else 1, st.priority] for h, st in s.engine.streams.items() if h not in (0, 2)]
    events = [[h, ev.flags, ev.marker.t_ns if ev.marker is not None else -1] for h, ev in s.events.items()]
    header = m.MoveIn(
        session=s.id,
        tenant=s.info.tenant,
        pid=s.info.pid,
        host_id=s.info.host_id,
        program=s.info.program,
        arena=[s.arena.base, s.arena.size] if s.arena is not None else [0, 0],
        regions=[[r.start, r.size] for r in s.regions.values() if r.allocation is not None],
        modules=modules,
        globals=globals_,
        functions=functions,
        streams=streams,
        events=events,
        sticky=[s.sticky_error.code, s.sticky_error.message] if s.sticky_error else [],
        pending=[s.pending_error.code, s.pending_error.message] if s.pending_error else [],
        messages=s.messages,
        moves=int(s.ext.get("moves", 0)),
    )
    return header, images


# ---------------------------------------------------------------------- the target side
def authorise_peer(
    server: Server, what: str, session: str, tenant: str, source: str, order: str, admin_token: str
) -> None:
    """A session's state may come in (``what``: "move", or "standby" for checkpoints) on a pool order naming this
    node, read back from etcd (``moves/`` or ``standby/<source>/<session>``), or, outside a pool, with this gpud's
    admin token; nothing else creates a session, or keeps one's bytes, without its tenant's credentials."""
    import hmac

    if order:
        agent = server.pool_agent
        if agent is None:
            raise CudaError(codes.NOT_PERMITTED, f"{what}: a pool order, but this gpud is in no pool")
        got = (agent.move_order if what == "move" else agent.standby_order)(source, session)
        if got is None or not hmac.compare_digest(str(got.get("token", "")).encode(), order.encode()):
            raise CudaError(codes.NOT_PERMITTED, f"{what}: no such {what} order in the pool")
        if got.get("target") != agent.name:
            raise CudaError(codes.NOT_PERMITTED, f"{what}: the {what} order names another node")
        if got.get("tenant") != tenant:
            raise CudaError(codes.NOT_PERMITTED, f"{what}: the {what} order is for another tenant")
        return
    need = server.hv.config.admin_token
    if not need:
        raise CudaError(
            codes.NOT_PERMITTED,
            f"{what}: outside a pool only with this gpud's admin token, and it has none (admin_token)",
        )
    if not hmac.compare_digest(need.encode(), admin_token.encode()):
        raise CudaError(codes.NOT_PERMITTED, f"{what}: wrong admin token for this gpud")


def peer_socket(endpoint: str, server_key: str) -> zmq.Socket:
    """A connection to another gpud, as a client's (CURVE with its key), failing after PEER_TIMEOUT_S of silence."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(PEER_TIMEOUT_S * 1000))
    sock.setsockopt(zmq.SNDTIMEO, int(PEER_TIMEOUT_S * 1000))
    try:
        curve.secure_client(sock, endpoint, server_key)
        sock.connect(endpoint)
    except (ValueError, zmq.ZMQError):
        sock.close(0)
        raise
    return sock


class MoveIn:
    """A session arriving (NOTE [migration]): made from ``move_in``, filled by ``move_data``, handed to its client
    at ``move_commit`` + the client's hello with the resume token."""

    def __init__(self, server: Server, msg: m.MoveIn, bulk: list[Any], prep: Prep | None = None) -> None:
        self.server = server
        self.id = secrets.token_hex(8)
        self.received = 0
        self.need: list[list[int]] = []  # [addr, size] the source must still send (move_data)
        self.ready = Marker()
        self.aten = msg.aten
        if len(msg.blobs) > 65536 or sum(msg.blobs) > server.hv.config.limits.parked_bytes * 64:
            raise CudaError(codes.INVALID_VALUE, "move_in: too many or too large tensor storages")
        self.blobs = [bytearray(n) for n in msg.blobs]
        info = SessionInfo(tenant=msg.tenant, pid=msg.pid, host_id=msg.host_id, program=msg.program, local=False)
        # NOTE [session devices]: the device its memory was pre-copied to, else the one gpud places it on
        backend = (
            prep.backend if prep is not None and prep.backend is not None else server.place_device(-1, msg.tenant)[0]
        )
        s = self.session = Session(server, msg.session, b"\0move-" + self.id.encode(), info, backend)
        base, size = msg.arena
        total = sum(sz for _, sz in msg.regions)
        server.hv.admit(msg.tenant, "", msg.tenant)  # room for it (the move order vouched for the tenant)
        server.hv.on_open(s)
        reserved = placed = 0
        try:
            if prep is not None and prep.arena is not None and prep.arena.base == base:
                s.arena, prep.arena = prep.arena, None  # what the pre-copy reserved and wrote (NOTE [migration])
                keep = {(int(a), int(n)) for a, n in msg.regions}
                for start, a in list(prep.allocs.items()):
                    if (start, a.size) not in keep:  # freed (or re-made) since the pre-copy began
                        s.backend.free(prep.allocs.pop(start))
            elif msg.regions:
                if not base:
                    raise CudaError(codes.NOT_SUPPORTED, "the session has allocations but no arena")
                try:
                    s.arena = s.backend.new_arena(base)
                except CudaError as exc:
                    raise CudaError(
                        codes.INVALID_VALUE,
                        f"the session's address range 0x{base:x}+{size} is not free on this node: {exc.message}",
                    ) from None
            server.reserve_memory(s, total)  # the tenant's quota here
            reserved = total
            for start, sz in msg.regions:
                a = (
                    prep.allocs.pop(start)
                    if prep is not None and start in prep.allocs
                    else s.backend.alloc(sz, s.arena, at=start)
                )
                s._add_region(Region(a.addr, a.size, a))
                s.memory_used += a.size
                placed += a.size
            for h, flags, prio in msg.streams:
                s.engine.create(int(h), int(flags), int(prio))
            if msg.digests or prep is not None:
                self._fill(msg, prep.written if prep is not None else {})
        except BaseException:
            if prep is not None:
                prep.release()
            s.closed = True
            s.free_all()  # gives back what was placed, and the arena
            if reserved > placed:
                server.release_memory(s, reserved - placed)
            raise
        for h, flags, t_ns in msg.events:
            mk = None
            if t_ns >= 0:
                mk = Marker()
                mk.complete()
                mk.t_ns = int(t_ns)
            s.events[int(h)] = Event(flags=int(flags), marker=mk)
        if msg.sticky:
            s.sticky_error = CudaError(int(msg.sticky[0]), str(msg.sticky[1]))
        if msg.pending:
            s.pending_error = CudaError(int(msg.pending[0]), str(msg.pending[1]))
        s.messages = msg.messages
        s.ext["moves"] = msg.moves + 1
        if msg.reservation:
            s.ext["pool.reservation"] = msg.reservation
        if msg.aten is not None:  # start the tenant's executor now, while the bytes travel (NOTE [executors])
            EXTENSIONS["aten_move"](s, _AtenOp([W.OP_SYNC, [], {}, []]), [])
        images = [bytes(b) for b in bulk]
        mods = [(int(h), str(fmt), images[int(f)]) for h, fmt, f in msg.modules]
        globs = [(int(h), str(name), images[int(f)]) for h, name, f in msg.globals]
        funcs = [(int(h), int(mh), str(name)) for h, mh, name in msg.functions]
        server.run_async(lambda: self._load(mods, globs, funcs))

    def _fill(self, msg: m.MoveIn, written: dict[int, bytes]) -> None:
        """Each chunk the pre-copy wrote in place whose digest is still the session's stands; ``need`` lists the
        rest (written since, or never sent), which the source sends while the session is held."""
        listed = {}
        for entry in msg.digests:
            start, size, ds = entry
            if not (isinstance(start, int) and isinstance(size, int) and isinstance(ds, list)) or len(ds) != -(
                -size // PRE_CHUNK
            ):
                raise CudaError(codes.INVALID_VALUE, "move_in: an allocation's digests do not match its size")
            listed[start] = (size, ds)
        for start, size in msg.regions:
            size_ds = listed.get(start)
            ds = size_ds[1] if size_ds is not None and size_ds[0] == size else None
            if ds is None:
                self.need.append([start, size])
                continue
            for i, d in enumerate(ds):
                off, n = i * PRE_CHUNK, min(PRE_CHUNK, size - i * PRE_CHUNK)
                if isinstance(d, bytes) and written.get(start + off) == d:
                    self.received += n
                elif off and self.need and self.need[-1][0] + self.need[-1][1] == start + off:  # same allocation
                    self.need[-1][1] += n
                else:
                    self.need.append([start + off, n])

    def _load(
        self, mods: list[tuple[int, str, bytes]], globs: list[tuple[int, str, bytes]], funcs: list[tuple[int, int, str]]
    ) -> None:
        """Modules, globals and functions, off the I/O loop (a module not in the JIT cache compiles)."""
        s = self.session
        try:
            for h, fmt, image in mods:
                mod = s.backend.load_module(image, fmt)
                s.modules[h] = mod
                s.module_images[h] = (image, fmt)
                for addr, size in mod.globals.values():
                    if size and addr not in s.regions:
                        s._add_region(Region(addr, size, None))
            for h, name, data in globs:
                addr, size = s.modules[h].globals[name]
                s.backend.copyin(addr, data[:size])
            for h, mh, name in funcs:
                fn = s.backend.get_function(s.modules[mh], name)
                fn.module = s.modules[mh]
                s.functions[h] = fn
            self.ready.complete()
        except CudaError as exc:
            self.ready.complete(exc)
        except Exception as exc:  # noqa: BLE001 - reported to the source, which keeps the session
            self.ready.complete(CudaError(codes.UNKNOWN, f"{type(exc).__name__}: {exc}"))

    def write(self, addr: int, data: Any) -> None:
        n = data.nbytes if isinstance(data, memoryview) else len(data)
        r = self.session.find(addr, n, "move_data")
        if r.allocation is None:
            raise CudaError(codes.INVALID_VALUE, "move_data: not an allocation")
        self.session.backend.copyin(addr, data)
        self.received += n

    def write_blob(self, index: int, offset: int, data: Any) -> None:
        view = memoryview(data).cast("B")
        if index >= len(self.blobs) or offset + view.nbytes > len(self.blobs[index]):
            raise CudaError(
                codes.INVALID_VALUE, f"move_blob: {view.nbytes} bytes at {offset} of blob {index} do not fit"
            )
        self.blobs[index][offset : offset + view.nbytes] = view
        self.received += view.nbytes

    def abort(self, why: str) -> None:
        self.server.close_session(self.session, f"move-aborted: {why}")


@dataclass
class Prep:
    """A session that will move here, while it still runs at its source: its arena and allocations (as the
    pre-copy began) and the digest of each chunk written into them, until its ``move_in`` takes them over."""

    peer: bytes
    session: str
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    arena: Any = None
    allocs: dict[int, Any] = field(default_factory=dict)  # start -> backend Allocation
    written: dict[int, bytes] = field(default_factory=dict)  # chunk address -> digest of what is there
    starts: list[int] = field(default_factory=list)  # sorted starts of ``allocs``
    until: float = field(default_factory=lambda: time.monotonic() + PREP_S)
    backend: Any = None  # the device the session will run on here (NOTE [session devices])

    def release(self) -> None:
        """Give back what no session took over."""
        for a in self.allocs.values():
            self.backend.free(a)
        self.allocs.clear()
        if self.arena is not None:
            self.arena.close()
            self.arena = None


class Moves:
    """The ``move_*`` calls of one gpud: ``move_out`` (an admin asks this gpud to move a session away) and the
    target's side, ``move_in`` / ``move_data`` / ``move_commit`` / ``move_abort`` (from a peer gpud)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.incoming: dict[str, MoveIn] = {}  # move id -> arriving session
        self.preps: dict[str, Prep] = {}  # prep id -> chunks pre-copied for a session that will move here
        self.resumable: dict[str, tuple[Session, float]] = {}  # resume token -> (session, deadline)
        self.by_peer: dict[bytes, set[str]] = {}

    # ------------------------------------------------------------------ source
    def on_move_out(self, identity: bytes, rid: int, msg: m.MoveOut, bulk: list[Any]) -> None:
        self.server.hv.admit_admin(msg.token)
        session = next((s for s in self.server.sessions.values() if s.id == msg.session), None)
        if session is None:
            raise CudaError(codes.NOT_FOUND, f"no session {msg.session!r} on this gpud")
        if session.moving is not None:
            raise CudaError(codes.NOT_READY, f"session {msg.session} is moving already")

        def done(ok: bool, detail: dict[str, Any]) -> None:
            if ok:
                self.server._reply(identity, rid, detail, [], None)
            else:
                self.server._error(identity, rid, CudaError(codes.NOT_READY, detail.get("error", "move failed")), None)

        self.move(session, msg.endpoint, msg.server_key, admin_token=msg.target_token, done=done)

    def move(self, session: Session, endpoint: str, server_key: str, **kw: Any) -> MoveOut:
        mv = MoveOut(self.server, session, endpoint, server_key, **kw)
        mv.start()
        return mv

    # ------------------------------------------------------------------ target
    def _authorise(self, msg: m.MoveIn | m.MovePrep) -> None:
        authorise_peer(self.server, "move", msg.session, msg.tenant, msg.source, msg.order, msg.admin_token)

    def on_move_in(self, identity: bytes, rid: int, msg: m.MoveIn, bulk: list[Any]) -> None:
        self._authorise(msg)
        if any(s.id == msg.session for s in self.server.sessions.values()) or any(
            mi.session.id == msg.session for mi in self.incoming.values()
        ):
            raise CudaError(codes.INVALID_VALUE, f"move_in: session {msg.session} is here already")
        prep = None
        if msg.prep:
            prep = self.preps.pop(msg.prep, None)
            if prep is None or prep.peer != identity or prep.session != msg.session:
                if prep is not None:
                    self.preps[msg.prep] = prep
                raise CudaError(codes.INVALID_HANDLE, f"move_in: no prep {msg.prep!r} of this session from this peer")
        mi = MoveIn(self.server, msg, bulk, prep)
        if prep is not None:
            prep.release()  # what the session did not keep
        mi.peer = identity  # type: ignore[attr-defined]
        self.incoming[mi.id] = mi
        self.by_peer.setdefault(identity, set()).add(mi.id)

        def loaded() -> None:
            if mi.ready.error is not None:
                self._drop(mi, "its modules did not load here")
                self.server._error(identity, rid, mi.ready.error, None)
            else:
                self.server._reply(identity, rid, {"move": mi.id, "need": mi.need}, [], None)

        when_all([mi.ready], lambda: self.server.call_on_loop(loaded))

    def on_move_prep(self, identity: bytes, rid: int, msg: m.MovePrep, bulk: list[Any]) -> dict[str, Any]:
        self._authorise(msg)
        if any(s.id == msg.session for s in self.server.sessions.values()):
            raise CudaError(codes.INVALID_VALUE, f"move_prep: session {msg.session} is here already")
        for pid, p in list(self.preps.items()):
            if p.session == msg.session:
                self.preps.pop(pid).release()  # a newer move of the same session
        quota = self.server.hv.tenant(msg.tenant).quota
        if sum(n for _, n in msg.regions) > quota:
            raise CudaError(
                codes.OUT_OF_MEMORY, f"move_prep: the session holds more than tenant {msg.tenant!r} may here"
            )
        prep = Prep(identity, msg.session)
        backend = prep.backend = self.server.place_device(-1, msg.tenant)[0]
        if msg.regions:
            base, size = msg.arena
            try:
                prep.arena = backend.new_arena(base) if base else None
                if prep.arena is None:
                    raise CudaError(codes.NOT_SUPPORTED, "the session has allocations but no arena")
                for start, n in msg.regions:
                    prep.allocs[int(start)] = backend.alloc(int(n), prep.arena, at=int(start))
                prep.starts = sorted(prep.allocs)
            except CudaError as exc:
                prep.release()
                raise CudaError(
                    codes.INVALID_VALUE,
                    f"move_prep: the session's memory (0x{base:x}+{size}) cannot be placed here: {exc.message}",
                ) from None
        self.preps[prep.id] = prep
        return {"prep": prep.id}

    def on_move_chunk(self, identity: bytes, rid: int, msg: m.MoveChunk, bulk: list[Any]) -> dict[str, Any]:
        if msg.frame >= len(bulk):
            raise CudaError(codes.INVALID_VALUE, "move_chunk: no bulk frame")
        data = bulk[msg.frame]
        n = len(data) if isinstance(data, bytes) else memoryview(data).nbytes
        prep = self._prep_chunk(identity, msg.prep, msg.addr, n)
        if chunk_digest(data) != msg.digest:
            return {"kept": False}  # torn while it was read: sent again at the freeze
        prep.backend.copyin(msg.addr, data)
        prep.written[msg.addr] = msg.digest
        return {"kept": True}

    def _prep_chunk(self, identity: bytes, pid: str, addr: int, n: int) -> Prep:
        prep = self.preps.get(pid)
        if prep is None or prep.peer != identity:
            raise CudaError(codes.INVALID_HANDLE, f"no prep {pid!r} from this peer")
        i = bisect.bisect_right(prep.starts, addr) - 1
        a = prep.allocs.get(prep.starts[i]) if i >= 0 else None
        if a is None or not 0 < n <= PRE_CHUNK or addr + n > a.addr + a.size:
            raise CudaError(codes.INVALID_VALUE, "move_chunk: not a chunk of the session's memory")
        return prep

    def on_move_have(self, identity: bytes, rid: int, msg: m.MoveHave, bulk: list[Any]) -> dict[str, Any]:
        """NOTE [migration]: chunks of a moving session this node's dedup store holds are copied from there."""
        dedup = self.server.hv.dedup
        held = []
        for entry in msg.chunks:
            addr, n, d = entry
            if not (isinstance(addr, int) and isinstance(n, int) and isinstance(d, bytes)):
                raise CudaError(codes.INVALID_VALUE, "move_have: each chunk is [addr, size, digest]")
            prep = self._prep_chunk(identity, msg.prep, addr, n)
            with dedup.lock:
                c = dedup.store.get(("xxh3_128", d, n))
                if c is not None:
                    prep.backend.copyin_from(addr, n, c.mem.addr)
                    prep.written[addr] = d
            held.append(c is not None)
        return {"held": held}

    def _get(self, identity: bytes, move: str) -> MoveIn:
        mi = self.incoming.get(move)
        if mi is None or getattr(mi, "peer", None) != identity:
            raise CudaError(codes.INVALID_HANDLE, f"no move {move!r} from this peer")
        return mi

    def on_move_data(self, identity: bytes, rid: int, msg: m.MoveData, bulk: list[Any]) -> dict[str, Any]:
        mi = self._get(identity, msg.move)
        if msg.frame >= len(bulk):
            raise CudaError(codes.INVALID_VALUE, "move_data: no bulk frame")
        mi.write(msg.addr, bulk[msg.frame])
        return {}

    def on_move_blob(self, identity: bytes, rid: int, msg: m.MoveBlob, bulk: list[Any]) -> dict[str, Any]:
        mi = self._get(identity, msg.move)
        if msg.frame >= len(bulk):
            raise CudaError(codes.INVALID_VALUE, "move_blob: no bulk frame")
        mi.write_blob(msg.index, msg.offset, bulk[msg.frame])
        return {}

    def on_move_commit(self, identity: bytes, rid: int, msg: m.MoveCommit, bulk: list[Any]) -> None:
        mi = self._get(identity, msg.move)
        expect = mi.session.memory_used + sum(len(b) for b in mi.blobs)
        if mi.received != msg.total or msg.total != expect:
            self._drop(mi, "incomplete")
            raise CudaError(
                codes.INVALID_VALUE,
                f"move_commit: {mi.received} bytes arrived, {msg.total} were sent, the session holds {expect}",
            )

        def settled(token: str, error: CudaError | None) -> None:
            if error is not None:
                self._drop(mi, "its tensors did not load here")
                self.server._error(identity, rid, error, None)
                return
            self.incoming.pop(mi.id, None)
            self.by_peer.get(identity, set()).discard(mi.id)
            self.server._reply(identity, rid, {"resume": token}, [], None)

        self.settle(mi, settled)

    def settle(self, mi: MoveIn, then: Callable[[str, CudaError | None], None]) -> None:
        """Finish an arrived session (its tensors into its executor), list it, and hand ``then`` the one-time
        resume token its client will say hello with (on the I/O loop). Also restores a checkpoint."""

        def adopt() -> None:
            token = secrets.token_hex(16)
            s = mi.session
            s.last_seen = time.monotonic()
            self.resumable[token] = (s, time.monotonic() + ARRIVAL_S)
            self.server.sessions[s.identity] = s  # listed (and counted) from now; its client takes it over at hello
            log.event("move.arrived", session=s.id, tenant=s.info.tenant, bytes=mi.received)
            then(token, None)

        if mi.aten is None:
            adopt()
            return
        later = EXTENSIONS["aten_move"](mi.session, _AtenOp([W.OP_MOVE_IMPORT, [mi.aten], {}, []]), mi.blobs)

        def imported() -> None:
            try:
                later.produce()
            except CudaError as exc:
                then("", exc)
                return
            mi.blobs = []
            adopt()

        when_all(later.markers, lambda: self.server.call_on_loop(imported))

    def on_move_abort(self, identity: bytes, rid: int, msg: m.MoveAbort, bulk: list[Any]) -> None:
        mi = self.incoming.get(msg.move)
        if mi is not None and getattr(mi, "peer", None) == identity:
            self._drop(mi, "the source aborted")
        return None

    def _drop(self, mi: MoveIn, why: str) -> None:
        self.incoming.pop(mi.id, None)
        mi.abort(why)

    def resume(self, token: str, tenant: str) -> Session:
        """The session a client says hello to with its resume token (once)."""
        got = self.resumable.pop(token, None)
        if got is None:
            raise CudaError(codes.NOT_FOUND, "resume: no session moved here under this token (did it time out?)")
        s = got[0]
        if s.info.tenant != tenant:
            self.resumable[token] = got
            raise CudaError(codes.NOT_PERMITTED, "resume: the session belongs to another tenant")
        return s

    def expire(self) -> None:
        now = time.monotonic()
        for pid, p in list(self.preps.items()):
            if now > p.until:
                self.preps.pop(pid).release()
        for token, (s, deadline) in list(self.resumable.items()):
            if now > deadline:
                del self.resumable[token]
                self.server.close_session(s, "moved-in-client-never-came")
        for ident, fwd in list(self.server.forwards.items()):
            if now > fwd.until:
                del self.server.forwards[ident]


def moves_of(server: Server) -> Moves:
    if server.moves is None:
        server.moves = Moves(server)
    return server.moves


def _peer(kind: str) -> None:
    PEER_CALLS[kind] = lambda server, identity, rid, msg, bulk: getattr(moves_of(server), "on_" + kind)(
        identity, rid, msg, bulk
    )


for _kind in (
    "move_out",
    "move_prep",
    "move_chunk",
    "move_have",
    "move_in",
    "move_data",
    "move_blob",
    "move_commit",
    "move_abort",
):
    _peer(_kind)
PEER_CALLS["resume"] = lambda server, identity, rid, msg, bulk: moves_of(server).resume(msg.resume, msg.tenant)


def _pool_move(server: Server, order: Any, report: Callable[[bool, dict[str, Any]], None], tries: int = 0) -> None:
    """NOTE [drain]: the pool ordered a session of this node to ``order.target`` (on the I/O loop)."""
    session = next((s for s in server.sessions.values() if s.id == order.session), None)
    if session is None:
        report(False, {"error": f"no session {order.session} on this node (it ended?)"})
        return
    if session.moving is not None:  # a checkpoint (or an admin's move) is under way: the order waits for it
        if tries >= 600:
            report(False, {"error": f"session {order.session} stayed busy with another move or checkpoint"})
            return
        threading.Timer(0.2, lambda: server.call_on_loop(lambda: _pool_move(server, order, report, tries + 1))).start()
        return
    moves_of(server).move(
        session,
        order.endpoint,
        order.server_key,
        order=order.token,
        source=order.source,
        node=order.target,
        reservation=order.reservation,
        done=report,
    )


PEER_CALLS["pool_move"] = _pool_move
