// Kernels that launch kernels (NOTE [device launches], jit/devlaunch.py), for tests/unit/jit/test_device_launch.py.
// nvcc -arch=sm_80 -rdc=true -ptx device_launch.cu -o device_launch.ptx
#include <cstdio>

// out[base + i] = base + 2 i, one child grid per parent block
__global__ void fill(int *out, int base) { out[base + threadIdx.x] = base + 2 * threadIdx.x; }
__global__ void per_block(int *out) {
    if (threadIdx.x == 0) fill<<<1, 32>>>(out, blockIdx.x * 32);
}

// a recursion: each level writes its depth into log[depth] and launches the next, until `levels`
__global__ void nest(int *log, int depth, int levels) {
    log[depth] = depth + 1;
    if (depth + 1 < levels) {
        nest<<<1, 1>>>(log, depth + 1, levels);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) log[depth + 1] = -(int)e;  // the launch failed: say why
    }
}

// order: the child appends after its parent has finished; a tail launch runs after the other children
__global__ void append(int *seq, int value) { seq[1 + atomicAdd(seq, 1)] = value; }
__global__ void order(int *seq) {
    append<<<1, 1, 0, cudaStreamTailLaunch>>>(seq, 3);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    append<<<1, 1, 0, s>>>(seq, 2);
    cudaStreamDestroy(s);
    seq[1 + atomicAdd(seq, 1)] = 1;
}

// a copy queued behind the grid that produces its source
__global__ void produce(int *a) { a[threadIdx.x] = 100 + threadIdx.x; }
__global__ void copy_after(int *a, int *b, int n) {
    produce<<<1, n>>>(a);
    cudaMemcpyAsync(b, a, n * sizeof(int), cudaMemcpyDeviceToDevice, 0);
    cudaMemsetAsync(a, 0, n * sizeof(int), 0);
}

