"""Placement: filter the nodes that cannot take a request, score the rest, and say why.

NOTE [placement]: a decision is two passes over the controller's view of the pool (no etcd call):

1. **filters**, in this order; the first that rejects a node is that node's reason:
   ``cordoned`` (an operator took it out), ``vendor``, ``arch`` (``sm_90`` exactly, ``sm_80+`` that or newer),
   ``memory`` (no device with the bytes free once reservations and unreserved use are counted). Before any node,
   ``tenant-quota``: the tenant's reservations and use across the pool plus this request exceed its pool quota.
2. **scores** of the nodes left, each part in [0, 1], weighted and summed to 0-100:
   ``fit`` (40: binpack prefers the device left fullest, spread the emptiest), ``load`` (20: the node's recent
   device busy fraction, inverted) and ``affinity`` (40: NOTE [content affinity]). Ties go to the name, so the
   same view always gives the same answer.

The decision keeps the winner, the best ``TOP`` candidates with their score parts, and the rejected nodes grouped
by reason (a count, and up to ``SAMPLE`` names with what they lacked): readable for 3 nodes or 3000. The
controller stores it in etcd and its log; ``wooly pool explain ID`` prints it.

NOTE [content affinity]: nodes publish a sample of their dedup store's chunk hashes (xxh3-128, the first 64
bits in hex): every hash whose first byte is below ``content_threshold``, the threshold halved until at most
``SAMPLE_CAP`` remain, so a small store publishes all of it and a large one a stable 1-in-2^k part (the same
content always gives the same sample). A client that names its model (``WOOLY_MODEL``) sends the lowest
``SAMPLE_CAP`` chunk hashes of that checkpoint's tensors, chunked as the shim's dedup uploads chunk them
(woolyhv/pool/estimate.py). For a node with threshold t, the affinity part is the fraction of the request's
hashes below t that the node holds: an adapter's session lands next to its base model. The controller keeps an
index hash -> nodes, so this costs one pass over the request's hashes, not one per node. Without hashes, a node
where the tenant already maps shared content scores 0.5.
"""

from __future__ import annotations

import time
import uuid
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from proto.sizes import human as _human
from woolyhv.pool.model import Cordon, Device, Inventory, Ledger, PlaceRequest

WEIGHTS = {"fit": 40.0, "load": 20.0, "affinity": 40.0}
TOP = 10
SAMPLE = 20
POLICIES = ("binpack", "spread")
SAMPLE_CAP = 1024
DIGEST_HEX = 16


def content_sample(hashes: Iterable[str], cap: int = SAMPLE_CAP) -> tuple[int, list[str]]:
    """A node's published sample of its chunk hashes (hex): (threshold, the hashes whose first byte is below it)."""
    short = sorted({h[:DIGEST_HEX] for h in hashes})
    threshold = 256
    while len(short) > cap and threshold > 1:
        threshold //= 2
        short = short[: bisect_left(short, f"{threshold:02x}")]
    return threshold, short[:cap]


def request_sample(hashes: Iterable[str], cap: int = SAMPLE_CAP) -> list[str]:
    """A request's hashes: the ``cap`` lowest (they are the ones any node's threshold keeps first)."""
    return sorted({h[:DIGEST_HEX] for h in hashes})[:cap]


