"""Error behaviour. ``ops``: an unsupported op, a failing op, then exit with work queued."""

import os
import signal
import sys
import time

import torch

mode = sys.argv[1]
x = torch.randn(8, device="cuda")
if mode == "ops":
    try:  # a CUDA-only kernel with no CPU kernel and no decomposition (SyncBatchNorm's statistics)
        torch.ops.aten.batch_norm_stats(x.view(2, 4), 1e-5)[0].sum().item()
    except NotImplementedError as exc:
        print("NotImplementedError:", exc)
    # a CUDA-only kernel that PyTorch decomposes: a CPU gpud runs the decomposition (NOTE [decomposed ops])
    out, mask = torch.ops.aten._fused_dropout(x, 0.5)
    print("fused_dropout", torch.equal(out.cpu(), x.cpu() * mask.cpu() * 2.0), mask.dtype)
    try:
        (x.view(2, 4) @ torch.randn(3, 3, device="cuda")).sum().item()
    except RuntimeError as exc:
        print("RuntimeError:", exc)
    print("after", torch.ones(2, device="cuda").sum().item())
    import torch.multiprocessing as mp

    q = mp.get_context("spawn").SimpleQueue()
    w = torch.ones(2, device="cuda", requires_grad=True)
    sparse = torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,)).cuda()
    for shared in (w * 2, sparse):  # what PyTorch refuses to send, and a sparse tensor: refused by name
        try:
            q.put(shared)
        except RuntimeError as exc:
            print("share:", str(exc).splitlines()[0][:80])
    for _ in range(500):
        x = x * 1.0001 + 1
    print("exiting with queued work", flush=True)
elif mode == "daemon-gone":
    print(x.sum().item(), flush=True)
    os.kill(int(os.environ["GPUD_PID"]), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        (x * 2).sum().item()
    except RuntimeError as exc:
        print(f"RuntimeError after {time.monotonic() - t0:.1f}s:", exc)
