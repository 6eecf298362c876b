"""Train a small CNN (conv + batch norm + pooling) on synthetic 32x32 images.

Runs unchanged with plain ``python`` (CUDA if available, else CPU) and under ``wooly run``.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 8 * 8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(torch.flatten(x, 1))


def synthetic_batch(gen: torch.Generator, batch: int, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Images whose class is a bright square's position, plus noise: learnable in a few steps."""
    y = torch.randint(0, classes, (batch,), generator=gen)
    x = torch.randn(batch, 3, 32, 32, generator=gen) * 0.5
    for i in range(batch):
        r, c = divmod(int(y[i]), 4)
        x[i, :, r * 8 : r * 8 + 8, c * 8 : c * 8 + 8] += 2.0
    return x, y


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--amp", action="store_true", help="autocast to bfloat16")
    args = p.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    batches = [synthetic_batch(gen, args.batch) for _ in range(min(args.steps, 8))]

    model.train()
    step_times: list[float] = []
    t0 = t_prev = time.perf_counter()
    first = 0
    for step in range(args.steps):
        x, y = batches[step % len(batches)]
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=args.amp):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
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

    model.eval()
    with torch.no_grad():
        x, y = batches[0]
        acc = (model(x.to(device)).argmax(1) == y.to(device)).float().mean().item()
    print(f"train accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
