"""Real model code nobody here wrote: transformers (GPT-2, Llama with grouped-query attention, Mistral,
BERT, T5, ViT) and a peft LoRA adapter, built from tiny configs, trained two steps and generating
under wooly, equal to the same script on the local CPU (scripts/hf_models.py)."""

from __future__ import annotations

import json

import pytest
import torch

from .conftest import ROOT, check, run_local, run_wooly

pytest.importorskip("transformers")
SCRIPT = ROOT / "tests" / "integration" / "torch" / "scripts" / "hf_models.py"
MODELS = ["gpt2", "llama_gqa", "mistral", "bert", "t5", "vit"]


def _results(p_out: str) -> dict[str, dict]:
    return {r["model"]: r for r in (json.loads(line) for line in p_out.splitlines() if line.startswith("{"))}


def _same(local: dict, remote: dict) -> None:
    assert remote["losses"] == local["losses"]  # forward and optimizer steps equal to the bit
    assert remote.get("generated") == local.get("generated")
    if "eval_loss" in local:
        assert remote["eval_loss"] == pytest.approx(local["eval_loss"], rel=1e-6)
    # gradients: equal up to summation order in a few backward kernels
    assert remote["grad_abs_sum"] == pytest.approx(local["grad_abs_sum"], rel=1e-5)


def test_transformers_models_train_and_generate(gpud: str) -> None:
    local = _results(check(run_local(SCRIPT, "cpu", *MODELS, timeout=300)))
    remote = _results(check(run_wooly(gpud, SCRIPT, "cuda", *MODELS, timeout=300)))
    assert sorted(remote) == sorted(MODELS)
    for name in MODELS:
        _same(local[name], remote[name])


def test_peft_lora_adapter(gpud: str) -> None:
    pytest.importorskip("peft")
    local = _results(check(run_local(SCRIPT, "cpu", "llama_gqa_lora", timeout=300)))
    remote = _results(check(run_wooly(gpud, SCRIPT, "cuda", "llama_gqa_lora", timeout=300)))
    _same(local["llama_gqa_lora"], remote["llama_gqa_lora"])


@pytest.mark.parametrize("name", ["timm", "timm_efficientnet", "timm_convnext", "timm_vit"])
def test_timm_model(gpud: str, name: str) -> None:
    # needs torchvision, whose PyPI build wants the CUDA build of torch: runs in test_cuda_build.py's pass
    pytest.importorskip("timm", exc_type=ImportError)
    local = _results(check(run_local(SCRIPT, "cpu", name, timeout=300)))
    remote = _results(check(run_wooly(gpud, SCRIPT, "cuda", name, timeout=300)))
    _same(local[name], remote[name])


TRAINER = ROOT / "tests" / "integration" / "torch" / "scripts" / "hf_trainer.py"


def test_hf_trainer(gpud: str) -> None:
    """transformers' Trainer (accelerate picks the device): on cuda:0 under wooly run, the host run's losses."""
    pytest.importorskip("accelerate")
    local = json.loads(check(run_local(TRAINER, "cpu", timeout=300)).strip().splitlines()[-1])
    remote = json.loads(check(run_wooly(gpud, TRAINER, "cuda", timeout=300)).strip().splitlines()[-1])
    assert local["device"] == "cpu" and remote["device"] == "cuda:0"
    assert remote["losses"] == local["losses"] and len(local["losses"]) == 4
    assert remote["eval_loss"] == local["eval_loss"]
    # mixed precision (GradScaler + autocast through accelerate): trains, close to the float32 run
    amp = json.loads(check(run_wooly(gpud, TRAINER, "cuda", "fp16", timeout=300)).strip().splitlines()[-1])
    assert amp["losses"] == pytest.approx(local["losses"], rel=1e-3)


# Each row of issue 19's table: works, or fails with an error naming what is unsupported.
EXPECTED = {
    "lstm": "OK",
    "where_scalars": "OK [0.0, 0.0, 1.0, 1.0]",
    "encoder_train_dropout": "OK (5, 2, 16)",
    "save_load_module": "OK (True, 'cuda:0')",
    "save_load_views": "OK ('cuda:0', [2.0, 100.0, 4.0], 'cpu', [2.0, 100.0, 4.0])",
    "sparse_to_cuda": "OK tensor(indices=tensor(",
    "memory_summary": "OK True",
    "memory_stats_keys": "OK True",
    "utilization_after_stats": "OK True",
    "dlpack": "OK ([9.0, 1.0], 'cuda:0')",
    "device_1": "ERR RuntimeError: CUDA error: invalid device ordinal",
    # a CPU build reports the CUDA the virtual GPU offers; a CUDA build keeps the one it was built with
    "version_cuda": f"OK {torch.version.cuda!r}" if torch.version.cuda else "OK '12",
    "total_memory": "OK True",
    "cuda_graph": "OK [3.0, 3.0, 3.0]",
    "nvtx": "OK (0, 0)",
    "memory_fraction": "ERR OutOfMemoryError: CUDA out of memory",
    "peak": "OK True",
    "record_stream": "OK [0.0, 2.0, 4.0]",
    "storage_ptrs": "OK (True, 8, 0, 32)",
    "save_pretrained": "OK (True, True)",
}


def test_fidelity_rows(gpud: str) -> None:
    out = check(run_wooly(gpud, ROOT / "tests" / "integration" / "torch" / "scripts" / "fidelity_rows.py"))
    got = {}
    for line in out.splitlines():
        status, name, rest = (line.split(" ", 2) + [""])[:3]
        if status in ("OK", "ERR"):
            got[name] = f"{status} {rest}"
    for name, want in EXPECTED.items():
        assert got.get(name, "").startswith(want), f"{name}: {got.get(name)!r}, expected {want!r}..."
    # the LSTM's gradients equal the host's
    lstm_local = check(run_local(ROOT / "tests" / "integration" / "torch" / "scripts" / "fidelity_rows.py", "cpu"))
    assert [ln for ln in lstm_local.splitlines() if ln.startswith("OK lstm ")][0] == f"OK lstm {got['lstm'][3:]}"


DETECTION = ROOT / "tests" / "integration" / "torch" / "scripts" / "detection.py"


def test_torchvision_detection_ops(gpud: str) -> None:
    """NOTE [extension operators] (gpud/aten_exec.py): torchvision's ops run on gpud with its torchvision; a
    detection model's inference equals the host run, roi_align's gradient too, and a rois batch index out of
    range is refused by gpud's guard."""
    pytest.importorskip("torchvision", exc_type=ImportError)  # (its PyPI build wants CUDA torch: test_cuda_build.py)
    local = json.loads(check(run_local(DETECTION, "cpu", timeout=300)).strip().splitlines()[-1])
    remote = json.loads(check(run_wooly(gpud, DETECTION, "cuda", timeout=300)).strip().splitlines()[-1])
    for key in ("n", "nms", "boxes", "scores", "roi", "roi_pool"):
        assert remote[key] == local[key], key
    assert remote["roi_grad"] == pytest.approx(local["roi_grad"], rel=1e-6)
    want = "CUDA_ERROR_INVALID_VALUE: torchvision.roi_align.default: the batch indices in rois[:, 0] must lie in [0, 2)"
    assert want in remote["bad_rois"], remote["bad_rois"]
