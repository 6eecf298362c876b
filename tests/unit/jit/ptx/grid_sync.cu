// nvcc -arch=sm_80 -ptx grid_sync.cu -o grid_sync_nvcc.ptx: cooperative groups grid sync (the %envreg workspace protocol nvcc inlines)
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(int *a, int *b, int iters) {
    cg::grid_group g = cg::this_grid();
    unsigned n = g.size();
    unsigned i = g.thread_rank();
    for (int it = 0; it < iters; ++it) {
        b[i] = a[i] + a[(i + 1) % n] + it;
        g.sync();
        a[i] = b[i] - b[(i + 3) % n] / 2;
        g.sync();
    }
}
