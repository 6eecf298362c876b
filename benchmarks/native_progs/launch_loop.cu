// Launch an empty kernel N times through the CUDA runtime and synchronise; prints the seconds per launch
// of the best of R rounds. Used by benchmarks/native.py under `wooly run`.
#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void empty(int *p) { if (p && threadIdx.x == 1024) *p = 0; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000, rounds = argc > 2 ? atoi(argv[2]) : 5;
    empty<<<1, 32>>>(nullptr);
    if (cudaDeviceSynchronize() != cudaSuccess) { printf("error\n"); return 1; }
    double best = 1e9;
    for (int r = 0; r < rounds; r++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; i++) empty<<<1, 32>>>(nullptr);
        if (cudaDeviceSynchronize() != cudaSuccess) { printf("error\n"); return 1; }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n;
        if (s < best) best = s;
    }
    printf("%.9f\n", best);
    return 0;
}
