"""Writes grid_sync_numba.ptx: numba-cuda's grid group sync (calls cudaCGGetIntrinsicHandle / cudaCGSynchronize of
cudadevrt) in tests/unit/jit/grid_sync_ref.py's kernel. numba types `this_grid` only with a device present: run it
from the repository root as `wooly run tests/unit/jit/ptx/grid_sync_numba.py`."""

import sys
from pathlib import Path

from numba import cuda, int32, void

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from tests.unit.jit.grid_sync_ref import rounds  # noqa: E402

ptx, _ = cuda.compile_ptx(rounds, void(int32[::1], int32[::1], int32), cc=(8, 0))
(Path(__file__).parent / "grid_sync_numba.ptx").write_text(ptx)
