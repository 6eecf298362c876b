// Stream-ordered allocation through cudart's memory pools (NOTE [memory pools] in shim/native/cu_mempool.py):
// the default pool, its attributes, cudaMallocAsync/cudaFreeAsync on a stream with a kernel between, an
// explicit pool, and the errors a bad pool gives. Prints PASS.
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e)); return 1; } } while (0)

__global__ void scale(float *out, const float *in, int n, float k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * k;
}

int main() {
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
    if (!supported) { printf("FAIL pools not supported\n"); return 1; }
    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    unsigned long long threshold = 64ull << 20, got = 0;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got));
    if (got != threshold) { printf("FAIL threshold %llu\n", got); return 1; }

    const int n = 1 << 16;
    float *host = new float[n], *back = new float[n];
    for (int i = 0; i < n; i++) host[i] = (float)i;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *a, *b;
    CHECK(cudaMallocAsync(&a, n * sizeof(float), s));
    CHECK(cudaMallocAsync(&b, n * sizeof(float), s));
    unsigned long long used = 0;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    if (used < 2 * n * sizeof(float)) { printf("FAIL used %llu\n", used); return 1; }
    CHECK(cudaMemcpyAsync(a, host, n * sizeof(float), cudaMemcpyHostToDevice, s));
    scale<<<(n + 255) / 256, 256, 0, s>>>(b, a, n, 3.0f);
    CHECK(cudaFreeAsync(a, s));  // ordered after the kernel that reads it
    CHECK(cudaMemcpyAsync(back, b, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(b, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) if (back[i] != 3.0f * i) { printf("FAIL value %d: %f\n", i, back[i]); return 1; }
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    if (used != 0) { printf("FAIL used after free %llu\n", used); return 1; }
    CHECK(cudaMemPoolTrimTo(pool, 0));

    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t mine;
    CHECK(cudaMemPoolCreate(&mine, &props));
    float *c;
    CHECK(cudaMallocFromPoolAsync(&c, 4096, mine, s));
    CHECK(cudaMemsetAsync(c, 0, 4096, s));
    CHECK(cudaFreeAsync(c, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolDestroy(mine));
    unsigned long long bogus = 1;
    cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &bogus);  // only a reset to 0
    if (e != cudaErrorInvalidValue) { printf("FAIL high-water set to 1: %s\n", cudaGetErrorName(e)); return 1; }
    cudaGetLastError();

    // L2 persistence hints (NOTE [stream attributes]): kept and read back; they change no result
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.persistingL2CacheMaxSize <= 0 || prop.accessPolicyMaxWindowSize <= 0) { printf("FAIL L2 props\n"); return 1; }
    CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, prop.persistingL2CacheMaxSize));
    size_t limit = 0;
    CHECK(cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize));
    if (limit != (size_t)prop.persistingL2CacheMaxSize) { printf("FAIL limit %zu\n", limit); return 1; }
    cudaStreamAttrValue v = {}, r = {};
    v.accessPolicyWindow.base_ptr = back;
    v.accessPolicyWindow.num_bytes = 4096;
    v.accessPolicyWindow.hitRatio = 0.5f;
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &r));
    if (r.accessPolicyWindow.num_bytes != 4096 || r.accessPolicyWindow.hitRatio != 0.5f) { printf("FAIL attr\n"); return 1; }
    CHECK(cudaCtxResetPersistingL2Cache());
    CHECK(cudaStreamDestroy(s));
    printf("PASS\n");
    return 0;
}
