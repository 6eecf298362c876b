"""``wooly controller``: places sessions on the pool's nodes, holding no state beside etcd.

NOTE [controller]: several controllers may run. Each registers ``controllers/<id>`` under its lease and campaigns
for ``leader`` (a transaction that creates the key under its lease only if it does not exist; the others poll it
every ``ttl/5`` seconds). Only the leader places: a follower answers a placement with ``redirect`` and the
leader's endpoint, so a client given any controller (or a Service in front of them) reaches the leader. When the
leader dies its lease lapses and another takes the key within one TTL; waiting requests on the old leader are
lost with it, and their clients ask again (woolyhv/pool/client.py retries on silence).

A placement: validate the request (``PlaceRequest``), decide on the watched view (NOTE [placement]), then reserve
in one transaction: compare the winner's ``ledger`` revision and ``nodes`` create revision (and the tenant's
counter when it has a pool quota), put the new ledger under the node's lease, the counter, and the decision. A
lost race (another controller, the node's agent) re-reads and decides again; a node whose lease is gone leaves the
view. A request that fits nowhere waits, ordered by priority, and is tried again whenever the view changes; at
its deadline it fails with ``CUDA_ERROR_OUT_OF_MEMORY`` (memory or quota) or ``CUDA_ERROR_NO_DEVICE`` (no node of
that kind) and the decision's one-line reason.

The wire is gpud's framing (proto/codec.py: version frame + msgpack map) over a ROUTER socket, CURVE on tcp unless
``--insecure`` (the client must not be redirected to a node by someone in the middle). Admin calls (cordon,
uncordon, quota) need the admin token when one is set.
"""

from __future__ import annotations

import gc
import hmac
import json
import logging
import os
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import msgspec
import zmq
from pydantic import ValidationError

from proto import curve
from proto import errors as E
from proto.codec import ProtocolError, encode_body, unpack_body
from woolyhv.pool import keys
from woolyhv.pool import protocol as P
from woolyhv.pool.model import Cordon, Ledger, PlaceRequest, Reservation
from woolyhv.pool.placement import POLICIES, summary
from woolyhv.pool.store import Store, StoreError, cmp_create, cmp_mod, op_get, op_put, range_kvs
from woolyhv.pool.view import PoolView

log = logging.getLogger("wooly.controller")

MAX_MESSAGE = 1 << 20
DECISION_TTL = 3600
CLAIM_S = 60.0
RECENT = 10_000
FLUSH_IDLE_S = 0.1
FLUSH_MAX_S = 5.0
MAX_BATCH = 32  # placements per transaction (etcd allows 128 operations in one)


@dataclass(order=True)
class Pending:
    sort_key: tuple[int, float]
    identity: bytes = field(compare=False)
    rid: int = field(compare=False)
    req: PlaceRequest = field(compare=False)
    deadline: float = field(compare=False)
    did: str = field(compare=False)
    since: float = field(compare=False)
    attempts: int = field(default=0, compare=False)
    last: dict[str, Any] = field(default_factory=dict, compare=False)


