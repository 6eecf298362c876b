"""The pool at scale: 1000 simulated nodes, 500 placements, one controller.

    python -m benchmarks.pool [--quick] [--nodes N] [--placements N] [--ttl S]

A real etcd on loopback (woolyhv/pool/local.py) and a real ``wooly controller`` process; the nodes are the real
node agent (woolyhv/pool/agent.py: lease, join transaction, inventory, keepalive, ledger reconcile) with simulated
inventories instead of a gpud, many to a process (``--workers`` processes, each driving its agents from one
thread). Inventories mix vendors (NVIDIA sm_80/sm_90, AMD gfx942, CPU), memory (24-141 GiB) and dedup content
(20 "models", each node holding 0-2). Clients (``--clients`` processes) then ask for placements at once: tenants,
1-40 GiB, a third with a vendor, a fifth with ``sm_80+``, a quarter naming a model's content.

Lines (the same JSON as every benchmark):
- ``place_all_s``: wall time until every placement is answered; target 10 s (GPUWorks' published figure is
  500 replicas on 1003 servers in 4 minutes on 9 cores);
- ``place_p99_ms``: client-side latency (request -> node endpoint), target 20 ms; ``etcd_txn_p99_ms`` (the
  same-run floor: one bare transaction) rides along;
- ``controller_cores`` (CPU seconds / wall seconds of the controller during placement), target 1 core;
- ``controller_rss_mb`` (peak), target 300 MB.
"""

from __future__ import annotations

import argparse
import heapq
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import emit, percentile

GiB = 1 << 30
MODELS = 20


def _model_hashes(seed: int) -> list[list[str]]:
    rnd = random.Random(seed)
    return [[f"{rnd.getrandbits(64):016x}" for _ in range(16)] for _ in range(MODELS)]


def _inventory(i: int, rnd: random.Random, models: list[list[str]]) -> tuple[dict[str, Any], list[int]]:
    kind = rnd.random()
    if kind < 0.6:
        vendor, arch, total = "nvidia", rnd.choice(["sm_80", "sm_90"]), rnd.choice([40, 80, 94, 141]) * GiB
    elif kind < 0.85:
        vendor, arch, total = "amd", "gfx942", rnd.choice([64, 128, 192]) * GiB
    else:
        vendor, arch, total = "cpu", "sm_80", rnd.choice([24, 48, 64]) * GiB
    ndev = rnd.choice([1, 2, 4, 8])
    held = rnd.sample(range(MODELS), rnd.choice([0, 0, 1, 2]))
    content = sorted({h for m in held for h in models[m]})
    tenants = {
        f"t{rnd.randrange(50)}": {"sessions": 1, "memory": rnd.randrange(8) * GiB, "shared": 0}
        for _ in range(rnd.randrange(3))
    }
    devices = [
        {
            "ordinal": d,
            "vendor": vendor,
            "name": f"sim-{vendor}-{arch}",
            "arch": arch,
            "total": total,
            "used": 0,
            "unreserved": rnd.randrange(0, 8) * GiB if rnd.random() < 0.3 else 0,
            "jit_targets": ["ptx"] if vendor == "nvidia" else ["amdgcn"] if vendor == "amd" else ["llvm:x86_64"],
        }
        for d in range(ndev)
    ]
    snap = {
        "version": "sim",
        "devices": devices,
        "tenants": tenants,
        "sessions": [],
        "session_count": 0,
        "load": round(rnd.random(), 2),
        "dedup": "xxh3_128:4194304",
        "content": content,
        "content_threshold": 256,
        "content_bytes": len(content) * (4 << 20),
    }
    return snap, held


