"""The NVIDIA backend on real hardware (skipped without a GPU)."""

from __future__ import annotations

import pytest

from gpud.backends import nvidia

pytestmark = pytest.mark.gpu

backends = nvidia.available()
if not backends:
    pytest.skip("no NVIDIA GPU on this machine", allow_module_level=True)

SAXPY = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry saxpy(.param .u64 x, .param .u64 y, .param .f32 a, .param .u32 n)
{
  .reg .pred %p; .reg .b32 %r<6>; .reg .f32 %f<4>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [x]; ld.param.u64 %rd2, [y]; ld.param.f32 %f1, [a]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x; mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p, %r5, %r1; @%p bra DONE;
  mul.wide.u32 %rd3, %r5, 4; add.s64 %rd4, %rd1, %rd3; add.s64 %rd5, %rd2, %rd3;
  ld.global.f32 %f2, [%rd4]; ld.global.f32 %f3, [%rd5]; fma.rn.f32 %f3, %f1, %f2, %f3; st.global.f32 [%rd5], %f3;
DONE:
  ret;
}
"""


def test_saxpy_on_gpu():
    import struct

    import numpy as np

    b = backends[0]
    n = 1 << 16
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    ax, ay = b.alloc(4 * n), b.alloc(4 * n)
    b.copyin(ax.addr, x.tobytes())
    b.copyin(ay.addr, y.tobytes())
    mod = b.load_module(SAXPY, "ptx")
    fn = b.get_function(mod, "saxpy")
    assert [p.offset for p in fn.params] == [0, 8, 16, 20]
    b.launch(fn, (n // 256, 1, 1), (256, 1, 1), 0, struct.pack("<QQfI", ax.addr, ay.addr, 2.0, n))
    out = np.frombuffer(b.copyout(ay.addr, 4 * n), dtype=np.float32)
    assert np.array_equal(out, 2 * x + 1)
