// Texture and surface fetches for devices without texture units (NOTE [textures] in jit/texture.py).
//
// This file is the source of jit/texture_lib.ptx, which the JIT appends to a module that uses tex/suld/sust and
// translates like any other PTX. Regenerate after a change (CUDA 12 or newer):
//     python -m jit.texture --regenerate
// A texture or surface object is the device address of a descriptor (struct Desc) that the client wrote into the
// tenant's own memory (shim/native/cu_texture.py packs it): every read below, of the descriptor and of the texels,
// is an ordinary global load, bounds-checked by the JIT like any other.

struct Desc {
    unsigned long long base;   //  0 address of texel (0, 0, 0) of layer 0
    unsigned long long pitch;  //  8 bytes from one row to the next
    unsigned long long slice;  // 16 bytes from one depth slice (or layer, or cubemap face) to the next
    unsigned int width;        // 24 texels
    unsigned int height;       // 28 1 for 1D
    unsigned int depth;        // 32 1 for 1D and 2D
    unsigned int layers;       // 36 layers (a cubemap's faces count as layers); 1 when not layered
    unsigned int format;       // 40 CUarray_format
    unsigned int channels;     // 44 1, 2 or 4
    unsigned int addr0;        // 48 address modes (CUaddress_mode: wrap 0, clamp 1, mirror 2, border 3)
    unsigned int addr1;        // 52
    unsigned int addr2;        // 56
    unsigned int filter;       // 60 0 point, 1 linear
    unsigned int flags;        // 64 CU_TRSF_*: 1 read as integer, 2 normalized coordinates
    unsigned int elem;         // 68 bytes per texel
    float border[4];           // 72 border colour
};