def worker(etcd: str, start: int, count: int, ttl: int, seed: int, ready: Any, stop: Any) -> None:
    """Run ``count`` node agents from one thread until ``stop`` is set."""
    from gpud import log
    from woolyhv.pool.agent import NodeAgent
    from woolyhv.pool.store import Store

    log.setup("error")
    store = Store(etcd, timeout_s=5.0)
    models = _model_hashes(seed)
    agents = []
    for i in range(start, start + count):
        rnd = random.Random(seed * 100_003 + i)
        snap, _ = _inventory(i, rnd, models)
        a = NodeAgent(
            store, f"sim-{i:05d}", f"tcp://10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:5555", ttl=ttl, interval=ttl / 3
        )
        a.offer(snap)
        agents.append(a)
    due = [(0.0, k) for k in range(len(agents))]
    heapq.heapify(due)
    signalled = False
    while not stop.is_set():
        when, k = heapq.heappop(due)
        now = time.monotonic()
        if when > now:
            time.sleep(min(when - now, 0.05))
            heapq.heappush(due, (when, k))
            continue
        wait = agents[k].step()
        heapq.heappush(due, (time.monotonic() + max(wait, 0.05), k))
        if not signalled and all(a.lease for a in agents):
            ready.set()
            signalled = True
    for a in agents:
        if a.lease:
            store.revoke(a.lease)


def clients(url: str, n: int, seed: int, out: Any, go: Any) -> None:
    from woolyhv.pool.client import PoolClient, PoolError
    from woolyhv.pool.model import PlaceRequest

    rnd = random.Random(seed)
    models = _model_hashes(0)
    c = PoolClient(url, timeout_s=10)
    results = []
    go.wait()
    for _ in range(n):
        model = rnd.randrange(MODELS) if rnd.random() < 0.25 else None
        vendor = rnd.choice(["nvidia", "amd"]) if rnd.random() < 0.33 else None
        req = PlaceRequest(
            tenant=f"t{rnd.randrange(50)}",
            memory=rnd.randint(1, 40) * GiB,
            vendor=vendor,
            arch="sm_80+" if vendor != "amd" and rnd.random() < 0.2 else None,
            deadline_s=5.0,
            digests=models[model] if model is not None else [],
        )
        t0 = time.perf_counter()
        try:
            p = c.place(req)
            results.append(
                {"ms": (time.perf_counter() - t0) * 1e3, "node": p.node, "model": model, "t_end": time.time()}
            )
        except PoolError as exc:
            results.append({"ms": (time.perf_counter() - t0) * 1e3, "error": str(exc), "t_end": time.time()})
    c.close()
    out.put(results)


def _proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def _proc_mem(pid: int) -> tuple[float, float]:
    rss = hwm = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return rss, hwm


