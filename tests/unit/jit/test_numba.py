"""numba-cuda generated PTX (compiled at test time, no GPU needed) run on the CPU JIT."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tests.unit.jit.helpers import module

cuda = pytest.importorskip("numba.cuda")
from numba import float32, float64, int32, uint32, void  # noqa: E402


def compile_numba(fn: Any, sig: Any, **kw: Any) -> Any:
    ptx, _ = cuda.compile_ptx(fn, sig, cc=(8, 0), **kw)
    return module(ptx)


def numba_args(*args: Any) -> list[Any]:
    """numba's kernel ABI: each array is (meminfo, parent, nitems, itemsize, data, shape..., strides...)."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, np.ndarray):
            out += [0, 0, a.size, a.itemsize, a.ctypes.data, *a.shape, *a.strides]
        else:
            out.append(a)
    return out


def run(mod: Any, grid: Any, block: Any, *args: Any, shared: int = 0) -> Any:
    import struct

    k = mod.get_kernel(mod.kernel_names[0])
    buf = bytearray(k.param_buffer_size)
    for p, v in zip(k.params, numba_args(*args), strict=False):
        if isinstance(v, float):
            raw = struct.pack("<f" if p.size == 4 else "<d", v)
        else:
            raw = int(v).to_bytes(p.size, "little", signed=int(v) < 0)
        buf[p.offset : p.offset + p.size] = raw
    return k.launch(grid, block, shared, bytes(buf))


