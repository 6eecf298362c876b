"""The victim of issue 21's attack: 64 tensors of 1024 floats equal to 1234.5 on "cuda", held while another
tenant attacks; prints 'ready', waits for a line on stdin, then checks its data and prints 'intact'."""

import sys

import torch

held = [torch.full((1024,), 1234.5, device="cuda") for _ in range(64)]
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()
assert all(bool((t == 1234.5).all()) for t in held), "victim's data changed"
print("intact", flush=True)
