"""NOTE [modifier table] (jit/lower/modifiers.py): a modifier the lowering of its instruction does not implement is
CUDA_ERROR_NOT_SUPPORTED naming it, where it used to be dropped (a silently wrong result)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jit.errors import JitError
from jit.lower.modifiers import ALLOWED
from jit.lower.types import TYPE_NAMES
from jit.pipeline import translate
from jit.ptx import ast as A
from jit.ptx.parser import parse
from tests.unit.jit.helpers import HEADER


def _kernel(line: str) -> str:
    return (
        HEADER
        + f"""
.visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .f32 %f<4>; .reg .b16 %h<4>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, 3; mov.f32 %f1, 0f3F800000; mov.b16 %h1, 0x3F80;
  {line}
  st.global.u32 [%rd1], %r3;
  ret;
}}
"""
    )


@pytest.mark.parametrize(
    "line,mod",
    [
        ("mad24.hi.sat.s32 %r3, %r1, %r2, %r1;", "sat"),  # the saturation of mad24 is not implemented
        ("fma.rn.oob.bf16 %h2, %h1, %h1, %h1;", "oob"),  # sm_90's out-of-bounds-as-zero
        ("add.relu.s32 %r3, %r1, %r2;", "relu"),  # not PTX at all
        ("ld.global.unified.u32 %r3, [%rd1];", "unified"),
        ("shl.wrap.b32 %r3, %r1, 2;", "wrap"),
        ("cvt.rni.sat.f32.f32 %f2, %f1;\n  cvt.rzi.frobnicate.u32.f32 %r3, %f2;", "frobnicate"),
    ],
)
def test_unimplemented_modifiers_are_named(line: str, mod: str) -> None:
    with pytest.raises(JitError) as ei:
        translate(_kernel(line), "cpu", False, "t")
    assert ei.value.code == 801
    assert f"modifier '.{mod}'" in ei.value.message and str(ei.value.message).count(mod) >= 2


@pytest.mark.parametrize(
    "line",
    [
        "mad24.hi.s32 %r3, %r1, %r2, %r1;",
        "ld.global.nc.ca.u32 %r3, [%rd1];",
        "ld.relaxed.gpu.global.u32 %r3, [%rd1];",
        "atom.global.acq_rel.gpu.add.u32 %r3, [%rd1], 1;",
        "min.NaN.xorsign.abs.f32 %f2, %f1, %f1;\n  mov.b32 %r3, %f2;",
        "shf.l.wrap.b32 %r3, %r1, %r2, %r1;",
        "cvt.rn.satfinite.relu.f16.f32 %h2, %f1;\n  cvt.u32.u16 %r3, %h2;",
        "setp.gtu.and.ftz.f32 %p1, %f1, %f1, %p1;\n  selp.u32 %r3, 1, 0, %p1;",
    ],
)
def test_implemented_modifiers_pass(line: str) -> None:
    translate(_kernel(line), "cpu", False, "t")


def test_every_corpus_modifier_is_in_the_table() -> None:
    """The golden corpus (numba-cuda, NVRTC and nvcc output) uses only modifiers its instructions implement."""
    root = Path(__file__).parents[2] / "jit_golden" / "cases"
    seen: dict[str, set[str]] = {}
    for p in sorted(root.glob("*.ptx")):
        for fn in parse(p.read_text()).functions:
            for st in fn.body or []:
                if isinstance(st, A.Instr) and st.opcode in ALLOWED:
                    seen.setdefault(st.opcode, set()).update(
                        m for m in st.mods if m not in TYPE_NAMES and "::" not in m
                    )
    assert len(seen) > 30
    missing = {op: sorted(ms - ALLOWED[op]) for op, ms in seen.items() if ms - ALLOWED[op]}
    assert not missing, json.dumps(missing)
