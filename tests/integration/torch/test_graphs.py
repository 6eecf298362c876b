"""CUDA graphs under wooly, used as PyTorch's documentation uses them (scripts/cuda_graphs.py): whole-network
capture and make_graphed_callables train to the same losses as the eager program, bit for bit."""

from __future__ import annotations

import json

from .conftest import ROOT, check, run_local, run_wooly

SCRIPT = ROOT / "tests" / "integration" / "torch" / "scripts" / "cuda_graphs.py"


def _cases(out: str) -> dict[str, dict]:
    return {r["case"]: r for r in (json.loads(line) for line in out.splitlines() if line.startswith("{"))}


def test_graphs_train_like_the_eager_program(gpud: str) -> None:
    graph = _cases(check(run_wooly(gpud, SCRIPT, "cuda", "graph", timeout=300)))
    cpu = _cases(check(run_local(SCRIPT, "cpu", "eager", timeout=300)))
    eager = _cases(check(run_wooly(gpud, SCRIPT, "cuda", "eager", timeout=300)))
    for case in ("whole_network_sgd", "graphed_callables"):
        assert graph[case]["losses"] == cpu[case]["losses"], case
    assert graph["whole_network_adamw"]["losses"] == eager["whole_network_adamw"]["losses"]  # capturable: no CPU
    assert graph["whole_network_sgd"]["view_follows"] and graph["whole_network_adamw"]["view_follows"]
    assert graph["refused"] == {"case": "refused", "item": "refused", "after": "ok"}
