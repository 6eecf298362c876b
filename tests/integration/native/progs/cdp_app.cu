// Dynamic parallelism across two objects (nvcc -rdc=true ... cdp_app.cu cdp_child.cu -lcudadevrt): a recursive
// quicksort whose partitions are child grids on device-side streams, a child kernel defined in the other object,
// device-side cudaMemcpyAsync, launch errors read with cudaGetLastError, and what device code asks about a kernel
// and the device against what the host is told. Prints PASS when every check holds.
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_));               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

extern __global__ void scale(int *data, int n, int factor);  // cdp_child.cu
extern __device__ int partition(int *data, int lo, int hi);  // cdp_child.cu

__global__ void quicksort(int *data, int lo, int hi, int depth) {
    if (lo >= hi) return;
    if (depth >= 20 || hi - lo < 8) {  // small or deep: insertion sort here
        for (int i = lo + 1; i <= hi; i++)
            for (int j = i; j > lo && data[j - 1] > data[j]; j--) {
                int t = data[j]; data[j] = data[j - 1]; data[j - 1] = t;
            }
        return;
    }
    int p = partition(data, lo, hi);
    cudaStream_t l, r;
    cudaStreamCreateWithFlags(&l, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&r, cudaStreamNonBlocking);
    quicksort<<<1, 1, 0, l>>>(data, lo, p - 1, depth + 1);
    quicksort<<<1, 1, 0, r>>>(data, p + 1, hi, depth + 1);
    cudaStreamDestroy(l);
    cudaStreamDestroy(r);
}

__global__ void scale_then_copy(int *data, int *copy, int n, int *status) {
    scale<<<(n + 63) / 64, 64>>>(data, n, 3);
    cudaMemcpyAsync(copy, data, n * sizeof(int), cudaMemcpyDeviceToDevice, 0);
    scale<<<1, 2048>>>(data, n, 0);  // more threads than a block may have: this thread's error, nothing runs
    status[0] = (int)cudaGetLastError();
    status[1] = (int)cudaGetLastError();
}

// a kernel's attributes, its occupancy and the device's SM count as device code reads them
__global__ void queries(long long *out) {
    cudaFuncAttributes a;
    out[0] = cudaFuncGetAttributes(&a, scale);
    out[1] = a.maxThreadsPerBlock; out[2] = a.sharedSizeBytes; out[3] = a.maxDynamicSharedSizeBytes;
    int n = -1, sms = -1;
    out[4] = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, scale, 64, 1024);
    out[5] = n;
    out[6] = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    out[7] = sms;
}

int main() {
    const int n = 3000;
    int *h = (int *)malloc(n * sizeof(int));
    srand(7);
    for (int i = 0; i < n; i++) h[i] = rand() % 100000;
    int *d, *copy, *status;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMalloc(&copy, n * sizeof(int)));
    CHECK(cudaMalloc(&status, 2 * sizeof(int)));
    CHECK(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    quicksort<<<1, 1>>>(d, 0, n - 1, 0);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    int *sorted = (int *)malloc(n * sizeof(int));
    CHECK(cudaMemcpy(sorted, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    long long sum_in = 0, sum_out = 0;
    for (int i = 0; i < n; i++) { sum_in += h[i]; sum_out += sorted[i]; }
    for (int i = 1; i < n; i++)
        if (sorted[i - 1] > sorted[i]) { printf("not sorted at %d\n", i); return 1; }
    if (sum_in != sum_out) { printf("sorted values differ\n"); return 1; }
    printf("sorted %d values\n", n);

    scale_then_copy<<<1, 1>>>(d, copy, n, status);
    CHECK(cudaDeviceSynchronize());
    int *c = (int *)malloc(n * sizeof(int)), st[2];
    CHECK(cudaMemcpy(c, copy, n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(st, status, sizeof st, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (c[i] != 3 * sorted[i]) { printf("copy[%d] = %d, expected %d\n", i, c[i], 3 * sorted[i]); return 1; }
    printf("child launch error %d then %d\n", st[0], st[1]);
    if (st[0] != cudaErrorInvalidConfiguration || st[1] != cudaSuccess) return 1;

    long long *q, dq[8], hq[8] = {0};
    CHECK(cudaMalloc(&q, sizeof dq));
    queries<<<1, 1>>>(q);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(dq, q, sizeof dq, cudaMemcpyDeviceToHost));
    cudaFuncAttributes a;
    int hn, sms;
    CHECK(cudaFuncGetAttributes(&a, scale));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&hn, scale, 64, 1024));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    hq[1] = a.maxThreadsPerBlock; hq[2] = a.sharedSizeBytes; hq[3] = a.maxDynamicSharedSizeBytes;
    hq[5] = hn; hq[7] = sms;
    for (int i = 0; i < 8; i++)
        if (dq[i] != hq[i]) { printf("device-side query %d: %lld, the host says %lld\n", i, dq[i], hq[i]); return 1; }
    printf("device-side queries agree with the host (%lld blocks per SM, %lld SMs)\n", dq[5], dq[7]);
    printf("PASS\n");
    return 0;
}