// a launch with a bad configuration fails for the launching thread only
__global__ void bad_config(int *out) {
    fill<<<1, 4096>>>(out, 0);
    cudaError_t e = cudaGetLastError();
    out[0] = (int)e;
    out[1] = (int)cudaGetLastError();  // cleared by the first read
    printf("%s %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
}

// a child that faults fails the host's launch
__global__ void wild(int *p) { p[threadIdx.x] = 1; }
__global__ void launches_wild(int *p) { wild<<<1, 1>>>(p + (1 << 28)); }

// the heap: device-side cudaMalloc/cudaFree around a child that uses the memory
__global__ void square(int *tmp, int *out) { tmp[threadIdx.x] = threadIdx.x * threadIdx.x; out[threadIdx.x] = tmp[threadIdx.x]; }
__global__ void with_malloc(int *out) {
    int *tmp;
    if (cudaMalloc(&tmp, 32 * sizeof(int)) != cudaSuccess) { out[0] = -1; return; }
    square<<<1, 32>>>(tmp, out);
    printf("parent done\n");
}

// the device's attributes and the runtime's version, as device code reads them
__global__ void attrs(int *out) {
    cudaDeviceGetAttribute(&out[0], cudaDevAttrMaxThreadsPerBlock, 0);
    cudaDeviceGetAttribute(&out[1], cudaDevAttrMultiProcessorCount, 0);
    out[2] = (int)cudaDeviceGetAttribute(&out[3], (cudaDeviceAttr)100000, 0);  // no such attribute
    out[4] = (int)cudaDeviceGetAttribute(&out[5], cudaDevAttrWarpSize, 3);  // no such device
    cudaRuntimeGetVersion(&out[6]);
}

// pitched copies: a w x h block from src (rows sp apart) to dst (rows dp apart), then 7 into the rest of dst's rows
__global__ void copies2d(char *dst, char *src, int w, int h, size_t dp, size_t sp) {
    cudaMemcpy2DAsync(dst, dp, src, sp, w, h, cudaMemcpyDeviceToDevice, 0);
    cudaMemset2DAsync(dst + w, dp, 7, dp - w, h, 0);
}

// a 3D copy from column 1 of src (d slices of h rows), then 9 into column 0 of every row of dst
__global__ void copies3d(char *dst, char *src, int w, int h, int d, size_t dp, size_t sp) {
    cudaMemcpy3DParms p = {0};
    p.srcPtr.ptr = src; p.srcPtr.pitch = sp; p.srcPtr.xsize = w; p.srcPtr.ysize = h;
    p.dstPtr.ptr = dst; p.dstPtr.pitch = dp; p.dstPtr.xsize = w; p.dstPtr.ysize = h;
    p.srcPos.x = 1;
    p.extent.width = w - 1; p.extent.height = h; p.extent.depth = d;
    p.kind = cudaMemcpyDeviceToDevice;
    cudaMemcpy3DAsync(&p, 0);
    cudaPitchedPtr q; q.ptr = dst; q.pitch = dp; q.xsize = w; q.ysize = h;
    cudaExtent e; e.width = 1; e.height = h; e.depth = d;
    cudaMemset3DAsync(q, 9, e, 0);
}

// what the device runtime refuses: a pitch below the width, a CUDA array, no parameters, a slice of too few rows
__global__ void copy_errors(int *out, char *buf) {
    out[0] = (int)cudaMemcpy2DAsync(buf, 2, buf + 8, 4, 4, 2, cudaMemcpyDeviceToDevice, 0);
    cudaMemcpy3DParms p = {0};
    p.srcArray = (cudaArray_t)buf;
    p.extent.width = 1; p.extent.height = 1; p.extent.depth = 1;
    out[1] = (int)cudaMemcpy3DAsync(&p, 0);
    out[2] = (int)cudaMemcpy3DAsync(nullptr, 0);
    cudaPitchedPtr q; q.ptr = buf; q.pitch = 4; q.xsize = 4; q.ysize = 1;
    cudaExtent e; e.width = 4; e.height = 2; e.depth = 2;
    out[3] = (int)cudaMemset3DAsync(q, 1, e, 0);
    out[4] = (int)cudaGetLastError();
}

// what device code may ask about kernels, occupancy, limits and devices; out[] holds results and error codes
__global__ void __launch_bounds__(128) bounded(int *p) {
    __shared__ int tile[300];
    tile[threadIdx.x] = p[threadIdx.x];
    __syncthreads();
    p[threadIdx.x] = tile[127 - threadIdx.x];
}
#pragma nv_diag_suppress 1215  // cudaDeviceGetSharedMemConfig is deprecated; programs still call it
__global__ void queries(long long *out) {
    cudaFuncAttributes a;
    memset(&a, 0x5a, sizeof a);
    out[0] = cudaFuncGetAttributes(&a, fill);
    out[1] = a.maxThreadsPerBlock; out[2] = a.sharedSizeBytes; out[3] = a.maxDynamicSharedSizeBytes;
    out[4] = a.ptxVersion; out[5] = a.reserved[15]; out[6] = a.numRegs;
    cudaFuncGetAttributes(&a, bounded);
    out[7] = a.maxThreadsPerBlock; out[8] = a.sharedSizeBytes; out[9] = a.maxDynamicSharedSizeBytes;
    int n = -1;
    out[10] = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fill, 256, 0); out[11] = n;
    cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, bounded, 128, 40000, cudaOccupancyDisableCachingOverride);
    out[12] = n;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, bounded, 256, 0); out[13] = n;  // past its launch bounds: 0
    out[14] = cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, fill, 32, 0, 7);  // no such flag
    size_t v = 0;
    out[15] = cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize); out[16] = v;
    cudaDeviceGetLimit(&v, cudaLimitDevRuntimePendingLaunchCount); out[17] = v;
    out[18] = cudaDeviceGetLimit(&v, (cudaLimit)99);
    int count = -1;
    out[19] = cudaGetDeviceCount(&count); out[20] = count;
    cudaFuncCache c = (cudaFuncCache)-1; cudaDeviceGetCacheConfig(&c); out[21] = c;
    cudaSharedMemConfig s = (cudaSharedMemConfig)-1; cudaDeviceGetSharedMemConfig(&s); out[22] = s;
    out[23] = cudaFuncGetAttributes(&a, (const void *)out);  // not a kernel
    out[24] = cudaGetLastError();
    out[25] = cudaGetLastError();
}
