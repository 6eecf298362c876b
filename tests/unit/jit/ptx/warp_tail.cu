// nvcc -ptx -arch=compute_80 -O3 warp_tail.cu -o warp_tail.ptx (tests/unit/jit/test_warp_synchrony.py)
// Warp-synchronous code between loops: one warp bitonic-sorts n floats in global memory with no barrier, then
// (1) reads, right after the sort's last step, what other lanes wrote in that step, (2) takes one straight-line
// step of its own (lane i swaps the i-th smallest and the i-th largest) and (3) reads a neighbour's write of
// that step. Lockstep warps order every lane's writes before the next instruction's reads, with no loop
// between them.
extern "C" __global__ void warp_tail(float *a, float *out, int n) {
    int id = threadIdx.x % 32;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    float *x = a + warp * n;
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
    float top = x[n - 1 - id];
    float low = x[id];
    x[id] = top;
    x[n - 1 - id] = low;
    out[warp * 32 + id] = x[(id + 1) % 32];
}
