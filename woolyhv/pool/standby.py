"""Standbys: where each checkpointed session's checkpoints go (the controller chooses, and explains).

NOTE [standby]
- A node's inventory marks the sessions whose tenant has a checkpoint policy (``checkpoint_s`` > 0, NOTE
  [checkpoints] in gpud/checkpoint.py). The leading controller's ``Planner.step`` (every ``STEP_S``) gives each
  of them a standby: a placement decision for the session's tenant, memory and vendor over every node but the
  session's own (the usual filters and scores, NOTE [placement]; recorded, so ``wooly pool explain`` shows why
  that node), written to etcd as ``standby/<node>/<session>`` with the standby's endpoint and key and a random
  token. No memory is reserved: a standby holds the checkpoint in host memory, and a restore that finds the node
  full is refused there.
- The session's node reads its orders (NOTE [node agent]) and sends checkpoints to the standby, which checks the
  order in etcd before it keeps anything. An order whose standby left the pool or was cordoned is replaced; an
  order whose session is on no node any more, or whose node left, is deleted (the session ended, moved, or its
  node died and its client restored it elsewhere: there the session gets a new standby).
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from typing import Any

from woolyhv.pool import keys
from woolyhv.pool.model import PlaceRequest, StandbyOrder
from woolyhv.pool.placement import decide, summary
from woolyhv.pool.store import StoreError

log = logging.getLogger("wooly.controller")

STEP_S = 1.0


class Planner:
    def __init__(self, ctl: Any) -> None:  # woolyhv.pool.controller.Controller (which imports this module)
        self.ctl = ctl
        self.next_step = 0.0
        self.waiting: dict[str, str] = {}  # session -> why it has no standby

    def step(self) -> None:
        now = time.monotonic()
        if now < self.next_step or not self.ctl.is_leader:
            return
        self.next_step = now + STEP_S
        try:
            self._plan()
        except StoreError as exc:
            log.warning("standby: the pool's store is unavailable: %s", exc)

    def _plan(self) -> None:
        ctl, store = self.ctl, self.ctl.store
        with ctl.view.lock:
            nodes = dict(ctl.view.nodes)
            wanted = {
                (name, r.session): (r, v.inv.devices[0].vendor if v.inv.devices else None)
                for name, v in nodes.items()
                for r in v.inv.sessions
                if r.checkpoint_s > 0
            }
        kvs, _ = store.get_prefix(store.key("standby") + "/")
        have: dict[tuple[str, str], StandbyOrder] = {}
        for kv in kvs:
            try:
                o = StandbyOrder.model_validate_json(kv.value)
            except ValueError:
                store.delete(kv.key)
                continue
            if (o.source, o.session) not in wanted:
                if o.source not in nodes or time.time() - o.created > 10:  # gone (a fresh order may precede its row)
                    store.delete(kv.key)
                continue
            if o.target not in nodes or nodes[o.target].cordon is not None:
                log.info(
                    "standby: %s of session %s left the pool or was cordoned; choosing another", o.target, o.session
                )
                store.delete(kv.key)
                continue
            have[(o.source, o.session)] = o
        for (node, session), (row, vendor) in wanted.items():
            if (node, session) in have:
                self.waiting.pop(session, None)
                continue
            did = uuid.uuid4().hex[:16]
            req = PlaceRequest(
                tenant=row.tenant,
                memory=row.memory,
                vendor=vendor,
                deadline_s=0.0,
                program=f"standby for session {session} of {node}",
                memory_source="session",
            )
            others = {n: v for n, v in nodes.items() if n != node}
            d = decide(req, others, policy=ctl.policy, decision_id=did)
            d["controller"] = ctl.id
            ctl._record(d | {"outcome": d["outcome"], "purpose": "standby"})
            if d["outcome"] != "placed":
                why = d.get("reason") or summary(d)
                if self.waiting.get(session) != why:
                    log.info(
                        "standby: session %s of %s has none for now: %s (wooly pool explain %s)",
                        session,
                        node,
                        why,
                        did,
                    )
                self.waiting[session] = f"{why} (wooly pool explain {did})"
                continue
            target = nodes[d["node"]].inv
            order = StandbyOrder(
                session=session,
                tenant=row.tenant,
                source=node,
                target=d["node"],
                endpoint=target.endpoint,
                server_key=target.server_key,
                decision=did,
                token=secrets.token_hex(16),
                created=time.time(),
            )
            store.put(keys.standby(store, node, session), order)
            self.waiting.pop(session, None)
            log.info(
                "standby: session %s (%s) of %s checkpoints to %s (decision %s)",
                session,
                row.tenant,
                node,
                d["node"],
                did,
            )
