"""Many tenants on one device: dedup, fair scheduling, wake time, and a soak (docs/hypervisor.md).

    python -m benchmarks.sharing [--quick] [--only dedup,fairness,wake,soak]

(a) dedup: 4 client processes load the same model (raw driver uploads): physical device bytes over
    one tenant's bytes (target <= 1.05), and bytes sent on the wire over bytes uploaded.
(b) fairness: two saturating tenants with weights 1:3, observed device-time ratio (target 3 +-10%);
    a lone tenant's throughput with the scheduler vs without any policy (target >= 0.95).
(c) wake: restore a slept tenant of >= 512 MiB vs a plain memcpy of the same bytes (target >= 0.8x
    the bandwidth).
(d) soak: many clients doing random verified work (driver calls, and two PyTorch programs): zero errors, memory
    back to baseline.
Each prints JSON lines (benchmarks.common.emit); the last line is the headline (dedup ratio).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import multiprocessing as mp
import os
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks import _sharing_workers as W
from benchmarks.common import emit, median
from proto import messages as m
from woolyhv.launcher import start_gpud

MiB = 1 << 20
BENCH = "sharing"


def _gpud(config: str = "", *extra: str) -> tuple[str, Any, str]:
    fd, path = tempfile.mkstemp(suffix=".toml", prefix="wooly-bench-")
    with os.fdopen(fd, "w") as f:
        f.write(config)
    endpoint, proc = start_gpud(backend="cpu", log_level="warning", extra_args=["--config", path, *extra])
    return endpoint, proc, path


def _stop(proc: Any, path: str) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except Exception:  # noqa: BLE001
        proc.kill()
    os.unlink(path)


def _hv(d: Any) -> dict[str, Any]:
    return d.conn.call(m.ListSessions())[0]["hypervisor"]


def _emit_band(metric: str, value: float, baseline: float, tol: float, unit: str, **extra: Any) -> dict[str, Any]:
    """A result whose target is "within +-tol of the baseline" (emit's targets are one-sided)."""
    ratio = value / baseline if baseline else float("nan")
    line = {
        "bench": BENCH,
        "metric": metric,
        "value": round(value, 4),
        "baseline": round(baseline, 4),
        "ratio": round(ratio, 4),
        "target": 1.0,
        "tolerance": tol,
        "unit": unit,
        "meets_target": abs(ratio - 1.0) <= tol,
        **extra,
    }
    print(json.dumps(line), flush=True)
    return line


# ---------------------------------------------------------------------- (a) dedup
def bench_dedup(quick: bool) -> dict[str, Any]:
    total = 200 * MiB if not quick else 96 * MiB
    n = 4
    endpoint, proc, path = _gpud("[hypervisor]\n", "--cpu-memory", str(4 << 30))
    ctx = mp.get_context("spawn")
    try:
        obs = W.connect(endpoint, "observer")
        barrier = ctx.Barrier(n + 1)
        out = ctx.Queue()
        procs = [ctx.Process(target=W.load_model, args=(endpoint, f"tenant{i}", total, barrier, out)) for i in range(n)]
        procs[0].start()  # the first tenant loads alone, then three at once
        first = out.get(timeout=300)
        for p in procs[1:]:
            p.start()
        rest = [out.get(timeout=300) for _ in procs[1:]]
        obs.ctx_synchronize()
        time.sleep(0.2)
        st = _hv(obs)
        barrier.wait(timeout=60)
        for p in procs:
            p.join(60)
        obs.conn.close()
    finally:
        _stop(proc, path)
    results = [first, *rest]
    assert all(r["ok"] for r in results), results
    physical = st["physical"]["0"]
    one = next(t["memory_used"] for t in st["tenants"] if t["tenant"] == "tenant0")
    sent = sum(r["bytes_sent"] for r in results)
    asked = sum(r["bytes_total"] for r in results) or n * total
    emit(
        BENCH,
        "dedup_wire_bytes",
        sent / MiB,
        asked / MiB,
        0.5,
        "MiB",
        note="bytes sent on the wire vs bytes uploaded by the 4 tenants",
        first_load_s=round(first["seconds"], 3),
        later_load_s=round(median([r["seconds"] for r in rest]), 3),
    )
    return emit(
        BENCH,
        "dedup_device_bytes",
        physical / MiB,
        one / MiB,
        1.05,
        "MiB",
        tenants=n,
        model_mib=total // MiB,
        store_mib=round(st["dedup"]["store_bytes"] / MiB, 1),
    )


# ---------------------------------------------------------------------- (b) fairness
def _run_saturating(
    endpoint: str, tenants: list[str], seconds: float, key: str = "device_time_s"
) -> tuple[dict[str, float], dict[str, int]]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(tenants) + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=W.saturate, args=(endpoint, t, seconds, barrier, out)) for t in tenants]
    for p in procs:
        p.start()
    obs = W.connect(endpoint, "observer")
    barrier.wait(timeout=120)
    time.sleep(0.5)
    t1 = {t["tenant"]: t for t in _hv(obs)["tenants"]}
    time.sleep(seconds - 1.0)
    t2 = {t["tenant"]: t for t in _hv(obs)["tenants"]}
    ops = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    obs.conn.close()

    def delta(t: str, k: str) -> float:
        return t2[t][k] - t1[t][k] if t in t2 and t in t1 else 0.0

    out = {t: delta(t, "device_time_s") for t in tenants}
    out.update({f"{t}_contended": delta(t, "contended_time_s") for t in tenants})
    return out, ops


