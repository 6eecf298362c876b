// nvcc -arch=sm_80 -ptx alloca.cu -o alloca.ptx: alloca() in device code (PTX alloca.u64; stacksave/stackrestore
// where an inlined alloca sits in a loop). NOTE [dynamic stack] in jit/passes/dynamic_stack.py.
// across_barrier: each thread's alloca'd block holds values across __syncthreads and is read by its own thread;
// per_call: a __noinline__ function allocates on every call (its frame gives the memory back when it returns);
// in_loop: an inlined alloca inside a 64-round loop (1000 bytes a round: without stackrestore the 4 KiB stack
// would run out in the fifth round); sized: a thread allocates n bytes from a parameter (too many: a trap).
extern "C" __global__ void across_barrier(const int *in, int *out) {
    int t = threadIdx.x;
    int m = in[t] & 15;
    int *buf = (int *)alloca((m + 1) * sizeof(int));
    for (int i = 0; i <= m; ++i) buf[i] = i * t;
    __syncthreads();
    int s = 0;
    for (int i = 0; i <= m; ++i) s += buf[i];
    out[t] = s;
}
extern "C" __device__ __noinline__ int sum_to(int m, int t) {
    int *buf = (int *)alloca((m + 1) * sizeof(int));
    for (int i = 0; i <= m; ++i) buf[i] = i + t;
    int s = 0;
    for (int i = 0; i <= m; ++i) s += buf[i];
    return s;
}
extern "C" __global__ void per_call(const int *in, int *out) {
    int t = threadIdx.x;
    int s = 0;
    for (int r = 0; r < 3; ++r) s += sum_to((in[t] + r) & 7, t);
    out[t] = s;
}
__device__ __forceinline__ int round_sum(int r, int t, int n) {
    volatile int *buf = (volatile int *)alloca(n * sizeof(int));
    for (int i = 0; i < n; ++i) buf[i] = i ^ r ^ t;
    int s = 0;
    for (int i = 0; i < n; ++i) s += buf[i];
    return s;
}
extern "C" __global__ void in_loop(int *out, int n) {
    int t = threadIdx.x, s = 0;
    for (int r = 0; r < 64; ++r) s += round_sum(r, t, n);
    out[t] = s;
}
extern "C" __global__ void sized(unsigned long long *out, unsigned long long n) {
    unsigned char *a = (unsigned char *)alloca(1);
    unsigned char *b = (unsigned char *)alloca(n);
    a[0] = 1;
    if (n) b[n - 1] = 2;
    out[2 * threadIdx.x] = (unsigned long long)a;
    out[2 * threadIdx.x + 1] = (unsigned long long)b + a[0] + (n ? b[n - 1] : 0) - 3;
}
