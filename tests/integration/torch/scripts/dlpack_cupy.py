"""Run under ``wooly run``: CuPy and numba arrays as torch tensors without a copy, as on a GPU."""

import gc

import cupy as cp
import numpy as np
import torch
from numba import cuda

# torch.from_dlpack of a CuPy array: one memory; a CuPy kernel's writes and a torch op's writes are both seen
a = cp.arange(6, dtype=cp.float32)
u = torch.from_dlpack(a)
u[1] = 100.0
a[2] = -5
print("cupy", u.device, u.cpu().tolist(), cp.asnumpy(a).tolist())
for dt in (cp.float16, cp.int64, cp.bool_, cp.complex64, cp.uint8):
    x = cp.arange(5).astype(dt)
    y = torch.from_dlpack(x)
    print(np.dtype(dt).name, str(y.dtype), y.cpu().numpy().tolist() == cp.asnumpy(x).tolist())
v = torch.as_tensor(cp.arange(12, dtype=cp.int64).reshape(3, 4)[:, 1:3])
print("view", tuple(v.shape), v.stride(), v.cpu().tolist())
cap = cp.arange(3, dtype=cp.float64).__dlpack__()
print("capsule", torch.from_dlpack(cap).cpu().tolist())

# the array stays while torch uses its memory: CuPy's pool must not give it to the next array
b = cp.full(1 << 16, 3.0, dtype=cp.float32)
w = torch.from_dlpack(b)[10:]  # a view of the tensor: it keeps the memory too
del b
gc.collect()
others = [cp.full(1 << 16, 9.0, dtype=cp.float32) for _ in range(4)]
print("kept", float(w.sum()) == 3.0 * ((1 << 16) - 10))


# a numba kernel on a tensor's memory (numba's array, torch's view of it)
@cuda.jit
def twice(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= 2


d = cuda.to_device(np.arange(8, dtype=np.float32))
t = torch.as_tensor(d)
t += 1
twice[1, 32](d)
print("numba", t.cpu().tolist(), d.copy_to_host().tolist() == t.cpu().tolist())
# the other way: CuPy and numba work on a cuda tensor's memory (the tensor's storage moves onto driver memory once)
t = torch.arange(10, dtype=torch.float32, device="cuda")
c = cp.from_dlpack(t)
c *= 3
z = cp.asarray(t[2:6])  # __cuda_array_interface__ of a view
z += 1
print("from torch", t.cpu().tolist(), cp.asnumpy(c).tolist() == t.cpu().tolist())
g = torch.zeros(8, device="cuda")
twice[1, 32](cuda.as_cuda_array(g.add_(1.5)))
print("numba on torch", g.cpu().tolist())
m = torch.randn(64, 64, device="cuda")
print(
    "cupy matmul",
    bool(cp.allclose(cp.from_dlpack(m) @ cp.from_dlpack(m), cp.asarray((m @ m).cpu().numpy()), atol=1e-4)),
)
print("OK")
