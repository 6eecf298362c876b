"""Memory estimates for placement (``wooly estimate PATH``, ``WOOLY_MODEL``).

NOTE [memory estimate]: the figure a placement reserves when the user did not declare one (``WOOLY_MEM``):

- **weights**: exact from safetensors headers (8-byte length, JSON of dtype/shape/offsets per tensor; the data is
  not read), else counted from a transformers ``config.json`` (decoder blocks of the Llama family: attention with
  grouped KV heads, gated MLP, experts for MoE; GPT-2 and BERT blocks with biases and learned positions);
- **KV cache** (inference): ``2 x layers x kv_heads x head_dim x context x batch`` elements;
- **training**: gradients (one more copy of the weights) and Adam's two fp32 moments (8 bytes a parameter), and
  activations per layer of ``s b h (34 + 5 a s / h)`` bytes at 16 bits (Korthikanti et al., "Reducing Activation
  Recomputation in Large Transformer Models", 2022), scaled to the weights' width;
- **overhead**: 5 % of the above plus 64 MiB (allocator rounding, workspaces).

With ``sample=True`` a safetensors checkpoint also gives the content sample of NOTE [content affinity]
(woolyhv/pool/placement.py): each tensor of at least 1 MiB cut into the dedup chunk (4 MiB) and hashed as the
shim's uploads hash it. That reads the weights once (xxh3 runs at ~10 GB/s; the page cache then serves the
program's own load).
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from woolyhv.pool.placement import request_sample

DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "U32": 4,
    "U64": 8,
}
NAMED = {
    "float32": 4,
    "float": 4,
    "fp32": 4,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float64": 8,
    "int8": 1,
    "fp8": 1,
    "float8": 1,
}
SAFE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I8": "int8", "U8": "uint8"}
CHUNK = 4 << 20
MIN_UPLOAD = 1 << 20
MAX_HEADER = 100 << 20


class EstimateError(ValueError):
    """A path that is not a checkpoint this can read: one line saying what was expected."""


def _safetensors_header(path: str) -> tuple[dict[str, Any], int]:
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise EstimateError(f"{path}: too short for a safetensors file")
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER:
                raise EstimateError(f"{path}: safetensors header of {n} bytes is implausible")
            header = json.loads(f.read(n))
    except EstimateError:
        raise
    except OSError as exc:
        raise EstimateError(f"{path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError):
        raise EstimateError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise EstimateError(f"{path}: not a safetensors file")
    return header, 8 + n


def _from_safetensors(files: list[str], sample: bool) -> dict[str, Any]:
    import xxhash

    params = 0
    weights = 0
    dtypes: dict[str, int] = {}
    hashes: list[str] = []
    for path in files:
        header, base = _safetensors_header(path)
        chunks: list[tuple[int, int]] = []
        for name, t in header.items():
            if name == "__metadata__" or not isinstance(t, dict):
                continue
            try:
                dt, shape, (start, end) = t["dtype"], t["shape"], t["data_offsets"]
                n = 1
                for d in shape:
                    n *= int(d)
            except (KeyError, TypeError, ValueError):
                raise EstimateError(f"{path}: tensor {name!r} has no dtype/shape/data_offsets") from None
            size = DTYPE_BYTES.get(dt)
            if size is None:
                raise EstimateError(f"{path}: tensor {name!r} has unknown dtype {dt!r}")
            params += n
            weights += n * size
            dtypes[dt] = dtypes.get(dt, 0) + n
            if sample and end - start >= MIN_UPLOAD:
                chunks.extend((base + off, min(CHUNK, end - off)) for off in range(start, end, CHUNK))
        if chunks:
            with open(path, "rb") as f:
                for off, n in sorted(chunks):
                    f.seek(off)
                    hashes.append(xxhash.xxh3_128_hexdigest(f.read(n)))
    main = max(dtypes, key=lambda k: dtypes[k]) if dtypes else "F32"
    return {
        "params": params,
        "weights": weights,
        "dtype": SAFE_NAMES.get(main, main.lower()),
        "bytes_per_param": DTYPE_BYTES.get(main, 4),
        "sample": request_sample(hashes) if sample else [],
    }


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def count_params(cfg: dict[str, Any]) -> int:
    """Parameters of a transformers config (see NOTE [memory estimate]); EstimateError for a family it cannot
    count."""
    if "text_config" in cfg and isinstance(cfg["text_config"], dict):
        cfg = cfg["text_config"]
    mt = str(cfg.get("model_type", ""))
    V = int(_get(cfg, "vocab_size", default=0))
    H = int(_get(cfg, "hidden_size", "n_embd", "d_model", default=0))
    L = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers", default=0))
    if not (V and H and L):
        raise EstimateError(
            f"config of model_type {mt or '?'} lacks vocab_size/hidden_size/num_hidden_layers:"
            " give the checkpoint's .safetensors instead"
        )
    heads = int(_get(cfg, "num_attention_heads", "n_head", default=1))
    if mt == "gpt2":
        inner = int(_get(cfg, "n_inner", default=4 * H))
        P = int(_get(cfg, "n_positions", default=1024))
        block = 4 * H * H + 4 * H + 2 * H * inner + inner + H + 4 * H
        return V * H + P * H + L * block + 2 * H
    if mt in ("bert", "roberta", "distilbert", "electra"):
        inner = int(_get(cfg, "intermediate_size", default=4 * H))
        P = int(_get(cfg, "max_position_embeddings", default=512))
        T = int(_get(cfg, "type_vocab_size", default=2))
        block = 4 * H * H + 4 * H + 2 * H * inner + inner + H + 4 * H
        return V * H + P * H + T * H + 2 * H + L * block + H * H + H
    hd = int(_get(cfg, "head_dim", default=H // max(heads, 1)))
    kv = int(_get(cfg, "num_key_value_heads", default=heads))
    inner = int(_get(cfg, "intermediate_size", default=4 * H))
    experts = int(_get(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=1))
    attn = H * heads * hd + 2 * H * kv * hd + heads * hd * H
    mlp = 3 * H * inner * experts + (H * experts if experts > 1 else 0)
    tied = bool(_get(cfg, "tie_word_embeddings", default=False))
    return V * H * (1 if tied else 2) + L * (attn + mlp + 2 * H) + H


def _kv_cache(cfg: dict[str, Any], context: int, batch: int, width: int) -> int:
    if "text_config" in cfg and isinstance(cfg["text_config"], dict):
        cfg = cfg["text_config"]
    H = int(_get(cfg, "hidden_size", "n_embd", "d_model", default=0))
    L = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers", default=0))
    heads = int(_get(cfg, "num_attention_heads", "n_head", default=1))
    hd = int(_get(cfg, "head_dim", default=H // max(heads, 1)))
    kv = int(_get(cfg, "num_key_value_heads", default=heads))
    return 2 * L * kv * hd * context * batch * width


def _activations(cfg: dict[str, Any], context: int, batch: int, width: int) -> int:
    H = int(_get(cfg, "hidden_size", "n_embd", "d_model", default=0))
    L = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers", default=0))
    a = int(_get(cfg, "num_attention_heads", "n_head", default=1))
    per_layer = context * batch * H * 34 + 5 * a * context * context * batch
    return int(L * per_layer * width / 2)


def _locate(path: str) -> tuple[list[str], dict[str, Any] | None]:
    """(safetensors files, config) of a checkpoint path."""
    if not os.path.exists(path):
        raise EstimateError("no such file or directory")
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    files: list[str] = []
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            path = index
        else:
            files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    if path.endswith(".index.json"):
        try:
            with open(path) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise EstimateError(f"{path}: not a safetensors index (expected a weight_map)") from None
        files = [os.path.join(folder, s) for s in shards if "/" not in s and "\\" not in s]
    elif path.endswith(".safetensors"):
        files = [path]
    cfg_path = path if path.endswith("config.json") else os.path.join(folder, "config.json")
    cfg = None
    if os.path.isfile(cfg_path):
        try:
            with open(cfg_path) as f:
                cfg = json.load(f)
        except (OSError, ValueError):
            raise EstimateError(f"{cfg_path}: not a JSON config") from None
        if not isinstance(cfg, dict):
            raise EstimateError(f"{cfg_path}: not a model config (expected a JSON object)")
    if not files and cfg is None:
        raise EstimateError("expected a checkpoint directory, a config.json, a .safetensors file or its index")
    return files, cfg


def estimate(
    path: str,
    *,
    context: int = 4096,
    batch: int = 1,
    training: bool = False,
    dtype: str | None = None,
    sample: bool = True,
) -> dict[str, Any]:
    """The NOTE [memory estimate] of a checkpoint, in bytes (``total`` is what a placement reserves)."""
    if context <= 0 or batch <= 0:
        raise EstimateError("context and batch must be > 0")
    files, cfg = _locate(path)
    if files:
        out = _from_safetensors(files, sample and dtype is None)
        out["source"] = f"{len(files)} safetensors file(s)"
    else:
        assert cfg is not None
        n = count_params(cfg)
        name = str(_get(cfg, "torch_dtype", "dtype", default="float32")).replace("torch.", "")
        width = NAMED.get(name, 4)
        out = {
            "params": n,
            "weights": n * width,
            "dtype": name,
            "bytes_per_param": width,
            "sample": [],
            "source": "config.json",
        }
    if dtype is not None:
        width = NAMED.get(dtype.replace("torch.", ""))
        if width is None:
            raise EstimateError(f"dtype {dtype!r}: expected one of {', '.join(sorted(NAMED))}")
        out.update(dtype=dtype, bytes_per_param=width, weights=out["params"] * width)
    width = out["bytes_per_param"]
    out["kv_cache"] = _kv_cache(cfg, context, batch, width) if (cfg and not training) else 0
    if training:
        out["gradients"] = out["weights"]
        out["optimizer"] = 8 * out["params"]
        out["activations"] = _activations(cfg, context, batch, width) if cfg else 0
    body = sum(out.get(k, 0) for k in ("weights", "kv_cache", "gradients", "optimizer", "activations"))
    out["overhead"] = int(body * 0.05) + (64 << 20)
    out["total"] = body + out["overhead"]
    out.update(context=context, batch=batch, training=training)
    return out
