"""NOTE [implicit warp synchrony] (jit/passes/yield_points.py): warp-synchronous code without barriers, as CuPy's
partition kernels are written, sees each step's writes of every lane of its warp. tests/unit/jit/ptx/warp_bitonic.cu
is the kernel (one warp bitonic-sorts a segment of global memory, lanes sharing each step through memory); its
PTX is nvcc's. Run thread after thread, the segments came back unsorted."""

from __future__ import annotations

import os

import numpy as np
import pytest

from jit import compile_module
from jit.ptx.parser import parse

HERE = os.path.join(os.path.dirname(__file__), "ptx")
PTX = open(os.path.join(HERE, "warp_bitonic.ptx")).read()
TAIL = open(os.path.join(HERE, "warp_tail.ptx")).read()


@pytest.mark.parametrize("bounds_check", [False, True])
@pytest.mark.parametrize("n", [64, 1024])
def test_a_warp_sorts_its_segment_without_a_barrier(bounds_check: bool, n: int) -> None:
    k = compile_module(PTX, bounds_check=bounds_check).get_kernel("warp_bitonic")
    a = np.random.default_rng(n).random(4 * n).astype(np.float32)
    ref = np.sort(a.reshape(4, n), axis=1)
    params = a.ctypes.data.to_bytes(8, "little") + n.to_bytes(4, "little") + bytes(4)
    kw = {"allowed_ranges": [(a.ctypes.data, a.nbytes)]} if bounds_check else {}
    k.launch(2, 64, 0, params, **kw)  # two blocks of two warps: four segments
    assert np.array_equal(a.reshape(4, n), ref)


@pytest.mark.parametrize("bounds_check", [False, True])
@pytest.mark.parametrize("n", [64, 256])
def test_reads_after_a_loop_or_a_straight_line_step_see_every_lanes_writes(bounds_check: bool, n: int) -> None:
    """tests/unit/jit/ptx/warp_tail.cu: no back edge lies between the sort's last step and the read of its result,
    nor between the straight-line swap and the read of a neighbour's half of it (CuPy's argpartition merges so)."""
    k = compile_module(TAIL, bounds_check=bounds_check).get_kernel("warp_tail")
    a = np.random.default_rng(n).random(4 * n).astype(np.float32)
    out = np.zeros(4 * 32, np.float32)
    srt = np.sort(a.reshape(4, n), axis=1)
    ref = srt[:, n - 1 - (np.arange(32) + 1) % 32]
    params = a.ctypes.data.to_bytes(8, "little") + out.ctypes.data.to_bytes(8, "little") + n.to_bytes(4, "little")
    params += bytes(4)
    kw = {"allowed_ranges": [(a.ctypes.data, a.nbytes), (out.ctypes.data, out.nbytes)]} if bounds_check else {}
    k.launch(2, 64, 0, params, **kw)
    assert np.array_equal(out.reshape(4, 32), ref)


def test_only_barrier_free_warp_code_gets_the_yields() -> None:
    from jit.passes import yield_points
    from jit.passes.sync_points import YIELD

    def yields(ptx: str) -> int:
        mod = yield_points.run(parse(ptx))
        return sum(1 for fn in mod.functions for st in fn.body or [] if getattr(st, "opcode", None) == YIELD)

    assert yields(PTX) >= 3  # the three loops of the sort store to global memory
    with_barrier = PTX.replace("ret;", "bar.sync 0;\n\tret;", 1)
    assert yields(with_barrier) == 0  # a block barrier: the program synchronises its threads itself
