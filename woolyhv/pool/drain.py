"""Draining a node: its sessions move, live, to other nodes the controller chooses (and explains).

NOTE [drain]
- ``wooly pool drain NODE`` asks the leading controller, which cordons the node (no new placements) and writes
  ``drain/<node>``. While that key exists, the leader's ``Drainer.step`` (every ``STEP_S``) places every session
  of the node's inventory that has no move order yet: a placement request for the session's tenant, memory and
  vendor, decided and reserved exactly as a new session's (NOTE [placement]; the draining node is cordoned, so it
  is never the target), recorded as a decision that ``wooly pool explain`` shows. The order goes to etcd as
  ``moves/<node>/<session>``: the target node, its endpoint and key, the reservation, the decision, and a random
  token.
- The node's agent reads its orders (NOTE [node agent]) and hands each to gpud, which moves the session at its
  next call (NOTE [migration] in gpud/migrate.py), node to node. The target checks the order in etcd (it must name
  the target, the session and the tenant, with the same token) before it creates anything, and claims the
  reservation when the session arrives. The source deletes the order when the session has left, or marks it
  ``failed`` with the reason; a failed order is dropped after ``RETRY_S`` and the session is placed again (its
  reservation lapses unclaimed).
- A session that fits nowhere stays where it is, its reason kept in the drain status; the node keeps serving it.
  ``wooly pool drain`` prints each move as it happens and returns when the node has no sessions left (then the
  node can be stopped), or at ``--timeout`` with what is left and why. ``uncordon`` ends the drain.
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from typing import Any

from woolyhv.pool import keys
from woolyhv.pool.model import MoveOrder, PlaceRequest
from woolyhv.pool.placement import summary
from woolyhv.pool.store import StoreError

log = logging.getLogger("wooly.controller")

STEP_S = 0.5
RETRY_S = 3.0


class Drainer:
    def __init__(self, ctl: Any) -> None:  # woolyhv.pool.controller.Controller (which imports this module)
        self.ctl = ctl
        self.next_step = 0.0
        self.waiting: dict[str, dict[str, str]] = {}  # node -> session -> why it has not moved yet
        self.moved: dict[str, list[dict[str, Any]]] = {}  # node -> moves seen done (from the node's reports)

    def step(self) -> None:
        now = time.monotonic()
        if now < self.next_step or not self.ctl.is_leader:
            return
        self.next_step = now + STEP_S
        store = self.ctl.store
        try:
            drains, _ = store.get_prefix(keys.drain(store, ""))
            for kv in drains:
                node = kv.key.rsplit("/", 1)[-1]
                self._drain(node)
        except StoreError as exc:
            log.warning("drain: the pool's store is unavailable: %s", exc)

    def _drain(self, node: str) -> None:
        ctl, store = self.ctl, self.ctl.store
        with ctl.view.lock:
            v = ctl.view.nodes.get(node)
            rows = list(v.inv.sessions) if v is not None else []
            vendor = v.inv.devices[0].vendor if v is not None and v.inv.devices else None
        orders, _ = store.get_prefix(keys.move(store, node, ""))
        by_session: dict[str, MoveOrder] = {}
        for kv in orders:
            try:
                o = MoveOrder.model_validate_json(kv.value)
            except ValueError:
                store.delete(kv.key)
                continue
            if o.state == "failed" and time.time() - o.updated > RETRY_S:
                log.info(
                    "drain %s: moving session %s to %s failed (%s); placing it again",
                    node,
                    o.session,
                    o.target,
                    o.error,
                )
                self.waiting.setdefault(node, {})[o.session] = f"the move to {o.target} failed: {o.error}"
                store.delete(kv.key)
                continue
            by_session[o.session] = o
        waiting = self.waiting.setdefault(node, {})
        live = {r.session for r in rows}
        for s in list(waiting):
            if s not in live:
                del waiting[s]
        for row in rows:
            if row.session in by_session:
                continue
            did = uuid.uuid4().hex[:16]
            req = PlaceRequest(
                tenant=row.tenant,
                memory=row.memory,
                vendor=vendor,
                deadline_s=0.0,
                program=f"move of session {row.session} off {node}" + (f" ({row.program})" if row.program else ""),
                memory_source="session",
            )
            placed, last = ctl.place_now(req, did)
            if placed is None:
                why = last.get("reason") or summary(last)
                if waiting.get(row.session) != why:
                    log.info(
                        "drain %s: session %s stays for now: %s (wooly pool explain %s)", node, row.session, why, did
                    )
                waiting[row.session] = f"{why} (wooly pool explain {did})"
                continue
            order = MoveOrder(
                session=row.session,
                tenant=row.tenant,
                source=node,
                target=placed.node,
                endpoint=placed.endpoint,
                server_key=placed.server_key,
                reservation=placed.reservation,
                decision=did,
                token=secrets.token_hex(16),
                created=time.time(),
                updated=time.time(),
            )
            store.put(keys.move(store, node, row.session), order)
            waiting.pop(row.session, None)
            log.info(
                "drain %s: session %s (%s) moves to %s (decision %s)",
                node,
                row.session,
                row.tenant,
                placed.node,
                did,
            )

    def status(self, node: str) -> dict[str, Any]:
        ctl, store = self.ctl, self.ctl.store
        with ctl.view.lock:
            v = ctl.view.nodes.get(node)
            rows = [r.model_dump() for r in v.inv.sessions] if v is not None else []
        orders, _ = store.get_prefix(keys.move(store, node, ""))
        drain = store.get(keys.drain(store, node))
        return {
            "node": node,
            "in_pool": v is not None,
            "draining": drain is not None,
            "sessions": rows,
            "orders": [
                MoveOrder.model_validate_json(kv.value).model_dump(exclude={"token", "server_key"}) for kv in orders
            ],
            "waiting": dict(self.waiting.get(node, {})),
        }
