"""numba-cuda kernels checked against numpy: elementwise, shared-memory reduction, atomics.

Runs unmodified on a GPU machine (``python examples/numba_kernels.py``) and on any machine under
wooly (``wooly run examples/numba_kernels.py``). Exits non-zero on a mismatch.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from numba import cuda, float32, int32

THREADS = 128


@cuda.jit
def saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def block_sums(x, partial):
    """Tree reduction in shared memory: one partial sum per block."""
    buf = cuda.shared.array(THREADS, dtype=float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[tid] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    stride = THREADS // 2
    while stride > 0:
        if tid < stride:
            buf[tid] += buf[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def histogram(values, bins, counts):
    i = cuda.grid(1)
    if i < values.size:
        b = int32(values[i] * bins)
        if b >= bins:
            b = bins - 1
        cuda.atomic.add(counts, b, 1)


@cuda.jit
def block_max(x, out):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.max(out, 0, x[i])


def main() -> int:
    rng = np.random.default_rng(0)
    n = 10_000
    blocks = math.ceil(n / THREADS)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    failures = []

    d_x, d_y = cuda.to_device(x), cuda.to_device(y)
    d_out = cuda.device_array_like(x)
    saxpy[blocks, THREADS](np.float32(2.5), d_x, d_y, d_out)
    if not np.allclose(d_out.copy_to_host(), 2.5 * x + y, rtol=1e-6):
        failures.append("saxpy")

    d_partial = cuda.device_array(blocks, dtype=np.float32)
    block_sums[blocks, THREADS](d_x, d_partial)
    total = d_partial.copy_to_host().sum(dtype=np.float64)
    if not math.isclose(total, x.sum(dtype=np.float64), rel_tol=1e-4):
        failures.append(f"reduction: {total} != {x.sum(dtype=np.float64)}")

    bins = 16
    d_counts = cuda.to_device(np.zeros(bins, dtype=np.int32))
    histogram[blocks, THREADS](d_x, bins, d_counts)
    expected = np.bincount(np.minimum((x * bins).astype(np.int32), bins - 1), minlength=bins)
    if not (d_counts.copy_to_host() == expected).all():
        failures.append("histogram (atomic.add)")

    d_max = cuda.to_device(np.zeros(1, dtype=np.float32))
    block_max[blocks, THREADS](d_x, d_max)
    if d_max.copy_to_host()[0] != x.max():
        failures.append("atomic.max")

    for f in failures:
        print(f"MISMATCH: {f}", file=sys.stderr)
    print("numba_kernels:", "FAILED" if failures else "OK", f"({4 - len(failures)}/4 checks passed)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
