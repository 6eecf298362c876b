"""Python child processes of a program under ``wooly run`` use cuda too (NOTE [child interpreters]): a
``subprocess`` of ``sys.executable`` and a ``torch.multiprocessing`` spawn worker. A forked child (a DataLoader
worker) seeds its generator and works on the host without waiting for its parent's session (NOTE [fork]). Prints
one line per child."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

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
    # A fork while another thread holds the op stream's lock (the flusher does, now and then): the child must not
    # wait for a lock nobody in it will release. Every DataLoader worker calls torch.manual_seed.
    from shim.torch import stream as S

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with S.stream()._lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(30)
    pid = os.fork()
    if pid == 0:
        torch.manual_seed(3)
        os._exit(0 if torch.randn(2).shape == (2,) else 1)
    release.set()
    t.join()
    for _ in range(600):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        threading.Event().wait(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        status = -1
    print("fork", "exited" if status == 0 else f"stuck or failed ({status})")
