"""Texture and surface statements (NOTE [textures], jit/texture.py) and the worker-lifetime hints of .func access
sites that make them fast under bounds checks (NOTE [.func hints], jit/emit/bounds.py)."""

from __future__ import annotations

import numpy as np
import pytest

from jit import compile_module
from jit import texture as jit_texture
from jit.errors import JitError
from proto import texture
from tests.unit.jit.helpers import HEADER, launch, pack

F32, U8X4 = 0x20, 0x01
CLAMP, WRAP, MIRROR, BORDER = 1, 0, 2, 3


def desc(arr: np.ndarray, width: int, height: int = 1, depth: int = 1, layers: int = 1, fmt: int = F32,
         channels: int = 1, modes=(CLAMP, CLAMP, CLAMP), filt: int = 0, flags: int = 0, border=(0.0,) * 4) -> np.ndarray:  # fmt: skip
    elem = texture.FORMAT_BYTES[fmt] * channels
    raw = texture.pack_descriptor(
        arr.ctypes.data, width * elem, width * elem * height, width, height, depth, layers, fmt, channels, modes, filt,
        flags, border,
    )  # fmt: skip
    return np.frombuffer(raw, dtype=np.uint8).copy()


# out[i] = tex.2d(t, {x[i], y[i]}).x, except where x[i] is -1000 (a predicated statement: out[i] = 999)
TEX2D = (
    HEADER
    + """
.visible .entry k(.param .u64 t, .param .u64 xs, .param .u64 ys, .param .u64 out)
{
  .reg .b32 %r<4>; .reg .b64 %rd<12>; .reg .f32 %f<12>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [t]; ld.param.u64 %rd2, [xs]; ld.param.u64 %rd3, [ys]; ld.param.u64 %rd4, [out];
  mov.u32 %r1, %tid.x; mul.wide.u32 %rd5, %r1, 4;
  add.s64 %rd6, %rd2, %rd5; add.s64 %rd7, %rd3, %rd5; add.s64 %rd8, %rd4, %rd5;
  ld.global.f32 %f1, [%rd6]; ld.global.f32 %f2, [%rd7];
  mov.f32 %f3, 0f4479C000;
  setp.ne.f32 %p1, %f1, 0fC47A0000;
  @%p1 tex.2d.v4.f32.f32 {%f3, %f4, %f5, %f6}, [%rd1, {%f1, %f2}];
  st.global.f32 [%rd8], %f3;
  ret;
}
"""
)


def _bilinear(img: np.ndarray, u: float, v: float) -> float:
    h, w = img.shape
    u, v = u - 0.5, v - 0.5
    i, j = int(np.floor(u)), int(np.floor(v))
    a = np.float32(np.round((u - i) * 256) / 256)
    b = np.float32(np.round((v - j) * 256) / 256)

    def g(x: int, y: int) -> np.float32:
        return img[min(max(y, 0), h - 1), min(max(x, 0), w - 1)]

    x0 = g(i, j) + a * (g(i + 1, j) - g(i, j))
    x1 = g(i, j + 1) + a * (g(i + 1, j + 1) - g(i, j + 1))
    return float(x0 + b * (x1 - x0))


def _tex2d(d: np.ndarray, xs: list[float], ys: list[float]) -> np.ndarray:
    x = np.array(xs, np.float32)
    y = np.array(ys, np.float32)
    out = np.zeros(len(xs), np.float32)
    launch(TEX2D, "k", 1, len(xs), d.ctypes.data, x, y, out)
    return out


def test_bilinear_filtering_with_eight_bit_weights_and_predicated_fetch() -> None:
    img = np.random.RandomState(3).rand(5, 7).astype(np.float32)
    d = desc(img, 7, 5, filt=1)
    xs = [0.25, 3.6, 6.9, 8.0, -2.3, -1000.0]
    ys = [0.75, 2.2, 4.9, -3.0, 1.01, 1.0]
    out = _tex2d(d, xs, ys)
    for k in range(5):
        assert out[k] == pytest.approx(_bilinear(img, xs[k], ys[k]), abs=1e-6)
    assert out[5] == 999.0  # the predicate was false: the destination kept its value


