"""A small torch training step on cuda (placed through the pool by the test)."""

import os
import time

import torch

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(128, 32, device="cuda"), torch.randn(128, 1, device="cuda")
first = None
for _ in range(20):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    first = loss.item() if first is None else first
print("torch ok", loss.item() < first, torch.cuda.get_device_name(0))
time.sleep(float(os.environ.get("HOLD_S", "0")))
