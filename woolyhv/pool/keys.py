"""Key names of NOTE [pool keys] (woolyhv/pool/__init__.py), in one place."""

from __future__ import annotations

from woolyhv.pool.store import Store


def node(store: Store, name: str) -> str:
    return store.key("nodes", name)


def ledger(store: Store, name: str) -> str:
    return store.key("ledger", name)


def cordon(store: Store, name: str) -> str:
    return store.key("cordon", name)


def quota(store: Store, tenant: str) -> str:
    return store.key("quota", tenant)


def tenant(store: Store, name: str) -> str:
    return store.key("tenant", name)


def drain(store: Store, name: str) -> str:
    return store.key("drain", name)


def move(store: Store, node: str, session: str) -> str:
    """``moves/<node>/<session>`` (``session`` '' for the node's prefix): NOTE [drain]."""
    return store.key("moves", node, session) if session else store.key("moves", node) + "/"


def standby(store: Store, node: str, session: str) -> str:
    """``standby/<node>/<session>`` (``session`` '' for the node's prefix): NOTE [standby]."""
    return store.key("standby", node, session) if session else store.key("standby", node) + "/"


def leader(store: Store) -> str:
    return store.key("leader")


def controller(store: Store, cid: str) -> str:
    return store.key("controllers", cid)


def decision(store: Store, did: str) -> str:
    """Decisions live beside the pool's prefix (``/wooly/pool-decisions/<id>``), outside the range controllers
    watch: they are written once and read only by ``wooly pool explain``."""
    return store.prefix.rstrip("/") + "-decisions/" + did


def split(store: Store, key: str) -> tuple[str, str]:
    """``/wooly/pool/nodes/n1`` -> ("nodes", "n1"); ("", "") for a key outside the prefix."""
    if not key.startswith(store.prefix):
        return "", ""
    kind, _, rest = key[len(store.prefix) :].partition("/")
    return kind, rest
