"""Train a small MLP on a synthetic regression/classification task.

Runs unchanged with plain ``python`` (CUDA if available, else CPU) and under ``wooly run``.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optimizer", default="adamw", choices=["sgd", "adam", "adamw"])
    p.add_argument("--amp", action="store_true", help="autocast to bfloat16")
    p.add_argument("--save", default="", help="save a checkpoint here after the last step")
    p.add_argument("--resume", default="", help="resume from this checkpoint")
    args = p.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    data_gen = torch.Generator().manual_seed(args.seed + 1)  # data come from the host, as from a loader

    model = nn.Sequential(
        nn.Linear(32, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, 10),
    ).to(device)
    opt_cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[args.optimizer]
    opt = opt_cls(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    start = 0
    if args.resume:
        ckpt = torch.load(args.resume, map_location=device)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        sched.load_state_dict(ckpt["sched"])
        data_gen.set_state(ckpt["data_gen"].cpu())  # map_location moved it to the device
        start = ckpt["step"]

    w_true = torch.randn(32, 10, generator=torch.Generator().manual_seed(1234))
    step_times: list[float] = []
    t0 = t_prev = time.perf_counter()
    first = start
    for step in range(start, start + args.steps):
        x = torch.randn(args.batch, 32, generator=data_gen)
        y = (x @ w_true).argmax(dim=1)
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=args.amp):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
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
    if args.save:
        torch.save(
            {
                "model": model.state_dict(),
                "opt": opt.state_dict(),
                "sched": sched.state_dict(),
                "data_gen": data_gen.get_state(),
                "step": start + args.steps,
            },
            args.save,
        )


if __name__ == "__main__":
    main()
