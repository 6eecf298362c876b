"""Negative cases for the PTX JIT's error contract (see README.md):

- malformed PTX -> JitError code 218 CUDA_ERROR_INVALID_PTX, message carries `line:col`;
- a valid PTX instruction the JIT does not implement -> 801 CUDA_ERROR_NOT_SUPPORTED naming it;
- trap at run time -> 719 CUDA_ERROR_LAUNCH_FAILED (golden case nv_trap_launch_failed);
- unknown kernel name -> 500 CUDA_ERROR_NOT_FOUND (what cuModuleGetFunction returns).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CASES = Path(__file__).resolve().parent / "cases"
BASE = "nv_saxpy"


def _jit():
    jit = pytest.importorskip("jit", reason="jit package not importable")
    if not hasattr(jit, "compile_module"):
        pytest.skip("jit.compile_module not implemented yet")
    return jit


def _base() -> str:
    return (CASES / (BASE + ".ptx")).read_text()


def _expect(ptx: str, code: int):
    jit = _jit()
    with pytest.raises(jit.JitError) as ei:
        jit.compile_module(ptx)
    e = ei.value
    assert e.code == code, f"got {e.code} {e.name}: {e.message}"
    assert isinstance(e.message, str) and e.message
    return e


LINECOL = re.compile(r"\d+:\d+")


def test_base_compiles():
    jit = _jit()
    jit.compile_module(_base())


def test_truncated_ptx():
    ptx = _base()
    cut = ptx[: ptx.index("ld.param") + 40]  # stops in the middle of the kernel body
    e = _expect(cut, 218)
    assert LINECOL.search(e.message), e.message


def test_truncated_header_only():
    e = _expect(".version 8.8\n.target sm_80\n.address_size 64\n.visible .entry k(\n\t.param .u64 p\n", 218)
    assert LINECOL.search(e.message), e.message


def test_bad_opcode():
    ptx = _base()
    assert "fma.rn.f32" in ptx
    e = _expect(ptx.replace("fma.rn.f32", "fmz.rn.f32", 1), 218)
    assert LINECOL.search(e.message), e.message
    line = next(i for i, t in enumerate(ptx.splitlines(), 1) if "fma.rn.f32" in t)
    assert str(line) in e.message, f"error should point at line {line}: {e.message}"


def test_bad_operand_count():
    ptx = _base()
    m = re.search(r"fma\.rn\.f32\s+(%f\d+), (%f\d+), (%f\d+), (%f\d+);", ptx)
    assert m, "base PTX changed"
    bad = ptx.replace(m.group(0), f"fma.rn.f32 \t{m.group(1)}, {m.group(2)};", 1)
    e = _expect(bad, 218)
    assert LINECOL.search(e.message), e.message


def test_undeclared_register():
    ptx = _base()
    m = re.search(r"fma\.rn\.f32\s+(%f\d+), ", ptx)
    e = _expect(ptx.replace(m.group(0), "fma.rn.f32 \t%zz9, ", 1), 218)
    assert LINECOL.search(e.message), e.message


def test_garbage():
    _expect("this is not PTX at all {{{", 218)


def test_empty_module():
    jit = _jit()
    try:
        jit.compile_module("")
    except jit.JitError as e:  # CUDA rejects an empty image; either outcome is fine, but only as JitError
        assert e.code in (200, 218), e


UNSUPPORTED_TEX = r""".version 8.8
.target sm_80
.address_size 64
.global .texref tex_a;
.visible .entry tex_kernel(.param .u64 out)
{
  .reg .b32 %r<6>;
  .reg .b64 %rd<3>;
  mov.u32 %r5, %tid.x;
  tex.1d.v4.s32.s32 {%r1, %r2, %r3, %r4}, [tex_a, {%r5}];
  ld.param.u64 %rd1, [out];
  st.global.u32 [%rd1], %r1;
  ret;
}
"""


def test_unsupported_instruction_named():
    e = _expect(UNSUPPORTED_TEX, 801)
    assert "tex" in e.message, e.message


def test_missing_kernel_name():
    jit = _jit()
    mod = jit.compile_module(_base())
    with pytest.raises(jit.JitError) as ei:
        mod.get_kernel("no_such_kernel")
    assert ei.value.code == 500, ei.value
