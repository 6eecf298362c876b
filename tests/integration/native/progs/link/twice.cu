// Linked into link/kernel.cu's module by cuLinkAddFile (progs/link_app.cpp).
extern "C" __device__ int twice(int x) { return 2 * x; }
