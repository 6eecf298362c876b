"""Python child processes of a program under ``wooly run`` use cuda too (NOTE [child interpreters]): a
``subprocess`` of ``sys.executable`` and a ``torch.multiprocessing`` spawn worker. Prints one line per child."""

from __future__ import annotations

import subprocess
import sys

import torch
import torch.multiprocessing as mp

CHILD = (
    "import torch; x = torch.arange(6.0, device='cuda').reshape(2, 3); "
    "print(torch.cuda.is_available(), x.device, (x @ x.T).sum().item())"
)


def worker(rank: int, q: mp.Queue) -> None:  # type: ignore[type-arg]
    y = torch.full((4,), float(rank + 1), device="cuda")
    q.put((rank, str(y.device), y.sum().item()))


if __name__ == "__main__":
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    print("subprocess", out.returncode, out.stdout.strip(), out.stderr.strip()[-300:])
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, q)) for r in range(2)]
    for p in procs:
        p.start()
    got = sorted(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    print("spawn", got, [p.exitcode for p in procs])
    print("parent", torch.ones(2, device="cuda").sum().item())