@dataclass
class NodeView:
    """One node as the controller sees it: its inventory, its ledger (and that key's revision), its cordon.
    ``slots`` (free bytes, ordinal, vendor, arch, total) per device, most free first, is recomputed by ``refresh``
    whenever the inventory or the ledger changes, so a decision reads it instead of summing reservations."""

    inv: Inventory
    node_rev: int = 0  # create revision of nodes/<name>: a re-registered node is a new node
    ledger: Ledger | None = None
    ledger_rev: int = 0
    cordon: Cordon | None = None
    content: frozenset[str] = field(default_factory=frozenset)
    slots: list[tuple[int, int, str, str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.refresh()

    def refresh(self) -> None:
        reserved: dict[int, int] = {}
        if self.ledger is not None:
            for r in self.ledger.reservations.values():
                reserved[r.device] = reserved.get(r.device, 0) + r.bytes
        self.slots = sorted(
            (
                (d.total - reserved.get(d.ordinal, 0) - d.unreserved, d.ordinal, d.vendor, d.arch, d.total)
                for d in self.inv.devices
            ),
            key=lambda t: (-t[0], t[1]),
        )

    def free(self, dev: Device) -> int:
        for f, ordinal, *_ in self.slots:
            if ordinal == dev.ordinal:
                return f
        return 0


def arch_matches(want: str, have: str) -> bool:
    if want.endswith("+"):
        base = want[:-1]
        prefix = base.rstrip("0123456789")
        if not have.startswith(prefix) or not base[len(prefix) :].isdigit():
            return False
        tail = have[len(prefix) :]
        return tail.isdigit() and int(tail) >= int(base[len(prefix) :])
    return want == have


def tenant_usage(nodes: dict[str, NodeView], tenant: str) -> int:
    """What ``tenant`` holds across the pool: on each node, the larger of its reservations there and its use."""
    total = 0
    for v in nodes.values():
        reserved = sum(r.bytes for r in v.ledger.reservations.values() if r.tenant == tenant) if v.ledger else 0
        use = v.inv.tenants.get(tenant)
        total += max(reserved, use.memory if use else 0)
    return total


def decide(
    req: PlaceRequest,
    nodes: dict[str, NodeView],
    *,
    policy: str = "binpack",
    quota: int | None = None,
    decision_id: str | None = None,
    content_index: dict[str, set[str]] | None = None,
) -> dict[str, Any]:
    """The decision for ``req`` on this view: ``outcome`` is ``placed`` (with ``node``, ``device``) or ``wait``
    (with ``reason``, the most common rejection). Pure: the caller reserves the winner in etcd."""
    t0 = time.perf_counter()
    did = decision_id or uuid.uuid4().hex[:16]
    rejected: dict[str, dict[str, Any]] = {}

    def reject(reason: str, node: str, detail: Any) -> None:
        """Count a rejection; the first SAMPLE of each reason keep their detail (``detail()`` when callable, so
        the text of the other 990 rejections out of 1000 is never built)."""
        r = rejected.get(reason)
        if r is None:
            r = rejected[reason] = {"count": 0, "nodes": []}
        r["count"] += 1
        if len(r["nodes"]) < SAMPLE:
            r["nodes"].append({"node": node, "detail": detail() if callable(detail) else detail})

    candidates: list[tuple[float, str, int, float, float, float]] = []
    memory, binpack = req.memory, policy == "binpack"
    w_fit, w_load, w_aff = WEIGHTS["fit"], WEIGHTS["load"], WEIGHTS["affinity"]
    if quota is not None:
        used = tenant_usage(nodes, req.tenant)
        if used + req.memory > quota:
            reject(
                "tenant-quota",
                "*",
                f"tenant {req.tenant!r} holds {_human(used)} of its {_human(quota)} pool "
                f"quota; {_human(req.memory)} more does not fit",
            )
            nodes = {}
    want = sorted(set(req.digests))
    firsts = [int(h[:2], 16) for h in want]
    matches: dict[str, int] = {}
    for h in want:
        for n in (
            content_index.get(h, ())
            if content_index is not None
            else [name for name, v in nodes.items() if h in v.content]
        ):
            matches[n] = matches.get(n, 0) + 1
    for name, v in nodes.items():
        inv = v.inv
        if v.cordon is not None:
            reject("cordoned", name, v.cordon.reason or "cordoned")
            continue
        slots = v.slots
        if req.vendor is not None:
            slots = [t for t in slots if t[2] == req.vendor]
            if not slots:
                reject(
                    "vendor",
                    name,
                    lambda inv=inv: "has " + (",".join(sorted({d.vendor for d in inv.devices})) or "no devices"),
                )
                continue
        if req.arch is not None:
            slots = [t for t in slots if arch_matches(req.arch, t[3])]
            if not slots:
                reject("arch", name, lambda inv=inv: "has " + ",".join(sorted({d.arch for d in inv.devices})))
                continue
        if not slots or slots[0][0] < memory:  # slots: most free first
            reject(
                "memory",
                name,
                lambda slots=slots: f"{_human(max(slots[0][0] if slots else 0, 0))} free, {_human(memory)} needed",
            )
            continue
        free, ordinal, _, _, total = slots[0]
        after = (free - memory) / total if total else 0.0
        fit = 1.0 - after if binpack else after
        load = 1.0 - min(inv.load, 1.0)
        below = bisect_left(firsts, inv.content_threshold) if want else 0
        if below:
            aff = min(1.0, matches.get(name, 0) / below)
        else:
            use = inv.tenants.get(req.tenant)
            aff = 0.5 if use is not None and use.shared > 0 else 0.0
        candidates.append((-(w_fit * fit + w_load * load + w_aff * aff), name, ordinal, fit, load, aff))
    candidates.sort()
    return finish(req, did, policy, len(nodes), candidates[:TOP], len(candidates), rejected, t0)


def finish(
    req: PlaceRequest,
    did: str,
    policy: str,
    considered: int,
    top: list[tuple[float, str, int, float, float, float]],
    feasible: int,
    rejected: dict[str, dict[str, Any]],
    t0: float,
) -> dict[str, Any]:
    """The decision record from its parts; ``top`` holds (-score, node, device, fit, load, affinity), best first."""
    decision: dict[str, Any] = {
        "id": did,
        "time": time.time(),
        "request": req.model_dump(exclude={"digests"}) | {"digests": len(req.digests)},
        "policy": policy,
        "nodes_considered": considered,
        "candidates": [
            {
                "node": n,
                "device": d,
                "score": round(-s, 3),
                "parts": {"fit": round(f, 4), "load": round(lo, 4), "affinity": round(a, 4)},
            }
            for s, n, d, f, lo, a in top
        ],
        "feasible": feasible,
        "rejected": rejected,
    }
    if top:
        decision.update(outcome="placed", node=top[0][1], device=top[0][2])
    else:
        decision.update(outcome="wait", reason=summary(decision))
    decision["elapsed_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
    return decision


def summary(decision: dict[str, Any]) -> str:
    """One line in the style of "0/3 nodes fit: 2 memory (n1: 1.0 GiB free, 4.0 GiB needed), 1 cordoned"."""
    rej = decision.get("rejected") or {}
    parts = []
    for reason, r in sorted(rej.items(), key=lambda kv: -kv[1]["count"]):
        first = r["nodes"][0] if r["nodes"] else None
        parts.append(f"{r['count']} {reason}" + (f" ({first['node']}: {first['detail']})" if first else ""))
    n = decision.get("nodes_considered", 0)
    if not n and not parts:
        return "no node has joined the pool"
    return f"{decision.get('feasible', 0)}/{n} nodes fit" + (": " + ", ".join(parts) if parts else "")


def explain(decision: dict[str, Any]) -> str:
    """A decision as text for ``wooly pool explain``."""
    req = decision.get("request", {})
    lines = [
        f"decision {decision.get('id')}  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(decision.get('time', 0)))}"
        f"  policy {decision.get('policy')}  by {decision.get('controller', '?')}",
        f"request: tenant {req.get('tenant')!r}, {_human(int(req.get('memory', 0)))} ({req.get('memory_source', '')})"
        + (f", vendor {req['vendor']}" if req.get("vendor") else "")
        + (f", arch {req['arch']}" if req.get("arch") else "")
        + f", priority {req.get('priority', 0)}"
        + (f", {req['digests']} content digests" if req.get("digests") else "")
        + (f", program {req['program'][:60]!r}" if req.get("program") else ""),
    ]
    outcome = decision.get("outcome")
    if outcome == "placed":
        lines.append(
            f"placed on {decision.get('node')} device {decision.get('device')}"
            f" (reservation {decision.get('reservation', '-')}, waited {decision.get('waited_s', 0):.2f} s,"
            f" {decision.get('attempts', 1)} attempt(s))"
        )
    elif outcome == "wait":
        lines.append(f"waiting: {decision.get('reason', summary(decision))}")
    else:
        lines.append(f"{outcome}: {decision.get('reason', summary(decision))}")
    lines.append(
        f"{decision.get('nodes_considered', 0)} node(s) considered, {decision.get('feasible', 0)} feasible,"
        f" decided in {decision.get('elapsed_ms', 0)} ms"
    )
    if decision.get("candidates"):
        lines.append("candidates (score = 40 fit + 20 load + 40 affinity):")
        for c in decision["candidates"]:
            p = c["parts"]
            mark = "*" if c["node"] == decision.get("node") else " "
            lines.append(
                f" {mark} {c['node']:24} dev {c['device']}  {c['score']:7.2f}   fit {p.get('fit', 0):.3f}"
                f"  load {p.get('load', 0):.3f}  affinity {p.get('affinity', 0):.3f}"
            )
    for reason, r in (decision.get("rejected") or {}).items():
        lines.append(f"rejected by {reason}: {r['count']} node(s)")
        for x in r["nodes"]:
            lines.append(f"    {x['node']}: {x['detail']}")
        if r["count"] > len(r["nodes"]):
            lines.append(f"    ... and {r['count'] - len(r['nodes'])} more")
    return "\n".join(lines)
