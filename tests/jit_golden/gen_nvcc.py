"""Generate golden cases with the offline compiler: `nvcc -ptx -arch=sm_80` (CUDA 13 on PATH; no GPU needed).

These keep the corpus honest about a second producer version (CUDA 13 emits PTX ISA 9.x).
Run: `python tests/jit_golden/gen_nvcc.py`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _casegen import Arr, Scalar, rng, write_case  # noqa: E402
from _nvrtc import compile_nvcc  # noqa: E402


def nvcc_case(name, src, args, **kw):
    ptx, ver = compile_nvcc(src)
    write_case("nvcc_" + name, producer=f"nvcc -ptx -arch=sm_80 ({ver})", ptx=ptx, args=args, abi="c", **kw)


def out(name, like, expected, tol=None):
    return Arr(name, np.zeros_like(like), "out", np.asarray(expected).astype(like.dtype), tol or {}, "zeros")


def main():
    if not shutil.which("nvcc"):
        sys.exit("nvcc not on PATH")
    r = rng(300)
    # 1: grid-stride saxpy + block reduction of the result with warp shuffles
    src = r"""
extern "C" __global__ void saxpy_sum(float* y, const float* x, float a, int n, float* block_sums) {
  float local = 0.f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = a * x[i] + y[i];
    local += y[i];
  }
  for (int o = 16; o > 0; o >>= 1) local += __shfl_xor_sync(0xffffffffu, local, o);
  __shared__ float warp_sums[32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = local;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) block_sums[blockIdx.x] = v;
  }
}"""
    n, nb, bs = 4000, 4, 256
    x = r.integers(-20, 20, n).astype(np.float32)
    y = r.integers(-20, 20, n).astype(np.float32)
    ey = (np.float32(0.5) * x + y).astype(np.float32)
    idx = np.arange(n)
    owner = (idx % (nb * bs)) // bs
    bsum = np.array([ey[owner == b].sum() for b in range(nb)], np.float32)
    nvcc_case(
        "saxpy_block_sum",
        src,
        [
            Arr("y", y, "inout", ey),
            Arr("x", x),
            Scalar("a", "float32", 0.5),
            Scalar("n", "int32", n),
            out("block_sums", np.zeros(nb, np.float32), bsum),
        ],
        category="reduction",
        grid=nb,
        block=bs,
        seed=300,
        notes="CUDA 13 nvcc; values exact (small ints/2)",
    )

    # 2: half2 + double + integer mix, __noinline__ helper
    src = r"""#include <cuda_fp16.h>
__device__ __noinline__ double poly(double v, int k) { double r = 1.0; for (int j = 0; j < k; ++j) r = r * v + j; return r; }
extern "C" __global__ void mix(const __half2* h, const double* d, const int* k, float* o, double* od, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half2 v = __hmul2(h[i], h[i]);
  o[i] = __low2float(v) - __high2float(v);
  od[i] = poly(d[i], k[i] & 7);
}"""
    n = 300
    hh = (r.integers(-64, 64, (n, 2)) / 8.0).astype(np.float16)
    dd = r.integers(-16, 16, n) / 4.0
    kk = r.integers(0, 100, n).astype(np.int32)
    H = hh.astype(np.float64)
    eo = (H[:, 0] ** 2).astype(np.float16).astype(np.float32) - (H[:, 1] ** 2).astype(np.float16).astype(np.float32)
    ed = np.zeros(n)
    for i in range(n):
        v = 1.0
        for j in range(int(kk[i]) & 7):
            v = v * dd[i] + j
        ed[i] = v
    nvcc_case(
        "half2_double_noinline",
        src,
        [
            Arr("h", hh),
            Arr("d", dd),
            Arr("k", kk),
            out("o", np.zeros(n, np.float32), eo),
            out("od", ed, ed, {"rtol": 1e-15}),
            Scalar("n", "int32", n),
        ],
        category="calls",
        grid=3,
        block=128,
        seed=301,
    )

    # 3: atomics + printf from a CUDA 13 toolchain
    src = r"""#include <cstdio>
extern "C" __global__ void count_neg(const int* x, int n, unsigned* cnt) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] < 0) atomicAdd(cnt, 1u);
  if (i == 0) printf("n=%d first=%d\n", n, x[0]);
}"""
    n = 777
    xi = r.integers(-100, 100, n).astype(np.int32)
    nvcc_case(
        "atomic_count_printf",
        src,
        [Arr("x", xi), Scalar("n", "int32", n), out("cnt", np.zeros(1, np.uint32), [(xi < 0).sum()])],
        category="atomics",
        grid=7,
        block=128,
        seed=302,
        printf={"text": f"n={n} first={int(xi[0])}\n", "compare": "exact"},
    )

    # 4: SIMD-in-a-word intrinsics; nvcc emits the video instruction vabsdiff4 (+ .add) for some of them
    src = r"""
