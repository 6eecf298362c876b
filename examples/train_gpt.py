"""Train a tiny character-level GPT on the bundled text (examples/data/tiny_corpus.txt).

Runs unchanged with plain ``python`` (CUDA if available, else CPU) and under ``wooly run``.
"""

import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, d: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--amp", action="store_true", help="autocast to bfloat16")
    p.add_argument("--sample", type=int, default=0, help="generate this many characters at the end")
    args = p.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tiny_corpus.txt")).read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    gen = torch.Generator().manual_seed(args.seed + 1)

    model = GPT(len(chars), args.block).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    step_times: list[float] = []
    t0 = t_prev = time.perf_counter()
    first = 0
    for step in range(args.steps):
        ix = torch.randint(len(data) - args.block - 1, (args.batch,), generator=gen)
        x = torch.stack([data[i : i + args.block] for i in ix]).to(device)
        y = torch.stack([data[i + 1 : i + 1 + args.block] for i in ix]).to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=args.amp):
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        print(f"step {step} loss {loss.item():.6f}", flush=True)
        now = time.perf_counter()
        if step >= first + 2:
            step_times.append(now - t_prev)  # steady state: after two warm-up steps
        t_prev = now
        if step == first + 1:
            t0 = now
    timed = args.steps - 2 if args.steps > 2 else args.steps
    dt = time.perf_counter() - t0
    if step_times:
        print(f"median time/step {sorted(step_times)[len(step_times) // 2] * 1000:.3f} ms")
    print(f"time/step {dt / max(timed, 1) * 1000:.3f} ms")

    if args.sample:
        model.eval()
        idx = torch.zeros((1, 1), dtype=torch.long, device=device)
        with torch.no_grad():
            for _ in range(args.sample):
                logits, _ = model(idx[:, -args.block :])
                nxt = torch.multinomial(F.softmax(logits[:, -1, :], dim=-1), 1)
                idx = torch.cat([idx, nxt], dim=1)
        print("".join(chars[i] for i in idx[0].tolist()))


if __name__ == "__main__":
    main()
