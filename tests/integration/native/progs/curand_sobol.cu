// cuRAND's 32-bit Sobol generator (QUASI_SOBOL32) and its direction vectors (curandGetDirectionVectors32), as the
// cuda-samples MC_EstimatePiQ / MC_EstimatePiInlineQ use them: the table's first dimension is van der Corput's;
// a kernel that steps a Sobol state the way curand_kernel.h's curand() does (x ^= v[trailing zeros of ~i]) from
// the table gives the host API's numbers, dimension after dimension; host and device generators agree; the
// status codes of misuse are cuRAND's. Prints PASS.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

extern "C" {
typedef void *curandGenerator_t;
typedef unsigned int curandDirectionVectors32_t[32];
int curandCreateGenerator(curandGenerator_t *gen, int type);
int curandCreateGeneratorHost(curandGenerator_t *gen, int type);
int curandSetQuasiRandomGeneratorDimensions(curandGenerator_t gen, unsigned int dims);
int curandSetPseudoRandomGeneratorSeed(curandGenerator_t gen, unsigned long long seed);
int curandGetDirectionVectors32(curandDirectionVectors32_t **vectors, int set);
int curandGenerate(curandGenerator_t gen, unsigned int *out, size_t n);
int curandGenerateUniform(curandGenerator_t gen, float *out, size_t n);
int curandDestroyGenerator(curandGenerator_t gen);
}
enum { QUASI_SOBOL32 = 201, QUASI_SCRAMBLED_SOBOL32 = 202, JOEKUO6 = 101 };
enum { TYPE_ERROR = 103, OUT_OF_RANGE = 104, LENGTH_NOT_MULTIPLE = 105 };

#define EXPECT(call, want)                                                                                   \
    do {                                                                                                     \
        int s_ = (int)(call);                                                                                \
        if (s_ != (want)) {                                                                                  \
            printf("FAIL %s: status %d, expected %d\n", #call, s_, (int)(want));                             \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

// points [0, n) of dimensions [0, dims), dimension-major, from the direction vectors (a thread per dimension)
__global__ void sobol_by_hand(const unsigned *v, int dims, int n, unsigned *out)
{
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= dims)
        return;
    unsigned x = 0;
    for (int i = 0; i < n; i++) {
        out[d * n + i] = x;
        x ^= v[d * 32 + (__ffs(~i) - 1)];
    }
}

int main()
{
    const int dims = 40, per = 512, n = dims * per;
    curandDirectionVectors32_t *table;
    CHECK(curandGetDirectionVectors32(&table, JOEKUO6));
    for (int k = 0; k < 32; k++)
        if (table[0][k] != 1u << (31 - k)) {
            printf("FAIL dimension 0, vector %d: %u\n", k, table[0][k]);
            return 1;
        }
    unsigned *dv, *dgen, *dref, *gen = (unsigned *)malloc(n * 4), *ref = (unsigned *)malloc(n * 4);
    CHECK(cudaMalloc(&dv, dims * 32 * 4));
    CHECK(cudaMalloc(&dgen, n * 4));
    CHECK(cudaMalloc(&dref, n * 4));
    CHECK(cudaMemcpy(dv, table, dims * 32 * 4, cudaMemcpyHostToDevice));
    sobol_by_hand<<<1, 64>>>(dv, dims, per, dref);
    CHECK(cudaGetLastError());

    curandGenerator_t g, h;
    CHECK(curandCreateGenerator(&g, QUASI_SOBOL32));
    CHECK(curandSetQuasiRandomGeneratorDimensions(g, dims));
    CHECK(curandGenerate(g, dgen, n / 2));  // two calls: the second goes on from where the first stopped
    CHECK(curandGenerate(g, dgen + n / 2, n / 2));
    CHECK(cudaMemcpy(gen, dgen, n * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(ref, dref, n * 4, cudaMemcpyDeviceToHost));
    for (int d = 0; d < dims; d++)
        for (int i = 0; i < per; i++) {
            int half = i < per / 2 ? 0 : 1, j = i - half * per / 2;
            unsigned got = gen[half * n / 2 + d * per / 2 + j];
            if (got != ref[d * per + i]) {
                printf("FAIL dimension %d point %d: generator %u, by hand %u\n", d, i, got, ref[d * per + i]);
                return 1;
            }
        }

    // uniform floats: x / 2^32 + 2^-33; dimension 0 in Gray-code order is 0, 1/2, 3/4, 1/4; dimension 1 is 0, 1/2, 1/4, 3/4
    float *du, u[8], hu[8];
    const float want[8] = {0.0f, 0.5f, 0.75f, 0.25f, 0.0f, 0.5f, 0.25f, 0.75f};
    CHECK(cudaMalloc(&du, sizeof(u)));
    CHECK(curandCreateGenerator(&g, QUASI_SOBOL32));
    CHECK(curandCreateGeneratorHost(&h, QUASI_SOBOL32));
    CHECK(curandSetQuasiRandomGeneratorDimensions(g, 2));
    CHECK(curandSetQuasiRandomGeneratorDimensions(h, 2));
    CHECK(curandGenerateUniform(g, du, 8));
    CHECK(curandGenerateUniform(h, hu, 8));
    CHECK(cudaMemcpy(u, du, sizeof(u), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 8; i++)
        if (u[i] != want[i] + 0x1p-33f || hu[i] != u[i]) {
            printf("FAIL uniform %d: device %a, host %a, expected %a\n", i, u[i], hu[i], want[i] + 0x1p-33f);
            return 1;
        }

    EXPECT(curandGenerateUniform(g, du, 7), LENGTH_NOT_MULTIPLE);
    EXPECT(curandSetPseudoRandomGeneratorSeed(g, 1), TYPE_ERROR);
    EXPECT(curandSetQuasiRandomGeneratorDimensions(g, 0), OUT_OF_RANGE);
    EXPECT(curandSetQuasiRandomGeneratorDimensions(g, 20001), OUT_OF_RANGE);
    EXPECT(curandCreateGenerator(&h, QUASI_SCRAMBLED_SOBOL32), TYPE_ERROR);
    EXPECT(curandGetDirectionVectors32(&table, 7), OUT_OF_RANGE);
    CHECK(curandDestroyGenerator(g));
    printf("PASS\n");
    return 0;
}