extern "C" __global__ void simd_bytes(const unsigned* a, const unsigned* b, unsigned* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = a[i], y = b[i];
  o[7 * i + 0] = __vabsdiffu4(x, y);
  o[7 * i + 1] = __vsadu4(x, y);
  o[7 * i + 2] = __vabsdiffs4(x, y);
  o[7 * i + 3] = __vabs4(x);
  o[7 * i + 4] = __vadd4(x, y);
  o[7 * i + 5] = __vmaxu4(x, y);
  o[7 * i + 6] = __vavgu4(x, y);
}"""
    n = 500
    sa = r.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    sb = r.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    ua = sa.view(np.uint8).reshape(n, 4).astype(np.int64)
    ub = sb.view(np.uint8).reshape(n, 4).astype(np.int64)
    ia, ib = sa.view(np.int8).reshape(n, 4).astype(np.int64), sb.view(np.int8).reshape(n, 4).astype(np.int64)

    def pack4(lanes):  # (n, 4) lane values -> uint32 words (each lane taken mod 256)
        return ((lanes & 255) << np.array([0, 8, 16, 24])).sum(axis=1).astype(np.uint32)

    eo = np.stack(
        [
            pack4(np.abs(ua - ub)),
            np.abs(ua - ub).sum(axis=1).astype(np.uint32),
            pack4(np.abs(ia - ib)),
            pack4(np.abs(ia)),
            pack4(ua + ub),
            pack4(np.maximum(ua, ub)),
            pack4((ua + ub + 1) >> 1),
        ],
        axis=1,
    )
    nvcc_case(
        "simd_video_bytes",
        src,
        [Arr("a", sa), Arr("b", sb), out("o", np.zeros(7 * n, np.uint32), eo.ravel()), Scalar("n", "int32", n)],
        category="bits",
        grid=2,
        block=256,
        seed=303,
        notes="__vabsdiffu4/__vsadu4 compile to vabsdiff4",
    )

    # 5: cuda::barrier + cuda::memcpy_async (mbarrier and cp.async; the wait polls with a globaltimer/nanosleep back-off)
    src = r"""#include <cuda/barrier>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void barrier_copy(const float* in, float* out, int n) {
  __shared__ float buf[256];
#pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  auto block = cg::this_thread_block();
  if (block.thread_rank() == 0) init(&bar, block.size());
  block.sync();
  int base = blockIdx.x * blockDim.x;
  cuda::memcpy_async(block, buf, in + base, sizeof(float) * blockDim.x, bar);
  bar.arrive_and_wait();
  int t = threadIdx.x;
  if (base + t < n) out[base + t] = buf[blockDim.x - 1 - t] + 1.0f;
}"""
    n, nb, bs = 1000, 4, 256
    xin = r.integers(-50, 50, nb * bs).astype(np.float32)
    g = np.arange(n)
    eb = xin[(g // bs) * bs + bs - 1 - g % bs] + 1
    nvcc_case(
        "barrier_memcpy_async",
        src,
        [Arr("in", xin), out("out", np.zeros(n, np.float32), eb), Scalar("n", "int32", n)],
        category="sync",
        grid=nb,
        block=bs,
        seed=304,
        notes="cuda::barrier: mbarrier.init/arrive/test_wait",
    )

    # 6: CUB block primitives (header-only CUB of the CUDA toolkit): scan, reduce, radix sort, warp reduce. Heavy
    # template code: shuffles with predicates, bmsk/bfe/bfi digit extraction, barriers between the primitives
    src = r"""#include <cub/block/block_scan.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/warp/warp_reduce.cuh>
extern "C" __global__ void cub_block(const int* in, int* scan, int* red, int* sorted, int n) {
  typedef cub::BlockScan<int, 128> Scan;
  typedef cub::BlockReduce<int, 128> Red;
  typedef cub::BlockRadixSort<int, 128, 4> Sort;
  typedef cub::WarpReduce<int> WRed;
  __shared__ union { typename Scan::TempStorage s; typename Red::TempStorage r; typename Sort::TempStorage so;
                     typename WRed::TempStorage w[4]; } tmp;
  int t = threadIdx.x, base = blockIdx.x * 128;
  int v = base + t < n ? in[base + t] : 0;
  int out;
  Scan(tmp.s).ExclusiveSum(v, out);
  if (base + t < n) scan[base + t] = out;
  __syncthreads();
  int total = Red(tmp.r).Sum(v);
  if (t == 0) red[blockIdx.x] = total;
  __syncthreads();
  int keys[4];
  for (int j = 0; j < 4; ++j) keys[j] = base * 4 + t * 4 + j < 4 * n ? in[(base * 4 + t * 4 + j) % n] : 0x7fffffff;
  Sort(tmp.so).Sort(keys);
  for (int j = 0; j < 4; ++j) sorted[blockIdx.x * 512 + t * 4 + j] = keys[j];
  __syncthreads();
  int ws = WRed(tmp.w[t / 32]).Sum(v);
  if ((t & 31) == 0) atomicAdd(red + gridDim.x, ws);
}"""
    n, nb = 300, 3
    xc = r.integers(-1000, 1000, n).astype(np.int32)
    xp = np.zeros(nb * 128, np.int32)
    xp[:n] = xc
    escan = np.concatenate([np.cumsum(xp[b * 128 : (b + 1) * 128]) - xp[b * 128 : (b + 1) * 128] for b in range(nb)])[
        :n
    ]
    ered = np.append(xp.reshape(nb, 128).sum(1), xp.sum()).astype(np.int32)
    keys = [[xc[(b * 512 + i) % n] if b * 512 + i < 4 * n else 0x7FFFFFFF for i in range(512)] for b in range(nb)]
    esort = np.concatenate([np.sort(np.array(k, np.int64)) for k in keys]).astype(np.int32)
    nvcc_case(
        "cub_block_primitives",
        src,
        [
            Arr("in", xc),
            out("scan", np.zeros(n, np.int32), escan),
            out("red", np.zeros(nb + 1, np.int32), ered),
            out("sorted", np.zeros(nb * 512, np.int32), esort),
            Scalar("n", "int32", n),
        ],
        category="scan",
        grid=nb,
        block=128,
        seed=305,
        notes="cub::BlockScan/BlockReduce/BlockRadixSort/WarpReduce",
    )


if __name__ == "__main__":
    main()
