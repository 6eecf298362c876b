"""NOTE [reserved shared memory] (jit/passes/special_regs.py): %reserved_smem_offset_* name a per-block region."""

from __future__ import annotations

import struct

import numpy as np

import jit

PTX = """
.version 7.8
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<6>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %reserved_smem_offset_1;
    mov.u32 %r3, %reserved_smem_offset_begin;
    mov.u32 %r4, %reserved_smem_offset_cap;
    cvt.u64.u32 %rd1, %r2;
    cvta.shared.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    add.s32 %r5, %r1, 100;
    st.u32 [%rd4], %r5;
    bar.sync 0;
    xor.b32 %r6, %r1, 1;
    mul.wide.u32 %rd3, %r6, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.u32 %r7, [%rd4];
    ld.param.u64 %rd5, [out];
    cvta.to.global.u64 %rd5, %rd5;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd5, %rd5, %rd3;
    st.global.u32 [%rd5], %r7;
    setp.eq.u32 %p1, %r1, 0;
    ret;
}
"""


def test_reserved_region_is_block_shared_memory() -> None:
    ptx = PTX.replace("    setp.eq.u32 %p1, %r1, 0;\n", "")
    mod = jit.compile_module(ptx)
    out = np.zeros(64, np.uint32)
    mod.get_kernel("k").launch((2, 1, 1), (64, 1, 1), params=struct.pack("<Q", out.ctypes.data))
    assert (out == (np.arange(64) ^ 1) + 100).all()  # each thread read its neighbour's word through the region
