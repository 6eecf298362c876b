"""AMDGPU code objects: built through the same front end, inspected with llvm-readelf (they cannot run here)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from jit import JitError, compile_module
from tests.unit.jit.helpers import HEADER

LLD = shutil.which("ld.lld") or shutil.which("ld.lld-14")
READELF = shutil.which("llvm-readelf") or shutil.which("llvm-readelf-14")
pytestmark = pytest.mark.skipif(LLD is None, reason="ld.lld not installed (Debian package lld)")

PTX = (
    HEADER
    + """
.visible .entry blocksum(.param .u64 x, .param .u64 out, .param .u32 n)
{
  .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .f32 %f<6>; .reg .pred %p<3>;
  .shared .align 4 .f32 sm[32];
  mov.u32 %r0, %tid.x; mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mad.lo.u32 %r3, %r1, %r2, %r0;
  ld.param.u32 %r4, [n]; mov.f32 %f1, 0f00000000;
  setp.ge.u32 %p1, %r3, %r4; @%p1 bra SKIP;
  ld.param.u64 %rd1, [x]; mul.wide.u32 %rd2, %r3, 4; add.s64 %rd3, %rd1, %rd2; ld.global.f32 %f1, [%rd3];
SKIP:
  mov.b32 %r5, %f1;
  shfl.sync.bfly.b32 %r6|%p2, %r5, 16, 31, -1; mov.b32 %f2, %r6; add.f32 %f1, %f1, %f2;
  vote.sync.ballot.b32 %r7, %p2, -1;
  and.b32 %r8, %r0, 31; setp.ne.u32 %p1, %r8, 0; @%p1 bra NOSTORE;
  shr.u32 %r9, %r0, 5; mul.wide.u32 %rd4, %r9, 4; mov.u64 %rd5, sm; add.s64 %rd5, %rd5, %rd4;
  st.shared.f32 [%rd5], %f1;
NOSTORE:
  bar.sync 0;
  setp.ne.u32 %p1, %r0, 0; @%p1 bra DONE;
  ld.shared.f32 %f3, [sm]; ld.param.u64 %rd6, [out]; mul.wide.u32 %rd7, %r1, 4; add.s64 %rd6, %rd6, %rd7;
  st.global.f32 [%rd6], %f3;
DONE:
  ret;
}
"""
)


@pytest.mark.parametrize("arch,wave", [("gfx90a", 64), ("gfx942", 64), ("gfx1100", 32)])
def test_code_object(arch: str, wave: int) -> None:
    m = compile_module(PTX, target=arch)
    assert m.arch == arch and m.wavefront_size == wave and m.kernel_names == ["blocksum"]
    k = m.get_kernel("blocksum")
    assert [p.offset for p in k.params] == [0, 8, 16] and k.param_buffer_size == 20
    assert k.descriptor == "blocksum.kd"
    obj = m.code_object
    assert obj[:4] == b"\x7fELF" and int.from_bytes(obj[18:20], "little") == 224  # EM_AMDGPU
    with pytest.raises(JitError) as ei:
        k.launch(1, 32)
    assert ei.value.code == 801
    if READELF is None:
        pytest.skip("llvm-readelf not installed")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.hsaco"
        p.write_bytes(obj)
        out = subprocess.run(
            [READELF, "--notes", "--symbols", "--file-header", str(p)], capture_output=True, text=True, check=True
        ).stdout
    assert "blocksum.kd" in out
    assert f"amdgcn-amd-amdhsa--{arch}" in out
    assert f".wavefront_size: {wave}" in out
    assert ".group_segment_fixed_size: 128" in out  # the 32-float shared array
    assert ".kernarg_segment_size: 24" in out  # CUDA param buffer (20 bytes) in 8-byte kernargs
    assert "DYN" in out  # a shared object, as the HSA loader wants


def test_unknown_arch() -> None:
    with pytest.raises(JitError) as ei:
        compile_module(PTX, target="gfx803")
    assert ei.value.code == 801
