// The driver's JIT linker (NOTE [linking PTX]): two PTX modules, one calling a function the other defines, are
// linked with cuLinkAddData and cuLinkAddFile, the result loaded and launched; a cubin input is refused with
// CUDA_ERROR_NO_BINARY_FOR_GPU and a message in the error log. Usage: link_app kernel.ptx twice.ptx. Prints PASS.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        CUresult r_ = (call);                                                                                \
        if (r_ != CUDA_SUCCESS) {                                                                            \
            const char *name_ = "?";                                                                         \
            cuGetErrorName(r_, &name_);                                                                      \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, name_);                                 \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("FAIL cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = (char *)calloc(n + 1, 1);
    if (fread(buf, 1, n, f) != (size_t)n)
        exit(1);
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        printf("usage: %s kernel.ptx twice.ptx\n", argv[0]);
        return 2;
    }
    CUdevice  dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));

    char         info[4096] = {0}, error[4096] = {0};
    CUjit_option opts[4]    = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                               CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void        *vals[4]    = {info, (void *)(size_t)sizeof info, error, (void *)(size_t)sizeof error};
    CUlinkState  link;
    CHECK(cuLinkCreate(4, opts, vals, &link));
    char *kernel = slurp(argv[1]);
    CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, kernel, strlen(kernel) + 1, "kernel.ptx", 0, NULL, NULL));
    CHECK(cuLinkAddFile(link, CU_JIT_INPUT_PTX, argv[2], 0, NULL, NULL));
    const char elf[16] = {0x7f, 'E', 'L', 'F'};
    CUresult   bad     = cuLinkAddData(link, CU_JIT_INPUT_CUBIN, (void *)elf, sizeof elf, "a.cubin", 0, NULL, NULL);
    if (bad != CUDA_ERROR_NO_BINARY_FOR_GPU || !strstr(error, "a.cubin")) {
        printf("FAIL a cubin input gave %d, error log '%s'\n", (int)bad, error);
        return 1;
    }
    void  *image;
    size_t size = 0;
    CHECK(cuLinkComplete(link, &image, &size));
    if (size == 0 || !strstr(info, "kernel.ptx")) {
        printf("FAIL link output of %zu bytes, info log '%s'\n", size, info);
        return 1;
    }
    CUmodule   mod;
    CUfunction fn;
    CHECK(cuModuleLoadData(&mod, image));
    CHECK(cuLinkDestroy(link));  // the module outlives the linker's output
    CHECK(cuModuleGetFunction(&fn, mod, "twice_all"));

    const int   n = 1000;
    int         host[n];
    CUdeviceptr v;
    for (int i = 0; i < n; i++)
        host[i] = i;
    CHECK(cuMemAlloc(&v, sizeof host));
    CHECK(cuMemcpyHtoD(v, host, sizeof host));
    int   count  = n;
    void *args[] = {&v, &count};
    CHECK(cuLaunchKernel(fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(host, v, sizeof host));
    for (int i = 0; i < n; i++)
        if (host[i] != 2 * i + 1) {
            printf("FAIL v[%d] = %d, want %d\n", i, host[i], 2 * i + 1);
            return 1;
        }
    CUlinkState gone = link;
    if (cuLinkComplete(gone, &image, &size) == CUDA_SUCCESS) {
        printf("FAIL a destroyed link state completed\n");
        return 1;
    }
    CHECK(cuMemFree(v));
    CHECK(cuModuleUnload(mod));
    printf("PASS\n");
    return 0;
}
