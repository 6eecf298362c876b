"""NOTE [warp matrix ops]: mma / wmma / ldmatrix / stmatrix / movmatrix rewritten into plain PTX.

The golden corpus (tests/jit_golden/gen_nvcc_mma.py) checks the results of every supported shape and type; these
tests cover what it cannot: several warps of a block sharing the hidden area, a .func holding wmma, the reported
static shared size, area sizing under .maxntid, a predicated mma, unsupported forms and the AMDGPU target.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from jit import GlobalRange, JitError, compile_module
from jit.passes.warp_matrix import SCRATCH
from jit.pipeline import front_end
from tests.unit.jit.helpers import HEADER, pack

# nvcc -arch=sm_80 -ptx wmma_multiwarp.cu: 4 warps per block (.maxntid 128), each one 16x16 tile of
# C = A * B + w with the A tile staged in 2 KiB of user shared memory, the mma in a __noinline__ .func
MULTIWARP = (Path(__file__).parent / "ptx" / "wmma_multiwarp.ptx").read_text()


@pytest.mark.parametrize("checked", [False, True])
def test_warps_of_a_block_use_their_own_areas(checked: bool) -> None:
    m = compile_module(MULTIWARP, bounds_check=checked)
    k = m.get_kernel("multiwarp")
    rng = np.random.default_rng(5)
    n = 16 * 4 * 3
    a = (rng.integers(-8, 8, (16, 16)) / 4).astype(np.float16)
    b = (rng.integers(-8, 8, (16, n)) / 4).astype(np.float16)
    c = np.zeros((16, n), np.float32)
    granted = [GlobalRange(x.ctypes.data, x.nbytes) for x in (a, b, c)] if checked else None
    k.launch((3,), (128,), 0, pack(k, a, b, c, n), allowed_ranges=granted)
    ref = a.astype(np.float32) @ b.astype(np.float32) + (np.arange(n) // 16 % 4)[None, :]
    np.testing.assert_array_equal(c, ref)
    # the hidden area is not the kernel's: only the user's 4 x 256 halves count
    assert k.static_shared_bytes == 2048


# m16n8k4 tf32 with fragments loaded by the ISA layout; the mma is predicated on %ctaid.x == 0, so block 1 keeps
# the 5.0 its D registers start with
PRED_MMA = (
    HEADER
    + """
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pout)
{
  .reg .b32 %r<16>; .reg .b64 %rd<16>; .reg .f32 %f<16>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [pa]; ld.param.u64 %rd2, [pb]; ld.param.u64 %rd3, [pout];
  mov.u32 %r1, %laneid; shr.u32 %r2, %r1, 2; and.b32 %r3, %r1, 3;
  shl.b32 %r4, %r2, 2; add.u32 %r4, %r4, %r3; mul.wide.u32 %rd4, %r4, 4; add.s64 %rd5, %rd1, %rd4;
  ld.global.b32 %r5, [%rd5]; ld.global.b32 %r6, [%rd5+128];
  shl.b32 %r7, %r3, 3; add.u32 %r7, %r7, %r2; mul.wide.u32 %rd6, %r7, 4; add.s64 %rd6, %rd2, %rd6;
  ld.global.b32 %r8, [%rd6];
  mov.f32 %f1, 0f40A00000; mov.f32 %f2, 0f40A00000; mov.f32 %f3, 0f40A00000; mov.f32 %f4, 0f40A00000;
  mov.f32 %f5, 0f00000000;
  mov.u32 %r9, %ctaid.x; setp.eq.u32 %p1, %r9, 0;
  @%p1 mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%f1, %f2, %f3, %f4}, {%r5, %r6}, {%r8}, {%f5, %f5, %f5, %f5};
  shl.b32 %r10, %r2, 3; shl.b32 %r11, %r3, 1; add.u32 %r10, %r10, %r11; mul.lo.u32 %r12, %r9, 128;
  add.u32 %r10, %r10, %r12; mul.wide.u32 %rd7, %r10, 4; add.s64 %rd7, %rd3, %rd7;
  st.global.f32 [%rd7], %f1; st.global.f32 [%rd7+4], %f2; st.global.f32 [%rd7+256], %f3; st.global.f32 [%rd7+260], %f4;
  ret;
}
"""
)


def _areas(ptx: str) -> dict[str, list[int]]:
    return {f.name: v.dims for f in front_end(ptx).functions for v in f.vars if v.name.startswith(SCRATCH)}


def test_area_per_warp_of_the_largest_block() -> None:
    # wmma.mma in the .func, called from an entry with .maxntid 128: 4 warps; f16 m16n16k16 needs (256 + 256)
    # f32 per warp. The entry only loads and stores fragments, which exchange nothing: no area of its own.
    assert list(_areas(MULTIWARP).values()) == [[4 * 2048]]
    # m16n8k4 tf32: (16 * 4 + 4 * 8) f32 per warp; .maxntid 64 -> 2 warps
    assert _areas(PRED_MMA) == {"k": [32 * 384]}
    assert _areas(
        PRED_MMA.replace(
            "(.param .u64 pa, .param .u64 pb, .param .u64 pout)",
            "(.param .u64 pa, .param .u64 pb, .param .u64 pout) .maxntid 64, 1, 1",
        )
    ) == {"k": [2 * 384]}


def test_predicated_mma_is_skipped_as_a_whole() -> None:
    m = compile_module(PRED_MMA)
    k = m.get_kernel("k")
    rng = np.random.default_rng(6)
    a = (rng.integers(-8, 8, (16, 4)) / 4).astype(np.float32)
    b = (rng.integers(-8, 8, (4, 8)) / 4).astype(np.float32)
    out = np.zeros((2, 16, 8), np.float32)
    k.launch((2,), (32,), 0, pack(k, a, b, out))
    np.testing.assert_array_equal(out[0], a @ b)
    np.testing.assert_array_equal(out[1], np.full((16, 8), 5.0, np.float32))


@pytest.mark.parametrize(
    "ins,what",
    [
        (
            "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%f1,%f2,%f3,%f4,%f5,%f6,%f7,%f8}, {%r1,%r2}, {%r3,%r4}, "
            "{%f1,%f2,%f3,%f4,%f5,%f6,%f7,%f8};",
            "shape .m8n8k4 with .f16",
        ),
        (
            "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6}, "
            "{%f1,%f2,%f3,%f4};",
            ".e4m3",
        ),
        ("wmma.load.a.sync.aligned.row.m8n8k128.b1 {%r1}, [%rd1], 128;", "m8n8k128"),
        ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r1, %r2}, [%rd1];", "ldmatrix"),
        (
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1,%f2,%f3}, {%r1,%r2,%r3,%r4}, {%r5,%r6}, "
            "{%f1,%f2,%f3,%f4};",
            "D fragment",
        ),
    ],
)
def test_unsupported_forms_are_not_supported_naming_them(ins: str, what: str) -> None:
    ptx = HEADER + (
        ".visible .entry k(.param .u64 p)\n{\n .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .f32 %f<10>;\n"
        f" ld.param.u64 %rd1, [p];\n {ins}\n ret;\n}}\n"
    )
    with pytest.raises(JitError) as ei:
        compile_module(ptx)
    assert ei.value.code == 801 and what in ei.value.message


@pytest.mark.parametrize(
    "ins,code,what",
    [
        (
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6};",
            218,
            "mma takes 4 operands, not 3",
        ),
        ("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1};", 218, "ldmatrix takes 2 operands, not 1"),
        ("wmma.load.sync.aligned.row.m16n16k16.global.f16 {%r1,%r2,%r3,%r4}, [%rd1], 16;", 801, "wmma.load"),
        ("wmma.store.a.sync.aligned.row.m16n16k16.global.f16 [%rd1], {%r1,%r2,%r3,%r4}, 16;", 801, "wmma.store"),
    ],
)
def test_malformed_warp_matrix_instructions_are_named(ins: str, code: int, what: str) -> None:
    ptx = HEADER + (
        ".visible .entry k(.param .u64 p)\n{\n .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .f32 %f<10>;\n"
        f" ld.param.u64 %rd1, [p];\n {ins}\n ret;\n}}\n"
    )
    with pytest.raises(JitError) as ei:
        compile_module(ptx)
    assert ei.value.code == code and what in ei.value.message and "internal" not in ei.value.message


@pytest.mark.skipif(not shutil.which("ld.lld"), reason="ld.lld not installed (Debian package lld)")
def test_amdgpu_code_object_with_wmma() -> None:
    m = compile_module(MULTIWARP, target="gfx90a")
    assert m.kernel_names == ["multiwarp"]
    assert m.code_object[:4] == b"\x7fELF"


@pytest.mark.skipif(not shutil.which("ld.lld"), reason="ld.lld not installed (Debian package lld)")
def test_amdgpu_lds_overflow_is_a_clear_error() -> None:
    # without .maxntid the area is sized for 32 warps: 32 x 2 KiB for the wmma m16n16k16 .func, plus the user's 2 KiB
    big = MULTIWARP.replace(".maxntid 128, 1, 1", "")
    with pytest.raises(JitError) as ei:
        compile_module(big, target="gfx90a")
    assert ei.value.code == 218 and "64 KiB LDS of gfx90a" in ei.value.message and "warp matrix" in ei.value.message
