"""A small PyTorch training run on "cuda" (run unmodified by the drain tests): an MLP with dropout and an Adam
optimiser whose state lives on the device; prints the loss of every step and the final weights' checksum."""

import os
import time

import torch
from torch import nn

STEPS = int(os.environ.get("STEPS", "40"))
PAUSE = float(os.environ.get("PAUSE", "0.05"))

torch.manual_seed(0)
dev = torch.device("cuda")
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 10)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(512, 64, device=dev)
y = torch.randint(0, 10, (512,), device=dev)
view = x[:, :32]  # a view sharing x's storage, kept across the run
for step in range(STEPS):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.7f}", flush=True)
    if step == 5:
        print("READY", flush=True)
    time.sleep(PAUSE)
view.mul_(2.0)  # writes through the view: x must still share its storage
total = sum(float(p.double().sum().item()) for p in model.parameters())
print(f"checksum {total:.9f} {float(x.sum().item()):.6f}", flush=True)
