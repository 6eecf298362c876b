"""Placement decisions (NOTE [placement]) and their vector form (NOTE [placement table]) on views built here."""

from __future__ import annotations

import random

import pytest

from woolyhv.pool.model import Cordon, Inventory, Ledger, PlaceRequest, Reservation
from woolyhv.pool.placement import NodeView, arch_matches, content_sample, decide, explain, request_sample, summary
from woolyhv.pool.table import NodeTable

GiB = 1 << 30


def node(
    name: str,
    *devs: tuple[str, str, int],
    load: float = 0.0,
    content: list[str] | None = None,
    tenants: dict | None = None,
    reserved: list[tuple[int, int]] | None = None,
    cordon: str | None = None,
) -> NodeView:
    inv = Inventory(
        node=name,
        endpoint=f"tcp://{name}:5555",
        devices=[{"ordinal": i, "vendor": v, "name": v, "arch": a, "total": t} for i, (v, a, t) in enumerate(devs)],
        load=load,
        content=content or [],
        tenants=tenants or {},
    )
    led = Ledger(
        node=name,
        reservations={
            f"r{k}": Reservation(id=f"r{k}", tenant="x", bytes=b, device=d, created=0, claim_by=0)
            for k, (d, b) in enumerate(reserved or [])
        },
    )
    v = NodeView(inv=inv, ledger=led, content=frozenset(inv.content), cordon=Cordon(reason=cordon) if cordon else None)
    v.refresh()
    return v


def pool() -> dict[str, NodeView]:
    return {
        "a100": node("a100", ("nvidia", "sm_80", 80 * GiB), reserved=[(0, 70 * GiB)]),
        "h200": node("h200", ("nvidia", "sm_90", 141 * GiB), ("nvidia", "sm_90", 141 * GiB), load=0.5),
        "mi300": node("mi300", ("amd", "gfx942", 192 * GiB)),
        "cpu": node("cpu", ("cpu", "sm_80", 64 * GiB)),
        "down": node("down", ("nvidia", "sm_90", 141 * GiB), cordon="firmware"),
    }


def test_filters_reject_in_order_and_say_why() -> None:
    d = decide(PlaceRequest(memory=20 * GiB, vendor="nvidia", arch="sm_80+"), pool())
    assert d["outcome"] == "placed" and d["node"] == "h200"
    rej = d["rejected"]
    assert rej["cordoned"]["nodes"] == [{"node": "down", "detail": "firmware"}]
    assert {x["node"] for x in rej["vendor"]["nodes"]} == {"mi300", "cpu"}
    assert rej["memory"]["nodes"] == [{"node": "a100", "detail": "10.0 GiB free, 20.0 GiB needed"}]
    assert "arch" not in rej
    d = decide(PlaceRequest(memory=GiB, vendor="nvidia", arch="sm_90"), pool())
    assert d["rejected"]["arch"]["nodes"] == [{"node": "a100", "detail": "has sm_80"}]


def test_binpack_fills_and_spread_balances() -> None:
    p = pool()
    assert decide(PlaceRequest(memory=8 * GiB), p, policy="binpack")["node"] == "a100"  # 10 GiB free: tightest
    assert decide(PlaceRequest(memory=8 * GiB), p, policy="spread")["node"] == "mi300"  # most room left


def test_waits_with_the_commonest_reason() -> None:
    d = decide(PlaceRequest(memory=500 * GiB), pool())
    assert d["outcome"] == "wait"
    assert d["reason"].startswith("0/5 nodes fit: 4 memory (") and "1 cordoned" in d["reason"]
    assert summary({"nodes_considered": 0, "rejected": {}}) == "no node has joined the pool"


def test_tenant_pool_quota_counts_reservations_and_use() -> None:
    p = pool()
    p["cpu"].ledger.reservations["q"] = Reservation(id="q", tenant="t", bytes=3 * GiB, created=0, claim_by=0)
    assert decide(PlaceRequest(tenant="t", memory=GiB), p, quota=4 * GiB)["outcome"] == "placed"
    d = decide(PlaceRequest(tenant="t", memory=2 * GiB), p, quota=4 * GiB)
    assert d["outcome"] == "wait" and "tenant-quota" in d["rejected"] and "3.0 GiB of its 4.0 GiB" in d["reason"]


def test_content_affinity_brings_an_adapter_to_its_base_model() -> None:
    base = [f"{i:02x}{'ab' * 7}" for i in range(0, 256, 16)]
    p = pool()
    p["mi300"] = node("mi300", ("amd", "gfx942", 192 * GiB), content=base)
    d = decide(PlaceRequest(memory=GiB, digests=base[:8]), p)
    assert d["node"] == "mi300" and d["candidates"][0]["parts"]["affinity"] == 1.0
    assert "mi300" in explain(d) and "affinity 1.000" in explain(d)


