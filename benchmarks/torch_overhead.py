"""PyTorch face overhead: ``wooly run`` (embedded gpud, same machine) against plain local CPU torch.

    python -m benchmarks.torch_overhead [--quick]

Measures, in one run: steady-state step time (median step after two warm-up steps) of the three
examples under ``wooly run`` and with plain ``python`` on the CPU (each pair run alternately, best
of the repeats: medians and best-of shrug off load spikes from other work on a shared machine), the client's cost
per op (dispatch, metadata cache hit, queueing; gpud's execution not included) and synchronous
round trips per training step, and a training step replayed from a CUDA graph against the same step
streamed op by op. Prints JSON lines last, the GPT ratio as the headline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env(local: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("WOOLY_SERVER", None)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if local:
        env["CUDA_VISIBLE_DEVICES"] = ""
    # Both sides get the OpenMP policy gpud uses (gpud/aten.py): with spinning OpenMP threads the
    # local baseline itself is several times slower on a loaded 2-core machine, flattering wooly.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def _step_ms(cmd: list[str], local: bool) -> float:
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(local), cwd=str(ROOT), timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    m = re.search(r"median time/step ([0-9.]+) ms", p.stdout)
    if m is None:
        raise RuntimeError(f"no time/step in output of {' '.join(cmd)}")
    return float(m.group(1))


def line(metric: str, value: float, baseline: float, target: float, unit: str, **extra: object) -> dict[str, object]:
    ratio = value / baseline if baseline else 0.0
    return {
        "bench": "torch_overhead",
        "metric": metric,
        "value": round(value, 3),
        "baseline": round(baseline, 3),
        "ratio": round(ratio, 3),
        "target": target,
        "unit": unit,
        "meets_target": ratio <= target,
        **extra,
    }


def _executor_hop(quick: bool) -> list[dict[str, object]]:
    """The hop to a tenant's executor process (NOTE [executors]): the same probe against two gpuds started here,
    one with executors and one running ATen in-process, alternately, best of the repeats."""
    from woolyhv.launcher import start_gpud

    gpuds = {
        on: start_gpud(log_level="warning", extra_args=["--executors" if on else "--no-executors"])
        for on in (True, False)
    }
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    try:
        for _ in range(2 if quick else 4):
            for on, (endpoint, _) in gpuds.items():
                cmd = [sys.executable, "-m", "woolyhv", "run", str(ROOT / "benchmarks" / "aten_hop.py")]
                env = {**_env(False), "WOOLY_SERVER": endpoint}
                p = subprocess.run(
                    cmd + (["--quick"] if quick else []),
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=str(ROOT),
                    timeout=600,
                )
                if p.returncode != 0:
                    raise RuntimeError(p.stderr[-3000:])
                runs[on].append(json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1]))
    finally:
        for _, proc in gpuds.values():
            proc.terminate()
            proc.wait(10)
    out = []
    for key, metric in (("sync_us", "executor_hop_sync_op"), ("stream_us_per_op", "executor_hop_streamed_op")):
        on, off = min(r[key] for r in runs[True]), min(r[key] for r in runs[False])
        out.append(
            line(
                metric,
                on,
                off,
                1.1,
                "us",
                runs_executors=[round(r[key], 2) for r in runs[True]],
                runs_in_process=[round(r[key], 2) for r in runs[False]],
            )
        )
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    steps = "8" if quick else "30"
    repeats = 1 if quick else 3
    results = []
    for name, target in (("mlp", 1.5), ("cnn", 1.25), ("gpt", 1.25)):
        script = str(ROOT / "examples" / f"train_{name}.py")
        local, wooly = [], []
        for _ in range(repeats):
            local.append(_step_ms([sys.executable, script, "--steps", steps], local=True))
            wooly.append(_step_ms([sys.executable, "-m", "woolyhv", "run", script, "--steps", steps], local=False))
        w, l_ = min(wooly), min(local)
        print(
            f"{name}: wooly {w:.2f} ms/step, local {l_:.2f} ms/step ({w / l_:.2f}x); runs wooly {wooly} local {local}",
            file=sys.stderr,
        )
        results.append(
            line(
                f"step_time_ratio_{name}",
                w,
                l_,
                target,
                "ratio",
                value_unit="ms/step",
                wooly_runs=wooly,
                local_runs=local,
            )
        )
    cmd = [sys.executable, "-m", "woolyhv", "run", str(ROOT / "benchmarks" / "torch_probe.py")] + (
        ["--quick"] if quick else []
    )
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(False), cwd=str(ROOT), timeout=600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    probe = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    # Baseline for the op cost: the same add on plain CPU torch in this process.
    import time

    import torch

    a, b = torch.randn(16, 16), torch.randn(16, 16)
    n = 2000 if quick else 10000
    t0 = time.perf_counter()
    for _ in range(n):
        a + b
    local_op_us = (time.perf_counter() - t0) / n * 1e6
    results.append(line("client_us_per_op", probe["op_us"], local_op_us, 25.0, "us"))
    results.append(line("sync_round_trips_per_step", probe["round_trips_per_step"], 1.0, 1.0, "round trips"))
    # A captured CUDA graph replayed (one op on the wire) against the same step streamed op by op.
    results.append(
        line(
            "cuda_graph_replay_step_ratio",
            probe["replayed_step_ms"],
            probe["streamed_step_ms"],
            1.0,
            "ratio",
            value_unit="ms/step",
            graph_ops=probe["graph_ops"],
        )
    )
    results.extend(_executor_hop(quick))
    headline = results.pop(2)  # GPT
    for r in results + [headline]:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
