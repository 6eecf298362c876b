// The other object of cdp_app.cu: a kernel it launches from the device and a device function it calls.
__global__ void scale(int *data, int n, int factor) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] *= factor;
}

__device__ int partition(int *data, int lo, int hi) {  // Lomuto, the last element as pivot
    int pivot = data[hi], i = lo;
    for (int j = lo; j < hi; j++)
        if (data[j] < pivot) { int t = data[i]; data[i] = data[j]; data[j] = t; i++; }
    int t = data[i]; data[i] = data[hi]; data[hi] = t;
    return i;
}
