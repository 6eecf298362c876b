"""Golden cases for warp matrix instructions (NOTE [warp matrix ops]): mma.sync, wmma, ldmatrix, stmatrix, movmatrix.

Kernels are CUDA C++ compiled with `nvcc -ptx` (sm_80; sm_90 for stmatrix). mma fragments are either loaded with
ldmatrix, as real GEMM kernels do, or filled element by element from the PTX ISA's fragment layout formulas; wmma
goes through nvcuda::wmma. Inputs are small multiples of 1/4 (exact in f16/bf16/tf32), so every product and sum
is exact in f32 and outputs compare bit-exactly, except where tf32 rounding or f64 sums are involved.
Run: `python tests/jit_golden/gen_nvcc_mma.py`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _casegen import Arr, Scalar, rng, write_case  # noqa: E402
from _nvrtc import compile_nvcc  # noqa: E402


def case(name, src, args, arch="sm_80", **kw):
    ptx, ver = compile_nvcc(src, arch=arch)
    write_case(
        "nvcc_" + name,
        producer=f"nvcc -ptx -arch={arch} ({ver})",
        ptx=ptx,
        args=args,
        abi="c",
        category="tensor_core",
        **kw,
    )


def out(name, like, expected, tol=None):
    return Arr(name, np.zeros_like(like), "out", np.asarray(expected).astype(like.dtype), tol or {}, "zeros")


def quarters(r, *shape):
    return (r.integers(-8, 8, shape) / 4).astype(np.float32)


def bf16_bits(x):
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def tf32_rna(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


HEAD = (
    "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <mma.h>\n#include <stdint.h>\nusing namespace nvcuda;\n"
)

LDMATRIX_GEMM = (
    HEAD
    + r"""
// one warp per 16x8 tile of C = A * B; A row-major MxK, B given as N x K (column-major K x N)
extern "C" __global__ void mma_ldmatrix_gemm(const half* A, const half* B, float* C, int M, int N, int K) {
  __shared__ __align__(16) half sa[16 * 16];
  __shared__ __align__(16) half sb[8 * 16];
  int lane = threadIdx.x, tm = blockIdx.y * 16, tn = blockIdx.x * 8;
  float d[4] = {0, 0, 0, 0};
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int i = lane; i < 256; i += 32) sa[i] = A[(tm + i / 16) * K + k0 + i % 16];
    for (int i = lane; i < 128; i += 32) sb[i] = B[(tn + i / 16) * K + k0 + i % 16];
    __syncwarp();
    uint32_t a[4], b[2];
    uint32_t pa = (uint32_t)__cvta_generic_to_shared(&sa[(lane % 16) * 16 + (lane / 16) * 8]);
    uint32_t pb = (uint32_t)__cvta_generic_to_shared(&sb[(lane % 8) * 16 + ((lane / 8) % 2) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(pa));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "r"(pb));
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    __syncwarp();
  }
  int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; i++) C[(tm + g + 8 * (i >= 2)) * N + tn + 2 * t + (i & 1)] = d[i];
}"""
)

LDMATRIX_TRANS = (
    HEAD
    + r"""
// B row-major K x N, loaded with ldmatrix.trans; f16 accumulator
extern "C" __global__ void mma_trans_f16acc(const half* A, const half* B, half* C, int M, int N, int K) {
  __shared__ __align__(16) half sa[16 * 16];
  __shared__ __align__(16) half sb[16 * 8];
  int lane = threadIdx.x, tm = blockIdx.y * 16, tn = blockIdx.x * 8;
  uint32_t d[2] = {0, 0};
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int i = lane; i < 256; i += 32) sa[i] = A[(tm + i / 16) * K + k0 + i % 16];
    for (int i = lane; i < 128; i += 32) sb[i] = B[(k0 + i / 8) * N + tn + i % 8];
    __syncwarp();
    uint32_t a[4], b[2];
    uint32_t pa = (uint32_t)__cvta_generic_to_shared(&sa[(lane % 16) * 16 + (lane / 16) * 8]);
    uint32_t pb = (uint32_t)__cvta_generic_to_shared(&sb[(lane % 16) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(pa));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "r"(pb));
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"
                 : "+r"(d[0]), "+r"(d[1]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    __syncwarp();
  }
  int g = lane >> 2, t = lane & 3;
  *(uint32_t*)&C[(tm + g) * N + tn + 2 * t] = d[0];
  *(uint32_t*)&C[(tm + g + 8) * N + tn + 2 * t] = d[1];
}"""
)

MMA_MIXED = (
    HEAD
    + r"""