namespace wooly_texture {

__device__ __forceinline__ float half_to_float(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// One channel of the texel at p as a float: integers scaled to [0, 1] (or [-1, 1]) unless read as integers.
__device__ __forceinline__ float channel(const Desc *d, const char *p, int c) {
    bool raw = d->flags & 1;
    switch (d->format) {
    case 0x01: { unsigned char v = ((const unsigned char *)p)[c]; return raw ? (float)v : v / 255.0f; }
    case 0x02: { unsigned short v = ((const unsigned short *)p)[c]; return raw ? (float)v : v / 65535.0f; }
    case 0x08: { signed char v = ((const signed char *)p)[c]; return raw ? (float)v : fmaxf(v / 127.0f, -1.0f); }
    case 0x09: { short v = ((const short *)p)[c]; return raw ? (float)v : fmaxf(v / 32767.0f, -1.0f); }
    case 0x10: return half_to_float(((const unsigned short *)p)[c]);
    case 0x03: return __int_as_float(((const int *)p)[c]);
    case 0x0a: return __int_as_float(((const int *)p)[c]);
    default: return ((const float *)p)[c];
    }
}

__device__ __forceinline__ unsigned int channel_bits(const Desc *d, const char *p, int c) {
    switch (d->format) {
    case 0x01: return ((const unsigned char *)p)[c];
    case 0x02: return ((const unsigned short *)p)[c];
    case 0x08: return (unsigned int)(int)((const signed char *)p)[c];
    case 0x09: return (unsigned int)(int)((const short *)p)[c];
    case 0x10: return ((const unsigned short *)p)[c];
    default: return ((const unsigned int *)p)[c];
    }
}

// An index into [0, n) by the address mode; -1: outside, the border colour.
__device__ __forceinline__ int address(int i, int n, unsigned int mode) {
    if (i >= 0 && i < n) return i;
    switch (mode) {
    case 0: { int r = i % n; return r < 0 ? r + n : r; }
    case 2: {
        int period = 2 * n;
        int r = i % period;
        if (r < 0) r += period;
        return r < n ? r : period - 1 - r;
    }
    case 3: return -1;
    default: return i < 0 ? 0 : n - 1;
    }
}

// The address of texel (x, y, z) of a layer, or 0 when an address mode puts it on the border.
// ``clamp``: every axis clamped whatever its mode (texel fetches, cubemap faces).
__device__ __forceinline__ const char *texel(const Desc *d, int x, int y, int z, unsigned int layer, int clamp) {
    x = address(x, (int)d->width, clamp ? 1 : d->addr0);
    y = address(y, (int)d->height, clamp ? 1 : d->addr1);
    z = address(z, (int)d->depth, clamp ? 1 : d->addr2);
    if (x < 0 || y < 0 || z < 0) return 0;
    if (layer >= d->layers) layer = d->layers - 1;
    return (const char *)d->base + (unsigned long long)(layer * d->depth + z) * d->slice +
           (unsigned long long)y * d->pitch + (unsigned long long)x * d->elem;
}

__device__ __noinline__ float4 read_texel(const Desc *d, int x, int y, int z, unsigned int layer, int clamp) {
    const char *p = texel(d, x, y, z, layer, clamp);
    if (!p) return make_float4(d->border[0], d->border[1], d->border[2], d->border[3]);
    float4 r = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    r.x = channel(d, p, 0);
    if (d->channels > 1) r.y = channel(d, p, 1);
    if (d->channels > 2) { r.z = channel(d, p, 2); r.w = channel(d, p, 3); }
    return r;
}

__device__ __forceinline__ float4 lerp4(float4 a, float4 b, float t) {
    return make_float4(a.x + t * (b.x - a.x), a.y + t * (b.y - a.y), a.z + t * (b.z - a.z), a.w + t * (b.w - a.w));
}

// Coordinates in texels; a texture unit's linear filter weighs with 8 fractional bits.
__device__ __forceinline__ float to_texels(int normalized, float u, unsigned int n) {
    return normalized ? u * (float)n : u;
}

__device__ __forceinline__ void split(float u, int &i, float &a) {
    float f = floorf(u);
    i = (int)f;
    a = rintf((u - f) * 256.0f) * (1.0f / 256.0f);
}

__device__ __noinline__ float4 sample(const Desc *d, int dims, float u, float v, float w, unsigned int layer, int face) {
    int normalized = face || (d->flags & 2);
    u = to_texels(normalized, u, d->width);
    v = dims > 1 ? to_texels(normalized, v, d->height) : 0.0f;
    w = dims > 2 ? to_texels(normalized, w, d->depth) : 0.0f;
    if (d->filter == 0) {
        return read_texel(d, (int)floorf(u), (int)floorf(v), (int)floorf(w), layer, face);
    }
    int i, j = 0, k = 0;
    float a, b = 0.0f, c = 0.0f;
    split(u - 0.5f, i, a);
    if (dims > 1) split(v - 0.5f, j, b);
    if (dims > 2) split(w - 0.5f, k, c);
    float4 x0 = lerp4(read_texel(d, i, j, k, layer, face), read_texel(d, i + 1, j, k, layer, face), a);
    if (dims == 1) return x0;
    float4 x1 = lerp4(read_texel(d, i, j + 1, k, layer, face), read_texel(d, i + 1, j + 1, k, layer, face), a);
    float4 y0 = lerp4(x0, x1, b);
    if (dims == 2) return y0;
    float4 x2 = lerp4(read_texel(d, i, j, k + 1, layer, face), read_texel(d, i + 1, j, k + 1, layer, face), a);
    float4 x3 = lerp4(read_texel(d, i, j + 1, k + 1, layer, face), read_texel(d, i + 1, j + 1, k + 1, layer, face), a);
    return lerp4(y0, lerp4(x2, x3, b), c);
}

// A cubemap direction: the face of its major axis and the normalized coordinates on that face (clamped).
__device__ __forceinline__ float4 sample_cube(const Desc *d, float x, float y, float z, unsigned int layer) {
    float ax = fabsf(x), ay = fabsf(y), az = fabsf(z), m, s, t;
    unsigned int face;
    if (ax >= ay && ax >= az) {
        m = ax; face = x >= 0.0f ? 0 : 1; s = x >= 0.0f ? -z : z; t = -y;
    } else if (ay >= az) {
        m = ay; face = y >= 0.0f ? 2 : 3; s = x; t = y >= 0.0f ? z : -z;
    } else {
        m = az; face = z >= 0.0f ? 4 : 5; s = z >= 0.0f ? x : -x; t = -y;
    }
    return sample(d, 2, (s / m + 1.0f) * 0.5f, (t / m + 1.0f) * 0.5f, 0.0f, layer * 6 + face, 1);
}

}  // namespace wooly_texture

using namespace wooly_texture;

extern "C" {

__device__ __noinline__ float4 __wooly_tex_f(const Desc *d, int dims, float u, float v, float w, unsigned int layer,
                                             int cube) {
    if (cube) return sample_cube(d, u, v, w, layer);
    return sample(d, dims, u, v, w, layer, 0);
}

// Integer coordinates: a texel fetch (tex1Dfetch and the like), no filtering, clamped.
__device__ __noinline__ float4 __wooly_tex_fi(const Desc *d, int x, int y, int z, unsigned int layer) {
    return read_texel(d, x, y, z, layer, 1);
}

// Integer results (read mode element type of an integer format): the channels' bits, sign-extended.
__device__ __noinline__ uint4 __wooly_tex_i(const Desc *d, int dims, float u, float v, float w, unsigned int layer,
                                            int integer_coords, int ix, int iy, int iz) {
    int x, y = 0, z = 0;
    if (integer_coords) {
        x = ix; y = iy; z = iz;
    } else {
        x = (int)floorf(to_texels(d->flags & 2, u, d->width));
        if (dims > 1) y = (int)floorf(to_texels(d->flags & 2, v, d->height));
        if (dims > 2) z = (int)floorf(to_texels(d->flags & 2, w, d->depth));
    }
    const char *p = texel(d, x, y, z, layer, integer_coords);
    uint4 r = make_uint4(0, 0, 0, 0);
    if (!p) return r;
    r.x = channel_bits(d, p, 0);
    if (d->channels > 1) r.y = channel_bits(d, p, 1);
    if (d->channels > 2) { r.z = channel_bits(d, p, 2); r.w = channel_bits(d, p, 3); }
    return r;
}

// A surface access: the address of byte x of row y of slice z (layer), or 0 for an access outside the surface
// with mode .zero (the load reads zeros, the store is dropped); .clamp clamps; .trap (mode 0) traps, as a GPU does.
__device__ __noinline__ unsigned long long __wooly_surf(const Desc *d, int x, int y, int z, unsigned int layer,
                                                        int bytes, int mode) {
    long long row = (long long)d->width * d->elem;
    bool out = x < 0 || (long long)x + bytes > row || y < 0 || y >= (int)d->height || z < 0 || z >= (int)d->depth ||
               layer >= d->layers;
    if (out) {
        if (mode == 0) asm volatile("trap;");
        if (mode == 2) return 0;
        x = x < 0 ? 0 : ((long long)x + bytes > row ? (int)(row - bytes) : x);
        y = y < 0 ? 0 : (y >= (int)d->height ? (int)d->height - 1 : y);
        z = z < 0 ? 0 : (z >= (int)d->depth ? (int)d->depth - 1 : z);
        if (layer >= d->layers) layer = d->layers - 1;
    }
    return d->base + (unsigned long long)(layer * d->depth + z) * d->slice + (unsigned long long)y * d->pitch +
           (unsigned long long)x;
}

}  // extern "C"
