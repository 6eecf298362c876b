"""Bounds checks that keep kernels fast and legal programs legal: rooted checks (NOTE [rooted bounds checks]) and the
per-thread .func frame stack (NOTE [checked .func stack])."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.jit.helpers import HEADER, pack

# NOTE [rooted bounds checks]: accesses derived from a pointer parameter are checked against that parameter's
# allocation (looked up once per launch), without a call, so checked thread loops still vectorise.
ROOTED = (
    HEADER
    + """
.visible .entry k(.param .u64 src, .param .u64 dst, .param .u32 n, .param .s32 shift)
{
  .reg .b32 %r<8>; .reg .b64 %rd<12>; .reg .f32 %f<4>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [src]; ld.param.u64 %rd2, [dst]; ld.param.u32 %r1, [n]; ld.param.s32 %r2, [shift];
  mov.u32 %r3, %tid.x; mov.u32 %r4, %ntid.x; mov.u32 %r5, %ctaid.x; mad.lo.s32 %r6, %r5, %r4, %r3;
  setp.ge.u32 %p1, %r6, %r1;
  @%p1 bra DONE;
  add.s32 %r7, %r6, %r2;
  mul.wide.s32 %rd3, %r7, 4; add.s64 %rd4, %rd1, %rd3;
  ld.global.f32 %f1, [%rd4];
  mul.wide.u32 %rd5, %r6, 4; add.s64 %rd6, %rd2, %rd5;
  st.global.f32 [%rd6], %f1;
DONE:
  ret;
}
"""
)


def _rooted_launch(src_ptr: int, dst: np.ndarray, n: int, shift: int, ranges: list) -> None:
    from jit import compile_module

    k = compile_module(ROOTED, bounds_check=True).get_kernel("k")
    assert k._bc_roots  # the accesses use the rooted check
    params = pack(k, 0, dst, n, shift)
    params = src_ptr.to_bytes(8, "little") + params[8:]
    k.launch((n + 63) // 64, 64, 0, params, allowed_ranges=ranges)


def test_rooted_bounds_check_allows_in_range_and_names_the_bad_address() -> None:
    from jit.errors import JitError

    n = 1000
    src = np.arange(n + 16, dtype=np.float32)
    dst = np.zeros(n, np.float32)
    ranges = [(src.ctypes.data, src.nbytes), (dst.ctypes.data, dst.nbytes)]
    _rooted_launch(src.ctypes.data, dst, n, 16, ranges)
    assert (dst == src[16:]).all()
    with pytest.raises(JitError) as ei:  # src[n + 17 ...]: past the end of src's allocation
        _rooted_launch(src.ctypes.data, dst, n, 17, ranges)
    assert ei.value.code == 700
    bad = int(ei.value.message.split("illegal address 0x")[1].split()[0], 16)
    assert src.ctypes.data + src.nbytes <= bad < src.ctypes.data + src.nbytes + 64 * 4


def test_rooted_bounds_check_one_past_the_end_base_and_null() -> None:
    from jit.errors import JitError

    n = 256
    src = np.arange(n, dtype=np.float32)
    dst = np.zeros(n, np.float32)
    ranges = [(src.ctypes.data, src.nbytes), (dst.ctypes.data, dst.nbytes)]
    _rooted_launch(src.ctypes.data + src.nbytes, dst, n, -n, ranges)  # base one past the end, negative indices
    assert (dst == src).all()
    with pytest.raises(JitError) as ei:  # a null parameter that is dereferenced
        _rooted_launch(0, dst, n, 0, ranges)
    assert ei.value.code == 700
    assert int(ei.value.message.split("illegal address 0x")[1].split()[0], 16) < 64 * 4  # in the null page


def test_rooted_bounds_check_in_a_barrier_kernel_fails_cleanly() -> None:
    """A failing thread leaves the block; the others pass the barrier; the launch reports 700 (no hang)."""
    from jit import compile_module
    from jit.errors import JitError

    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 a, .param .u32 limit)
{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  .shared .align 4 .b32 s[256];
  ld.param.u64 %rd1, [a]; ld.param.u32 %r1, [limit];
  mov.u32 %r2, %tid.x;
  mul.wide.u32 %rd2, %r2, 4; add.s64 %rd3, %rd1, %rd2;
  ld.global.u32 %r3, [%rd3];
  mov.u32 %r5, s; add.u32 %r6, %r5, %r2; mul.lo.u32 %r6, %r2, 4; add.u32 %r6, %r6, %r5;
  st.shared.u32 [%r6], %r3;
  bar.sync 0;
  st.global.u32 [%rd3], %r3;
  ret;
}
"""
    )
    k = compile_module(ptx, bounds_check=True).get_kernel("k")
    a = np.arange(256, dtype=np.uint32)
    k.launch(1, 256, 0, pack(k, a, 0), allowed_ranges=[(a.ctypes.data, a.nbytes)])
    with pytest.raises(JitError) as ei:
        k.launch(1, 256, 0, pack(k, a, 0), allowed_ranges=[(a.ctypes.data, 128 * 4)])
    assert ei.value.code == 700