def _etcd_txn_floor(url: str, n: int = 200) -> list[float]:
    from woolyhv.pool.store import Store, cmp_mod, op_put

    s = Store(url, prefix="/floor/")
    out = []
    for i in range(n):
        kv = s.get(s.key("k"))
        t0 = time.perf_counter()
        s.txn([cmp_mod(s.key("k"), kv.mod_revision if kv else 0)], [op_put(s.key("k"), {"i": i})])
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 nodes, 100 placements")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--placements", type=int, default=500)
    ap.add_argument("--workers", type=int, default=4, help="processes the simulated nodes run in")
    ap.add_argument("--clients", type=int, default=4, help="client processes asking at once")
    ap.add_argument("--ttl", type=int, default=10, help="node lease TTL (seconds)")
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.placements = 200, 100
    from woolyhv.pool.client import PoolClient
    from woolyhv.pool.local import LocalEtcd, free_port, wait_until
    from woolyhv.pool.store import Store

    load = os.getloadavg()[0]
    with LocalEtcd("bench") as etcd:
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        per = (args.nodes + args.workers - 1) // args.workers
        readies, procs = [], []
        t0 = time.monotonic()
        for w in range(args.workers):
            count = min(per, args.nodes - w * per)
            if count <= 0:
                break
            ready = ctx.Event()
            p = ctx.Process(target=worker, args=(etcd.url, w * per, count, args.ttl, 0, ready, stop), daemon=True)
            p.start()
            readies.append(ready)
            procs.append(p)
        for r in readies:
            if not r.wait(300):
                raise SystemExit("simulated nodes did not all join within 300 s")
        joined_s = time.monotonic() - t0
        kvs, _ = Store(etcd.url).get_prefix(Store(etcd.url).key("nodes", ""))
        assert len(kvs) == args.nodes, f"{len(kvs)} nodes registered, expected {args.nodes}"

        port = free_port()
        url = f"pool://127.0.0.1:{port}"
        ctl = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "woolyhv",
                "controller",
                "--etcd",
                etcd.url,
                "--listen",
                f"tcp://127.0.0.1:{port}",
                "--insecure",
                "--log-level",
                "warning",
                "--claim-s",
                "300",
            ],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=dict(os.environ, WOOLY_INSECURE="1"),
        )
        os.environ["WOOLY_INSECURE"] = "1"
        try:
            t1 = time.monotonic()
            probe = PoolClient(url, timeout_s=2)

            def view_full() -> bool:
                try:
                    st = probe.call({"kind": "status"})
                except Exception:  # noqa: BLE001
                    return False
                return st.get("is_leader") and st.get("nodes") == args.nodes

            if not wait_until(view_full, 120, 0.1):
                raise SystemExit("the controller never saw every node")
            view_s = time.monotonic() - t1
            floor = _etcd_txn_floor(etcd.url)
            out, go = ctx.Queue(), ctx.Event()
            per_client = [
                args.placements // args.clients + (1 if i < args.placements % args.clients else 0)
                for i in range(args.clients)
            ]
            cps = [
                ctx.Process(target=clients, args=(url, n, 1000 + i, out, go), daemon=True)
                for i, n in enumerate(per_client)
            ]
            for p in cps:
                p.start()
            time.sleep(2.0)  # let the client processes import and connect
            cpu0, w0 = _proc_cpu(ctl.pid), time.time()
            go.set()
            results = [r for _ in cps for r in out.get(timeout=600)]
            w1 = max(r["t_end"] for r in results)
            cpu1 = _proc_cpu(ctl.pid)
            rss, hwm = _proc_mem(ctl.pid)
            status = probe.call({"kind": "status"})
            probe.close()
        finally:
            ctl.terminate()
            ctl.wait(10)
            stop.set()
            for p in procs:
                p.join(20)
    lat = [r["ms"] for r in results]
    placed = [r for r in results if "node" in r]
    errors = [r for r in results if "error" in r]
    wall = w1 - w0
    cores = (cpu1 - cpu0) / wall if wall > 0 else float("nan")
    models = _model_hashes(0)
    rnd_held = {}
    for i in range(args.nodes):
        _, held = _inventory(i, random.Random(0 * 100_003 + i), models)
        rnd_held[f"sim-{i:05d}"] = set(held)
    with_model = [r for r in placed if r.get("model") is not None]
    affinity_hits = sum(1 for r in with_model if r["model"] in rnd_held.get(r["node"], set()))
    common = {
        "nodes": args.nodes,
        "placements": args.placements,
        "placed": len(placed),
        "unplaced": len(errors),
        "clients": args.clients,
        "join_s": round(joined_s, 2),
        "view_load_s": round(view_s, 2),
        "load_before": round(load, 2),
        "conflicts": status["stats"]["conflicts"],
        "affinity_placed_on_holder": f"{affinity_hits}/{len(with_model)}",
    }
    emit("pool", "place_all_s", wall, 10.0, 1.0, "s", **common)
    emit(
        "pool",
        "place_p99_ms",
        percentile(lat, 99),
        20.0,
        1.0,
        "ms",
        p50_ms=round(percentile(lat, 50), 3),
        controller_p50_ms=status.get("latency_ms", {}).get("p50"),
        controller_p99_ms=status.get("latency_ms", {}).get("p99"),
        etcd_txn_p50_ms=round(percentile(floor, 50), 3),
        etcd_txn_p99_ms=round(percentile(floor, 99), 3),
    )
    emit("pool", "controller_cores", cores, 1.0, 1.0, "cores", cpu_s=round(cpu1 - cpu0, 3), wall_s=round(wall, 3))
    emit("pool", "controller_rss_mb", hwm, 300.0, 1.0, "MB", rss_end_mb=round(rss, 1))
    if errors:
        print(json.dumps({"first_errors": [e["error"] for e in errors[:3]]}))


if __name__ == "__main__":
    main()
