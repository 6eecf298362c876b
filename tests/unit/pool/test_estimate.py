"""Memory estimates (NOTE [memory estimate]) against what transformers and safetensors say about real models
built from their configs (no download)."""

from __future__ import annotations

import json
import os
import struct

import pytest

from woolyhv.pool.estimate import EstimateError, count_params, estimate

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

CONFIGS = {
    "gpt2": lambda: transformers.GPT2Config(n_embd=64, n_layer=3, n_head=4, vocab_size=1000, n_positions=128),
    "llama-gqa": lambda: transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=3,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=1000,
    ),
    "llama-tied": lambda: transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=500,
        tie_word_embeddings=True,
    ),
    "mistral": lambda: transformers.MistralConfig(
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=700,
    ),
    "bert": lambda: transformers.BertConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=800,
        max_position_embeddings=64,
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameter_count_from_config_matches_the_model(name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = CONFIGS[name]()
    torch.manual_seed(0)
    model = (
        transformers.AutoModel.from_config(cfg)
        if name == "bert"
        else transformers.AutoModelForCausalLM.from_config(cfg)
    )
    real = sum(p.numel() for p in model.parameters())
    counted = count_params(json.loads(cfg.to_json_string()))
    assert counted == real, f"{name}: counted {counted}, the model has {real}"
    # the same model saved as safetensors: the header gives the exact bytes
    model.save_pretrained(tmp_path)
    est = estimate(str(tmp_path), context=256)
    assert est["params"] == real and est["weights"] == real * 4 and est["source"].startswith("1 safetensors")
    assert est["total"] > est["weights"] + est["kv_cache"]


def test_kv_cache_and_training_terms() -> None:
    cfg = {
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "torch_dtype": "float16",
    }
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        inf = estimate(d, context=4096)
        assert 6.7e9 < inf["params"] < 6.8e9  # Llama-2-7B
        assert inf["kv_cache"] == 2 * 32 * 32 * 128 * 4096 * 2  # 2 GiB at fp16
        train = estimate(d, context=512, training=True)
        assert train["gradients"] == train["weights"] and train["optimizer"] == 8 * train["params"]
        assert train["kv_cache"] == 0 and train["activations"] > 0
        assert estimate(d, dtype="float32")["weights"] == 4 * inf["params"]


def test_content_sample_of_a_checkpoint_is_the_shims_chunking(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import numpy as np
    import xxhash
    from safetensors.numpy import save_file

    rnd = np.random.default_rng(0)
    big = rnd.standard_normal((3 << 20) // 4 * 3, dtype=np.float32)  # 9 MiB: chunks of 4 + 4 + 1 MiB
    save_file({"big": big, "small": np.ones(10, dtype=np.float32)}, str(tmp_path / "model.safetensors"))
    est = estimate(str(tmp_path / "model.safetensors"))
    raw = big.tobytes()
    want = sorted(xxhash.xxh3_128_hexdigest(raw[o : o + (4 << 20)])[:16] for o in range(0, len(raw), 4 << 20))
    assert est["sample"] == want


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"\x00" * 3, "too short"),
        (struct.pack("<Q", 1 << 40), "implausible"),
        (struct.pack("<Q", 5) + b"hello", "not a safetensors file"),
        (struct.pack("<Q", 30) + b'{"w": {"dtype": "Q9", "x": 1}}', "no dtype/shape/data_offsets"),
    ],
)
def test_bad_checkpoints_get_one_line(tmp_path, content: bytes | None, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "m.safetensors"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(EstimateError, match=message):
        estimate(str(path))


def test_unknown_family_config_asks_for_weights(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mystery"}))
    with pytest.raises(EstimateError, match="give the checkpoint's .safetensors"):
        estimate(str(tmp_path))


def test_cli_prints_the_estimate_and_a_bad_path_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    cfg = CONFIGS["gpt2"]()
    (tmp_path / "config.json").write_text(cfg.to_json_string())
    r = subprocess.run([sys.executable, "-m", "woolyhv", "estimate", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0 and "parameters (config.json)" in r.stdout and "WOOLY_MEM=" in r.stdout, (
        r.stdout + r.stderr
    )
    r = subprocess.run(
        [sys.executable, "-m", "woolyhv", "estimate", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no such file" in r.stderr, r.stderr
