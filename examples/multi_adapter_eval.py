"""Many tenants, one base model: N processes each load the same base weights plus their own LoRA adapter
and evaluate concurrently on one gpud, which holds the base weights once (VRAM dedup).

    python examples/multi_adapter_eval.py [--clients 4] [--base-mib 64] [--server tcp://host:5555]

Without ``--server`` an embedded gpud is started. Each client checks its outputs against the same
computation on its own CPU. The last line is a JSON summary: device bytes in use vs the N copies the
clients asked for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

HIDDEN = 1024
RANK = 8


def base_weights(base_mib: int):  # the same bytes in every process: seeded
    import torch

    g = torch.Generator().manual_seed(0)
    layers = max(1, base_mib * (1 << 20) // (HIDDEN * HIDDEN * 4))
    return [torch.randn(HIDDEN, HIDDEN, generator=g) / HIDDEN**0.5 for _ in range(layers)]


def adapter(layers: int, index: int):  # each client's own LoRA: A (rank x hidden), B (hidden x rank)
    import torch

    g = torch.Generator().manual_seed(1000 + index)
    return [
        (torch.randn(RANK, HIDDEN, generator=g) * 0.01, torch.randn(HIDDEN, RANK, generator=g) * 0.01)
        for _ in range(layers)
    ]


def forward(x, weights, lora):
    import torch

    for w, (a, b) in zip(weights, lora, strict=True):
        x = torch.relu(x @ w.T + (x @ a.T) @ b.T)
    return x


def child(index: int, base_mib: int, batches: int) -> None:
    import shim.torch

    shim.torch.activate()
    import torch

    host_w = base_weights(base_mib)
    host_lora = adapter(len(host_w), index)
    t0 = time.perf_counter()
    weights = [w.cuda() for w in host_w]  # large: content-addressed, shared with the other tenants
    lora = [(a.cuda(), b.cuda()) for a, b in host_lora]
    torch.cuda.synchronize()
    load_s = time.perf_counter() - t0
    g = torch.Generator().manual_seed(index)
    worst = 0.0
    t0 = time.perf_counter()
    for _ in range(batches):
        x = torch.randn(32, HIDDEN, generator=g)
        got = forward(x.cuda(), weights, lora).cpu()
        want = forward(x, host_w, host_lora)
        worst = max(worst, (got - want).abs().max().item())
    eval_s = time.perf_counter() - t0
    free, total = torch.cuda.mem_get_info()
    print(
        json.dumps(
            {
                "client": index,
                "load_s": round(load_s, 3),
                "eval_s": round(eval_s, 3),
                "max_abs_err": worst,
                "used_bytes": total - free,
            }
        ),
        flush=True,
    )
    # Stay loaded until the parent has looked at gpud's memory (it closes our stdin).
    sys.stdin.read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--base-mib", type=int, default=64)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--server", default=os.environ.get("WOOLY_SERVER", ""))
    ap.add_argument("--child", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child >= 0:
        child(args.child, args.base_mib, args.batches)
        return
    proc = None
    endpoint = args.server
    if not endpoint:
        from woolyhv.launcher import start_gpud

        endpoint, proc = start_gpud(backend="cpu", log_level="warning")
    env = dict(os.environ, WOOLY_SERVER=endpoint)
    try:
        kids = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    str(i),
                    "--base-mib",
                    str(args.base_mib),
                    "--batches",
                    str(args.batches),
                ],
                env=dict(env, WOOLY_TENANT=f"adapter{i}"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(args.clients)
        ]
        reports = []
        for k in kids:
            assert k.stdout is not None
            line = k.stdout.readline()
            if not line:
                raise SystemExit(f"client exited with status {k.wait()}")
            reports.append(json.loads(line))
            print(line.strip(), flush=True)
        from shim.client import Connection

        conn = Connection(endpoint, tenant="observer", program="multi_adapter_eval")
        hv = conn.call({"kind": "list_sessions"})[0]["hypervisor"]
        conn.close()
        for k in kids:
            assert k.stdin is not None
            k.stdin.close()
            k.wait(60)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(15)
    base = max(1, args.base_mib * (1 << 20) // (HIDDEN * HIDDEN * 4)) * HIDDEN * HIDDEN * 4
    used = sum(r["used_bytes"] for r in reports)
    summary = {
        "clients": args.clients,
        "base_bytes": base,
        "bytes_requested_by_clients": used,
        "device_bytes": int(hv["physical"]["0"]),
        "store_bytes": hv["dedup"]["store_bytes"],
        "device_over_one_base": round(int(hv["physical"]["0"]) / base, 3),
        "max_abs_err": max(r["max_abs_err"] for r in reports),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
