// nvcc -ptx -arch=compute_80 -O3 warp_bitonic.cu -o warp_bitonic.ptx (tests/unit/jit/test_warp_synchrony.py)
// One warp bitonic-sorts n (a power of two) floats in global memory with no barrier: lane i swaps the pairs
// j = i, i + 32, ... of each step, and each step reads what the other lanes wrote in the step before. This is
// how CuPy's partition kernels are written (warp-synchronous, implicit lockstep).
extern "C" __global__ void warp_bitonic(float *a, int n) {
    int id = threadIdx.x % 32;
    float *x = a + (blockIdx.x * blockDim.x + threadIdx.x) / 32 * n;
    for (int s = 2; s <= n; s *= 2) {
        for (int w = s / 2; w >= 1; w /= 2) {
            for (int j = id; j < n / 2; j += 32) {
                int m = j + (j & -w);
                float v = x[m], u = x[m + w];
                if ((m & s) ? v < u : v > u) {
                    x[m] = u;
                    x[m + w] = v;
                }
            }
        }
    }
}
