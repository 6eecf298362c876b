// CUDA arrays, texture objects and surface objects through the runtime API (NOTE [textures]): every result is
// checked on the host against what a texture unit computes. Prints PASS.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

const int W = 13, H = 7;

__global__ void sample2d(cudaTextureObject_t t, float *out, float dx, float dy, int normalized, float shift) {
    int x = threadIdx.x, y = blockIdx.x;
    float u = x + dx, v = y + dy;
    if (normalized) { u = u / W + shift; v = v / H + shift; }
    out[y * W + x] = tex2D<float>(t, u, v);
}

__global__ void sample_uchar4(cudaTextureObject_t norm, cudaTextureObject_t raw, float4 *f, uchar4 *r) {
    int x = threadIdx.x, y = blockIdx.x;
    f[y * W + x] = tex2D<float4>(norm, x + 0.5f, y + 0.5f);
    r[y * W + x] = tex2D<uchar4>(raw, x + 0.5f, y + 0.5f);
}

__global__ void sample3d(cudaTextureObject_t t, float *out, int w, int h, int d) {
    int x = threadIdx.x, y = threadIdx.y, z = threadIdx.z;
    out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void sample_layers(cudaTextureObject_t t, float *out, int layers) {
    int x = threadIdx.x, y = blockIdx.x;
    for (int l = 0; l < layers; l++) out[(l * H + y) * W + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l);
}

__global__ void sample_cube(cudaTextureObject_t t, float *out) {
    const float dirs[6][3] = {{1, 0.1f, 0.2f}, {-1, 0.2f, 0.1f}, {0.1f, 1, 0.3f},
                              {0.3f, -1, 0.1f}, {0.2f, 0.1f, 1}, {0.1f, 0.3f, -1}};
    int i = threadIdx.x;
    out[i] = texCubemap<float>(t, dirs[i][0], dirs[i][1], dirs[i][2]);
}

__global__ void write_surface(cudaSurfaceObject_t s) {
    int x = threadIdx.x, y = blockIdx.x;
    surf2Dwrite(x * 100.0f + y, s, x * (int)sizeof(float), y);
}

__global__ void read_surface(cudaSurfaceObject_t s, float *out) {
    // out[0]: (3, 2); out[1]: past the right edge, zero mode; out[2]: past the right edge, clamp mode
    out[0] = surf2Dread<float>(s, 3 * sizeof(float), 2);
    out[1] = surf2Dread<float>(s, (W + 2) * sizeof(float), 2, cudaBoundaryModeZero);
    out[2] = surf2Dread<float>(s, (W + 2) * sizeof(float), 2, cudaBoundaryModeClamp);
}

__global__ void fetch_linear(cudaTextureObject_t t, float2 *out, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<float2>(t, i);
}

static float texel(const float *img, int x, int y) {
    x = x < 0 ? 0 : (x >= W ? W - 1 : x);
    y = y < 0 ? 0 : (y >= H ? H - 1 : y);
    return img[y * W + x];
}

// A texture unit's bilinear filter: texel centres at +0.5, weights with 8 fractional bits.
static float bilinear(const float *img, float u, float v) {
    u -= 0.5f; v -= 0.5f;
    float fu = floorf(u), fv = floorf(v);
    int i = (int)fu, j = (int)fv;
    float a = rintf((u - fu) * 256.0f) / 256.0f, b = rintf((v - fv) * 256.0f) / 256.0f;
    float x0 = texel(img, i, j) + a * (texel(img, i + 1, j) - texel(img, i, j));
    float x1 = texel(img, i, j + 1) + a * (texel(img, i + 1, j + 1) - texel(img, i, j + 1));
    return x0 + b * (x1 - x0);
}

static void upload3d(cudaArray_t a, const float *host, int w, int h, int d) {
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr((void *)host, w * sizeof(float), w, h);
    p.dstArray = a;
    p.extent = make_cudaExtent(w, h, d);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
}

static cudaTextureObject_t make_texture(cudaArray_t a, cudaTextureFilterMode filter, cudaTextureAddressMode mode,
                                        int normalized, cudaTextureReadMode read) {
    cudaResourceDesc res = {};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a;
    cudaTextureDesc td = {};
    td.filterMode = filter;
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = mode;
    td.normalizedCoords = normalized;
    td.readMode = read;
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
    return t;
}

int main() {
    // 2D float array from a padded host image
    static float img[H * W];
    const size_t hpitch = (W + 3) * sizeof(float);
    static float padded[H * (W + 3)];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) padded[y * (W + 3) + x] = img[y * W + x] = (float)((x * 7 + y * 13) % 17) / 3.0f;
    cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>();
    cudaArray_t arr;
    CHECK(cudaMallocArray(&arr, &fdesc, W, H));
    CHECK(cudaMemcpy2DToArray(arr, 0, 0, padded, hpitch, W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned int flags;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, arr));
    EXPECT(got.x == 32 && got.f == cudaChannelFormatKindFloat && ext.width == W && ext.height == H);

    float *d_out, out[H * W];
    CHECK(cudaMalloc(&d_out, sizeof(out) * 4));

    // bilinear, clamped, unnormalized coordinates (wrap is clamp there, as on a GPU)
    cudaTextureObject_t lin = make_texture(arr, cudaFilterModeLinear, cudaAddressModeWrap, 0, cudaReadModeElementType);
    sample2d<<<H, W>>>(lin, d_out, 0.3f, 0.65f, 0, 0.0f);
    CHECK(cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) EXPECT(fabsf(out[y * W + x] - bilinear(img, x + 0.3f, y + 0.65f)) < 1e-5f);
    cudaResourceDesc back;
    CHECK(cudaGetTextureObjectResourceDesc(&back, lin));
    EXPECT(back.resType == cudaResourceTypeArray && back.res.array.array == arr);

    // point sampling, normalized coordinates, wrap: one period to the right reads the same texels
    cudaTextureObject_t wrap = make_texture(arr, cudaFilterModePoint, cudaAddressModeWrap, 1, cudaReadModeElementType);
    sample2d<<<H, W>>>(wrap, d_out, 0.5f, 0.5f, 1, 1.0f);
    CHECK(cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost));
    for (int i = 0; i < H * W; i++) EXPECT(out[i] == img[i]);
    // border: outside reads the border colour (0)
    cudaTextureObject_t border =
        make_texture(arr, cudaFilterModePoint, cudaAddressModeBorder, 1, cudaReadModeElementType);
    sample2d<<<H, W>>>(border, d_out, 0.5f, 0.5f, 1, 1.0f);
    CHECK(cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost));
    for (int i = 0; i < H * W; i++) EXPECT(out[i] == 0.0f);

    // uchar4: normalized float and element type
    static uchar4 px[H * W];
    for (int i = 0; i < H * W; i++) px[i] = make_uchar4(i, 255 - i, i * 3, 7);
    cudaChannelFormatDesc cdesc = cudaCreateChannelDesc<uchar4>();
    cudaArray_t carr;
    CHECK(cudaMallocArray(&carr, &cdesc, W, H));
    CHECK(cudaMemcpy2DToArray(carr, 0, 0, px, W * sizeof(uchar4), W * sizeof(uchar4), H, cudaMemcpyHostToDevice));
    cudaTextureObject_t norm =
        make_texture(carr, cudaFilterModePoint, cudaAddressModeClamp, 0, cudaReadModeNormalizedFloat);
    cudaTextureObject_t raw = make_texture(carr, cudaFilterModePoint, cudaAddressModeClamp, 0, cudaReadModeElementType);
    float4 *d_f;
    uchar4 *d_r;
    CHECK(cudaMalloc(&d_f, H * W * sizeof(float4)));
    CHECK(cudaMalloc(&d_r, H * W * sizeof(uchar4)));
    sample_uchar4<<<H, W>>>(norm, raw, d_f, d_r);
    static float4 f[H * W];
    static uchar4 r[H * W];
    CHECK(cudaMemcpy(f, d_f, sizeof(f), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(r, d_r, sizeof(r), cudaMemcpyDeviceToHost));
    for (int i = 0; i < H * W; i++) {
        EXPECT(fabsf(f[i].x - px[i].x / 255.0f) < 1e-6f && fabsf(f[i].w - 7 / 255.0f) < 1e-6f);
        EXPECT(r[i].x == px[i].x && r[i].y == px[i].y && r[i].z == px[i].z && r[i].w == 7);
    }

    // 3D array through cudaMemcpy3D, read back through cudaMemcpy3D
    const int w3 = 4, h3 = 3, d3 = 2;
    float vol[w3 * h3 * d3], vol_back[w3 * h3 * d3];
    for (int i = 0; i < w3 * h3 * d3; i++) vol[i] = i * 0.5f;
    cudaArray_t varr;
    CHECK(cudaMalloc3DArray(&varr, &fdesc, make_cudaExtent(w3, h3, d3)));
    upload3d(varr, vol, w3, h3, d3);
    cudaMemcpy3DParms q = {};
    q.srcArray = varr;
    q.dstPtr = make_cudaPitchedPtr(vol_back, w3 * sizeof(float), w3, h3);
    q.extent = make_cudaExtent(w3, h3, d3);
    q.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&q));
    for (int i = 0; i < w3 * h3 * d3; i++) EXPECT(vol_back[i] == vol[i]);
    cudaTextureObject_t t3 = make_texture(varr, cudaFilterModePoint, cudaAddressModeClamp, 0, cudaReadModeElementType);
    sample3d<<<1, dim3(w3, h3, d3)>>>(t3, d_out, w3, h3, d3);
    CHECK(cudaMemcpy(out, d_out, sizeof(vol), cudaMemcpyDeviceToHost));
    for (int i = 0; i < w3 * h3 * d3; i++) EXPECT(out[i] == vol[i]);

    // a layered 2D array: each layer its own image
    const int layers = 3;
    static float stack[layers * H * W], stack_back[layers * H * W];
    for (int i = 0; i < layers * H * W; i++) stack[i] = (float)i;
    cudaArray_t larr;
    CHECK(cudaMalloc3DArray(&larr, &fdesc, make_cudaExtent(W, H, layers), cudaArrayLayered));
    upload3d(larr, stack, W, H, layers);
    cudaTextureObject_t tl = make_texture(larr, cudaFilterModePoint, cudaAddressModeClamp, 0, cudaReadModeElementType);
    sample_layers<<<H, W>>>(tl, d_out, layers);
    CHECK(cudaMemcpy(stack_back, d_out, sizeof(stack), cudaMemcpyDeviceToHost));
    for (int i = 0; i < layers * H * W; i++) EXPECT(stack_back[i] == stack[i]);

    // a cubemap whose faces hold their index: a direction reads its major axis' face
    const int side = 4;
    static float faces[6 * side * side];
    for (int i = 0; i < 6 * side * side; i++) faces[i] = (float)(i / (side * side));
    cudaArray_t cube;
    CHECK(cudaMalloc3DArray(&cube, &fdesc, make_cudaExtent(side, side, 6), cudaArrayCubemap));
    upload3d(cube, faces, side, side, 6);
    cudaTextureObject_t tc = make_texture(cube, cudaFilterModePoint, cudaAddressModeClamp, 1, cudaReadModeElementType);
    sample_cube<<<1, 6>>>(tc, d_out);
    CHECK(cudaMemcpy(out, d_out, 6 * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 6; i++) EXPECT(out[i] == (float)i);

    // a surface: written by a kernel, read back by a copy and by surf2Dread with each boundary mode
    cudaArray_t sarr;
    CHECK(cudaMallocArray(&sarr, &fdesc, W, H, cudaArraySurfaceLoadStore));
    cudaResourceDesc sres = {};
    sres.resType = cudaResourceTypeArray;
    sres.res.array.array = sarr;
    cudaSurfaceObject_t surf;
    CHECK(cudaCreateSurfaceObject(&surf, &sres));
    write_surface<<<H, W>>>(surf);
    CHECK(cudaMemcpy2DFromArray(out, W * sizeof(float), sarr, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) EXPECT(out[y * W + x] == x * 100.0f + y);
    read_surface<<<1, 1>>>(surf, d_out);
    CHECK(cudaMemcpy(out, d_out, 3 * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(out[0] == 302.0f && out[1] == 0.0f && out[2] == (W - 1) * 100.0f + 2);
    // an array made without cudaArraySurfaceLoadStore cannot back a surface
    cudaSurfaceObject_t bad;
    sres.res.array.array = arr;
    EXPECT(cudaCreateSurfaceObject(&bad, &sres) != cudaSuccess);
    cudaGetLastError();

    // tex1Dfetch from linear memory
    const int n = 9;
    float2 lin_h[n], lin_back[n];
    for (int i = 0; i < n; i++) lin_h[i] = make_float2(i, -i);
    float2 *d_lin, *d_lout;
    CHECK(cudaMalloc(&d_lin, sizeof(lin_h)));
    CHECK(cudaMalloc(&d_lout, sizeof(lin_h)));
    CHECK(cudaMemcpy(d_lin, lin_h, sizeof(lin_h), cudaMemcpyHostToDevice));
    cudaResourceDesc lres = {};
    lres.resType = cudaResourceTypeLinear;
    lres.res.linear.devPtr = d_lin;
    lres.res.linear.desc = cudaCreateChannelDesc<float2>();
    lres.res.linear.sizeInBytes = sizeof(lin_h);
    cudaTextureDesc ltd = {};
    ltd.readMode = cudaReadModeElementType;
    cudaTextureObject_t tlin;
    CHECK(cudaCreateTextureObject(&tlin, &lres, &ltd, nullptr));
    fetch_linear<<<1, n>>>(tlin, d_lout, n);
    CHECK(cudaMemcpy(lin_back, d_lout, sizeof(lin_h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(lin_back[i].x == i && lin_back[i].y == -i);
    // a linear resource larger than its allocation is refused at creation
    lres.res.linear.sizeInBytes = sizeof(lin_h) * 4;
    EXPECT(cudaCreateTextureObject(&tlin, &lres, &ltd, nullptr) != cudaSuccess);
    cudaGetLastError();

    CHECK(cudaDestroyTextureObject(lin));
    CHECK(cudaDestroySurfaceObject(surf));
    CHECK(cudaFreeArray(sarr));

    // a forged texture object (an address the tenant does not own) fails the launch; it reads nothing
    sample2d<<<1, 1>>>((cudaTextureObject_t)0x10, d_out, 0.5f, 0.5f, 0, 0.0f);
    cudaError_t e = cudaDeviceSynchronize();
    EXPECT(e == cudaErrorIllegalAddress);
    printf("PASS\n");
    return 0;
}
