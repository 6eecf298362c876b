"""Reservations are etcd transactions: controllers racing for one node's memory never promise it twice, and a
node's agent keeps its ledger (claims, releases, lapses) without losing a controller's write."""

from __future__ import annotations

import threading
import time

import pytest

from tests.conftest import free_port
from woolyhv.pool import keys
from woolyhv.pool.agent import NodeAgent
from woolyhv.pool.controller import Controller, Pending
from woolyhv.pool.local import wait_until
from woolyhv.pool.model import Ledger, PlaceRequest
from woolyhv.pool.store import Store

GiB = 1 << 30


def snapshot(total: int, sessions: list[dict] | None = None) -> dict:
    return {
        "version": "sim",
        "devices": [{"ordinal": 0, "vendor": "nvidia", "name": "H200", "arch": "sm_90", "total": total}],
        "tenants": {},
        "sessions": sessions or [],
        "session_count": len(sessions or []),
        "load": 0.0,
    }


def controller(store: Store) -> Controller:
    c = Controller(store, f"tcp://127.0.0.1:{free_port()}", insecure=True, claim_s=2.0)
    c.view.start()
    c.is_leader = True  # both place at once: only the transactions keep them honest
    return c


def ledger(store: Store, node: str) -> Ledger:
    kv = store.get(keys.ledger(store, node))
    assert kv is not None
    return Ledger.model_validate_json(kv.value)


def test_two_controllers_racing_never_overcommit_a_node(etcd) -> None:  # type: ignore[no-untyped-def]
    store = Store(etcd.url, prefix="/race/")
    agent = NodeAgent(store, "big", "tcp://127.0.0.1:1", ttl=5)
    agent.offer(snapshot(10 * GiB))
    agent.start()
    assert agent.joined.wait(10)
    ctls = [controller(Store(etcd.url, prefix="/race/")) for _ in range(2)]
    try:
        assert all(wait_until(lambda c=c: "big" in c.view.nodes, 10) for c in ctls)
        placed: list[str] = []
        lock = threading.Lock()

        def hammer(c: Controller) -> None:
            for _ in range(12):
                p = Pending(
                    (0, time.monotonic()),
                    b"",
                    0,
                    PlaceRequest(tenant="t", memory=GiB),
                    time.monotonic() + 5,
                    f"d{time.monotonic_ns()}",
                    time.monotonic(),
                )
                reply = c._attempt(p)
                if reply is not None:
                    with lock:
                        placed.append(reply.reservation)

        threads = [threading.Thread(target=hammer, args=(c,)) for c in ctls for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        led = ledger(store, "big")
        assert len(placed) == 10, f"{len(placed)} placements of 1 GiB on a 10 GiB node"
        assert sorted(led.reservations) == sorted(placed)
        assert sum(c.stats["conflicts"] for c in ctls) > 0  # they did race
    finally:
        for c in ctls:
            c.view.stop()
            c.sock.close(0)
        agent.stop()


def test_agent_claims_releases_and_lapses_reservations(etcd) -> None:  # type: ignore[no-untyped-def]
    store = Store(etcd.url, prefix="/ledger/")
    agent = NodeAgent(store, "n", "tcp://127.0.0.1:1", ttl=5, interval=0.1)
    agent.offer(snapshot(8 * GiB))
    agent.start()
    assert agent.joined.wait(10)
    c = controller(Store(etcd.url, prefix="/ledger/"))
    try:
        assert wait_until(lambda: "n" in c.view.nodes, 10)

        def place() -> str:
            p = Pending(
                (0, 0.0),
                b"",
                0,
                PlaceRequest(tenant="t", memory=GiB),
                time.monotonic() + 5,
                f"d{time.monotonic_ns()}",
                time.monotonic(),
            )
            reply = c._attempt(p)
            assert reply is not None
            return reply.reservation

        claimed, unclaimed = place(), place()
        agent.offer(snapshot(8 * GiB, [{"session": "s1", "tenant": "t", "memory": 0, "reservation": claimed}]))
        assert wait_until(
            lambda: (
                ledger(store, "n").reservations.get(claimed, None) is not None
                and ledger(store, "n").reservations[claimed].session == "s1"
            ),
            5,
        )
        # the unclaimed one lapses after the controller's claim window (2 s); the claimed one stays
        assert wait_until(lambda: unclaimed not in ledger(store, "n").reservations, 6)
        assert claimed in ledger(store, "n").reservations
        # the session closes: its reservation is released
        agent.offer(snapshot(8 * GiB))
        assert wait_until(lambda: not ledger(store, "n").reservations, 5)
        # and a wrong tenant cannot claim someone else's reservation
        other = place()
        agent.offer(snapshot(8 * GiB, [{"session": "s2", "tenant": "intruder", "memory": 0, "reservation": other}]))
        time.sleep(0.5)
        assert ledger(store, "n").reservations[other].session == ""
    finally:
        c.view.stop()
        c.sock.close(0)
        agent.stop()
    # the node left: its keys went with its lease
    assert store.get(keys.node(store, "n")) is None and store.get(keys.ledger(store, "n")) is None


def test_second_node_with_a_taken_name_waits_for_the_first(etcd) -> None:  # type: ignore[no-untyped-def]
    store = Store(etcd.url, prefix="/names/")
    a = NodeAgent(store, "same", "tcp://127.0.0.1:1", ttl=2)
    b = NodeAgent(store, "same", "tcp://127.0.0.1:2", ttl=2)
    for x in (a, b):
        x.offer(snapshot(GiB))
    a.start()
    assert a.joined.wait(10)
    b.start()
    time.sleep(1.0)
    assert not b.joined.is_set()
    kv = store.get(keys.node(store, "same"))
    assert kv is not None and kv.json()["endpoint"] == "tcp://127.0.0.1:1"
    a.stop()  # revokes its lease: b takes the name at once
    assert b.joined.wait(5)
    assert store.get(keys.node(store, "same")).json()["endpoint"] == "tcp://127.0.0.1:2"  # type: ignore[union-attr]
    b.stop()


@pytest.mark.parametrize(
    "garbage",
    [
        b"not json",
        b'{"node": "x"}',
        b'{"node": "../etc", "endpoint": "e"}',
        b'{"node": "ok", "endpoint": "e", "devices": [{"ordinal": -1}]}',
    ],
)
def test_a_node_publishing_garbage_is_ignored_and_reported(etcd, garbage: bytes) -> None:  # type: ignore[no-untyped-def]
    store = Store(etcd.url, prefix="/garbage/")
    good = NodeAgent(store, "good", "tcp://127.0.0.1:1", ttl=5)
    good.offer(snapshot(GiB))
    good.start()
    assert good.joined.wait(10)
    store.put(keys.node(store, "evil"), garbage)
    c = controller(Store(etcd.url, prefix="/garbage/"))
    try:
        assert wait_until(lambda: keys.node(store, "evil") in c.view.bad, 5)
        assert set(c.view.nodes) == {"good"}
        p = Pending((0, 0.0), b"", 0, PlaceRequest(tenant="t", memory=1), time.monotonic() + 5, "dg", time.monotonic())
        assert (placed := c._attempt(p)) is not None and placed.node == "good"
    finally:
        c.view.stop()
        c.sock.close(0)
        good.stop()
        store.delete(keys.node(store, "evil"))
