"""Grid-wide sync in cooperative launches (NOTE [grid sync], jit/emit/cpu/grid.py): nvcc's inlined %envreg protocol
and numba's cudadevrt calls (supplied by jit/devrt.py), each checked against numpy over several grid shapes, with
and without bounds checks; an ordinary launch traps, as on a GPU; a grid too large to be resident is refused."""

from __future__ import annotations

import time

import numpy as np
import pytest

from jit import GlobalRange, JitError, compile_module
from tests.unit.jit.grid_sync_ref import expect
from tests.unit.jit.helpers import PTX_DIR, pack
from tests.unit.jit.test_numba import numba_args

NVCC = (PTX_DIR / "grid_sync_nvcc.ptx").read_text()  # from grid_sync.cu
NUMBA = (PTX_DIR / "grid_sync_numba.ptx").read_text()  # from grid_sync_numba.py (the kernel: grid_sync_ref.py)
ITERS = 5


def params(kind: str, k, a: np.ndarray, b: np.ndarray, iters: int) -> bytes:  # type: ignore[no-untyped-def]
    if kind == "nvcc":
        return pack(k, a, b, iters)
    buf = bytearray(k.param_buffer_size)
    for p, v in zip(k.params, numba_args(a, b, iters), strict=False):
        buf[p.offset : p.offset + p.size] = int(v).to_bytes(p.size, "little", signed=int(v) < 0)
    return bytes(buf)


def kernel(kind: str, checked: bool):  # type: ignore[no-untyped-def]
    m = compile_module(NVCC if kind == "nvcc" else NUMBA, bounds_check=checked, tier="optimized")
    return m.get_kernel(m.kernel_names[0])


@pytest.mark.parametrize("kind", ["nvcc", "numba"])
@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("grid,block", [(4, 64), (37, 32), (2, 1024), (64, 96)])
def test_grid_sync_matches_numpy(kind: str, checked: bool, grid: int, block: int) -> None:
    k = kernel(kind, checked)
    n = grid * block
    a = np.random.default_rng(n).integers(-1000, 1000, n, dtype=np.int32)
    a0, b = a.copy(), np.zeros(n, np.int32)
    kw = {"allowed_ranges": [GlobalRange(x.ctypes.data, x.nbytes) for x in (a, b)]} if checked else {}
    k.launch((grid,), (block,), 0, params(kind, k, a, b, ITERS), cooperative=True, **kw)
    np.testing.assert_array_equal(a, expect(kind, a0, ITERS))


@pytest.mark.parametrize("kind", ["nvcc", "numba"])
def test_ordinary_launch_traps(kind: str) -> None:
    """No cooperative launch, no workspace: both kinds of code trap (CUDA_ERROR_LAUNCH_FAILED), as on a GPU."""
    k = kernel(kind, False)
    a, b = np.zeros(256, np.int32), np.zeros(256, np.int32)
    with pytest.raises(JitError) as ei:
        k.launch((4,), (64,), 0, params(kind, k, a, b, 1))
    assert ei.value.code == 719


def test_grid_too_large_to_be_resident() -> None:
    import jit.runtime as rt

    k = kernel("nvcc", False)
    a, b = np.zeros(16, np.int32), np.zeros(16, np.int32)
    with pytest.raises(JitError) as ei:
        k.launch((rt.COOPERATIVE_MAX_BLOCKS + 1,), (1,), 0, params("nvcc", k, a, b, 0), cooperative=True)
    assert ei.value.code == 720 and "resident" in ei.value.message


def test_many_blocks_on_few_cores_finish_promptly() -> None:
    """256 blocks, each on its own OS thread, 40 grid barriers: the waiting blocks give their cores away (sched_yield)
    instead of spinning through their time slices (measured about 0.2 s here; spinning took far longer)."""
    k = kernel("nvcc", False)
    grid, block, iters = 256, 32, 20
    a = np.random.default_rng(0).integers(-1000, 1000, grid * block, dtype=np.int32)
    a0, b = a.copy(), np.zeros(grid * block, np.int32)
    t = time.perf_counter()
    k.launch((grid,), (block,), 0, params("nvcc", k, a, b, iters), cooperative=True)
    elapsed = time.perf_counter() - t
    np.testing.assert_array_equal(a, expect("nvcc", a0, iters))
    assert elapsed < 20, elapsed


def test_devrt_is_supplied_only_where_named() -> None:
    from jit import devrt
    from jit.ptx.parser import parse

    assert devrt.supply(NVCC) is NVCC  # nvcc inlines its barrier: nothing to add
    defined = {f.name for f in parse(devrt.supply(NUMBA)).functions if f.body is not None}
    assert {"cudaCGGetIntrinsicHandle", "cudaCGSynchronize"} <= defined
    # a module's own (strong) definition wins over the supplied weak one
    own = (
        NUMBA
        + """
.visible .func (.param .b32 func_retval0) cudaCGSynchronize(.param .b64 h, .param .b32 f)
{ .reg .b32 %r1; mov.u32 %r1, 7; st.param.b32 [func_retval0], %r1; ret; }
"""
    )
    sync = [f for f in parse(devrt.supply(own)).functions if f.name == "cudaCGSynchronize" and f.body is not None]
    assert len(sync) == 1 and not sync[0].weak
