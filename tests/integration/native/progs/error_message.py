"""A bad launch configuration from numba fails with CUDA_ERROR_INVALID_VALUE; print the error texts."""

import numpy as np
from cuda.bindings import driver as cu
from numba import cuda


@cuda.jit
def k(x):
    x[cuda.grid(1)] = 1


d = cuda.to_device(np.zeros(4096, dtype=np.int32))
try:
    k[1, 2048](d)
    cuda.synchronize()
    print("no error raised")
except Exception as exc:  # numba-cuda 0.30 raises cuda.core's CUDAError, older ones CudaAPIError
    print(type(exc).__name__, exc)
    # the driver's string for the failure just returned carries wooly's detail
    print(cu.cuGetErrorString(cu.CUresult.CUDA_ERROR_INVALID_VALUE)[1].decode())
