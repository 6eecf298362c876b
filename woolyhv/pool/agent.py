"""The node agent: how a gpud belongs to the pool (``wooly gpud --join etcd://HOST:2379``).

NOTE [node agent]: a thread of gpud's own. It

1. **joins**: grants a lease (``ttl`` seconds) and creates ``nodes/<name>`` and ``ledger/<name>`` under it in one
   transaction that succeeds only if no live node holds the name (a second gpud with the same name waits, saying
   so, until the first one's lease lapses);
2. **stays alive**: refreshes the lease every ``ttl/3`` seconds. If gpud dies or hangs, the lease lapses and etcd
   deletes both keys: the node is out of the pool within its TTL, its unclaimed reservations with it. A lease
   that lapsed while gpud lived (a network partition) is noticed at the next refresh and the node joins again;
3. **publishes** its inventory (``model.Inventory``: devices, tenants, sessions, load, dedup sample) whenever it
   changes, at most every ``interval`` seconds. The snapshot is taken on gpud's I/O loop (``Server.pool_snapshot``),
   so the agent never reads session tables from another thread;
4. **keeps its ledger** (NOTE [pool keys]): a session whose hello names a reservation in this node's ledger, for
   its tenant, claims it; a claimed reservation is released when its session closes, an unclaimed one when its
   ``claim_by`` time passes. Each change is a compare-and-swap on the ledger's revision, so it never loses a
   reservation a controller added meanwhile.

On shutdown it revokes the lease: a drained node leaves at once instead of after its TTL.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from gpud import log
from woolyhv.pool import keys
from woolyhv.pool.model import Inventory, Ledger, MoveOrder, StandbyOrder
from woolyhv.pool.store import Store, StoreError, cmp_create, cmp_lease, cmp_mod, op_get, op_put

LEDGER_CHECK_S = 10.0


class NodeAgent:
    def __init__(
        self,
        store: Store,
        name: str,
        endpoint: str,
        *,
        ttl: int = 5,
        interval: float = 1.0,
        server_key: str = "",
        labels: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self.endpoint = endpoint
        self.ttl = ttl
        self.interval = interval
        self.server_key = server_key
        self.labels = labels or {}
        self.lease = 0
        self.joined = threading.Event()
        self._stop = threading.Event()
        self._snapshot: dict[str, Any] | None = None
        self._snap_lock = threading.Lock()
        self._published: dict[str, Any] | None = None
        self._last_publish = 0.0
        self._thread = threading.Thread(target=self._run, name="pool-agent", daemon=True)
        self.started = time.time()
        self.errors = 0
        self._next_refresh = 0.0
        self._name_note = 0.0
        self._sessions_seen: object = None
        self._next_ledger_check = 0.0
        # NOTE [drain]: move orders for this node's sessions go to ``on_move(order, report)`` (gpud's loop moves the
        # session and calls ``report(ok, detail)`` from there); the reports are written to etcd from this thread.
        self.on_move: Any = None
        self._orders_started: set[str] = set()
        self._reports: list[tuple[Any, bool, dict[str, Any]]] = []
        self._next_orders = 0.0
        # NOTE [checkpoints]: the standby orders of this node's checkpointed sessions go to ``on_standby(orders)``
        # (session id -> order) whenever they change
        self.on_standby: Any = None
        self._standbys_seen: dict[str, dict[str, Any]] | None = None
        self._next_standbys = 0.0

    # ------------------------------------------------------------------ called by gpud's loop
    def offer(self, snapshot: dict[str, Any]) -> None:
        """The latest inventory snapshot (called on gpud's I/O loop; never blocks)."""
        with self._snap_lock:
            self._snapshot = snapshot

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.lease:
            self.store.revoke(self.lease)
            log.event("pool.left", node=self.name)
            self.lease = 0

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(self.step())

    def step(self) -> float:
        """One round of join / refresh / publish / reconcile; the seconds until the next one is due. (gpud's agent
        calls it from its own thread; benchmarks/pool.py drives many simulated nodes from one thread.)"""
        try:
            now = time.monotonic()
            if not self.lease:
                if not self._join():
                    if now > self._name_note:
                        log.warning(
                            "pool.name-taken",
                            node=self.name,
                            detail="a live node holds this name; waiting for its lease to lapse",
                        )
                        self._name_note = now + 10
                    return 0.5
                self._next_refresh = now + self.ttl / 3
            if now >= self._next_refresh:
                if self.store.keepalive(self.lease) <= 0:
                    log.warning("pool.lease-lost", node=self.name, lease=self.lease)
                    self.lease = 0
                    self.joined.clear()
                    return 0.0
                self._next_refresh = now + self.ttl / 3
            self._publish()
            self._reconcile()
            self._moves()
            self._standbys()
        except StoreError as exc:
            self.errors += 1
            log.warning("pool.etcd", node=self.name, error=str(exc))
            return min(1.0, self.ttl / 3)
        except Exception as exc:  # noqa: BLE001 - the agent must not take gpud down
            self.errors += 1
            log.warning("pool.agent.crash", node=self.name, error=f"{type(exc).__name__}: {exc}")
        return max(0.0, min(self.interval, self._next_refresh - time.monotonic()))

    def _inventory(self) -> Inventory | None:
        with self._snap_lock:
            snap = self._snapshot
        if snap is None:
            return None
        return Inventory(
            node=self.name,
            endpoint=self.endpoint,
            server_key=self.server_key,
            lease=self.lease,
            started=self.started,
            updated=time.time(),
            labels=self.labels,
            **snap,
        )

    def _join(self) -> bool:
        inv = self._inventory()
        if inv is None:
            return False
        lease = self.store.grant(self.ttl)
        inv.lease = lease
        nkey, lkey = keys.node(self.store, self.name), keys.ledger(self.store, self.name)
        ok, _, _ = self.store.txn(
            [cmp_create(nkey, 0)], [op_put(nkey, inv, lease), op_put(lkey, Ledger(node=self.name), lease)]
        )
        if not ok:
            self.store.revoke(lease)
            return False
        self.lease = lease
        self._published = _stable(inv)
        self._last_publish = time.monotonic()
        self.joined.set()
        log.event("pool.joined", node=self.name, endpoint=self.endpoint, lease=lease, ttl=self.ttl)
        return True

    def _publish(self) -> None:
        inv = self._inventory()
        if inv is None:
            return
        stable = _stable(inv)
        now = time.monotonic()
        if stable == self._published and now - self._last_publish < 30:
            return
        nkey = keys.node(self.store, self.name)
        ok, _, _ = self.store.txn([cmp_lease(nkey, self.lease)], [op_put(nkey, inv, self.lease)])
        if not ok:  # our key is gone (lease lapsed between refreshes): join again
            self.lease = 0
            self.joined.clear()
            return
        self._published = stable
        self._last_publish = now

    def _reconcile(self) -> None:
        with self._snap_lock:
            snap = self._snapshot
        if snap is None:
            return
        open_sessions: dict[str, tuple[str, str]] = {
            s["reservation"]: (s["session"], s["tenant"]) for s in snap["sessions"] if s.get("reservation")
        }
        live = {s["session"] for s in snap["sessions"]}
        seen = (frozenset(live), frozenset(open_sessions))
        if seen == self._sessions_seen and time.monotonic() < self._next_ledger_check:
            return  # no session came or went, and no unclaimed reservation is due
        self._sessions_seen = seen
        lkey = keys.ledger(self.store, self.name)
        for _attempt in range(5):
            kv = self.store.get(lkey)
            if kv is None:
                return
            ledger = Ledger.model_validate_json(kv.value)
            now = time.time()
            changed = False
            self._schedule_check(ledger, now)
            for rid, r in list(ledger.reservations.items()):
                if r.session:
                    if r.session not in live:
                        del ledger.reservations[rid]  # its session closed
                        changed = True
                elif rid in open_sessions and open_sessions[rid][1] == r.tenant:
                    r.session = open_sessions[rid][0]
                    changed = True
                elif now > r.claim_by:
                    del ledger.reservations[rid]  # nobody came for it
                    changed = True
            if not changed:
                return
            ok, _, _ = self.store.txn(
                [cmp_mod(lkey, kv.mod_revision)], [op_put(lkey, ledger, self.lease)], [op_get(lkey)]
            )
            if ok:
                self._schedule_check(ledger, now)
                log.event("pool.ledger", node=self.name, reservations=len(ledger.reservations))
                return

    # ------------------------------------------------------------------ NOTE [drain]
    def move_order(self, source: str, session: str) -> dict[str, Any] | None:
        """The move order ``moves/<source>/<session>`` as etcd holds it now (a target checks a move against it)."""
        kv = self.store.get(keys.move(self.store, source, session))
        return kv.json() if kv is not None else None

    def _moves(self) -> None:
        with self._snap_lock:
            reports, self._reports = self._reports, []
        for order, ok, detail in reports:
            key = keys.move(self.store, self.name, order.session)
            if ok:
                self.store.delete(key)
                log.event(
                    "pool.moved",
                    node=self.name,
                    session=order.session,
                    target=order.target,
                    bytes=detail.get("bytes", 0),
                    pause_s=detail.get("pause_s", 0),
                )
            else:
                order.state, order.error, order.updated = "failed", str(detail.get("error", ""))[:2000], time.time()
                self.store.put(key, order)
            self._orders_started.discard(order.token)
        if self.on_move is None or time.monotonic() < self._next_orders:
            return
        self._next_orders = time.monotonic() + 0.25
        kvs, _ = self.store.get_prefix(keys.move(self.store, self.name, ""))
        for kv in kvs:
            try:
                order = MoveOrder.model_validate_json(kv.value)
            except ValueError:
                continue
            if order.state != "ordered" or order.token in self._orders_started:
                continue
            self._orders_started.add(order.token)

            def report(ok: bool, detail: dict[str, Any], order: MoveOrder = order) -> None:
                with self._snap_lock:
                    self._reports.append((order, ok, detail))

            self.on_move(order, report)

    # ------------------------------------------------------------------ NOTE [standby]
    def standby_order(self, source: str, session: str) -> dict[str, Any] | None:
        """The standby order ``standby/<source>/<session>`` as etcd holds it now (a standby checks against it)."""
        kv = self.store.get(keys.standby(self.store, source, session))
        return kv.json() if kv is not None else None

    def _standbys(self) -> None:
        if self.on_standby is None or time.monotonic() < self._next_standbys:
            return
        self._next_standbys = time.monotonic() + 0.5
        kvs, _ = self.store.get_prefix(keys.standby(self.store, self.name, ""))
        orders: dict[str, dict[str, Any]] = {}
        for kv in kvs:
            try:
                o = StandbyOrder.model_validate_json(kv.value)
            except ValueError:
                continue
            orders[o.session] = o.model_dump()
        if orders != self._standbys_seen:
            self._standbys_seen = orders
            self.on_standby(orders)

    def _schedule_check(self, ledger: Ledger, now: float) -> None:
        """Read the ledger again when its first unclaimed reservation is due, and at least every
        ``LEDGER_CHECK_S`` (new reservations a controller added are learnt then or when their session arrives)."""
        due = [r.claim_by for r in ledger.reservations.values() if not r.session]
        wait = min([LEDGER_CHECK_S] + [max(0.0, d - now) + 0.05 for d in due])
        self._next_ledger_check = time.monotonic() + wait


def _stable(inv: Inventory) -> dict[str, Any]:
    """The inventory without what changes every time (so an idle node does not write to etcd)."""
    d = inv.model_dump(exclude={"updated", "sessions"})
    d["load"] = round(d["load"], 1)
    # a session's checkpoints and moves are news (``wooly pool sessions`` shows them; NOTE [standby] plans on them)
    d["session_ids"] = sorted(
        (
            s.session,
            s.reservation,
            s.memory >> 20,
            s.checkpoint_s,
            s.moves,
            str(s.checkpoint.get("count", "")),
            str(s.checkpoint.get("standby", "")),
        )
        for s in inv.sessions
    )
    return d
