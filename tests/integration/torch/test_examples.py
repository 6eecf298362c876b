"""The bundled examples give the same losses under ``wooly run`` as a plain local CPU run."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from tests.integration.torch.conftest import EXAMPLES, ROOT, _env, check, losses, run_local, run_wooly

STEPS = 20
_cache: dict[str, list[float]] = {}


def wooly_losses(gpud: str, example: str) -> list[float]:
    if example not in _cache:
        _cache[example] = losses(check(run_wooly(gpud, EXAMPLES / example, "--steps", str(STEPS))))
    return _cache[example]


@pytest.mark.parametrize("example", ["train_mlp.py", "train_cnn.py", "train_gpt.py"])
def test_losses_match_local(gpud: str, example: str) -> None:
    local = losses(check(run_local(EXAMPLES / example, "--steps", str(STEPS))))
    remote = wooly_losses(gpud, example)
    assert len(local) == len(remote) == STEPS
    for i, (a, b) in enumerate(zip(local, remote, strict=True)):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7), f"step {i}: local {a} vs wooly {b}"


def test_autocast_finishes_finite(gpud: str) -> None:
    out = check(run_wooly(gpud, EXAMPLES / "train_gpt.py", "--steps", "5", "--amp"))
    ls = losses(out)
    assert len(ls) == 5 and all(math.isfinite(v) for v in ls)


def test_checkpoint_resume_same_loss(gpud: str, tmp_path) -> None:
    full = wooly_losses(gpud, "train_mlp.py")
    ckpt = tmp_path / "ckpt.pt"
    half = STEPS // 2
    first = losses(check(run_wooly(gpud, EXAMPLES / "train_mlp.py", "--steps", str(half), "--save", str(ckpt))))
    second = losses(check(run_wooly(gpud, EXAMPLES / "train_mlp.py", "--steps", str(half), "--resume", str(ckpt))))
    assert first + second == pytest.approx(full, rel=1e-6)
    # The file is plain PyTorch, as if saved on a GPU (storages tagged cuda:0): a process without wooly
    # and without a GPU loads it with map_location, and without one refuses it as it refuses any GPU file.
    code = (
        "import torch,sys\ntry: torch.load(sys.argv[1])\nexcept RuntimeError as e: print('refused', 'CUDA' in str(e))\n"
        "c=torch.load(sys.argv[1], map_location='cpu'); w=c['model']['0.weight'];"
        "print(type(w).__name__, w.device, tuple(w.shape))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(ckpt)],
        capture_output=True,
        text=True,
        env=_env({"CUDA_VISIBLE_DEVICES": ""}),
        cwd=str(ROOT),
        timeout=60,
    )
    assert check(p).split() == ["refused", "True", "Tensor", "cpu", "(256,", "32)"]
