// Virtual memory management through the driver API (NOTE [virtual memory on gpud] in shim/native/cu_vmm.py):
// reserve a range, map two physical allocations into it back to back, run a kernel across the seam, unmap one and
// map it at another reservation with its contents, and the errors aliasing and bad sizes give. Prints PASS.
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>

#define CHECK(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { const char *n; cuGetErrorName(e, &n); \
    printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #x, n); return 1; } } while (0)
#define EXPECT(x, want) do { CUresult e = (x); if (e != (want)) { printf("FAIL %s:%d %s gave %d, want %d\n", \
    __FILE__, __LINE__, #x, (int)e, (int)(want)); return 1; } } while (0)

__global__ void fill(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = i;
}

int main() {
    cudaFree(0);  // cudart creates the context
    int vmm = 0;
    CHECK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    if (!vmm) { printf("FAIL VMM not supported\n"); return 1; }
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va, va2;
    CHECK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    CHECK(cuMemAddressReserve(&va2, gran, 0, 0, 0));
    CUmemGenericAllocationHandle h[2];
    for (int i = 0; i < 2; i++) {
        CHECK(cuMemCreate(&h[i], gran, &prop, 0));
        CHECK(cuMemMap(va + i * gran, gran, 0, h[i], 0));
    }
    EXPECT(cuMemMap(va2, gran, 0, h[0], 0), CUDA_ERROR_NOT_SUPPORTED);  // one allocation at two addresses
    EXPECT(cuMemCreate(&h[0] + 0, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(cuMemSetAccess(va, 2 * gran, &access, 1));
    int n = (int)(2 * gran / sizeof(int));
    fill<<<(n + 255) / 256, 256>>>((int *)va, n);
    if (cudaDeviceSynchronize() != cudaSuccess) { printf("FAIL kernel\n"); return 1; }
    int probe[2];
    CHECK(cuMemcpyDtoH(probe, va + gran - 4, 8));  // across the seam of the two mappings
    if (probe[0] != n / 2 - 1 || probe[1] != n / 2) { printf("FAIL seam %d %d\n", probe[0], probe[1]); return 1; }
    // the second allocation moves to the other reservation and keeps its contents
    CHECK(cuMemUnmap(va + gran, gran));
    CHECK(cuMemMap(va2, gran, 0, h[1], 0));
    CHECK(cuMemcpyDtoH(probe, va2, 4));
    if (probe[0] != n / 2) { printf("FAIL moved contents %d\n", probe[0]); return 1; }
    for (int i = 0; i < 2; i++) CHECK(cuMemRelease(h[i]));  // mapped: they live until unmapped
    EXPECT(cuMemAddressFree(va, 2 * gran), CUDA_ERROR_INVALID_VALUE);  // still mapped
    CHECK(cuMemUnmap(va, gran));
    CHECK(cuMemUnmap(va2, gran));
    CHECK(cuMemAddressFree(va, 2 * gran));
    CHECK(cuMemAddressFree(va2, gran));
    printf("PASS\n");
    return 0;
}
