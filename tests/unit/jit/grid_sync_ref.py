"""The grid-sync test kernel (numba's form; tests/unit/jit/ptx/grid_sync.cu is the same in CUDA C++) and its
expected result, shared by the JIT tests, the gpud test and the `wooly run` program."""

from __future__ import annotations

import numpy as np

try:
    from numba import cuda
except ImportError:  # expect() alone needs only numpy
    cuda = None


def rounds(a, b, iters):  # type: ignore[no-untyped-def]
    """`iters` rounds of b = a + a[i+1] + it; grid sync; a = b - b[i+3] // 2; grid sync (numba.cuda kernel body)."""
    g = cuda.cg.this_grid()
    i = cuda.grid(1)
    n = a.size
    for it in range(iters):
        b[i] = a[i] + a[(i + 1) % n] + it
        g.sync()
        a[i] = b[i] - b[(i + 3) % n] // 2
        g.sync()


def expect(kind: str, a: np.ndarray, iters: int) -> np.ndarray:
    """What either kernel leaves in `a`, in int32 arithmetic. C's `/` rounds toward 0 (nvcc), Python's `//` down
    (numba)."""

    def wrap(x: np.ndarray) -> np.ndarray:
        return x.astype(np.int64).astype(np.int32).astype(np.int64)

    a = a.astype(np.int64)
    for it in range(iters):
        b = wrap(a + np.roll(a, -1) + it)
        r = np.roll(b, -3)
        a = wrap(b - (r // 2 if kind == "numba" else np.sign(r) * (np.abs(r) // 2)))
    return a.astype(np.int32)
