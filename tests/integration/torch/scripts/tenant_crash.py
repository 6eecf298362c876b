"""A tenant whose executor process dies under it: by a segfaulting op ('segv'), by an op past its max_kernel_s
('slow') or, with 'wait', by a signal from outside (the test kills it while this script waits for a line on
stdin); 'none' runs ordinary ops. Prints one line per step."""

import sys

import torch

mode = sys.argv[1]
x = torch.arange(4.0, device="cuda")
keep = torch.ones(1 << 20, device="cuda")  # 4 MiB that must be given back when the executor dies
torch.cuda.synchronize()
print("ready", flush=True)
try:
    if mode == "segv":
        # sums 2**40 floats from a 4-float tensor: the read runs off the end of the process's memory
        torch.segment_reduce(x, "sum", lengths=torch.tensor([1 << 40], device="cuda"), unsafe=True).sum().item()
    elif mode == "slow":
        a = torch.ones(6000, 6000, device="cuda")
        (a @ a).sum().item()
    else:
        if mode == "wait":
            sys.stdin.readline()
        (x * 2).sum().item()
    print("op: ran", flush=True)
except RuntimeError as exc:
    print(f"op: {str(exc).splitlines()[0][:300]}", flush=True)
try:
    print(f"next: ran {(x + 1).sum().item()}", flush=True)
except RuntimeError as exc:
    print(f"next: {str(exc).splitlines()[0][:300]}", flush=True)