#define CIDX(i) ((g + 8 * ((i) >= 2)) * 8 + 2 * t + ((i) & 1))
__device__ uint32_t pack_h(half x, half y) { __half2 v(x, y); return *(uint32_t*)&v; }
__device__ uint32_t pack_b(__nv_bfloat16 x, __nv_bfloat16 y) { __nv_bfloat162 v(x, y); return *(uint32_t*)&v; }
__device__ uint32_t pack_8(const int8_t* p, int s) {  // bytes p[0], p[s], p[2s], p[3s]
  uint32_t w = 0; for (int j = 0; j < 4; j++) w |= (uint32_t)(uint8_t)p[j * s] << (8 * j); return w; }
extern "C" __global__ void mma_mixed(
    const float* A32, const float* B32, float* C32,          // tf32 m16n8k8 (A 16x8, B 8x8), C in/out
    const float* A4, const float* B4, float* C4,             // tf32 m16n8k4 (A 16x4, B 4x8)
    const double* Ad, const double* Bd, double* Cd,          // f64 m8n8k4
    const int8_t* As, const int8_t* Bs, int* Cs,             // s8 m16n8k32 .satfinite (B given N x K)
    const uint8_t* Au, const uint8_t* Bu, int* Cu,           // u8 m16n8k16 (B given N x K)
    const int8_t* Aq, const int8_t* Bq, int* Cq,             // s8 m8n8k16 (B given N x K)
    const __nv_bfloat16* Ab, const __nv_bfloat16* Bb, float* Cb,  // bf16 m16n8k8
    const half* Ah, const half* Bh, float* Ch,               // f16 m16n8k8
    const uint32_t* Mi, uint32_t* Mo) {                      // movmatrix
  int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  {
    uint32_t a[4] = {__float_as_uint(A32[g * 8 + t]), __float_as_uint(A32[(g + 8) * 8 + t]),
                     __float_as_uint(A32[g * 8 + t + 4]), __float_as_uint(A32[(g + 8) * 8 + t + 4])};
    uint32_t b[2] = {__float_as_uint(B32[t * 8 + g]), __float_as_uint(B32[(t + 4) * 8 + g])};
    float c[4]; for (int i = 0; i < 4; i++) c[i] = C32[CIDX(i)];
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    for (int i = 0; i < 4; i++) C32[CIDX(i)] = c[i];
  }
  {
    uint32_t a0 = __float_as_uint(A4[g * 4 + t]), a1 = __float_as_uint(A4[(g + 8) * 4 + t]), b0 = __float_as_uint(B4[t * 8 + g]);
    float c[4]; for (int i = 0; i < 4; i++) c[i] = C4[CIDX(i)];
    asm volatile("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(b0));
    for (int i = 0; i < 4; i++) C4[CIDX(i)] = c[i];
  }
  {
    double a = Ad[g * 4 + t], b = Bd[t * 8 + g], c0 = Cd[g * 8 + 2 * t], c1 = Cd[g * 8 + 2 * t + 1];
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};" : "+d"(c0), "+d"(c1) : "d"(a), "d"(b));
    Cd[g * 8 + 2 * t] = c0; Cd[g * 8 + 2 * t + 1] = c1;
  }
  {
    uint32_t a[4], b[2]; int c[4];
    for (int r = 0; r < 4; r++) a[r] = pack_8(As + (g + 8 * (r & 1)) * 32 + t * 4 + 16 * (r >= 2), 1);
    for (int r = 0; r < 2; r++) b[r] = pack_8(Bs + g * 32 + t * 4 + 16 * r, 1);
    for (int i = 0; i < 4; i++) c[i] = Cs[CIDX(i)];
    asm volatile("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    for (int i = 0; i < 4; i++) Cs[CIDX(i)] = c[i];
  }
  {
    uint32_t a0 = pack_8((const int8_t*)Au + g * 16 + t * 4, 1), a1 = pack_8((const int8_t*)Au + (g + 8) * 16 + t * 4, 1);
    uint32_t b0 = pack_8((const int8_t*)Bu + g * 16 + t * 4, 1);
    int c[4] = {0, 0, 0, 0};
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a0), "r"(a1), "r"(b0));
    for (int i = 0; i < 4; i++) Cu[CIDX(i)] = c[i];
  }
  {
    uint32_t a0 = pack_8(Aq + g * 16 + t * 4, 1), b0 = pack_8(Bq + g * 16 + t * 4, 1);
    int c0 = 7, c1 = -7;
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};" : "+r"(c0), "+r"(c1) : "r"(a0), "r"(b0));
    Cq[g * 8 + 2 * t] = c0; Cq[g * 8 + 2 * t + 1] = c1;
  }
  {
    uint32_t a0 = pack_b(Ab[g * 8 + 2 * t], Ab[g * 8 + 2 * t + 1]), a1 = pack_b(Ab[(g + 8) * 8 + 2 * t], Ab[(g + 8) * 8 + 2 * t + 1]);
    uint32_t b0 = pack_b(Bb[(2 * t) * 8 + g], Bb[(2 * t + 1) * 8 + g]);
    float c[4] = {0, 0, 0, 0};
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(b0));
    for (int i = 0; i < 4; i++) Cb[CIDX(i)] = c[i];
  }
  {
    uint32_t a0 = pack_h(Ah[g * 8 + 2 * t], Ah[g * 8 + 2 * t + 1]), a1 = pack_h(Ah[(g + 8) * 8 + 2 * t], Ah[(g + 8) * 8 + 2 * t + 1]);
    uint32_t b0 = pack_h(Bh[(2 * t) * 8 + g], Bh[(2 * t + 1) * 8 + g]);
    float c[4] = {1, 2, 3, 4};
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(b0));
    for (int i = 0; i < 4; i++) Ch[CIDX(i)] = c[i];
  }
  {
    uint32_t r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(Mi[lane]));
    Mo[lane] = r;
  }
}"""
)

WMMA_GEMM = (
    HEAD
    + r"""