def saxpy(a, x, y, out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


def test_saxpy() -> None:
    mod = compile_numba(saxpy, void(float32, float32[::1], float32[::1], float32[::1]))
    n = 10001
    x = np.random.rand(n).astype(np.float32)
    y = np.random.rand(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    run(mod, ((n + 255) // 256,), (256,), 2.5, x, y, out)
    np.testing.assert_allclose(out, 2.5 * x + y, rtol=1e-6)


def block_sum(x, out):  # type: ignore[no-untyped-def]
    sm = cuda.shared.array(128, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    sm[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    s = 64
    while s > 0:
        if t < s:
            sm[t] += sm[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        cuda.atomic.add(out, 0, sm[0])


def test_shared_tree_reduction_with_atomics() -> None:
    mod = compile_numba(block_sum, void(float32[::1], float32[::1]))
    x = np.random.rand(5000).astype(np.float32)
    out = np.zeros(1, np.float32)
    run(mod, ((x.size + 127) // 128,), (128,), x, out)
    assert abs(out[0] - x.sum()) < 1e-2


def warp_sum(x, out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    v = x[i] if i < x.size else 0
    off = 16
    while off > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        off //= 2
    if cuda.laneid == 0:
        out[i // 32] = v
    b = cuda.ballot_sync(0xFFFFFFFF, v > 100)
    if cuda.laneid == 1:
        out[i // 32 + x.size // 32] = b


def test_warp_shuffle_reduction() -> None:
    mod = compile_numba(warp_sum, void(int32[::1], int32[::1]))
    x = np.arange(256, dtype=np.int32)
    out = np.zeros(16, np.int32)
    run(mod, (2,), (128,), x, out)
    sums = x.reshape(8, 32).sum(1)
    assert out[:8].tolist() == sums.tolist()
    ballots = []
    for w in range(8):
        v = x[32 * w : 32 * w + 32].astype(np.int64).tolist()
        for off in (16, 8, 4, 2, 1):  # out-of-range source lanes read their own value
            v = [v[lane] + (v[lane + off] if lane + off < 32 else v[lane]) for lane in range(32)]
        b = sum(1 << lane for lane in range(32) if v[lane] > 100)
        ballots.append(b - (1 << 32) if b >> 31 else b)
    assert out[8:].tolist() == ballots


def hist(data, bins):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < data.size:
        cuda.atomic.add(bins, data[i] % 16, 1)


def test_global_atomics_parallel_blocks() -> None:
    mod = compile_numba(hist, void(uint32[::1], uint32[::1]))
    d = np.random.randint(0, 1000, 100000).astype(np.uint32)
    bins = np.zeros(16, np.uint32)
    run(mod, ((d.size + 255) // 256,), (256,), d, bins)
    assert bins.tolist() == np.bincount(d % 16, minlength=16).tolist()


def mathk(x, out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i] = math.sin(v) + math.exp(v) * math.sqrt(abs(v)) + math.log1p(abs(v)) + math.pow(abs(v), 0.3) + v // 0.7


@pytest.mark.parametrize("fastmath", [False, True])
def test_math_functions(fastmath: bool) -> None:
    mod = compile_numba(mathk, void(float64[::1], float64[::1]), fastmath=fastmath)
    x = np.linspace(-3, 3, 301)
    out = np.zeros_like(x)
    run(mod, (2,), (256,), x, out)
    ref = np.sin(x) + np.exp(x) * np.sqrt(np.abs(x)) + np.log1p(np.abs(x)) + np.abs(x) ** 0.3 + x // 0.7
    np.testing.assert_allclose(out, ref, rtol=1e-6 if not fastmath else 1e-4, atol=1e-9)


def grid2d(a, out):  # type: ignore[no-untyped-def]
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j] * 2 + i - j


def test_2d_grid_and_strides() -> None:
    mod = compile_numba(grid2d, void(float32[:, :], float32[:, :]))
    a = np.random.rand(37, 21).astype(np.float32)
    out = np.zeros_like(a)
    run(mod, (3, 3), (16, 8), a, out)
    ii, jj = np.indices(a.shape)
    np.testing.assert_allclose(out, a * 2 + ii - jj)


# NOTE [rematerialised registers] / [thread records]: barrier kernels under the scheduler with block shapes that
# are not multiples of a vector width, a barrier pair passed only by some blocks, and registers recomputed at resume.


def transpose_accumulate(a, out, rounds):  # type: ignore[no-untyped-def]
    sm = cuda.shared.array((16, 17), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    bx = cuda.blockIdx.x
    acc = float32(0.0)
    for it in range(rounds):
        sm[ty, tx] = a[bx, it, ty, tx]
        cuda.syncthreads()
        acc += sm[tx, ty] * float32(it + 1)
        cuda.syncthreads()
        if bx % 2 == 1:  # uniform per block: odd blocks pass a third barrier
            sm[ty, tx] = acc
            cuda.syncthreads()
            acc = sm[tx, ty] - float32(1.0)
            cuda.syncthreads()
    out[bx, ty, tx] = acc


@pytest.mark.parametrize("side", [16, 12, 5])
def test_barriers_square_blocks(side: int) -> None:
    mod = compile_numba(transpose_accumulate, void(float32[:, :, :, ::1], float32[:, :, ::1], int32))
    k = mod.get_kernel(mod.kernel_names[0])
    assert k._code.rec_bytes > 0  # runs under the scheduler
    rng = np.random.default_rng(side)
    blocks, rounds = 6, 4
    a = rng.integers(-8, 8, (blocks, rounds, side, side)).astype(np.float32)
    out = np.zeros((blocks, side, side), np.float32)
    run(mod, (blocks,), (side, side), a, out, rounds)
    want = np.zeros_like(out)
    for bx in range(blocks):
        acc = np.zeros((side, side), np.float32)
        for it in range(rounds):
            acc = acc + a[bx, it].T * np.float32(it + 1)
            if bx % 2 == 1:
                acc = acc.T - np.float32(1.0)
        want[bx] = acc
    np.testing.assert_array_equal(out, want)


def rematerialised(a, out):  # type: ignore[no-untyped-def]
    sm = cuda.shared.array(256, int32)
    t = cuda.threadIdx.x
    g = cuda.blockIdx.x * cuda.blockDim.x + t
    shifted = (t * 7 + 3) % cuda.blockDim.x  # a pure function of the thread: recomputed, not saved
    mine = a[g]  # a load: saved
    sm[t] = mine
    cuda.syncthreads()
    v = sm[shifted]
    cuda.syncthreads()
    sm[t] = v + shifted
    cuda.syncthreads()
    out[g] = sm[(t + 1) % cuda.blockDim.x] * 1000 + shifted + mine


def test_rematerialised_registers_across_barriers() -> None:
    from jit.pipeline import front_end

    ptx, _ = cuda.compile_ptx(rematerialised, void(int32[::1], int32[::1]), cc=(8, 0))
    sps = front_end(ptx).functions[0].sync_points.values()
    assert any(sp.remat for sp in sps)  # something is recomputed at resume
    mod = module(ptx)
    for nt in (256, 96, 33):
        nb = 5
        a = np.arange(nb * nt, dtype=np.int32) * 3
        out = np.zeros(nb * nt, np.int32)
        run(mod, (nb,), (nt,), a, out)
        t = np.arange(nt)
        sh = (t * 7 + 3) % nt
        for b in range(nb):
            blk = a[b * nt : (b + 1) * nt]
            stage = blk[sh] + sh
            want = stage[(t + 1) % nt] * 1000 + sh + blk
            np.testing.assert_array_equal(out[b * nt : (b + 1) * nt], want)
