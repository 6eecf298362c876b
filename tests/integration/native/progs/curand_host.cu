// cuRAND host generators (curandCreateGeneratorHost): the same type and seed give the same numbers on the host
// as on the device, uniform and normal, across consecutive calls; a NULL output is refused. Prints PASS.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

// cuRAND's C API as its header declares it (the toolkit here ships without the library's headers)
extern "C" {
typedef void *curandGenerator_t;
enum { CURAND_STATUS_SUCCESS = 0 };
enum { CURAND_RNG_PSEUDO_MTGP32 = 141 };
int curandCreateGenerator(curandGenerator_t *gen, int type);
int curandCreateGeneratorHost(curandGenerator_t *gen, int type);
int curandSetPseudoRandomGeneratorSeed(curandGenerator_t gen, unsigned long long seed);
int curandGenerateUniform(curandGenerator_t gen, float *out, size_t n);
int curandGenerateNormal(curandGenerator_t gen, float *out, size_t n, float mean, float stddev);
int curandDestroyGenerator(curandGenerator_t gen);
}


int main()
{
    const int         n = 4096;
    float            *d, *from_device = (float *)malloc(n * sizeof(float)), *from_host = (float *)malloc(n * sizeof(float));
    curandGenerator_t dev, host;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(curandCreateGenerator(&dev, CURAND_RNG_PSEUDO_MTGP32));
    CHECK(curandCreateGeneratorHost(&host, CURAND_RNG_PSEUDO_MTGP32));
    CHECK(curandSetPseudoRandomGeneratorSeed(dev, 777));
    CHECK(curandSetPseudoRandomGeneratorSeed(host, 777));
    for (int call = 0; call < 2; call++) {
        CHECK(curandGenerateUniform(dev, d, n));
        CHECK(cudaMemcpy(from_device, d, n * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(curandGenerateUniform(host, from_host, n));
        double sum = 0;
        for (int i = 0; i < n; i++) {
            if (from_host[i] != from_device[i] || !(from_host[i] > 0.0f && from_host[i] <= 1.0f)) {
                printf("FAIL call %d: uniform[%d] host %g, device %g\n", call, i, from_host[i], from_device[i]);
                return 1;
            }
            sum += from_host[i];
        }
        if (sum / n < 0.45 || sum / n > 0.55) {
            printf("FAIL uniform mean %g\n", sum / n);
            return 1;
        }
    }
    CHECK(curandGenerateNormal(dev, d, n, 3.0f, 0.5f));
    CHECK(cudaMemcpy(from_device, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(curandGenerateNormal(host, from_host, n, 3.0f, 0.5f));
    for (int i = 0; i < n; i++)
        if (from_host[i] != from_device[i]) {
            printf("FAIL normal[%d] host %g, device %g\n", i, from_host[i], from_device[i]);
            return 1;
        }
    if (curandGenerateUniform(host, NULL, n) == CURAND_STATUS_SUCCESS) {
        printf("FAIL a NULL output was accepted\n");
        return 1;
    }
    CHECK(curandDestroyGenerator(dev));
    CHECK(curandDestroyGenerator(host));
    printf("PASS\n");
    return 0;
}
