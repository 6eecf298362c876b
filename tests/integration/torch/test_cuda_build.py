"""The PyTorch face on a CUDA build of torch, on a machine without a GPU or a driver.

On Linux, ``pip install torch`` gives the CUDA build, so that is what most laptops and CI runners that run
``wooly run train.py`` have. Its own CUDA registrations (device guard, CUDA hooks, allocator) ask a driver that
is not there; the face replaces them (NOTE [a cuda device in a CPU build], shim/torch/device.py) and sends
the factories a composite calls to gpud. This test runs the rest of this directory (examples, the torch.cuda
API, issue 19's rows, Hugging Face models and timm, graphs, executors, isolation) with such a torch: the
Python named by ``WOOLY_CUDA_TORCH_PYTHON``. ``.ci/run`` makes one (torch 2.14.1+cu130 with torchvision and
timm, which PyPI's torchvision needs) and sets ``WOOLY_REQUIRE_CUDA_TORCH=1``, so it fails there rather than
skipping when that Python is missing.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import ROOT

HERE = Path(__file__).resolve().parent


def _python() -> str:
    py = os.environ.get("WOOLY_CUDA_TORCH_PYTHON", "")
    if not py:
        if os.environ.get("WOOLY_REQUIRE_CUDA_TORCH") == "1":
            pytest.fail("WOOLY_REQUIRE_CUDA_TORCH=1 but WOOLY_CUDA_TORCH_PYTHON is not set")
        pytest.skip("WOOLY_CUDA_TORCH_PYTHON (a Python with a CUDA build of torch) is not set")
    return py


@pytest.mark.timeout(1800)
def test_torch_face_on_a_cuda_build() -> None:
    py = _python()
    build = subprocess.run(
        [py, "-c", "import torch, timm; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    version, cuda, available = build.stdout.split()
    assert cuda != "None", f"{py} has torch {version}, a CPU build"
    assert available == "False", "this test is about a machine without a GPU"
    env = {k: v for k, v in os.environ.items() if k not in ("WOOLY_CUDA_TORCH_PYTHON", "WOOLY_SERVER")}
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.run(
        [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", str(HERE), "--ignore", __file__],
        capture_output=True,
        text=True,
        timeout=1700,
        cwd=ROOT,
        env=env,
    )
    summary = (p.stdout.strip().splitlines() or [""])[-1]
    assert p.returncode == 0, f"torch {version} (CUDA {cuda}): {summary}\n{p.stdout[-6000:]}\n{p.stderr[-2000:]}"
    # every test ran: none skipped (timm, transformers and peft are installed beside that torch)
    assert re.search(r"\d+ passed", summary) and "skipped" not in summary, p.stdout[-6000:]
