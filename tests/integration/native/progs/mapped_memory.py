"""numba mapped, managed and pinned arrays: kernels reach host memory when gpud shares the host."""

import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver


@cuda.jit
def inc(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1


m = cuda.mapped_array(100, dtype=np.int32)
m[:] = np.arange(100)
inc[1, 128](m)
cuda.synchronize()
assert (m == np.arange(100) + 1).all(), m[:5]

g = cuda.managed_array(100, dtype=np.float32)
g[:] = 5
inc[1, 128](g)
cuda.synchronize()
assert (g == 6).all(), g[:5]

# a synchronous memset into mapped memory is visible to the host when it returns
driver.device_memset(m, 0, driver.device_memory_size(m))
assert (m == 0).all(), m[:5]

p = cuda.pinned_array(10, dtype=np.float64)
p[:] = 3
assert (cuda.to_device(p).copy_to_host() == 3).all()
print("mapped/managed OK")
