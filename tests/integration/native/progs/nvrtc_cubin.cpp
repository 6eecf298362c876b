// NVRTC asked for machine code (a cubin for the device's own architecture), loaded with the driver API:
// the pattern of cuda-samples' *_nvrtc programs. Prints PASS when the kernel ran.
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <nvrtc.h>

#define CU(x) do { CUresult r_ = (x); if (r_) { const char *s_; cuGetErrorString(r_, &s_); \
    printf("%s: %s\n", #x, s_); return 1; } } while (0)
#define RT(x) do { nvrtcResult r_ = (x); if (r_) { printf("%s: %s\n", #x, nvrtcGetErrorString(r_)); return 1; } } while (0)

static const char *src = "extern \"C\" __global__ void fill(int *a, int v) { a[threadIdx.x] = v + threadIdx.x; }";

int main() {
    CUdevice dev;
    CUcontext ctx;
    int major = 0, minor = 0;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CU(cuCtxCreate(&ctx, NULL, 0, dev));
    nvrtcProgram prog;
    RT(nvrtcCreateProgram(&prog, src, "fill.cu", 0, NULL, NULL));
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
    const char *opts[] = {arch};
    RT(nvrtcCompileProgram(prog, 1, opts));
    size_t n = 0;
    RT(nvrtcGetCUBINSize(prog, &n));
    char *cubin = (char *)malloc(n);
    RT(nvrtcGetCUBIN(prog, cubin));
    RT(nvrtcDestroyProgram(&prog));
    CUmodule mod;
    CUfunction fn;
    CU(cuModuleLoadData(&mod, cubin));
    CU(cuModuleGetFunction(&fn, mod, "fill"));
    CUdeviceptr d;
    CU(cuMemAlloc(&d, 32 * sizeof(int)));
    int v = 100;
    void *args[] = {&d, &v};
    CU(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    int h[32];
    CU(cuMemcpyDtoH(h, d, sizeof h));
    for (int i = 0; i < 32; i++)
        if (h[i] != 100 + i) { printf("h[%d] = %d\n", i, h[i]); return 1; }
    printf("PASS\n");
    return 0;
}
