"""Model code nobody here wrote, trained on "cuda" and moved mid-run by the tests: transformers' Llama (grouped-query
attention, RoPE, RMSNorm, SwiGLU) built from a tiny config with random weights, AdamW with weight decay, fixed
random token data; prints every step's loss and a checksum of the weights at the end."""

import os
import time

import torch
import transformers as T

STEPS = int(os.environ.get("STEPS", "40"))
PAUSE = float(os.environ.get("PAUSE", "0.05"))

torch.manual_seed(0)
cfg = T.LlamaConfig(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
model = T.LlamaForCausalLM(cfg).to("cuda")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
ids = torch.randint(0, 128, (4, 32)).to("cuda")
for step in range(STEPS):
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {out.loss.item():.6f}", flush=True)
    if step == 5:
        print("READY", flush=True)
    time.sleep(PAUSE)
total = sum(float(p.double().sum().item()) for p in model.parameters())
print(f"checksum {total:.8f}", flush=True)
