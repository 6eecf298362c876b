"""CI's fixed sample of the PyTorch-fidelity run (run.py): a few OpInfo and ModuleInfo entries on "cuda"
under wooly against the host CPU. Never a silently wrong result; the pass rate does not fall below
what this sample measured when it was fixed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = "add,mul,where,sum,matmul,index_select,nn.functional.conv2d,nn.functional.layer_norm,nn.Linear,nn.LSTM,nn.GRU"


def test_fidelity_sample(tmp_path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.torch_fidelity.run",
            "--names",
            NAMES,
            "--dtypes",
            "float32,int64",
            "--limit",
            "6",
            "--results",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, p.stdout
    for line in lines:
        assert line["mismatch"] == 0 and line["crash"] == 0, (line, (tmp_path / "failures.txt").read_text())
        assert line["pass_rate"] >= 0.98, (line, (tmp_path / "failures.txt").read_text())
