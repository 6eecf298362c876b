"""Run under ``wooly run``: a torch tensor over another library's device memory (NOTE [device memory aliases])."""

import gc
import os

import numpy as np
import torch

from shim.runtime import driver

d = driver()


class Buf:
    """Device memory from the driver API, offered as a CUDA array (what numba's and CuPy's arrays offer)."""

    def __init__(self, ptr: int, shape: tuple, typestr: str = "<f4", strides: tuple | None = None) -> None:
        self.__cuda_array_interface__ = {
            "data": (ptr, False),
            "shape": shape,
            "typestr": typestr,
            "strides": strides,
            "version": 3,
        }


def used() -> int:
    free, total = d.mem_get_info()
    return total - free


# 1. one memory, two names: a driver copy's bytes are the tensor's, and the tensor's writes are the driver's
n = 1 << 20
base = used()
p = d.mem_alloc(n * 4)
d.memcpy_htod(p, np.arange(n, dtype=np.float32))
t = torch.as_tensor(Buf(p, (n,)))
print("alias", t.device, t.dtype, float(t[5]), float(t.sum()) == float(np.arange(n, dtype=np.float64).sum()))
t.mul_(2)
print("torch writes", np.frombuffer(d.memcpy_dtoh(p + 8, 8), dtype=np.float32).tolist())
d.memcpy_htod(p, np.full(2, -1, dtype=np.float32))
print("driver writes", t[:3].cpu().tolist())
print("charged once", used() - base == n * 4, torch.cuda.memory_allocated())

# 2. strides and an offset (a transposed view 16 bytes into the allocation), dtypes, copies
m = torch.as_tensor(Buf(p + 16, (3, 2), "<f4", (4, 24)))
print("strided", m.shape, m.stride(), m.cpu().tolist() == t.cpu()[4:22].reshape(3, 6).T[:3, :2].tolist())
i = torch.as_tensor(Buf(p, (4,), "<i4"))
print("int32 view", i.dtype, i.cpu().tolist() == np.frombuffer(d.memcpy_dtoh(p, 16), dtype=np.int32).tolist())
c = torch.tensor(Buf(p, (4,)))
c2 = torch.as_tensor(Buf(p, (4,)), dtype=torch.float64)
t[:4] = 7
print("copies", c.cpu().tolist(), c2.dtype, c2.cpu().tolist(), torch.cuda.memory_allocated())

# 3. cuMemFree while a tensor still maps it: the tensor keeps its pages and the tenant is charged until it goes
del c, c2, m, i
d.mem_free(p)
print("after free", float(t[10]), used() - base == n * 4)
del t
gc.collect()
torch.cuda.synchronize()
q = d.mem_alloc(4096)  # any later alias call reports dead storages; a sync and this show the memory is back
torch.as_tensor(Buf(q, (4,)))
torch.cuda.synchronize()
print("released", used() - base == 4096)

# 4. bad pointers are errors, not reads
other = int(os.environ.get("OTHER_PTR", "0"))  # an allocation of another session (another tenant's)
for what, buf in (
    ("other", Buf(other, (4,))),
    ("wild", Buf(0x7000_0000, (4,))),
    ("overrun", Buf(q, (4096,))),
    ("odd", Buf(q + 2, (4,))),
):
    try:
        torch.as_tensor(buf).sum().item()
        print(what, "READ")
    except RuntimeError as exc:
        print(what, "refused", str(exc).split("torch.from_dlpack: ")[-1].splitlines()[0])

# 5. the other way: a tensor's memory at a driver-API address (its storage moves there; its views follow)
base = used()
x = torch.arange(1024, dtype=torch.float32, device="cuda")
xv = x[512:]
before = torch.cuda.memory_allocated()
cai = xv.__cuda_array_interface__
ptr = cai["data"][0]
print(
    "export", cai["shape"], cai["strides"], cai["typestr"], float(np.frombuffer(d.memcpy_dtoh(ptr, 4), np.float32)[0])
)
d.memcpy_htod(ptr, np.full(4, 0.5, dtype=np.float32))
x[513] = 7.0
print("both", x[510:516].cpu().tolist(), np.frombuffer(d.memcpy_dtoh(ptr, 8), np.float32).tolist())
print(
    "once",
    used() - base == 4096,
    torch.cuda.memory_allocated() == before,
    x.__cuda_array_interface__["data"][0] == ptr - 2048,
)
try:
    print(torch.ones(2, device="cuda", requires_grad=True).__cuda_array_interface__)
except RuntimeError as exc:
    print("grad", str(exc).split(".")[0])
cap = x.__dlpack__()
back = torch.from_dlpack(cap)  # the same memory again, through a capsule
back[0] = -3.0
print("capsule", float(x[0]), x.__dlpack_device__())
del x, xv, back, cap
gc.collect()
torch.cuda.synchronize()
torch.as_tensor(Buf(q, (4,)))  # an alias call reports dead storages; the export's allocation went with its storage
torch.cuda.synchronize()
print("export freed", used() - base == 0)
print("OK")
