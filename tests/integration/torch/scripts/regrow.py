"""Memory an op gives a tensor in place is charged (NOTE [storages an op regrows] in gpud/aten_exec.py): resize_,
set_ onto another tensor's storage, an out= argument that ATen resizes; past the quota the op fails as CUDA's
allocator fails it, and the tensor is as it was. Prints one line per case (MiB charged to this session)."""

import torch

MiB = 1 << 20
x = torch.empty(0, device="cuda")
x.resize_(64 * MiB // 4)  # 64 MiB
print("resize_", torch.cuda.memory_allocated() // MiB)
a = torch.empty(0, device="cuda")
b = torch.ones(32 * MiB // 4, device="cuda")
a.set_(b)
del b  # a holds the storage now
print("set_", torch.cuda.memory_allocated() // MiB, a.sum().item() == 32 * MiB // 4)
c = torch.empty(0, device="cuda")
torch.add(torch.ones(16 * MiB // 4, device="cuda"), 1, out=c)
print("out=", torch.cuda.memory_allocated() // MiB, c.numel())
y = torch.empty(0, device="cuda")
try:
    y.resize_(1 << 28)  # 1 GiB, past the 256 MiB device
    print("over", "grew", y.numel())
except torch.OutOfMemoryError as exc:
    print("over", "refused", "growing a tensor's storage" in str(exc))
print("intact", y.shape, y.sum().item(), torch.cuda.memory_allocated() // MiB)
try:
    torch.empty(1 << 50, device="cuda").sum().item()  # 4 PiB: the allocator refuses it (reported at the sync)
except torch.OutOfMemoryError:
    print("huge", "out of memory")
del x, a, c
print("freed", torch.cuda.memory_allocated() < MiB)
