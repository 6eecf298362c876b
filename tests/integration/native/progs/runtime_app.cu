// A CUDA runtime program as nvcc users write them: the runtime API only, <<<>>> launches,
// streams, events, shared memory, a __constant__, a __device__ global and device printf.
// Prints PASS and exits 0 when every result is right; exits with the number of failures otherwise.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); return 100; } } while (0)

__constant__ float scale;
__device__ int launches;

__global__ void saxpy(int n, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = scale * x[i] + y[i];
    if (i == 0) atomicAdd(&launches, 1);
}

__global__ void block_sum(const float *x, float *out, int n) {
    extern __shared__ float part[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    part[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

__global__ void hello(int tag) { if (threadIdx.x == 0) printf("device says %d\n", tag); }

int main(int argc, char **argv) {
    int count = 0, failures = 0;
    CHECK(cudaGetDeviceCount(&count));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%d device(s): %s, sm_%d%d, %zu MiB\n", count, prop.name, prop.major, prop.minor, prop.totalGlobalMem >> 20);
    const int n = 1 << 16;
    float *hx = (float *)malloc(n * sizeof(float)), *hy = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) { hx[i] = (float)(i % 100); hy[i] = 1.0f; }
    float *x, *y, *sum;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMalloc(&sum, sizeof(float)));
    float a = 2.0f;
    CHECK(cudaMemcpyToSymbol(scale, &a, sizeof a));
    cudaStream_t s;
    cudaEvent_t start, stop;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventRecord(start, s));
    CHECK(cudaMemcpyAsync(x, hx, n * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(y, hy, n * sizeof(float), cudaMemcpyHostToDevice, s));
    saxpy<<<(n + 255) / 256, 256, 0, s>>>(n, x, y);
    saxpy<<<(n + 255) / 256, 256, 0, s>>>(n, x, y);
    CHECK(cudaGetLastError());
    CHECK(cudaMemsetAsync(sum, 0, sizeof(float), s));
    block_sum<<<(n + 127) / 128, 128, 128 * sizeof(float), s>>>(y, sum, n);
    CHECK(cudaEventRecord(stop, s));
    CHECK(cudaMemcpyAsync(hy, y, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    float ms = -1, total = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    CHECK(cudaMemcpy(&total, sum, sizeof total, cudaMemcpyDeviceToHost));
    int done = 0;
    CHECK(cudaMemcpyFromSymbol(&done, launches, sizeof done));
    double expect = 0;
    for (int i = 0; i < n; i++) {
        float want = 1.0f + 4.0f * (float)(i % 100);
        if (hy[i] != want) { if (failures < 5) printf("y[%d] = %f, want %f\n", i, hy[i], want); failures++; }
        expect += want;
    }
    if (done != 2) { printf("launches = %d, want 2\n", done); failures++; }
    if (total != (float)expect) { printf("sum = %f, want %f\n", total, expect); failures++; }
    if (!(ms >= 0)) { printf("elapsed %f ms\n", ms); failures++; }
    hello<<<1, 32>>>(7);
    CHECK(cudaDeviceSynchronize());
    cudaError_t bad = cudaMemcpy(x, (void *)16, 4, cudaMemcpyDeviceToDevice);
    printf("bad copy: %s\n", cudaGetErrorName(bad));
    if (bad == cudaSuccess) failures++;
    cudaGetLastError();
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaFree(sum));
    CHECK(cudaStreamDestroy(s));
    if (argc > 1 && strcmp(argv[1], "--read-stdin") == 0) {
        char line[64] = {0};
        if (fgets(line, sizeof line, stdin)) printf("stdin: %s", line);
        return atoi(line);
    }
    printf(failures ? "FAIL (%d)\n" : "PASS\n", failures);
    return failures;
}
