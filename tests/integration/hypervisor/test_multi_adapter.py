"""The multi-adapter example: several torch clients, one copy of the base weights on gpud."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_base_weights_are_held_once():
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "examples", "multi_adapter_eval.py"),
            "--clients",
            "3",
            "--base-mib",
            "16",
            "--batches",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["max_abs_err"] == 0.0
    assert summary["store_bytes"] == summary["base_bytes"]
    # three clients asked for three copies of the base; the device holds one (+ adapters, activations)
    assert summary["device_over_one_base"] < 1.25, summary
    assert summary["bytes_requested_by_clients"] > 2.5 * summary["base_bytes"]


def test_torch_sees_its_quota_and_gets_torch_oom():
    script = r"""
import os, sys, json
sys.path.insert(0, os.getcwd())
from tests.conftest import start
g = start("ipc", extra_args=["--tenant", "small:quota=64MiB"])
os.environ["WOOLY_SERVER"] = g.endpoint
os.environ["WOOLY_TENANT"] = "small"
try:
    import shim.torch as st
    st.activate()
    import torch
    out = {"before": list(torch.cuda.mem_get_info())}
    a = torch.ones(8 << 20, device="cuda")  # 32 MiB
    out["after"] = list(torch.cuda.mem_get_info())
    try:
        b = torch.ones(10 << 20, device="cuda")  # 40 MiB more: over the quota
        torch.cuda.synchronize()
        out["oom"] = False
    except torch.OutOfMemoryError:
        out["oom"] = True
    out["a_sum"] = a.sum().item()
    print(json.dumps(out))
finally:
    g.stop()
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    assert out["before"] == [64 * mib, 64 * mib]
    assert out["after"] == [32 * mib, 64 * mib]
    assert out["oom"] is True and out["a_sum"] == float(8 << 20)