def bench_fairness(quick: bool) -> dict[str, Any]:
    seconds = 4.0 if quick else 10.0
    # one memset stream per tenant uses one core: two of them fit side by side on two cores, so weights show only
    # when the device is time-sliced (the spatial division of cores is measured by bench_spatial)
    endpoint, proc, path = _gpud(
        '[scheduler]\nmode = "timeslice"\n[tenants.w1]\nweight = 1\n[tenants.w3]\nweight = 3\n',
        "--cpu-memory",
        str(2 << 30),
    )
    try:
        dt, ops = _run_saturating(endpoint, ["w1", "w3"], seconds)
        sched = _hv(W.connect(endpoint, "observer"))["scheduler"]
    finally:
        _stop(proc, path)
    # WFQ shares the device by weight among *backlogged* tenants; on a shared machine a client can
    # stall and leave the device to the other (work conservation), so the ratio is measured over
    # the device time used while the other tenant was waiting. The raw ratio is reported beside it.
    window = seconds - 1.0
    line = _emit_band(
        "fairness_device_time_ratio",
        dt["w3_contended"] / dt["w1_contended"],
        3.0,
        0.10,
        "x",
        measured_over="device time while the other tenant waited",
        raw_ratio=round(dt["w3"] / dt["w1"], 4),
        device_busy=round((dt["w1"] + dt["w3"]) / window, 3),
        device_s={k: round(v, 3) for k, v in dt.items()},
        ops=ops,
        starvation_max_wait_s=sched["starvation_max_wait_s"],
        starvation_p99_wait_s=sched["starvation_p99_wait_s"],
    )
    # A lone tenant: scheduler on vs no policy at all, rounds interleaved (the machine is shared).
    rounds = 4 if quick else 8
    secs = 2.0 if quick else 3.0
    on_ep, on_proc, on_path = _gpud("", "--cpu-memory", str(1 << 30))
    off_ep, off_proc, off_path = _gpud("", "--cpu-memory", str(1 << 30), "--no-scheduler")
    with_policy, without = [], []
    try:
        for r in range(rounds):
            pair = [(on_ep, with_policy), (off_ep, without)]
            for ep, acc in pair if r % 2 == 0 else pair[::-1]:  # alternate who goes first
                _, ops = _run_saturating(ep, ["solo"], secs + 1.0)
                acc.append(ops["solo"] / (secs + 1.0))
    finally:
        _stop(on_proc, on_path)
        _stop(off_proc, off_path)
    # Medians of interleaved rounds: the machine is shared, single rounds swing by 2x either way.
    paired = [w / o for w, o in zip(with_policy, without, strict=True) if o]
    emit(
        BENCH,
        "lone_tenant_throughput",
        median(with_policy),
        median(without),
        0.95,
        "ops/s",
        higher_is_better=True,
        rounds=rounds,
        statistic="median of interleaved rounds",
        median_paired_ratio=round(median(paired), 3),
        best_ratio=round(max(with_policy) / max(without), 3),
        with_policy=[round(x, 1) for x in with_policy],
        without=[round(x, 1) for x in without],
    )
    return line


