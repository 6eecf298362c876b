// nvcc -arch=sm_90 -ptx -std=c++17 qualified.cu -o qualified_sm90.ptx: cache-hint loads/stores, cooperative-groups and
// cuda::pipeline memcpy_async, cuda::barrier (sm_90 emits mbarrier.arrive.shared::cta; NOTE [qualified modifiers])
#include <cuda/pipeline>
#include <cuda/barrier>
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
namespace cg = cooperative_groups;

extern "C" __global__ void hints(const float4 *__restrict__ x, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 a = __ldcs(x + i);
        float4 b = __ldlu(x + i);
        float4 c = __ldg(x + i);
        float4 d = __ldcg(x + i);
        __stcs(out + i, a.x + b.y + c.z + d.w);
    }
}

// block-wide memcpy_async into shared memory through cooperative groups, then a reduction per block
extern "C" __global__ void staged(const float *in, float *out) {
    __shared__ float tile[256];
    cg::thread_block tb = cg::this_thread_block();
    cg::memcpy_async(tb, tile, in + blockIdx.x * 256, sizeof(float) * 256);
    cg::wait(tb);
    float v = tile[(threadIdx.x + 1) % 256] * 2.0f;
    out[blockIdx.x * 256 + threadIdx.x] = v;
}

// cuda::pipeline double buffering (per-thread pipeline, memcpy_async of 4 bytes)
extern "C" __global__ void piped(const int *in, int *out, int chunks) {
    __shared__ int buf[2][128];
    auto pipe = cuda::make_pipeline();
    int t = threadIdx.x;
    int acc = 0;
    pipe.producer_acquire();
    cuda::memcpy_async(&buf[0][t], &in[t], sizeof(int), pipe);
    pipe.producer_commit();
    for (int c = 0; c < chunks; ++c) {
        if (c + 1 < chunks) {
            pipe.producer_acquire();
            cuda::memcpy_async(&buf[(c + 1) & 1][t], &in[(c + 1) * 128 + t], sizeof(int), pipe);
            pipe.producer_commit();
        }
        cuda::pipeline_consumer_wait_prior<0>(pipe);
        if (c + 1 < chunks) pipe.consumer_wait();
        acc += buf[c & 1][t] * (c + 1);
        pipe.consumer_release();
    }
    out[t] = acc;
}

// cuda::barrier in shared memory with arrive/wait
extern "C" __global__ void barred(const int *in, int *out) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    __shared__ int s[128];
    if (threadIdx.x == 0) init(&bar, blockDim.x);
    __syncthreads();
    s[threadIdx.x] = in[blockIdx.x * 128 + threadIdx.x] + 1;
    bar.arrive_and_wait();
    out[blockIdx.x * 128 + threadIdx.x] = s[127 - threadIdx.x];
}

// cuda::memcpy_async of an aligned block into shared memory, completing on a cuda::barrier: on sm_90 a bulk copy
// (cp.async.bulk ... mbarrier::complete_tx::bytes) issued before its mbarrier.expect_tx (NOTE [mbarrier])
extern "C" __global__ void txcopy(const float *in, float *out) {
    __shared__ alignas(16) float tile[256];
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    auto block = cg::this_thread_block();
    if (block.thread_rank() == 0) init(&bar, block.size());
    block.sync();
    cuda::memcpy_async(block, tile, in + blockIdx.x * 256, cuda::aligned_size_t<16>(sizeof(float) * 256), bar);
    bar.arrive_and_wait();
    out[blockIdx.x * 256 + threadIdx.x] = tile[255 - threadIdx.x] + 1.0f;
}