def test_address_modes_on_normalized_coordinates() -> None:
    img = np.arange(4 * 3, dtype=np.float32).reshape(3, 4)
    u = [(0.5 + 1) / 4 + 1.0, (0.5 + 1) / 4 - 1.0, 1.2, -0.1]  # wrap: +/- one period; beyond the edges
    v = [0.5 / 3] * 4
    wrap = _tex2d(desc(img, 4, 3, modes=(WRAP, WRAP, WRAP), flags=texture.NORMALIZED_COORDINATES), u, v)
    assert list(wrap[:2]) == [1.0, 1.0]
    clamp = _tex2d(desc(img, 4, 3, flags=texture.NORMALIZED_COORDINATES), u, v)
    assert list(clamp[2:]) == [3.0, 0.0]
    border = _tex2d(desc(img, 4, 3, modes=(BORDER,) * 3, flags=texture.NORMALIZED_COORDINATES, border=(-5.0, 0, 0, 0)),
                    u, v)  # fmt: skip
    assert list(border[2:]) == [-5.0, -5.0]
    # mirror: u in [1, 2) reads the row backwards
    mirror = _tex2d(desc(img, 4, 3, modes=(MIRROR,) * 3, flags=texture.NORMALIZED_COORDINATES), [1.0 + 0.5 / 4], [0.1])
    assert mirror[0] == 3.0


# integer results of a uchar4 texture (read as integers), a texel fetch with integer coordinates, txq/suq, and a
# surface: out[0..3] = tex.2d.v4.u32.s32 at (x, y), out[4] = width, out[5] = height, out[6] = surface width in bytes
QUERY = (
    HEADER
    + """
.visible .entry k(.param .u64 t, .param .u32 x, .param .u32 y, .param .u64 out)
{
  .reg .b32 %r<16>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [t]; ld.param.u32 %r1, [x]; ld.param.u32 %r2, [y]; ld.param.u64 %rd2, [out];
  tex.2d.v4.u32.s32 {%r3, %r4, %r5, %r6}, [%rd1, {%r1, %r2}];
  txq.width.b32 %r7, [%rd1];
  txq.height.b32 %r8, [%rd1];
  suq.width.b32 %r9, [%rd1];
  st.global.v4.u32 [%rd2], {%r3, %r4, %r5, %r6};
  st.global.u32 [%rd2+16], %r7; st.global.u32 [%rd2+20], %r8; st.global.u32 [%rd2+24], %r9;
  ret;
}
"""
)


def test_integer_fetch_and_queries() -> None:
    px = np.arange(5 * 3 * 4, dtype=np.uint8).reshape(3, 5, 4)
    d = desc(px, 5, 3, fmt=U8X4, channels=4, flags=texture.READ_AS_INTEGER)
    out = np.zeros(7, np.uint32)
    launch(QUERY, "k", 1, 1, d.ctypes.data, 2, 1, out)
    assert list(out[:4]) == list(px[1, 2])
    assert list(out[4:]) == [5, 3, 20]
    launch(QUERY, "k", 1, 1, d.ctypes.data, 9, -4, out)  # a fetch outside clamps
    assert list(out[:4]) == list(px[0, 4])


# a 1D surface of b32: thread i stores i * 3 at element i + shift with the given mode, then reads element i with .zero
SURF = (
    HEADER
    + """
.visible .entry k(.param .u64 s, .param .u32 shift, .param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [s]; ld.param.u32 %r1, [shift]; ld.param.u64 %rd2, [out];
  mov.u32 %r2, %tid.x; add.s32 %r3, %r2, %r1; shl.b32 %r3, %r3, 2; mul.lo.u32 %r4, %r2, 3;
  sust.b.1d.b32.clamp [%rd1, {%r3}], {%r4};
  bar.sync 0;
  shl.b32 %r5, %r2, 2; add.s32 %r5, %r5, 8;
  suld.b.1d.b32.zero {%r6}, [%rd1, {%r5}];
  mul.wide.u32 %rd3, %r2, 4; add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r6;
  ret;
}
"""
)


def test_surface_clamp_store_and_zero_load() -> None:
    cells = np.zeros(8, np.uint32)
    d = desc(cells, 8, fmt=0x03)
    out = np.full(8, 7, np.uint32)
    launch(SURF, "k", 1, 8, d.ctypes.data, 4, out)
    # stores to elements 4..11 clamp to 4..7; element 7 took one of the clamped stores (threads 3..7)
    assert list(cells[:4]) == [0, 0, 0, 0] and list(cells[4:7]) == [0, 3, 6] and cells[7] in (9, 12, 15, 18, 21)
    assert list(out[:6]) == list(cells[2:8]) and list(out[6:]) == [0, 0]  # reads past the end are zero


