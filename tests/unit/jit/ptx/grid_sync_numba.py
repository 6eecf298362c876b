"""Writes grid_sync_numba.ptx: numba-cuda's grid group sync (calls cudaCGGetIntrinsicHandle / cudaCGSynchronize of
cudadevrt). numba types `this_grid` only with a device present: run it as `wooly run grid_sync_numba.py`."""

from pathlib import Path

from numba import cuda, int32, void


def k(a, b, iters):  # type: ignore[no-untyped-def]
    g = cuda.cg.this_grid()
    i = cuda.grid(1)
    n = a.size
    for it in range(iters):
        b[i] = a[i] + a[(i + 1) % n] + it
        g.sync()
        a[i] = b[i] - b[(i + 3) % n] // 2
        g.sync()


ptx, _ = cuda.compile_ptx(k, void(int32[::1], int32[::1], int32), cc=(8, 0))
(Path(__file__).parent / "grid_sync_numba.ptx").write_text(ptx)
