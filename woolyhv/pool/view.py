"""A controller's view of the pool: everything under the prefix, read once and then kept current by a watch.

Documents that do not validate (a node publishing garbage) are logged once and left out of the view; they never
reach placement. ``version`` counts changes, so the controller retries waiting requests only when something
changed.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from pydantic import ValidationError

from woolyhv.pool import keys
from woolyhv.pool.model import Cordon, Inventory, Ledger
from woolyhv.pool.placement import NodeView
from woolyhv.pool.store import KV, Store
from woolyhv.pool.table import NodeTable

log = logging.getLogger("wooly.pool")


class PoolView:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.nodes: dict[str, NodeView] = {}
        self.content_index: dict[str, set[str]] = {}  # chunk hash -> nodes holding it (NOTE [content affinity])
        self.table = NodeTable()  # NOTE [placement table]: the same nodes as arrays
        self._ledgers: dict[str, tuple[Ledger, int]] = {}  # ledger may arrive before its node, or stay after
        self.cordons: dict[str, Cordon] = {}
        self.quotas: dict[str, int] = {}
        self.tenant_revs: dict[str, int] = {}
        self.leader: dict[str, Any] | None = None
        self.controllers: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.revision = 0
        self.bad: dict[str, str] = {}  # key -> why its document was ignored
        self._stop = threading.Event()

    # ------------------------------------------------------------------ loading
    def load(self) -> int:
        kvs, rev = self.store.get_prefix(self.store.prefix)
        with self.lock:
            self.nodes.clear()
            self.content_index.clear()
            self._ledgers.clear()
            self.cordons.clear()
            self.quotas.clear()
            self.tenant_revs.clear()
            self.controllers.clear()
            self.leader = None
            self.table.invalidate()
            for kv in kvs:
                self._apply("PUT", kv)
            self.revision = rev
            self.version += 1
            self.changed.notify_all()
        return rev

    def start(self) -> None:
        rev = self.load()
        self.store.watch(self.store.prefix, rev, self._on_events, self.load, self._stop)

    def stop(self) -> None:
        self._stop.set()

    def _on_events(self, events: list[tuple[str, KV]]) -> None:
        with self.lock:
            for kind, kv in events:
                self._apply(kind, kv)
                self.revision = max(self.revision, kv.mod_revision)
            self.version += 1
            self.changed.notify_all()

    # ------------------------------------------------------------------ one change (lock held)
    def _apply(self, kind: str, kv: KV) -> None:
        what, name = keys.split(self.store, kv.key)
        gone = kind == "DELETE"
        try:
            if what == "nodes":
                if gone:
                    old = self.nodes.pop(name, None)
                    if old is not None:
                        self._index(name, old.content, frozenset())
                        self.table.invalidate()
                    return
                inv = Inventory.model_validate_json(kv.value)
                v = self.nodes.get(name)
                if v is not None and v.node_rev != kv.create_revision:
                    self._index(name, v.content, frozenset())
                    v = None
                if v is None:
                    self.table.invalidate()
                    v = self.nodes[name] = NodeView(inv=inv, node_rev=kv.create_revision)
                    led = self._ledgers.get(name)
                    if led is not None:
                        v.ledger, v.ledger_rev = led
                        v.refresh()
                else:
                    v.inv = inv
                    v.refresh()
                    self.table.mark(name)
                content = frozenset(inv.content)
                self._index(name, v.content, content)
                v.content = content
                v.cordon = self.cordons.get(name)
            elif what == "ledger":
                if gone:
                    self._ledgers.pop(name, None)
                    if name in self.nodes:
                        self.nodes[name].ledger, self.nodes[name].ledger_rev = None, 0
                        self.touch(name)
                    return
                self.set_ledger(name, Ledger.model_validate_json(kv.value), kv.mod_revision)
            elif what == "cordon":
                c = None if gone else Cordon.model_validate_json(kv.value)
                if c is None:
                    self.cordons.pop(name, None)
                else:
                    self.cordons[name] = c
                if name in self.nodes:
                    self.nodes[name].cordon = c
                    self.table.mark(name)
            elif what == "quota":
                if gone:
                    self.quotas.pop(name, None)
                else:
                    self.quotas[name] = int(json.loads(kv.value)["bytes"])
            elif what == "tenant":
                self.tenant_revs[name] = 0 if gone else kv.mod_revision
            elif what == "leader":
                self.leader = None if gone else json.loads(kv.value)
            elif what == "controllers":
                if gone:
                    self.controllers.pop(name, None)
                else:
                    self.controllers[name] = json.loads(kv.value)
            self.bad.pop(kv.key, None)
        except (ValidationError, ValueError, KeyError, TypeError) as exc:
            if kv.key not in self.bad:
                log.warning("ignoring %s: %s", kv.key, " ".join(str(exc).split())[:200])
            self.bad[kv.key] = " ".join(str(exc).split())[:200]

    def _index(self, name: str, old: frozenset[str], new: frozenset[str]) -> None:
        if old == new:
            return
        for h in old - new:
            holders = self.content_index.get(h)
            if holders is not None:
                holders.discard(name)
                if not holders:
                    del self.content_index[h]
        for h in new - old:
            self.content_index.setdefault(h, set()).add(name)

    def set_ledger(self, name: str, ledger: Ledger, revision: int) -> None:
        """A ledger at ``revision`` (lock held); an older one than the view has is ignored."""
        old = self._ledgers.get(name)
        if old is not None and old[1] > revision:
            return
        self._ledgers[name] = (ledger, revision)
        v = self.nodes.get(name)
        if v is not None:
            v.ledger, v.ledger_rev = ledger, revision
            self.touch(name)

    def touch(self, name: str) -> None:
        """A node's ledger or devices changed (lock held): recompute its free slots, and its row of the table."""
        v = self.nodes.get(name)
        if v is not None:
            v.refresh()
            self.table.mark(name)

    def drop_node(self, name: str) -> None:
        with self.lock:
            old = self.nodes.pop(name, None)
            if old is not None:
                self._index(name, old.content, frozenset())
                self.table.invalidate()
            self.version += 1