// one warp per 16x16 tile: C = 2 * A * B, A row-major M x K, B given as N x K (col-major), K loop
extern "C" __global__ void wmma_gemm(const half* a, const half* b, float* c, int M, int N, int K) {
  int wm = blockIdx.y, wn = blockIdx.x;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  for (int k = 0; k < K; k += 16) {
    wmma::load_matrix_sync(fa, a + wm * 16 * K + k, K);
    wmma::load_matrix_sync(fb, b + wn * 16 * K + k, K);
    wmma::mma_sync(fc, fa, fb, fc);
  }
  for (int i = 0; i < fc.num_elements; i++) fc.x[i] *= 2.0f;
  wmma::store_matrix_sync(c + wm * 16 * N + wn * 16, fc, N, wmma::mem_row_major);
}"""
)

WMMA_MIXED = (
    HEAD
    + r"""
template <int M, int N, int K, typename TI, typename TA, typename LA, typename LB, typename TC>
__device__ void tile(const TI* a, int lda, const TI* b, int ldb, const TC* c, int ldc_in, bool ccol,
                     TC* d, int ldd, bool dcol) {
  wmma::fragment<wmma::matrix_a, M, N, K, TA, LA> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, TA, LB> fb;
  wmma::fragment<wmma::accumulator, M, N, K, TC> fc;
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  wmma::load_matrix_sync(fc, c, ldc_in, ccol ? wmma::mem_col_major : wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, ldd, dcol ? wmma::mem_col_major : wmma::mem_row_major);
}
extern "C" __global__ void wmma_mixed(
    const __nv_bfloat16* a1, const __nv_bfloat16* b1, const float* c1, float* d1,  // bf16 16x16x16, A row, B col, D col
    const half* a2, const half* b2, const half* c2, half* d2,      // f16 32x8x16, A col, B row, C col, f16 acc
    const half* a3, const half* b3, const float* c3, float* d3,    // f16 8x32x16, A row, B row
    const float* a4, const float* b4, const float* c4, float* d4,  // tf32 16x16x8
    const double* a5, const double* b5, const double* c5, double* d5,  // f64 8x8x4, B col
    const signed char* a6, const signed char* b6, const int* c6, int* d6,  // s8 16x16x16, B col
    const unsigned char* a7, const unsigned char* b7, int* d7) {   // u8 16x16x16, B row, C = d7 (in place)
  tile<16, 16, 16, __nv_bfloat16, __nv_bfloat16, wmma::row_major, wmma::col_major, float>(a1, 16, b1, 16, c1, 16, false, d1, 16, true);
  tile<32, 8, 16, half, half, wmma::col_major, wmma::row_major, half>(a2, 32, b2, 8, c2, 32, true, d2, 8, false);
  tile<8, 32, 16, half, half, wmma::row_major, wmma::row_major, float>(a3, 16, b3, 32, c3, 32, false, d3, 32, false);
  {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
    wmma::load_matrix_sync(fa, a4, 8);
    wmma::load_matrix_sync(fb, b4, 16);
    for (int i = 0; i < fa.num_elements; i++) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
    for (int i = 0; i < fb.num_elements; i++) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
    wmma::load_matrix_sync(fc, c4, 16, wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d4, fc, 16, wmma::mem_row_major);
  }
  tile<8, 8, 4, double, double, wmma::row_major, wmma::col_major, double>(a5, 4, b5, 4, c5, 8, false, d5, 8, false);
  tile<16, 16, 16, signed char, signed char, wmma::row_major, wmma::col_major, int>(a6, 16, b6, 16, c6, 16, false, d6, 16, false);
  tile<16, 16, 16, unsigned char, unsigned char, wmma::row_major, wmma::row_major, int>(a7, 16, b7, 16, d7, 16, false, d7, 16, false);
}"""
)

STMATRIX = r"""#include <stdint.h>
// lane l gives the address of row l % 8 of matrix l / 8; registers hold the ldmatrix fragment layout
extern "C" __global__ void stmatrix_x4(const uint32_t* in, uint16_t* out, int trans) {
  __shared__ __align__(16) uint16_t s[4 * 64];
  uint32_t v0 = in[threadIdx.x], v1 = in[32 + threadIdx.x], v2 = in[64 + threadIdx.x], v3 = in[96 + threadIdx.x];
  int l = threadIdx.x;
  uint32_t p = (uint32_t)__cvta_generic_to_shared(&s[(l / 8) * 64 + (l % 8) * 8]);
  if (trans) asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};" :: "r"(p), "r"(v0), "r"(v1), "r"(v2), "r"(v3));
  else asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};" :: "r"(p), "r"(v0), "r"(v1), "r"(v2), "r"(v3));
  __syncwarp();
  for (int i = l; i < 256; i += 32) out[i] = s[i];
}"""


def main():
    if not shutil.which("nvcc"):
        sys.exit("nvcc not on PATH")
    r = rng(400)
    m, n, k = 32, 16, 48
    a, b = quarters(r, m, k), quarters(r, n, k)
    case(
        "mma_ldmatrix_gemm",
        LDMATRIX_GEMM,
        [
            Arr("A", a.astype(np.float16)),
            Arr("B", b.astype(np.float16)),
            out("C", np.zeros((m, n), np.float32), a @ b.T),
            Scalar("M", "int32", m),
            Scalar("N", "int32", n),
            Scalar("K", "int32", k),
        ],
        grid=(n // 8, m // 16),
        block=32,
        seed=400,
        notes="ldmatrix.x4/x2 + mma.m16n8k16 f16 -> f32, 2x2 warps",
    )
    bt = quarters(r, k, n)
    case(
        "mma_ldmatrix_trans_f16acc",
        LDMATRIX_TRANS,
        [
            Arr("A", a.astype(np.float16)),
            Arr("B", bt.astype(np.float16)),
            out("C", np.zeros((m, n), np.float16), (a @ bt).astype(np.float16)),
            Scalar("M", "int32", m),
            Scalar("N", "int32", n),
            Scalar("K", "int32", k),
        ],
        grid=(n // 8, m // 16),
        block=32,
        seed=400,
        notes="ldmatrix .trans for B, f16 accumulator",
    )

    args = []
    x32, y32, z32 = r.random((16, 8), dtype=np.float32), r.random((8, 8), dtype=np.float32), quarters(r, 16, 8)
    e32 = (tf32_rna(x32).astype(np.float64) @ tf32_rna(y32).astype(np.float64) + z32).astype(np.float32)
    # tf32 operands: the hardware ignores the low 13 mantissa bits; inputs here are already tf32 values
    x32, y32 = tf32_rna(x32), tf32_rna(y32)
    args += [Arr("A32", x32), Arr("B32", y32), Arr("C32", z32, "inout", e32, {"rtol": 1e-6, "atol": 1e-6})]
    x4, y4, z4 = quarters(r, 16, 4), quarters(r, 4, 8), quarters(r, 16, 8)
    args += [Arr("A4", x4), Arr("B4", y4), Arr("C4", z4, "inout", x4 @ y4 + z4)]
    xd, yd, zd = r.random((8, 4)), r.random((4, 8)), r.random((8, 8))
    args += [Arr("Ad", xd), Arr("Bd", yd), Arr("Cd", zd, "inout", xd @ yd + zd, {"rtol": 1e-14, "atol": 1e-14})]
    xs, ys = r.integers(-128, 128, (16, 32)).astype(np.int8), r.integers(-128, 128, (8, 32)).astype(np.int8)
    zs = r.integers(-1000, 1000, (16, 8)).astype(np.int32)
    zs[0, 0], zs[9, 1] = 2**31 - 100, -(2**31) + 5  # saturate
    es = np.clip(xs.astype(np.int64) @ ys.astype(np.int64).T + zs, -(2**31), 2**31 - 1).astype(np.int32)
    args += [Arr("As", xs), Arr("Bs", ys), Arr("Cs", zs, "inout", es)]
    xu, yu = r.integers(0, 256, (16, 16)).astype(np.uint8), r.integers(0, 256, (8, 16)).astype(np.uint8)
    args += [
        Arr("Au", xu),
        Arr("Bu", yu),
        out("Cu", np.zeros((16, 8), np.int32), xu.astype(np.int64) @ yu.astype(np.int64).T),
    ]
    xq, yq = r.integers(-128, 128, (8, 16)).astype(np.int8), r.integers(-128, 128, (8, 16)).astype(np.int8)
    eq = xq.astype(np.int64) @ yq.astype(np.int64).T + np.tile([7, -7], 4)
    args += [Arr("Aq", xq), Arr("Bq", yq), out("Cq", np.zeros((8, 8), np.int32), eq)]
    xb, yb = quarters(r, 16, 8), quarters(r, 8, 8)
    args += [Arr("Ab", bf16_bits(xb)), Arr("Bb", bf16_bits(yb)), out("Cb", np.zeros((16, 8), np.float32), xb @ yb)]
    xh, yh = quarters(r, 16, 8), quarters(r, 8, 8)
    args += [
        Arr("Ah", xh.astype(np.float16)),
        Arr("Bh", yh.astype(np.float16)),
        out(
            "Ch",
            np.zeros((16, 8), np.float32),
            xh @ yh + np.tile([1, 2, 1, 2, 1, 2, 1, 2], (16, 1)) + np.where(np.arange(16)[:, None] >= 8, 2, 0),
        ),
    ]
    mat = r.integers(0, 1 << 16, (8, 8)).astype(np.uint16)
    args += [
        Arr("Mi", mat.reshape(32, 2).copy().view(np.uint32).reshape(32)),
        out("Mo", np.zeros(32, np.uint32), mat.T.copy().reshape(32, 2).view(np.uint32).reshape(32)),
    ]
    case(
        "mma_mixed",
        MMA_MIXED,
        args,
        block=32,
        seed=400,
        notes="mma tf32 m16n8k8/m16n8k4, f64 m8n8k4, s8 m16n8k32 satfinite, u8 m16n8k16, s8 m8n8k16, bf16 and f16 "
        "m16n8k8, movmatrix; fragments filled from the PTX ISA layout formulas",
    )

    m, n, k = 32, 48, 64
    a, b = quarters(r, m, k), quarters(r, n, k)
    case(
        "wmma_gemm",
        WMMA_GEMM,
        [
            Arr("a", a.astype(np.float16)),
            Arr("b", b.astype(np.float16)),
            out("c", np.zeros((m, n), np.float32), 2 * (a @ b.T)),
            Scalar("M", "int32", m),
            Scalar("N", "int32", n),
            Scalar("K", "int32", k),
        ],
        grid=(n // 16, m // 16),
        block=32,
        seed=401,
        notes="nvcuda::wmma m16n16k16, K loop, element-wise scaling",
    )

    args = []
    a1, b1, c1 = quarters(r, 16, 16), quarters(r, 16, 16), quarters(r, 16, 16)
    args += [
        Arr("a1", bf16_bits(a1)),
        Arr("b1", bf16_bits(b1.T.copy())),
        Arr("c1", c1),
        out("d1", np.zeros((16, 16), np.float32), (a1 @ b1 + c1).T.copy()),
    ]
    a2, b2, c2 = quarters(r, 32, 16), quarters(r, 16, 8), quarters(r, 32, 8)
    args += [
        Arr("a2", a2.T.copy().astype(np.float16)),
        Arr("b2", b2.astype(np.float16)),
        Arr("c2", c2.T.copy().astype(np.float16)),
        out("d2", np.zeros((32, 8), np.float16), a2 @ b2 + c2),
    ]
    a3, b3, c3 = quarters(r, 8, 16), quarters(r, 16, 32), quarters(r, 8, 32)
    args += [
        Arr("a3", a3.astype(np.float16)),
        Arr("b3", b3.astype(np.float16)),
        Arr("c3", c3),
        out("d3", np.zeros((8, 32), np.float32), a3 @ b3 + c3),
    ]
    a4, b4, c4 = r.random((16, 8), dtype=np.float32), r.random((8, 16), dtype=np.float32), quarters(r, 16, 16)
    e4 = tf32_rna(a4).astype(np.float64) @ tf32_rna(b4).astype(np.float64) + c4
    args += [
        Arr("a4", a4),
        Arr("b4", b4),
        Arr("c4", c4),
        out("d4", np.zeros((16, 16), np.float32), e4, {"rtol": 1e-6, "atol": 1e-6}),
    ]
    a5, b5, c5 = r.random((8, 4)), r.random((4, 8)), r.random((8, 8))
    args += [
        Arr("a5", a5),
        Arr("b5", b5.T.copy()),
        Arr("c5", c5),
        out("d5", np.zeros((8, 8)), a5 @ b5 + c5, {"rtol": 1e-14, "atol": 1e-14}),
    ]
    a6, b6 = r.integers(-128, 128, (16, 16)).astype(np.int8), r.integers(-128, 128, (16, 16)).astype(np.int8)
    c6 = r.integers(-1000, 1000, (16, 16)).astype(np.int32)
    args += [
        Arr("a6", a6),
        Arr("b6", b6.T.copy()),
        Arr("c6", c6),
        out("d6", np.zeros((16, 16), np.int32), a6.astype(np.int64) @ b6.astype(np.int64) + c6),
    ]
    a7, b7 = r.integers(0, 256, (16, 16)).astype(np.uint8), r.integers(0, 256, (16, 16)).astype(np.uint8)
    d7 = r.integers(-1000, 1000, (16, 16)).astype(np.int32)
    args += [
        Arr("a7", a7),
        Arr("b7", b7),
        Arr("d7", d7, "inout", (a7.astype(np.int64) @ b7.astype(np.int64) + d7).astype(np.int32)),
    ]
    case(
        "wmma_mixed",
        WMMA_MIXED,
        args,
        block=32,
        seed=401,
        notes="wmma bf16/f16 (three shapes, row and col layouts, f16 accumulator), tf32 with __float_to_tf32, "
        "f64, s8 and u8",
    )

    x = r.integers(0, 1 << 16, (4, 8, 8)).astype(np.uint16)
    frag = np.zeros((4, 32), np.uint32)  # register i of lane l: row l / 4, columns 2 (l % 4) and +1 of matrix i
    for i in range(4):
        for lane in range(32):
            rr, cc = lane // 4, 2 * (lane % 4)
            frag[i, lane] = int(x[i, rr, cc]) | (int(x[i, rr, cc + 1]) << 16)
    for trans in (0, 1):
        case(
            f"stmatrix_x4{'_trans' if trans else ''}",
            STMATRIX,
            [
                Arr("in", frag),
                out("out", np.zeros(256, np.uint16), (x.transpose(0, 2, 1) if trans else x).reshape(256)),
                Scalar("trans", "int32", trans),
            ],
            arch="sm_90",
            block=32,
            seed=402,
            notes="stmatrix (sm_90)",
        )


if __name__ == "__main__":
    main()