# NOTE [checked .func stack]: with bounds checking on, a non-inlined .func's .local frame comes from the thread's
# registered area (generic pointers to it pass the check); overflowing it is a launch failure, not a crash.
FUNC_LOCAL = (
    HEADER
    + """
.func (.param .b32 r) f(.param .b32 x)
{
  .local .align 4 .b8 buf[16];
  .reg .b32 %r<4>; .reg .b64 %rd<4>;
  ld.param.b32 %r1, [x];
  mov.u64 %rd1, buf; cvta.local.u64 %rd2, %rd1;
  st.u32 [%rd2], %r1; st.u32 [%rd2+4], %r1;
  ld.u32 %r2, [%rd2+4]; add.u32 %r3, %r2, 1;
  st.param.b32 [r], %r3;
  ret;
}
.func (.param .b32 r) deep(.param .b32 n)
{
  .local .align 8 .b8 pad[256];
  .reg .b32 %r<6>; .reg .b64 %rd<4>; .reg .pred %p<2>;
  ld.param.b32 %r1, [n];
  mov.u64 %rd1, pad; cvta.local.u64 %rd2, %rd1; st.u32 [%rd2+252], %r1;
  setp.eq.u32 %p1, %r1, 0;
  mov.u32 %r4, 0;
  @%p1 bra DONE;
  sub.u32 %r2, %r1, 1;
  {
  .param .b32 a0; st.param.b32 [a0], %r2;
  .param .b32 r0;
  call.uni (r0), deep, (a0);
  ld.param.b32 %r3, [r0];
  }
  ld.u32 %r5, [%rd2+252]; add.u32 %r4, %r3, %r5;
DONE:
  st.param.b32 [r], %r4;
  ret;
}
.visible .entry k(.param .u64 out, .param .u32 depth)
{
  .reg .b32 %r<8>; .reg .b64 %rd<4>;
  mov.u32 %r1, %tid.x;
  ld.param.u32 %r6, [depth];
  {
  .param .b32 a0; st.param.b32 [a0], %r1;
  .param .b32 r0;
  call.uni (r0), f, (a0);
  ld.param.b32 %r2, [r0];
  }
  {
  .param .b32 a1; st.param.b32 [a1], %r6;
  .param .b32 r1;
  call.uni (r1), deep, (a1);
  ld.param.b32 %r3, [r1];
  }
  add.u32 %r4, %r2, %r3;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r4;
  ret;
}
"""
)


def test_func_locals_under_bounds_check_and_stack_overflow() -> None:
    from jit import compile_module
    from jit.errors import JitError

    k = compile_module(FUNC_LOCAL, bounds_check=True).get_kernel("k")
    assert k._func_stack > 0
    out = np.zeros(64, np.uint32)
    ranges = [(out.ctypes.data, out.nbytes)]
    k.launch(2, 32, 0, pack(k, out, 5), allowed_ranges=ranges)  # two blocks write the same 32 words
    assert out[:32].tolist() == [t + 1 + 15 for t in range(32)]  # f: t + 1; deep(5): 5+4+3+2+1
    with pytest.raises(JitError) as ei:  # 1000 frames of 256 bytes do not fit: a launch failure
        k.launch(1, 32, 0, pack(k, out, 1000), allowed_ranges=ranges)
    assert ei.value.code == 719
    unchecked = compile_module(FUNC_LOCAL).get_kernel("k")  # the native stack, as before
    out[:] = 0
    unchecked.launch(1, 32, 0, pack(unchecked, out, 5))
    assert out[:32].tolist() == [t + 1 + 15 for t in range(32)]


def test_func_frame_honours_local_align_under_bounds_check() -> None:
    """A .func's frame on the checked frame stack starts at its largest .local .align."""
    from jit import compile_module

    ptx = (
        HEADER
        + """
.func (.param .b64 r) f()
{
  .local .align 64 .b8 buf[8];
  .reg .b64 %rd<3>;
  mov.u64 %rd1, buf; cvta.local.u64 %rd2, %rd1;
  st.u64 [%rd2], %rd2;
  st.param.b64 [r], %rd2;
  ret;
}
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<2>; .reg .b64 %rd<6>;
  mov.u32 %r1, %tid.x;
  {
  .param .b64 r0;
  call.uni (r0), f, ();
  ld.param.b64 %rd1, [r0];
  }
  ld.param.u64 %rd2, [out]; mul.wide.u32 %rd3, %r1, 8; add.s64 %rd4, %rd2, %rd3;
  st.global.u64 [%rd4], %rd1;
  ret;
}
"""
    )
    k = compile_module(ptx, bounds_check=True).get_kernel("k")
    assert k._func_stack > 0
    out = np.zeros(8, np.uint64)
    k.launch(1, 8, 0, pack(k, out), allowed_ranges=[(out.ctypes.data, out.nbytes)])
    assert all(int(a) % 64 == 0 and int(a) != 0 for a in out), [hex(int(a)) for a in out]
