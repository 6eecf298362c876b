// A CUDA runtime program that uses every device it finds, the way multi-GPU programs do (cudaSetDevice per
// device, a stream, memory and a kernel on each), then copies between devices (cudaMemcpyPeer and a
// cudaMemcpyDefault copy by unified addressing), asks where a pointer lives, replays a graph captured on device 1
// with device 0 current, and launches on a stream of the wrong device. Prints one line per fact and PASS.
#include <cuda_runtime.h>

#include "check.h"

__global__ void fill(float *out, float base, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = base + i;
}

int main() {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    printf("devices %d\n", count);
    EXPECT(count >= 2);
    const int n = 1000;
    float *d[2];
    cudaStream_t s[2];
    for (int dev = 0; dev < 2; dev++) {
        CHECK(cudaSetDevice(dev));
        cudaDeviceProp prop;
        CHECK(cudaGetDeviceProperties(&prop, dev));
        printf("device %d %s\n", dev, prop.name);
        CHECK(cudaStreamCreate(&s[dev]));
        CHECK(cudaMalloc(&d[dev], n * sizeof(float)));
        fill<<<(n + 255) / 256, 256, 0, s[dev]>>>(d[dev], 1000.0f * (dev + 1), n);
        CHECK(cudaGetLastError());
    }
    float h[n];
    for (int dev = 0; dev < 2; dev++) {
        CHECK(cudaSetDevice(dev));
        CHECK(cudaStreamSynchronize(s[dev]));
        CHECK(cudaMemcpy(h, d[dev], sizeof h, cudaMemcpyDeviceToHost));
        EXPECT(h[0] == 1000.0f * (dev + 1) && h[n - 1] == 1000.0f * (dev + 1) + n - 1);
    }
    cudaPointerAttributes attr;
    CHECK(cudaPointerGetAttributes(&attr, d[1]));
    printf("pointer on device %d\n", attr.device);
    EXPECT(attr.device == 1);
    int peer = -1;
    CHECK(cudaDeviceCanAccessPeer(&peer, 0, 1));
    printf("peer access %d\n", peer);
    // device 0's first half onto device 1, from device 0 (the current one)
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpyPeer(d[1], 1, d[0], 0, n / 2 * sizeof(float)));
    // and device 1's last element onto device 0's, by unified addressing
    CHECK(cudaMemcpy(d[0] + n - 1, d[1] + n - 1, sizeof(float), cudaMemcpyDefault));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMemcpy(h, d[1], sizeof h, cudaMemcpyDeviceToHost));
    EXPECT(h[0] == 1000.0f && h[n / 2 - 1] == 1000.0f + n / 2 - 1 && h[n / 2] == 2000.0f + n / 2);
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpy(h, d[0], sizeof h, cudaMemcpyDeviceToHost));
    EXPECT(h[n - 1] == 2000.0f + n - 1 && h[0] == 1000.0f);
    printf("peer copies ok\n");
    // a graph captured on device 1's stream, launched while device 0 is current, runs on device 1
    CHECK(cudaSetDevice(1));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s[1], cudaStreamCaptureModeGlobal));
    fill<<<(n + 255) / 256, 256, 0, s[1]>>>(d[1], 7.0f, n);
    CHECK(cudaStreamEndCapture(s[1], &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaSetDevice(0));
    CHECK(cudaGraphLaunch(exec, s[1]));
    CHECK(cudaStreamSynchronize(s[1]));
    CHECK(cudaMemcpy(h, d[1], sizeof h, cudaMemcpyDeviceToHost));
    EXPECT(h[5] == 12.0f && h[n - 1] == 7.0f + n - 1);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    printf("graph on device 1 ok\n");
    // device 0 is current: a stream of device 1 is not one of its streams
    fill<<<1, 32, 0, s[1]>>>(d[0], 0.0f, 32);
    cudaError_t wrong = cudaGetLastError();
    printf("wrong stream: %s\n", cudaGetErrorName(wrong));
    EXPECT(wrong != cudaSuccess);
    for (int dev = 0; dev < 2; dev++) {
        CHECK(cudaSetDevice(dev));
        CHECK(cudaFree(d[dev]));
        CHECK(cudaStreamDestroy(s[dev]));
    }
    printf("PASS\n");
    return 0;
}