# ---------------------------------------------------------------------- (c) wake
def _memcpy_gbs(size: int, reps: int = 3) -> tuple[float, float]:
    """Plain single-threaded memcpy bandwidth of ``size`` bytes: into freshly mapped pages (the state a
    slept allocation's pages are in: each first touch faults a zeroed page in) and into resident pages."""
    src = np.frombuffer(np.random.default_rng(5).bytes(size), dtype=np.uint8).copy()
    fresh, resident = float("inf"), float("inf")
    for _ in range(reps):
        dst = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        buf = (ctypes.c_char * size).from_buffer(dst)
        daddr = ctypes.addressof(buf)
        t = time.perf_counter()
        ctypes.memmove(daddr, src.ctypes.data, size)
        fresh = min(fresh, time.perf_counter() - t)
        t = time.perf_counter()
        ctypes.memmove(daddr, src.ctypes.data, size)
        resident = min(resident, time.perf_counter() - t)
        del buf
        dst.close()
    return size / fresh / 1e9, size / resident / 1e9


def bench_wake(quick: bool) -> dict[str, Any]:
    size = 512 * MiB
    cfg = (
        '[hypervisor]\nidle_check_s = 0.1\nhost_budget = "2GiB"\n[dedup]\nenabled = false\n'
        "[tenants.sleeper]\nidle_timeout_s = 0.5\n"
    )
    endpoint, proc, path = _gpud(cfg, "--cpu-memory", str(2 << 30))
    walls, wakes = [], []
    try:
        d = W.connect(endpoint, "sleeper")
        obs = W.connect(endpoint, "observer")
        data = np.random.default_rng(11).bytes(size)
        p = d.mem_alloc(size)
        d.memcpy_htod(p, data)
        d.ctx_synchronize()
        for _ in range(2 if quick else 4):
            deadline = time.monotonic() + 30
            while next(t for t in _hv(obs)["tenants"] if t["tenant"] == "sleeper")["state"] != "asleep":
                if time.monotonic() > deadline:
                    raise RuntimeError("the tenant did not fall asleep")
                time.sleep(0.05)
            t0 = time.perf_counter()
            d.ctx_synchronize()  # the next call wakes it
            walls.append(time.perf_counter() - t0)
            wakes.append(next(t for t in _hv(obs)["tenants"] if t["tenant"] == "sleeper")["last_wake_s"])
        exact = bytes(d.memcpy_dtoh(p, size)) == data
        st = _hv(obs)["sleep"]
        d.conn.close()
        obs.conn.close()
    finally:
        _stop(proc, path)
    fresh, resident = _memcpy_gbs(size)
    wake_s = min(wakes)  # best of the wakes, against the best of the memcpys
    wake_gbs = size / wake_s / 1e9
    return emit(
        BENCH,
        "wake_bandwidth",
        wake_gbs,
        fresh,
        0.8,
        "GB/s",
        higher_is_better=True,
        bytes=size,
        baseline_is="memcpy into freshly mapped pages (what restoring released pages costs)",
        resident_memcpy_gbs=round(resident, 3),
        ratio_vs_resident_memcpy=round(wake_gbs / resident, 3),
        wake_s=round(wake_s, 4),
        call_with_wake_s=round(min(walls), 4),
        bit_exact=exact,
        sleep_s=round(st["last_sleep_s"], 4),
    )