def test_tenant_shared_content_scores_half() -> None:
    p = pool()
    p["cpu"] = node("cpu", ("cpu", "sm_80", 64 * GiB), tenants={"t": {"sessions": 1, "memory": GiB, "shared": GiB}})
    d = decide(PlaceRequest(tenant="t", memory=GiB), p)
    parts = {c["node"]: c["parts"]["affinity"] for c in d["candidates"]}
    assert parts["cpu"] == 0.5 and parts["h200"] == 0.0


@pytest.mark.parametrize(
    ("want", "have", "ok"),
    [
        ("sm_80+", "sm_90", True),
        ("sm_90+", "sm_80", False),
        ("sm_80", "sm_80", True),
        ("sm_80", "sm_86", False),
        ("gfx90+", "gfx942", True),
        ("sm_80+", "gfx942", False),
    ],
)
def test_arch_matches(want: str, have: str, ok: bool) -> None:
    assert arch_matches(want, have) is ok


def test_content_sample_is_stable_and_bounded() -> None:
    rnd = random.Random(1)
    hashes = [f"{rnd.getrandbits(128):032x}" for _ in range(5000)]
    t, sample = content_sample(hashes, cap=1024)
    assert t < 256 and len(sample) <= 1024 and all(int(h[:2], 16) < t for h in sample)
    assert content_sample(list(reversed(hashes)), cap=1024) == (t, sample)
    assert content_sample(hashes[:10]) == (256, sorted(h[:16] for h in hashes[:10]))
    assert request_sample(hashes, cap=8) == sorted(h[:16] for h in hashes)[:8]


def _random_pool(rnd: random.Random, n: int) -> dict[str, NodeView]:
    out = {}
    hashes = [f"{rnd.getrandbits(64):016x}" for _ in range(40)]
    for _ in range(n):
        devs = []
        for _ in range(rnd.choice([0, 1, 1, 2, 4])):
            vendor = rnd.choice(["nvidia", "amd", "cpu"])
            devs.append(
                (
                    vendor,
                    rnd.choice(["sm_80", "sm_90", "sm_75"]) if vendor != "amd" else "gfx942",
                    rnd.choice([16, 40, 80]) * GiB,
                )
            )
        name = f"n{rnd.randrange(10**6):06d}"
        out[name] = node(
            name,
            *devs,
            load=rnd.choice([0.0, 0.25, 0.5, 1.5]),
            content=rnd.sample(hashes, rnd.choice([0, 0, 5])),
            tenants={"t1": {"sessions": 1, "memory": 0, "shared": GiB}} if rnd.random() < 0.2 else {},
            reserved=[(0, rnd.choice([0, 10, 30]) * GiB)] if devs else [],
            cordon="x" if rnd.random() < 0.1 else None,
        )
    return out, hashes


@pytest.mark.parametrize("seed", range(40))
def test_table_decides_exactly_as_the_reference(seed: int) -> None:
    rnd = random.Random(seed)
    nodes, hashes = _random_pool(rnd, rnd.choice([0, 1, 3, 50, 300]))
    index: dict[str, set[str]] = {}
    for name, v in nodes.items():
        for h in v.content:
            index.setdefault(h, set()).add(name)
    table = NodeTable()
    for _ in range(6):
        req = PlaceRequest(
            tenant=rnd.choice(["t1", "t2"]),
            memory=rnd.choice([0, 1, 20, 50, 90]) * GiB,
            vendor=rnd.choice([None, None, "nvidia", "amd", "cpu"]),
            arch=rnd.choice([None, None, "sm_80+", "sm_90", "gfx942"]),
            digests=rnd.sample(hashes, rnd.choice([0, 3, 10])),
        )
        policy = rnd.choice(["binpack", "spread"])
        quota = rnd.choice([None, None, 30 * GiB])
        ref = decide(req, nodes, policy=policy, quota=quota, decision_id="x", content_index=index)
        got = table.decide(req, nodes, policy=policy, quota=quota, decision_id="x", content_index=index)
        for d in (ref, got):
            d.pop("time"), d.pop("elapsed_ms")
        assert got == ref
        # the view changes between decisions: a reservation lands on the winner
        if ref["outcome"] == "placed" and req.memory:
            v = nodes[ref["node"]]
            v.ledger.reservations[f"x{_}"] = Reservation(
                id=f"x{_}", tenant=req.tenant, bytes=req.memory, device=ref["device"], created=0, claim_by=0
            )
            v.refresh()
            table.mark(ref["node"])