class Controller:
    def __init__(
        self,
        store: Store,
        listen: str,
        *,
        advertise: str = "",
        policy: str = "binpack",
        ttl: int = 5,
        insecure: bool = False,
        admin_token: str = "",
        metrics_port: int = 0,
        claim_s: float = CLAIM_S,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"--policy={policy!r}: expected one of {', '.join(POLICIES)}")
        self.store = store
        self.policy = policy
        self.ttl = ttl
        self.claim_s = claim_s
        self.admin_token = admin_token
        self.id = f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.view = PoolView(store)
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.SNDHWM, 10_000)
        if curve.is_tcp(listen) and not insecure:
            curve.secure_server(self.sock)
        try:
            self.sock.bind(listen)
        except zmq.ZMQError as exc:
            self.sock.close(0)
            raise ValueError(f"--listen {listen}: cannot listen there ({exc.strerror})") from None
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.advertise = advertise or self.endpoint.replace("0.0.0.0", "127.0.0.1")
        self.lease = 0
        self.is_leader = False
        self.pending: list[Pending] = []
        self._incoming: list[Pending] = []
        self._seen_version = -1
        self._next_retry = 0.0
        self._stop = threading.Event()
        self.recent: dict[str, dict[str, Any]] = {}  # the last RECENT decisions, for explain before etcd has them
        self._decisions: queue.Queue[dict[str, Any]] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._last_activity = 0.0
        self.stats = {
            "placed": 0,
            "waited": 0,
            "failed": 0,
            "conflicts": 0,
            "redirects": 0,
            "requests": 0,
            "step_errors": 0,
        }
        self._step_errors: set[str] = set()
        self.latency_ms: list[float] = []
        from woolyhv.pool.drain import Drainer

        self.drainer = Drainer(self)  # NOTE [drain]
        from woolyhv.pool.standby import Planner

        self.standbys = Planner(self)  # NOTE [standby]
        self.metrics = None
        if metrics_port:
            from woolyhv.pool.metrics import serve

            self.metrics = serve(self, metrics_port)

    # ------------------------------------------------------------------ lifecycle
    def serve_forever(self) -> None:
        self.view.start()
        # The view just read (thousands of inventories) lives as long as the controller: keep the cyclic
        # collector from walking it on every full collection (a 10-20 ms pause in the placement tail).
        gc.freeze()
        self.lease = self.store.grant(self.ttl)
        self.store.put(
            keys.controller(self.store, self.id),
            {"id": self.id, "endpoint": self.advertise, "started": time.time()},
            self.lease,
        )
        elector = threading.Thread(target=self._elect, name="election", daemon=True)
        elector.start()
        self._writer = threading.Thread(target=self._write_decisions, name="decisions", daemon=True)
        self._writer.start()
        log.info(
            "controller %s listening on %s (advertised %s), policy %s",
            self.id,
            self.endpoint,
            self.advertise,
            self.policy,
        )
        try:
            while not self._stop.is_set():
                if self.sock.poll(50, zmq.POLLIN):
                    for _ in range(256):
                        try:
                            frames = self.sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._handle(frames)
                if self._incoming:
                    self._guarded("placement", self._place_incoming)
                self._guarded("waiting requests", self._retry_pending)
                self._guarded("drain", self.drainer.step)
                self._guarded("standbys", self.standbys.step)
        finally:
            self.shutdown()

    def stop(self) -> None:
        self._stop.set()

    def _guarded(self, what: str, step: Any) -> None:
        """One background step of the loop; a failure is logged (once per message) and the loop goes on: a bug in
        a drain or standby step must not take the pool's placements down with it."""
        try:
            step()
        except StoreError as exc:
            log.warning("%s: the pool's store is unavailable: %s", what, exc)
        except Exception as exc:  # noqa: BLE001 - logged; the next round tries again
            key = f"{what}: {type(exc).__name__}: {exc}"
            if key not in self._step_errors:
                self._step_errors.add(key)
                log.exception("%s step failed (the controller goes on)", what)
            self.stats["step_errors"] += 1

    def shutdown(self) -> None:
        self.view.stop()
        for p in self.pending:
            self._send(p.identity, P.Redirect(rid=p.rid, message="controller stopping"))
        self.pending.clear()
        if self.lease:
            self.store.revoke(self.lease)  # leadership passes at once
            self.lease = 0
        self._stop.set()
        if self._writer is not None:
            self._writer.join(5)  # the last decisions reach etcd
        self.sock.close(0)

    def _elect(self) -> None:
        lkey = keys.leader(self.store)
        me = {"id": self.id, "endpoint": self.advertise, "since": time.time()}
        next_refresh = time.monotonic() + self.ttl / 3
        while not self._stop.is_set():
            try:
                if time.monotonic() >= next_refresh:
                    if self.store.keepalive(self.lease) <= 0:  # our lease lapsed (we stalled): start over
                        self.is_leader = False
                        self.lease = self.store.grant(self.ttl)
                        self.store.put(
                            keys.controller(self.store, self.id),
                            {"id": self.id, "endpoint": self.advertise, "started": time.time()},
                            self.lease,
                        )
                    next_refresh = time.monotonic() + self.ttl / 3
                if not self.is_leader:
                    ok, _, _ = self.store.txn([cmp_create(lkey, 0)], [op_put(lkey, me, self.lease)])
                    if ok:
                        self.is_leader = True
                        log.info("controller %s is the leader", self.id)
                else:
                    kv = self.store.get(lkey)
                    if kv is None or kv.lease != self.lease:
                        self.is_leader = False
                        log.warning("controller %s lost the lead", self.id)
            except StoreError as exc:
                log.warning("election: %s", exc)
            self._stop.wait(max(0.05, self.ttl / 10))

    # ------------------------------------------------------------------ wire
    def _send(self, identity: bytes, body: dict[str, Any] | msgspec.Struct) -> None:
        if isinstance(body, msgspec.Struct):
            body = P.as_map(body)
        try:
            self.sock.send_multipart([identity, *encode_body(body)], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the client went away

    def _handle(self, frames: list[bytes]) -> None:
        self.stats["requests"] += 1
        identity, rest = frames[0], frames[1:]
        rid = 0
        try:
            body, _ = unpack_body(rest)
            rid = body.get("rid", 0) if isinstance(body.get("rid", 0), int) else 0
            req = P.decode_request(body)  # checked against its Struct (woolyhv/pool/protocol.py)
            reply = _HANDLERS[type(req)](self, identity, req)
        except ProtocolError as exc:
            reply = _error(rid, exc.code, str(exc))
        except StoreError as exc:
            reply = _error(rid, E.DEVICE_UNAVAILABLE, f"the pool's store is unavailable: {exc}")
        except Exception as exc:  # noqa: BLE001 - no request may take the controller down
            log.exception("request crashed")
            reply = _error(rid, E.UNKNOWN, f"controller error: {type(exc).__name__}: {exc}")
        if reply is not None:
            self._send(identity, _with_rid(reply, rid))

    def _admin(self, req: P.Request) -> None:
        if self.admin_token and not hmac.compare_digest(req.token.encode(), self.admin_token.encode()):
            raise ProtocolError("this call needs the controller's admin token (WOOLY_ADMIN_TOKEN)", E.NOT_PERMITTED)

    # ------------------------------------------------------------------ placement
    def on_place(self, identity: bytes, msg: P.Place) -> P.Redirect | None:
        rid = msg.rid
        try:
            req = PlaceRequest.model_validate(msg.request)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ProtocolError(
                f"invalid placement request: {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from None
        if not self.is_leader:
            self.stats["redirects"] += 1
            with self.view.lock:
                leader = (self.view.leader or {}).get("endpoint", "")
            return P.Redirect(leader=leader, message="not the leader")
        now = time.monotonic()
        self._incoming.append(
            Pending((-req.priority, now), identity, rid, req, now + req.deadline_s, uuid.uuid4().hex[:16], now)
        )
        return None  # answered by _place_incoming once the socket is drained

    def _place_incoming(self) -> None:
        """Place the requests that arrived since the last round: up to MAX_BATCH at a time in one transaction
        (NOTE [group commit]); those that fit nowhere start waiting."""
        incoming, self._incoming = self._incoming, []
        incoming.sort()
        self._last_activity = time.monotonic()
        while incoming:
            chunk, incoming = incoming[:MAX_BATCH], incoming[MAX_BATCH:]
            replies = self._attempt_batch(chunk) if len(chunk) > 1 else [self._attempt(chunk[0])]
            for p, reply in zip(chunk, replies, strict=True):
                if reply is not None:
                    self._send(p.identity, _with_rid(reply, p.rid))
                    continue
                self.stats["waited"] += 1
                self.pending.append(p)
                self._record(p.last | {"outcome": "wait"})
                log.info("decision %s: waiting: %s", p.did, p.last.get("reason"))
                self._send(p.identity, P.Waiting(rid=p.rid, decision=p.did, reason=str(p.last.get("reason", ""))))
        self.pending.sort()

    def _attempt_batch(self, ps: list[Pending]) -> list[P.Placed | None]:
        """NOTE [group commit]: decide each request in turn on the view, each seeing the reservations staged for
        the ones before it, then commit them all in one transaction (every touched ledger compared, as in
        ``_attempt``). A lost race falls back to one transaction per request. Tenants with a pool quota take the
        single path (their counter makes concurrent reservations of one tenant conflict by design)."""
        t0 = time.perf_counter()
        staged: dict[str, dict[str, Any]] = {}
        decided: list[tuple[Pending, dict[str, Any] | None, str, str]] = []
        with self.view.lock:
            for p in ps:
                if p.req.tenant in self.view.quotas:
                    decided.append((p, None, "single", ""))
                    continue
                p.attempts += 1
                d = self.view.table.decide(
                    p.req, self.view.nodes, policy=self.policy, decision_id=p.did, content_index=self.view.content_index
                )
                d["controller"] = self.id
                p.last = d
                if d["outcome"] != "placed":
                    decided.append((p, None, "", ""))
                    continue
                v = self.view.nodes[d["node"]]
                st = staged.get(d["node"])
                if st is None:
                    st = staged[d["node"]] = {
                        "orig": (v.ledger, v.ledger_rev),
                        "node_rev": v.node_rev,
                        "lease": v.inv.lease,
                        "ledger": v.ledger.model_copy(deep=True) if v.ledger else Ledger(node=d["node"]),
                    }
                    v.ledger = st["ledger"]  # tentative: the next decisions of this batch see it
                res = self._reservation(p, d)
                st["ledger"].reservations[res.id] = res
                self.view.touch(d["node"])
                decided.append((p, d, v.inv.endpoint, v.inv.server_key))
        ok = True
        if staged:
            compare, success = [], []
            for name, st in staged.items():
                lkey = keys.ledger(self.store, name)
                compare += [cmp_mod(lkey, st["orig"][1]), cmp_create(keys.node(self.store, name), st["node_rev"])]
                success.append(op_put(lkey, st["ledger"], st["lease"]))
            try:
                ok, rev, _ = self.store.txn(compare, success)
            except StoreError as exc:
                if "lease" not in str(exc).lower():
                    raise
                ok = False  # a node left meanwhile: the single path finds out which
            with self.view.lock:
                for name, st in staged.items():
                    v = self.view.nodes.get(name)
                    if ok:
                        self.view.set_ledger(name, st["ledger"], rev)
                    elif v is not None and v.ledger is st["ledger"]:
                        v.ledger, v.ledger_rev = st["orig"]
                        self.view.touch(name)
        if not ok:
            self.stats["conflicts"] += 1
            return [self._attempt(p) for p in ps]
        replies: list[P.Placed | None] = []
        ms = (time.perf_counter() - t0) * 1e3
        for p, d, endpoint, key in decided:
            if endpoint == "single":
                replies.append(self._attempt(p))
            elif d is None:
                replies.append(None)
            else:
                replies.append(self._placed(p, d, endpoint, key, ms))
        return replies

    def _reservation(self, p: Pending, d: dict[str, Any]) -> Reservation:
        res = Reservation(
            id=uuid.uuid4().hex[:16],
            tenant=p.req.tenant,
            bytes=p.req.memory,
            device=d["device"],
            created=time.time(),
            claim_by=time.time() + self.claim_s,
            decision=p.did,
        )
        d.update(reservation=res.id, waited_s=round(time.monotonic() - p.since, 3), attempts=p.attempts)
        return res

    def _placed(self, p: Pending, d: dict[str, Any], endpoint: str, server_key: str, ms: float) -> P.Placed:
        self._record(d)
        self.stats["placed"] += 1
        self.latency_ms.append(ms)
        if len(self.latency_ms) > 10_000:
            del self.latency_ms[:5000]
        if log.isEnabledFor(logging.INFO):
            log.info(
                "decision %s: %s on %s (score %s), %s",
                p.did,
                p.req.tenant,
                d["node"],
                d["candidates"][0]["score"] if d["candidates"] else "-",
                summary(d),
            )
        return P.Placed(
            node=d["node"],
            endpoint=endpoint,
            server_key=server_key,
            reservation=d["reservation"],
            decision=p.did,
            device=d["device"],
        )

    def _attempt(self, p: Pending) -> P.Placed | None:
        """Decide and reserve; the reply when placed (or failed for good), None to wait."""
        for _ in range(8):
            p.attempts += 1
            t0 = time.perf_counter()
            with self.view.lock:
                quota = self.view.quotas.get(p.req.tenant)
                d = self.view.table.decide(
                    p.req,
                    self.view.nodes,
                    policy=self.policy,
                    quota=quota,
                    decision_id=p.did,
                    content_index=self.view.content_index,
                )
                d["controller"] = self.id
                p.last = d
                if d["outcome"] != "placed":
                    return None
                v = self.view.nodes[d["node"]]
                ledger = v.ledger.model_copy(deep=True) if v.ledger is not None else Ledger(node=d["node"])
                ledger_rev, node_rev, node_lease = v.ledger_rev, v.node_rev, v.inv.lease
                endpoint, server_key = v.inv.endpoint, v.inv.server_key
                tenant_rev = self.view.tenant_revs.get(p.req.tenant, 0)
            res = self._reservation(p, d)
            ledger.reservations[res.id] = res
            lkey, nkey = keys.ledger(self.store, d["node"]), keys.node(self.store, d["node"])
            compare = [cmp_mod(lkey, ledger_rev), cmp_create(nkey, node_rev)]
            success = [op_put(lkey, ledger, node_lease)]
            failure = [op_get(lkey), op_get(nkey)]
            tkey = keys.tenant(self.store, p.req.tenant)
            if quota is not None:
                compare.append(cmp_mod(tkey, tenant_rev))
                success.append(op_put(tkey, {"last": res.id}))
                failure.append(op_get(tkey))
            try:
                ok, rev, responses = self.store.txn(compare, success, failure)
            except StoreError as exc:
                if "lease" in str(exc).lower():  # the node's lease lapsed: it is leaving the pool
                    self.view.drop_node(d["node"])
                    continue
                raise
            if not ok:  # lost a race: take what the failure branch read and decide again
                self.stats["conflicts"] += 1
                got = [range_kvs(r) for r in responses]
                with self.view.lock:
                    if got and got[0]:
                        self.view.set_ledger(
                            d["node"], Ledger.model_validate_json(got[0][0].value), got[0][0].mod_revision
                        )
                    if len(got) > 1 and (not got[1] or got[1][0].create_revision != node_rev):
                        self.view.nodes.pop(d["node"], None)
                    if len(got) > 2:
                        self.view.tenant_revs[p.req.tenant] = got[2][0].mod_revision if got[2] else 0
                continue
            with self.view.lock:
                self.view.set_ledger(d["node"], ledger, rev)
                if quota is not None:
                    self.view.tenant_revs[p.req.tenant] = rev
            return self._placed(p, d, endpoint, server_key, (time.perf_counter() - t0) * 1e3)
        p.last = p.last | {"reason": "too many conflicting reservations; trying again"}
        return None

    def place_now(self, req: PlaceRequest, did: str) -> tuple[P.Placed | None, dict[str, Any]]:
        """Decide and reserve once, for a request with no client waiting (NOTE [drain]): the placement (or None)
        and the decision, which is recorded either way."""
        now = time.monotonic()
        p = Pending((-req.priority, now), b"", 0, req, now, did, now)
        placed = self._attempt(p)
        if placed is None:
            self._record(p.last | {"outcome": "wait"})
        return placed, p.last

    def _retry_pending(self) -> None:
        if not self.pending:
            return
        now = time.monotonic()
        if not self.is_leader:
            for p in self.pending:
                leader = (self.view.leader or {}).get("endpoint", "")
                self._send(p.identity, P.Redirect(rid=p.rid, leader=leader, message="this controller lost the lead"))
            self.pending.clear()
            return
        expired = [p for p in self.pending if now >= p.deadline]
        for p in expired:
            self.pending.remove(p)
            self.stats["failed"] += 1
            reason = p.last.get("reason") or summary(p.last)
            rej = p.last.get("rejected") or {}
            code = E.OUT_OF_MEMORY if ("memory" in rej or "tenant-quota" in rej) else E.NO_DEVICE
            self._record(p.last | {"outcome": "failed", "waited_s": round(now - p.since, 3)})
            self._send(
                p.identity,
                _error(
                    p.rid,
                    code,
                    f"no node could take this session within {p.req.deadline_s:.1f} s: "
                    f"{reason} (wooly pool explain {p.did})",
                    decision=p.did,
                ),
            )
        if self.view.version == self._seen_version and now < self._next_retry:
            return
        self._seen_version = self.view.version
        self._next_retry = now + 1.0
        for p in list(self.pending):
            reply = self._attempt(p)
            if reply is not None:
                self.pending.remove(p)
                self._send(p.identity, _with_rid(reply, p.rid))

    def _record(self, decision: dict[str, Any]) -> None:
        """Keep a decision for ``wooly pool explain``: at once in memory, and in etcd by the writer thread (off the
        placement's path: a reservation's transaction carries only the ledger)."""
        self.recent[decision["id"]] = decision
        while len(self.recent) > RECENT:
            self.recent.pop(next(iter(self.recent)))
        self._decisions.put(decision)
        if decision.get("outcome") != "placed" or log.isEnabledFor(logging.DEBUG):
            log.info("decision %s", json.dumps({k: decision.get(k) for k in ("id", "outcome", "node", "reason")}))

    def _write_decisions(self) -> None:
        """The decision writer: puts queued decisions under an hour's lease, up to 64 in one transaction, when
        placements pause for FLUSH_IDLE_S (or a decision has waited FLUSH_MAX_S): during a burst, etcd's time
        and this process's go to the reservations, and ``explain`` answers from ``recent`` meanwhile."""
        lease, lease_at = 0, 0.0
        queued: list[tuple[float, dict[str, Any]]] = []
        while not (self._stop.is_set() and self._decisions.empty() and not queued):
            try:
                queued.append((time.monotonic(), self._decisions.get(timeout=0.05)))
                continue
            except queue.Empty:
                pass
            now = time.monotonic()
            if not queued or (
                now - self._last_activity < FLUSH_IDLE_S
                and now - queued[0][0] < FLUSH_MAX_S
                and not self._stop.is_set()
            ):
                continue
            batch, queued = [d for _, d in queued[:64]], queued[64:]
            try:
                if not lease or now - lease_at > DECISION_TTL / 2:
                    lease, lease_at = self.store.grant(DECISION_TTL), now
                self.store.txn([], [op_put(keys.decision(self.store, d["id"]), d, lease) for d in batch])
            except StoreError as exc:
                log.warning("could not record %d decision(s): %s", len(batch), exc)
                if self._stop.is_set():
                    return

    # ------------------------------------------------------------------ reads and admin
    def on_nodes(self, identity: bytes, req: P.Nodes) -> dict[str, Any]:
        rows = []
        with self.view.lock:
            for name, v in sorted(self.view.nodes.items()):
                rows.append(
                    {
                        "node": name,
                        "endpoint": v.inv.endpoint,
                        "cordon": v.cordon.reason if v.cordon else None,
                        "devices": [d.model_dump() | {"free": v.free(d)} for d in v.inv.devices],
                        "sessions": v.inv.session_count,
                        "load": v.inv.load,
                        "reservations": len(v.ledger.reservations) if v.ledger else 0,
                        "tenants": {k: t.model_dump() for k, t in v.inv.tenants.items()},
                        "content_bytes": v.inv.content_bytes,
                        "updated": v.inv.updated,
                    }
                )
            bad = dict(self.view.bad)
        return {"kind": "nodes", "nodes": rows, "ignored": bad}

    def on_sessions(self, identity: bytes, req: P.Sessions) -> dict[str, Any]:
        rows = []
        with self.view.lock:
            for name, v in sorted(self.view.nodes.items()):
                claimed = set()
                for s in v.inv.sessions:
                    rows.append({"node": name} | s.model_dump())
                    claimed.add(s.reservation)
                for r in v.ledger.reservations.values() if v.ledger else ():
                    if r.id not in claimed:
                        rows.append(
                            {
                                "node": name,
                                "session": "(reserved)",
                                "tenant": r.tenant,
                                "memory": r.bytes,
                                "program": "",
                                "reservation": r.id,
                                "age_s": round(time.time() - r.created, 1),
                            }
                        )
        return {"kind": "sessions", "sessions": rows}

    def on_explain(self, identity: bytes, req: P.Explain) -> dict[str, Any]:
        did = req.id
        for p in self.pending:
            if p.did == did:
                return {
                    "kind": "decision",
                    "decision": p.last | {"outcome": "wait", "waited_s": round(time.monotonic() - p.since, 3)},
                }
        if did in self.recent:
            return {"kind": "decision", "decision": self.recent[did]}
        kv = self.store.get(keys.decision(self.store, did))
        if kv is None:
            raise ProtocolError(
                f"no decision {did!r} (decisions are kept for {DECISION_TTL // 60} minutes)", E.NOT_FOUND
            )
        return {"kind": "decision", "decision": kv.json()}

    def on_cordon(self, identity: bytes, req: P.Cordon | P.Uncordon) -> P.Ok:
        self._admin(req)
        node = req.node
        with self.view.lock:
            known = node in self.view.nodes
        if not known:
            raise ProtocolError(f"no node {node!r} in the pool", E.NOT_FOUND)
        if isinstance(req, P.Uncordon):
            self.store.delete(keys.cordon(self.store, node))
            self.store.delete(keys.drain(self.store, node))  # ends a drain too (NOTE [drain])
        else:
            self.store.put(
                keys.cordon(self.store, node),
                Cordon(reason=req.reason or "cordoned", at=time.time()),
            )
        return P.Ok()

    def on_drain(self, identity: bytes, req: P.Drain) -> dict[str, Any]:
        """NOTE [drain]: start draining ``node`` (cordon it, write ``drain/<node>``), or with ``status`` only report
        how far it got: the sessions left, the move orders, and why the ones that stay stay."""
        self._admin(req)
        node = req.node
        if not req.status:
            with self.view.lock:
                known = node in self.view.nodes
            if not known:
                raise ProtocolError(f"no node {node!r} in the pool", E.NOT_FOUND)
            reason = req.reason or "drain"
            self.store.put(keys.cordon(self.store, node), Cordon(reason=f"draining: {reason}", at=time.time()))
            self.store.put(keys.drain(self.store, node), {"at": time.time(), "reason": reason, "by": self.id})
            log.info("drain %s: started (%s)", node, reason)
            self.drainer.next_step = 0.0
        return {"kind": "drain", "leader": self.is_leader} | self.drainer.status(node)

    def on_quota(self, identity: bytes, req: P.Quota) -> P.Ok:
        self._admin(req)
        if req.bytes is None:
            self.store.delete(keys.quota(self.store, req.tenant))
        else:
            self.store.put(keys.quota(self.store, req.tenant), {"bytes": req.bytes})
        return P.Ok()

    def on_status(self, identity: bytes, req: P.Status) -> dict[str, Any]:
        with self.view.lock:
            out = {
                "kind": "status",
                "id": self.id,
                "leader": self.view.leader,
                "is_leader": self.is_leader,
                "controllers": list(self.view.controllers.values()),
                "nodes": len(self.view.nodes),
                "pending": [
                    {
                        "decision": p.did,
                        "tenant": p.req.tenant,
                        "memory": p.req.memory,
                        "waited_s": round(time.monotonic() - p.since, 3),
                        "reason": p.last.get("reason", ""),
                    }
                    for p in self.pending
                ],
                "quotas": dict(self.view.quotas),
                "stats": dict(self.stats),
                "policy": self.policy,
                "latency_ms": _quantiles(self.latency_ms[-1000:]),
            }
        return out


def _quantiles(samples: list[float]) -> dict[str, float]:
    """p50/p99 of the controller's own time per placement (decide + reserve), over the last 1000."""
    s = sorted(samples)
    if not s:
        return {}
    return {"p50": round(s[len(s) // 2], 3), "p99": round(s[min(len(s) - 1, int(len(s) * 0.99))], 3), "n": len(s)}


def _error(rid: int, code: int, message: str, decision: str = "") -> P.Error:
    name = E.CURESULT.get(code, ("CUDA_ERROR_UNKNOWN", ""))[0]
    return P.Error(rid=rid, code=code, name=name, message=message, decision=decision)


def _with_rid(reply: dict[str, Any] | msgspec.Struct, rid: int) -> dict[str, Any]:
    """The answer to request ``rid`` as the map the wire carries."""
    return (P.as_map(reply) if isinstance(reply, msgspec.Struct) else reply) | {"rid": rid}


_HANDLERS: dict[type, Any] = {
    P.Place: Controller.on_place,
    P.Nodes: Controller.on_nodes,
    P.Sessions: Controller.on_sessions,
    P.Explain: Controller.on_explain,
    P.Cordon: Controller.on_cordon,
    P.Uncordon: Controller.on_cordon,
    P.Quota: Controller.on_quota,
    P.Status: Controller.on_status,
    P.Drain: Controller.on_drain,
    P.Ping: lambda self, identity, req: P.Pong(is_leader=self.is_leader),
}
