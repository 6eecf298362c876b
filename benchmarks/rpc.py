"""RPC cost of the client ↔ gpud path, against raw ZeroMQ and memcpy measured in the same run.

    python -m benchmarks.rpc [--quick]

1. Round trip of a tiny synchronous call (``sync``: validated, dispatched, answered) through the
   client library, vs a raw pyzmq REQ/REP echo between two processes on the same transport.
   Target: p50 ≤ 1.5× raw.
2. Host→device and device→host bandwidth for 1 MiB … 256 MiB through the client library to a
   same-host gpud (the CPU backend, so "device" memory is gpud's memory), vs a plain in-process
   memcpy of the same size. Target ≥ 0.5× memcpy.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks.common import emit, percentile
from proto import messages as m

ECHO = """
import sys, zmq
s = zmq.Context.instance().socket(zmq.REP)
s.bind(sys.argv[1])
print("up", flush=True)
while True:
    m = s.recv()
    if m == b"quit":
        s.send(b"")
        break
    s.send(m)
"""


def _raw_rtt(endpoint: str, n: int) -> list[float]:
    import msgpack
    import zmq

    proc = subprocess.Popen([sys.executable, "-c", ECHO, endpoint], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.connect(endpoint)
    payload = msgpack.packb({"kind": "sync", "rid": 1})  # the raw baseline: the same bytes, no schema
    for _ in range(200):
        sock.send(payload)
        sock.recv()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        sock.send(payload)
        sock.recv()
        out.append(time.perf_counter() - t)
    sock.send(b"quit")
    sock.recv()
    sock.close(0)
    proc.wait(5)
    return out


def _client_rtt(driver, n: int) -> list[float]:
    conn = driver.conn
    for _ in range(200):
        conn.call(m.Sync())
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn.call(m.Sync())
        out.append(time.perf_counter() - t)
    return out


def _memcpy_gbs(size: int, reps: int) -> float:
    a = np.ones(size, dtype=np.uint8)
    b = np.ones(size, dtype=np.uint8)  # both touched: measure copying, not page faults
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        ctypes.memmove(b.ctypes.data, a.ctypes.data, size)
        best = min(best, time.perf_counter() - t)
    return size / best / 1e9


def _copy_gbs(driver, size: int, reps: int) -> tuple[float, float]:
    host = np.ones(size, dtype=np.uint8)
    out = np.ones(size, dtype=np.uint8)
    ptr = driver.mem_alloc(size)
    driver.memcpy_htod(ptr, host)  # commit the device pages
    driver.ctx_synchronize()
    best_h = best_d = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        driver.memcpy_htod(ptr, host)
        driver.ctx_synchronize()
        best_h = min(best_h, time.perf_counter() - t)
        t = time.perf_counter()
        driver.memcpy_dtoh(ptr, size, out=out)
        best_d = min(best_d, time.perf_counter() - t)
    driver.mem_free(ptr)
    return size / best_h / 1e9, size / best_d / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer samples and sizes")
    args = ap.parse_args()
    n = 500 if args.quick else 5000
    from shim.client import Connection
    from shim.driver import Driver
    from tests.conftest import free_port
    from woolyhv.launcher import start_gpud

    results = []
    # tcp: CURVE, gpud's default (NOTE [curve] in proto/curve.py), against raw pyzmq in clear; tcp_insecure: both in
    # clear (gpud --insecure), the figure comparable with runs before CURVE.
    for transport in ("tcp", "tcp_insecure", "ipc"):
        if transport.startswith("tcp"):
            ep_raw, ep_gpud = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
        else:
            ep_raw = f"ipc:///tmp/wooly-bench-raw-{os.getpid()}.sock"
            ep_gpud = f"ipc:///tmp/wooly-bench-gpud-{os.getpid()}.sock"
        insecure = transport == "tcp_insecure"
        endpoint, proc = start_gpud(
            ep_gpud, backend="cpu", log_level="warning", extra_args=["--insecure"] if insecure else None
        )
        time.sleep(2.0)  # steady state: let gpud's background JIT warm-up finish before timing
        try:
            if insecure:
                os.environ["WOOLY_INSECURE"] = "1"
            try:
                driver = Driver(Connection(endpoint))
            finally:
                os.environ.pop("WOOLY_INSECURE", None)
            raw = _raw_rtt(ep_raw, n)
            ours = _client_rtt(driver, n)
            raw_p50, raw_p99 = percentile(raw, 50) * 1e6, percentile(raw, 99) * 1e6
            p50, p99 = percentile(ours, 50) * 1e6, percentile(ours, 99) * 1e6
            emit("rpc", f"rtt_p99_{transport}", p99, raw_p99, 1.5, "us", samples=n)
            results.append(emit("rpc", f"rtt_p50_{transport}", p50, raw_p50, 1.5, "us", samples=n))
            if transport == "ipc":
                sizes = [1 << 20, 16 << 20, 64 << 20] + ([] if args.quick else [256 << 20])
                reps = 3 if args.quick else 5
                worst = None
                for size in sizes:
                    base = _memcpy_gbs(size, reps)
                    h, d = _copy_gbs(driver, size, reps)
                    mib = size >> 20
                    lh = emit("rpc", f"htod_{mib}MiB", h, base, 0.5, "GB/s", higher_is_better=True)
                    ld = emit("rpc", f"dtoh_{mib}MiB", d, base, 0.5, "GB/s", higher_is_better=True)
                    for line in (lh, ld):
                        if worst is None or line["ratio"] < worst["ratio"]:
                            worst = line
                assert worst is not None
                emit(
                    "rpc",
                    "copy_bandwidth_worst",
                    worst["value"],
                    worst["baseline"],
                    0.5,
                    "GB/s",
                    higher_is_better=True,
                    case=worst["metric"],
                )
            driver.conn.close()
        finally:
            proc.terminate()
            proc.wait(10)
    # headline: the tiny-call round trip over tcp
    tcp = results[0]
    emit("rpc", "rtt_p50", tcp["value"], tcp["baseline"], 1.5, "us", transport="tcp")


if __name__ == "__main__":
    main()