# ---------------------------------------------------------------------- (d) soak
def bench_soak(quick: bool) -> dict[str, Any]:
    clients, seconds = (6, 10.0) if quick else (16, 60.0)
    cfg = "".join(f"[tenants.soak{i}]\nweight = {1 + i}\npriority = {i % 5}\n" for i in range(4))
    cfg += "[tenants.sleepy]\nidle_timeout_s = 0.5\n[hypervisor]\nidle_check_s = 0.1\n"
    endpoint, proc, path = _gpud(cfg, "--cpu-memory", str(3 << 30))
    ctx = mp.get_context("spawn")
    try:
        obs = W.connect(endpoint, "observer")
        base = _hv(obs)["physical"]["0"]
        out = ctx.Queue()
        # two of the clients are PyTorch programs (their ops run in their tenants' executor processes)
        procs = [
            ctx.Process(target=W.soak, args=(endpoint, f"soak{i % 4}", seconds, i, out)) for i in range(clients - 3)
        ]
        procs += [ctx.Process(target=W.torch_soak, args=(endpoint, f"soak{i}", seconds, 500 + i, out)) for i in (0, 1)]
        # ... and one that pauses now and then, so its tenant is put to sleep and woken mid-run
        procs.append(
            ctx.Process(target=W.soak, args=(endpoint, "sleepy", seconds, 999, out), kwargs={"pause_every": 60})
        )
        for p in procs:
            p.start()
        results = [out.get(timeout=seconds + 300) for _ in procs]
        for p in procs:
            p.join(60)
        deadline = time.monotonic() + 10
        while True:
            st = _hv(obs)
            if st["physical"]["0"] == base or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        obs.conn.close()
        alive = proc.poll() is None
    finally:
        _stop(proc, path)
    errors = [e for r in results for e in r["errors"]]
    leftover = st["physical"]["0"] - base
    line = emit(
        BENCH,
        "soak_errors",
        float(len(errors)),
        1.0,
        0.0,
        "errors",
        clients=clients,
        seconds=seconds,
        ops=sum(r["ops"] for r in results),
        leftover_bytes=leftover,
        store_chunks=st["dedup"]["chunks"],
        sleeps=st["sleep"]["sleeps"],
        wakes=st["sleep"]["wakes"],
        cow_breaks=st["dedup"]["cow_breaks"],
        dedup_hit_mib=round(st["dedup"]["bytes_hit"] / MiB, 1),
        gpud_alive=alive,
        first_errors=errors[:3],
    )
    emit(BENCH, "soak_leftover_bytes", float(leftover), 1.0, 0.0, "bytes")
    return line


# ---------------------------------------------------------------------- (e) spatial sharing
def _burners(endpoint: str, plan: list[tuple[Any, ...]]) -> dict[str, list[tuple[float, float]]]:
    """Run W.burn in one process per (tenant, seconds, blocks, iters, ahead[, linger_s]); each tenant's (start, end)
    spans."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(plan) + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=W.burn, args=(endpoint, t, secs, blocks, iters, barrier, out, ahead, *linger))
        for t, secs, blocks, iters, ahead, *linger in plan
    ]
    for p in procs:
        p.start()
    barrier.wait(timeout=180)
    spans = dict(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(30)
    return spans


def _rate(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Launches per second completed inside [lo, hi]."""
    return sum(1 for _, e in spans if lo <= e <= hi) / max(hi - lo, 1e-9)


