// Calls a function another PTX module defines: only the linker brings them together (progs/link_app.cpp).
extern "C" __device__ int twice(int x);
extern "C" __global__ void twice_all(int *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] = twice(v[i]) + 1;
}