def test_forged_descriptor_is_an_illegal_address_under_bounds_checks() -> None:
    img = np.ones((4, 4), np.float32)
    ok = desc(img, 4, 4)
    outside = np.zeros(4096, np.float32)  # memory the launch is not given
    forged = desc(outside, 64, 16)
    x = np.full(4, 1.5, np.float32)
    out = np.zeros(4, np.float32)
    k = compile_module(TEX2D, bounds_check=True, tier="optimized").get_kernel("k")
    allowed = [(a.ctypes.data, a.nbytes) for a in (img, ok, forged, x, out)]
    k.launch(1, 4, 0, pack(k, ok.ctypes.data, x, x, out), allowed_ranges=allowed)
    assert list(out) == [1.0] * 4
    with pytest.raises(JitError) as ei:  # the descriptor is the tenant's, the texels it names are not
        k.launch(1, 4, 0, pack(k, forged.ctypes.data, x, x, out), allowed_ranges=allowed)
    assert ei.value.code == 700
    with pytest.raises(JitError) as ei:  # the handle itself points outside
        k.launch(1, 4, 0, pack(k, outside.ctypes.data, x, x, out), allowed_ranges=allowed)
    assert ei.value.code == 700


# NOTE [.func hints]: a .func called once per element keeps its sites' hints across calls; an access outside the
# allowed ranges still fails even after the same site matched a range many times
FUNC = (
    HEADER
    + """
.func (.param .b32 r) get(.param .b64 p, .param .b32 i)
{
  .reg .b64 %rd<4>; .reg .b32 %r<3>;
  ld.param.b64 %rd1, [p]; ld.param.b32 %r1, [i];
  mul.wide.s32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2;
  ld.u32 %r2, [%rd3];
  st.param.b32 [r], %r2;
  ret;
}
.visible .entry k(.param .u64 a, .param .u32 n, .param .u64 out)
{
  .reg .b64 %rd<4>; .reg .b32 %r<8>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [a]; ld.param.u32 %r1, [n]; ld.param.u64 %rd2, [out];
  mov.u32 %r2, 0; mov.u32 %r3, 0;
LOOP:
  { .param .b64 pa; .param .b32 pi; .param .b32 pr;
    st.param.b64 [pa], %rd1; st.param.b32 [pi], %r2;
    call.uni (pr), get, (pa, pi);
    ld.param.b32 %r4, [pr]; }
  add.s32 %r3, %r3, %r4;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r1;
  @%p1 bra LOOP;
  st.global.u32 [%rd2], %r3;
  ret;
}
"""
)


def test_func_site_hints_persist_but_never_widen_the_ranges() -> None:
    a = np.arange(1000, dtype=np.uint32)
    out = np.zeros(1, np.uint32)
    k = compile_module(FUNC, bounds_check=True, tier="optimized").get_kernel("k")
    allowed = [(a.ctypes.data, a.nbytes), (out.ctypes.data, out.nbytes)]
    k.launch(1, 1, 0, pack(k, a, 1000, out), allowed_ranges=allowed)
    assert out[0] == a.sum()
    with pytest.raises(JitError) as ei:  # element 1000 is one past the allocation
        k.launch(1, 1, 0, pack(k, a, 1001, out), allowed_ranges=allowed)
    assert ei.value.code == 700
    # a range allowed in one launch is not remembered by the next
    with pytest.raises(JitError) as ei:
        k.launch(1, 1, 0, pack(k, a, 10, out), allowed_ranges=[(out.ctypes.data, out.nbytes)])
    assert ei.value.code == 700


def test_statements_without_textures_are_untouched_and_mipmaps_refused() -> None:
    assert jit_texture.supply(HEADER + ".visible .entry k() { ret; }") == HEADER + ".visible .entry k() { ret; }"
    grad = TEX2D.replace("tex.2d.v4.f32.f32 {%f3, %f4, %f5, %f6}, [%rd1, {%f1, %f2}]",
                         "tex.level.2d.v4.f32.f32 {%f3, %f4, %f5, %f6}, [%rd1, {%f1, %f2}], %f2")  # fmt: skip
    with pytest.raises(JitError):
        compile_module(grad)