def bench_spatial(quick: bool) -> dict[str, Any]:
    """NOTE [spatial sharing] (jit/cores.py): tenants run at once on shares of the cores."""
    secs = 3.0 if quick else 6.0
    cfg = "[tenants.w1]\nweight = 1\n[tenants.w3]\nweight = 3\n"
    endpoint, proc, path = _gpud(cfg, "--cpu-memory", str(1 << 30))
    try:
        # 1. two latency-bound tenants: one block each (one worker: ~one core of the two)
        small_iters = 60000
        solo_a = _burners(endpoint, [("lat_a", secs, 1, small_iters, False)])["lat_a"]
        solo_b = _burners(endpoint, [("lat_b", secs, 1, small_iters, False)])["lat_b"]
        both = _burners(endpoint, [("lat_a", secs, 1, small_iters, False), ("lat_b", secs, 1, small_iters, False)])

        def steady(sp: list[tuple[float, float]]) -> float:
            t0 = sp[0][0]
            return _rate(sp, t0 + 0.3, sp[-1][1])

        ra, rb = steady(both["lat_a"]) / steady(solo_a), steady(both["lat_b"]) / steady(solo_b)
        emit(
            BENCH,
            "latency_bound_pair_min_ratio",
            min(ra, rb),
            1.0,
            0.8,
            "x",
            higher_is_better=True,
            each=[round(ra, 3), round(rb, 3)],
            note="each tenant's throughput together / alone (time slicing: <= 0.5)",
        )
        emit(
            BENCH,
            "latency_bound_pair_aggregate",
            (steady(both["lat_a"]) + steady(both["lat_b"])) / steady(solo_a),
            1.0,
            1.6,
            "x",
            higher_is_better=True,
            note="both together / one alone",
        )
        # 2. saturating tenants, weights 3:1: 64 blocks each (more work than cores); w3 stops first
        iters = 10000
        solo = _burners(endpoint, [("w1", secs / 2, 64, iters, True)])["w1"]
        solo_rate = steady(solo)
        # w3 stops launching and stays connected (idle) until w1 is done: recovery measures the re-division of
        # the cores, not w3's process exit competing for them on a small host
        sp = _burners(endpoint, [("w3", secs, 64, iters, True, 3.0), ("w1", secs + 2.0, 64, iters, True)])
        w3_end = sp["w3"][-1][1]
        lo = max(sp["w3"][0][0], sp["w1"][0][0]) + 0.5
        hi = w3_end - 0.2
        ratio = _rate(sp["w3"], lo, hi) / _rate(sp["w1"], lo, hi)  # same kernel: launches = core-time
        line = _emit_band(
            "weighted_core_time_ratio",
            ratio,
            3.0,
            0.10,
            "x",
            measured_over="both saturating",
            launches={k: len(v) for k, v in sp.items()},
        )
        after = _rate(sp["w1"], w3_end + 0.1, w3_end + 1.1)
        emit(
            BENCH,
            "recovery_throughput_ratio",
            after / solo_rate,
            1.0,
            0.95,
            "x",
            higher_is_better=True,
            note="w1 launches/s from 100 ms after w3 stopped, over solo",
        )

        # 3. a very long kernel of one tenant, small kernels of another of equal priority: their p99 latency
        def p99(sp: list[tuple[float, float]]) -> float:
            lat = sorted(e - s for s, e in sp[3:])
            return lat[min(len(lat) - 1, int(0.99 * len(lat)))]

        solo_small = _burners(endpoint, [("small", secs / 2, 1, 2000, False)])["small"]
        mixed = _burners(endpoint, [("long", secs + 1.0, 12000, 20000, False), ("small", secs, 1, 2000, False)])
        emit(
            BENCH,
            "small_kernel_p99_latency_ratio",
            p99(mixed["small"]),
            p99(solo_small),
            5.0,
            "s",
            note="p99 launch-to-completion of 1-block kernels beside a tenant's long kernel, over alone",
            long_launches=len(mixed["long"]),
        )
        hv = _hv(W.connect(endpoint, "observer"))
        emit(
            BENCH,
            "concurrency",
            max(t.get("concurrency", 0.0) for t in hv["tenants"]),
            1.0,
            0.0,
            "x",
            higher_is_better=True,
            note="the largest share of a tenant's busy time spent running beside another",
        )
    finally:
        _stop(proc, path)
    return line


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="soak,wake,fairness,spatial,dedup")
    args = ap.parse_args()
    parts = {
        "dedup": bench_dedup,
        "fairness": bench_fairness,
        "wake": bench_wake,
        "soak": bench_soak,
        "spatial": bench_spatial,
    }
    headline = None
    for name in args.only.split(","):
        line = parts[name.strip()](args.quick)
        if name.strip() == "dedup":
            headline = line
    if headline is not None:  # the headline goes last
        print(json.dumps(headline), flush=True)


if __name__ == "__main__":
    main()
