// nvcc -ptx -arch=compute_75 -O3 partial_shfl.cu -o partial_shfl.ptx (tests/unit/jit/test_warp_barrier.py)
// The second step of cuda-samples' shfl_scan: after a barrier, the first nwarps lanes of warp 0 scan the per-warp
// sums with a shuffle whose membermask names only them, while every other thread of the block waits at the next
// barrier; then each warp reads the scanned sum of the warp before it. The barrier may not release before the
// shuffling lanes store their results.
extern "C" __global__ void partial_shfl(int *out) {
    extern __shared__ int sums[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    if (lane == 31) sums[warp] = 32 * (warp + 1);
    __syncthreads();
    if (warp == 0 && lane < nwarps) {
        int v = sums[lane];
        for (int i = 1; i <= nwarps; i *= 2) {
            int n = __shfl_up_sync((1u << nwarps) - 1, v, i, nwarps);
            if (lane >= i) v += n;
        }
        sums[lane] = v;
    }
    __syncthreads();
    if (lane == 0) out[warp] = sums[warp];
}
