#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;
// 4 warps per block, one 16x16 output tile each; the A tile is staged in 1 KiB of user shared memory.
// The mma runs in a non-inlined device function (a .func holding a warp collective).
__device__ __noinline__ void mac(wmma::fragment<wmma::accumulator, 16, 16, 16, float>& fc, const half* sa, const half* b, int ldb) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
  wmma::load_matrix_sync(fa, sa, 16);
  wmma::load_matrix_sync(fb, b, ldb);
  wmma::mma_sync(fc, fa, fb, fc);
}
extern "C" __global__ void __launch_bounds__(128) multiwarp(const half* a, const half* b, float* c, int n) {
  __shared__ __align__(32) half sa[4][16 * 16];
  int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  int tile = blockIdx.x * 4 + w;  // C is 16 x n: tile t covers columns 16t..16t+15
  for (int i = lane; i < 256; i += 32) sa[w][i] = a[i];
  __syncwarp();
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, (float)w);
  mac(fc, sa[w], b + tile * 16, n);
  wmma::store_matrix_sync(c + tile * 16, fc, n, wmma::mem_row_major);
}
