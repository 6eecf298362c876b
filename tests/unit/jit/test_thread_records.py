"""Thread record layout (NOTE [thread records], jit/emit/cpu/records.py): fixed for the kernel's largest block when small
enough, else sized per launch; both keep every thread's registers across a barrier."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.jit.helpers import HEADER, module, pack


def live_across_barrier(nregs: int, maxntid: int = 0) -> str:
    """out[t] = sum of nregs values loaded before a barrier and summed after it (all live across it)."""
    loads = "".join(f"ld.global.u64 %v{j}, [%rd3+{8 * j}];\n" for j in range(nregs))
    sums = "".join(f"add.u64 %acc, %acc, %v{j};\n" for j in range(nregs))
    limit = f".maxntid {maxntid}, 1, 1" if maxntid else ""
    return (
        HEADER
        + f"""
.visible .entry lr(.param .u64 x, .param .u64 out) {limit}
{{
  .reg .b32 %r<4>; .reg .b64 %rd<8>; .reg .b64 %v<{nregs}>; .reg .b64 %acc;
  mov.u32 %r1, %tid.x; mul.wide.u32 %rd1, %r1, {8 * nregs}; ld.param.u64 %rd2, [x]; add.s64 %rd3, %rd2, %rd1;
  {loads}
  bar.sync 0;
  mov.u64 %acc, 0;
  {sums}
  mul.wide.u32 %rd4, %r1, 8; ld.param.u64 %rd5, [out]; add.s64 %rd6, %rd5, %rd4; st.global.u64 [%rd6], %acc;
  ret;
}}
"""
    )


@pytest.mark.parametrize("nregs,maxntid,fixed", [(4, 0, 1024), (4, 64, 64), (48, 0, 0), (48, 96, 96)])
def test_record_layout_and_values(nregs: int, maxntid: int, fixed: int) -> None:
    k = module(live_across_barrier(nregs, maxntid)).get_kernel("lr")
    assert k._code.rec_threads == fixed  # 48 registers x 1024 threads: over FIXED_RECORDS_MAX, laid out per launch
    for nt in (1, 37, maxntid or 256):
        x = np.arange(nt * nregs, dtype=np.uint64) * 3 + 1
        out = np.zeros(nt, np.uint64)
        k.launch((2,), (nt,), 0, pack(k, x, out))
        assert (out == x.reshape(nt, nregs).sum(axis=1)).all()
