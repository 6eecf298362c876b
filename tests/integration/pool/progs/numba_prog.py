"""A numba-cuda kernel (placed through the pool by the test)."""

import numpy as np
from numba import cuda


@cuda.jit
def axpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


x = np.arange(4096, dtype=np.float32)
y = np.ones_like(x)
out = cuda.device_array_like(x)
axpy[16, 256](np.float32(2.0), cuda.to_device(x), cuda.to_device(y), out)
print("numba ok", bool(np.allclose(out.copy_to_host(), 2 * x + 1)))
