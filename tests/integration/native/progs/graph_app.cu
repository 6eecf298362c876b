// CUDA graphs through the CUDA runtime, as applications use them: stream capture across two streams (fork and
// join by events) with kernels, a memset, copies, a host function and stream-ordered allocation; an explicitly
// built graph whose kernel node's parameters change in the executable; clone and whole-graph update; and the
// errors a program can make while capturing. Prints PASS when every check holds.
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
#define EXPECT(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            printf("FAIL line %d: ", __LINE__);                                                              \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

const int N = 1000;

__global__ void scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= a;
}

__global__ void add_into(float *dst, const float *a, const float *b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dst[i] = a[i] + b[i];
}

__global__ void count_launches(int *counter) { atomicAdd(counter, 1); }

static int host_calls = 0;
static void CUDART_CB on_host(void *arg) { host_calls += *(int *)arg; }

int main()
{
    float *a, *b, *c;
    int   *counter;
    CHECK(cudaMalloc(&a, N * sizeof(float)));
    CHECK(cudaMalloc(&b, N * sizeof(float)));
    CHECK(cudaMalloc(&c, N * sizeof(float)));
    CHECK(cudaMalloc(&counter, sizeof(int)));
    CHECK(cudaMemset(counter, 0, sizeof(int)));
    float *in_h = (float *)malloc(N * sizeof(float)), *out_h = (float *)malloc(N * sizeof(float));
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    int step = 1;

    // 1. capture: s1 uploads in_h to a and scales it by 2; s2 (forked) uploads in_h to a scratch allocation made
    //    while capturing, sets b to 0 and adds the scratch into it; both join into c = a + b, which is copied back to out_h.
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus status;
    CHECK(cudaStreamIsCapturing(s1, &status));
    EXPECT(status == cudaStreamCaptureStatusActive, "s1 is not capturing");
    CHECK(cudaStreamIsCapturing(s2, &status));
    EXPECT(status == cudaStreamCaptureStatusNone, "s2 captures before it waits on the fork");
    CHECK(cudaMemcpyAsync(a, in_h, N * sizeof(float), cudaMemcpyHostToDevice, s1));
    CHECK(cudaEventRecord(fork, s1));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    CHECK(cudaStreamIsCapturing(s2, &status));
    EXPECT(status == cudaStreamCaptureStatusActive, "s2 did not join the capture");
    scale<<<(N + 255) / 256, 256, 0, s1>>>(a, 2.0f, N);
    float *scratch;
    CHECK(cudaMallocAsync(&scratch, N * sizeof(float), s2));
    CHECK(cudaMemcpyAsync(scratch, in_h, N * sizeof(float), cudaMemcpyHostToDevice, s2));
    CHECK(cudaMemsetAsync(b, 0, N * sizeof(float), s2));
    add_into<<<(N + 255) / 256, 256, 0, s2>>>(b, b, scratch, N);
    CHECK(cudaFreeAsync(scratch, s2));
    CHECK(cudaEventRecord(join, s2));
    CHECK(cudaStreamWaitEvent(s1, join, 0));
    add_into<<<(N + 255) / 256, 256, 0, s1>>>(c, a, b, N);
    count_launches<<<1, 1, 0, s1>>>(counter);
    CHECK(cudaLaunchHostFunc(s1, on_host, &step));
    CHECK(cudaMemcpyAsync(out_h, c, N * sizeof(float), cudaMemcpyDeviceToHost, s1));
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s1, &graph));
    CHECK(cudaStreamIsCapturing(s2, &status));
    EXPECT(status == cudaStreamCaptureStatusNone, "s2 still captures after the capture ended");
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(graph, NULL, &nodes));
    EXPECT(nodes >= 10, "captured %zu nodes", nodes);
    int before = 0;
    CHECK(cudaMemcpy(&before, counter, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(before == 0 && host_calls == 0, "captured work ran at capture time (%d launches, %d host calls)", before,
           host_calls);

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < N; i++)
            in_h[i] = (float)(i * round);  // read when the graph runs, not when it was captured
        CHECK(cudaGraphLaunch(exec, s1));
        CHECK(cudaStreamSynchronize(s1));
        for (int i = 0; i < N; i++)
            EXPECT(out_h[i] == 3.0f * i * round, "round %d: out[%d] = %g, want %g", round, i, out_h[i],
                   3.0f * i * round);
    }
    int launches = 0;
    CHECK(cudaMemcpy(&launches, counter, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(launches == 3 && host_calls == 3, "%d launches, %d host calls (want 3, 3)", launches, host_calls);

    // 2. clone and update: the clone runs the same work; an executable updated from a graph of the same shape
    //    takes its parameters.
    cudaGraph_t copy;
    CHECK(cudaGraphClone(&copy, graph));
    cudaGraphExec_t exec2;
    CHECK(cudaGraphInstantiate(&exec2, copy, 0));
    CHECK(cudaGraphLaunch(exec2, s1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(out_h[7] == 3.0f * 7 * 3, "clone: out[7] = %g", out_h[7]);

    // 3. an explicit graph: a kernel node, then a copy node; the executable's kernel parameters change
    cudaGraph_t g2;
    CHECK(cudaGraphCreate(&g2, 0));
    float                factor = 5.0f;
    int                  n      = N;
    void                *args[] = {&a, &factor, &n};
    cudaKernelNodeParams kp     = {0};
    kp.func                     = (void *)scale;
    kp.gridDim                  = dim3((N + 255) / 256);
    kp.blockDim                 = dim3(256);
    kp.kernelParams             = args;
    cudaGraphNode_t kn, cn;
    CHECK(cudaGraphAddKernelNode(&kn, g2, NULL, 0, &kp));
    CHECK(cudaGraphAddMemcpyNode1D(&cn, g2, &kn, 1, out_h, a, N * sizeof(float), cudaMemcpyDeviceToHost));
    cudaKernelNodeParams got;
    CHECK(cudaGraphKernelNodeGetParams(kn, &got));
    EXPECT(got.func == (void *)scale && got.gridDim.x == (N + 255) / 256 && got.blockDim.x == 256 &&
               *(float *)got.kernelParams[1] == 5.0f && *(int *)got.kernelParams[2] == N,
           "kernel node parameters read back wrong");
    cudaGraphExec_t exec3;
    CHECK(cudaGraphInstantiate(&exec3, g2, 0));
    for (int i = 0; i < N; i++)
        in_h[i] = 1.0f;
    CHECK(cudaMemcpy(a, in_h, N * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaGraphLaunch(exec3, s1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(out_h[0] == 5.0f && out_h[N - 1] == 5.0f, "explicit graph: %g %g", out_h[0], out_h[N - 1]);
    factor = 0.5f;  // the node copied its parameters when it was made: this changes nothing by itself
    CHECK(cudaGraphLaunch(exec3, s1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(out_h[3] == 25.0f, "parameters were not copied at node creation: %g", out_h[3]);
    CHECK(cudaGraphExecKernelNodeSetParams(exec3, kn, &kp));  // now 0.5
    CHECK(cudaGraphLaunch(exec3, s1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(out_h[3] == 12.5f, "exec kernel parameters: %g", out_h[3]);
    cudaGraphExecUpdateResultInfo info;
    EXPECT(cudaGraphExecUpdate(exec3, graph, &info) == cudaErrorGraphExecUpdateFailure,
           "an update from a graph of another shape was taken");
    cudaGetLastError();

    // 4. what a program may not do while capturing
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed));
    scale<<<1, 32, 0, s1>>>(a, 1.0f, 32);
    EXPECT(cudaStreamSynchronize(s1) == cudaErrorStreamCaptureUnsupported, "synchronizing a capturing stream");
    CHECK(cudaStreamIsCapturing(s1, &status));
    EXPECT(status == cudaStreamCaptureStatusInvalidated, "status %d after an invalidating call", (int)status);
    cudaGraph_t bad = NULL;
    EXPECT(cudaStreamEndCapture(s1, &bad) == cudaErrorStreamCaptureInvalidated, "the capture was not invalidated");
    cudaGetLastError();
    EXPECT(cudaStreamEndCapture(s2, &bad) != cudaSuccess, "ending a capture that never began");
    cudaGetLastError();
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));  // a fork never joined back
    CHECK(cudaEventRecord(fork, s1));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    scale<<<1, 32, 0, s2>>>(a, 1.0f, 32);
    EXPECT(cudaStreamEndCapture(s1, &bad) == cudaErrorStreamCaptureUnjoined, "an unjoined fork was accepted");
    cudaGetLastError();
    CHECK(cudaStreamIsCapturing(s2, &status));
    EXPECT(status == cudaStreamCaptureStatusNone, "s2 still captures after its capture failed");
    CHECK(cudaGraphExecDestroy(exec2));
    EXPECT(cudaGraphLaunch(exec2, s1) != cudaSuccess, "a destroyed executable launched");
    cudaGetLastError();

    // 5. a 3D copy into pitched memory and back (cudaMemcpy3D: the copy a memcpy node carries)
    cudaExtent     ext = make_cudaExtent(10 * sizeof(float), 3, 2);
    cudaPitchedPtr vol;
    CHECK(cudaMalloc3D(&vol, ext));
    float box_in[2][3][10], box_out[2][3][10];
    for (int i = 0; i < 60; i++)
        (&box_in[0][0][0])[i] = (float)i, (&box_out[0][0][0])[i] = -1.0f;
    cudaMemcpy3DParms up = {0};
    up.srcPtr = make_cudaPitchedPtr(box_in, 10 * sizeof(float), 10, 3);
    up.dstPtr = vol;
    up.extent = ext;
    up.kind   = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&up));
    cudaMemcpy3DParms down = {0};
    down.srcPtr = vol;
    down.dstPtr = make_cudaPitchedPtr(box_out, 10 * sizeof(float), 10, 3);
    down.extent = ext;
    down.kind   = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&down));
    for (int i = 0; i < 60; i++)
        EXPECT((&box_out[0][0][0])[i] == (float)i, "3D copy: element %d is %g", i, (&box_out[0][0][0])[i]);
    CHECK(cudaFree(vol.ptr));

    // the device is still fine, and the first executable still runs
    for (int i = 0; i < N; i++)
        in_h[i] = 1.0f;
    CHECK(cudaGraphLaunch(exec, s1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(out_h[N - 1] == 3.0f, "after the errors: %g", out_h[N - 1]);

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphExecDestroy(exec3));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaGraphDestroy(copy));
    CHECK(cudaGraphDestroy(g2));
    CHECK(cudaDeviceSynchronize());
    printf("PASS\n");
    return 0;
}
