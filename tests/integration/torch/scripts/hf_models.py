"""Models from transformers / peft / timm, built from tiny configs with random weights, on a device.

    python hf_models.py cpu|cuda NAME...

Dropout is off (the device's random stream is not the host's, as on a real GPU). For each model:
two training steps (AdamW) on fixed random data, the losses and a checksum of the
gradients, then greedy ``generate`` for causal LMs (or a forward in eval mode): one JSON line per
model, which the test compares between the local CPU run and the same script under wooly.
"""

from __future__ import annotations

import json
import sys

import torch


def _lm(cfg_cls, model_cls, **cfg):
    def build():
        return model_cls(cfg_cls(**cfg))

    return build


def builders():
    import transformers as T

    small = dict(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    return {
        "gpt2": _lm(
            T.GPT2Config,
            T.GPT2LMHeadModel,
            vocab_size=96,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=64,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        ),
        "llama_gqa": _lm(T.LlamaConfig, T.LlamaForCausalLM, num_key_value_heads=2, **small),
        "mistral": _lm(T.MistralConfig, T.MistralForCausalLM, num_key_value_heads=2, sliding_window=8, **small),
        "bert": _lm(
            T.BertConfig,
            T.BertForSequenceClassification,
            num_labels=3,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            **small,
        ),
        "t5": _lm(
            T.T5Config,
            T.T5ForConditionalGeneration,
            vocab_size=96,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            decoder_start_token_id=0,
            dropout_rate=0.0,
        ),
        "vit": _lm(
            T.ViTConfig,
            T.ViTForImageClassification,
            image_size=16,
            patch_size=4,
            num_labels=5,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
        ),
    }


def batch(name: str, device: str):
    g = torch.Generator().manual_seed(1)
    if name == "vit":
        return {
            "pixel_values": torch.randn(2, 3, 16, 16, generator=g).to(device),
            "labels": torch.tensor([1, 3]).to(device),
        }
    ids = torch.randint(0, 96, (2, 12), generator=g).to(device)
    if name == "bert":
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 2]).to(device)}
    if name == "t5":
        return {"input_ids": ids, "labels": torch.randint(0, 96, (2, 6), generator=g).to(device)}
    return {"input_ids": ids, "labels": ids}


# timm's most used families: a ResNet, an EfficientNet (depthwise convolutions, squeeze-excitation, SiLU), a
# ConvNeXt (7x7 depthwise convolutions, LayerNorm over channels) and a ViT, at 32x32 inputs.
TIMM = {
    "timm": ("resnet18", {}),
    "timm_efficientnet": ("efficientnet_b0", {}),
    "timm_convnext": ("convnext_atto", {}),
    "timm_vit": ("vit_tiny_patch16_224", {"img_size": 32, "patch_size": 8}),
}


def run(name: str, device: str) -> dict:
    torch.manual_seed(0)
    if name.startswith("timm"):
        import timm

        arch, kw = TIMM[name]
        model = timm.create_model(arch, num_classes=4, pretrained=False, **kw)
        data = {"x": torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(device)}
        labels = torch.tensor([0, 3]).to(device)
        fwd = lambda m: torch.nn.functional.cross_entropy(m(data["x"]), labels)  # noqa: E731
    else:
        base = name.removesuffix("_lora")
        model = builders()[base]()
        data = batch(base, device)
        fwd = lambda m: m(**data).loss  # noqa: E731
        if name.endswith("_lora"):
            import peft

            model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    model = model.to(device)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    losses, gsum = [], 0.0
    for _ in range(2):
        opt.zero_grad()
        loss = fwd(model)
        loss.backward()
        gsum += sum(float(p.grad.float().abs().sum()) for p in model.parameters() if p.grad is not None)
        opt.step()
        losses.append(float(loss))
    out = {"model": name, "losses": losses, "grad_abs_sum": gsum}
    model.eval()
    with torch.no_grad():
        if hasattr(model, "generate") and name not in ("bert", "vit"):
            gen = model.generate(data["input_ids"][:, :6], max_new_tokens=5, do_sample=False)
            out["generated"] = gen.cpu().tolist()
        else:
            out["eval_loss"] = float(fwd(model))
    return out


if __name__ == "__main__":
    dev = sys.argv[1]
    for n in sys.argv[2:]:
        print(json.dumps(run(n, dev)), flush=True)
