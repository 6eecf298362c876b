// nvcc -arch=sm_80 -ptx -std=c++17 cxx_features.cu -o cxx_features.ptx: virtual functions (vtables of .func addresses
// in .global initializers), a device function-pointer table, generic(var) initializers, a __managed__ variable,
// recursion, a switch, device new/delete/malloc/free, printf (NOTE [function addresses in globals])
#include <cstdio>
#include <cassert>
struct Shape { __device__ virtual float area() const = 0; __device__ virtual ~Shape() {} };
struct Sq : Shape { float s; __device__ Sq(float s) : s(s) {} __device__ float area() const override { return s * s; } };
struct Ci : Shape { float r; __device__ Ci(float r) : r(r) {} __device__ float area() const override { return 3.14159f * r * r; } };
extern "C" __global__ void virt(const float *x, float *o) {
    int i = threadIdx.x;
    Shape *s = (i & 1) ? (Shape *)new Sq(x[i]) : (Shape *)new Ci(x[i]);
    o[i] = s->area();
    delete s;
}
__device__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
typedef int (*fn_t)(int);
__device__ int twice(int v) { return 2 * v; }
__device__ int sq(int v) { return v * v; }
__device__ fn_t table[2] = {twice, sq};
__device__ int gcounter = 5;
__device__ int *gptr = &gcounter;
__constant__ float coef[4] = {1, 2, 3, 4};
__managed__ int managed_v = 7;
extern "C" __global__ void __launch_bounds__(128, 2) misc(int *o, const int *x) {
    int i = threadIdx.x;
    int loc[16];
    for (int k = 0; k < 16; ++k) loc[k] = x[(i + k) % 64] * k;
    int v = loc[x[i] & 15];
    switch (x[i] % 7) { case 0: v += 1; break; case 1: v *= 3; break; case 2: v -= 8; break; case 3: v ^= 5; break;
                        case 4: v <<= 2; break; case 5: v = -v; break; default: v = 0; }
    o[i] = v + fib(x[i] & 7) + table[i & 1](i) + *gptr + (int)coef[i & 3] + managed_v;
    if (i == 0) printf("misc %d %5.2f %s %c %lld %x %p\n", v, 1.5f, "str", 'c', 123456789012ll, 255, (void *)0);
    assert(i < 1000);
    int *m = (int *)malloc(16);
    m[0] = i; o[i] += m[0] - i;
    free(m);
}
