// A synchronous cudaMemcpy to the device, then a kernel on a non-blocking stream that reads what was copied
// (NOTE [synchronous uploads]): the kernel must see every byte. The second of two identical uploads takes gpud's
// dedup path, whose chunks arrive by mapping; cuda-samples StreamPriorities does this. Prints PASS.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        cudaError_t err_ = (call);                                                                           \
        if (err_ != cudaSuccess) {                                                                           \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(err_));                \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

__global__ void copy(int *dst, const int *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

int main()
{
    const size_t n = 16 << 20;  // 64 MiB of ints
    int         *host = (int *)malloc(n * sizeof(int)), *back = (int *)malloc(n * sizeof(int));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < n; i++)
            host[i] = (int)(i * 7 + round);
        int *a, *b, *c;
        CHECK(cudaMalloc(&a, n * sizeof(int)));
        CHECK(cudaMalloc(&b, n * sizeof(int)));
        CHECK(cudaMalloc(&c, n * sizeof(int)));
        CHECK(cudaMemcpy(a, host, n * sizeof(int), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(b, host, n * sizeof(int), cudaMemcpyHostToDevice));  // the same bytes again
        copy<<<256, 256, 0, s>>>(c, b, n);
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(back, c, n * sizeof(int), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++)
            if (back[i] != host[i]) {
                printf("FAIL round %d: element %zu is %d, want %d\n", round, i, back[i], host[i]);
                return 1;
            }
        CHECK(cudaFree(a));
        CHECK(cudaFree(b));
        CHECK(cudaFree(c));
    }
    printf("PASS\n");
    return 0;
}
