"""alloca / stacksave / stackrestore (NOTE [dynamic stack], jit/passes/dynamic_stack.py): nvcc's PTX for alloca()
in device code (tests/unit/jit/ptx/alloca.cu) and hand-written PTX for the edges."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from jit import GlobalRange, JitError, compile_module
from jit.passes.dynamic_stack import STACK_BYTES
from tests.unit.jit.helpers import HEADER, PTX_DIR

PTX = (PTX_DIR / "alloca.ptx").read_text()  # from alloca.cu
CASES = [
    pytest.param(tier, checked, id=f"{tier}-{'checked' if checked else 'unchecked'}")
    for tier in ("quick", "optimized")
    for checked in (False, True)
]


def launch(m, name: str, block: int, params: bytes, *arrays: np.ndarray):  # type: ignore[no-untyped-def]
    kw = {"allowed_ranges": [GlobalRange(a.ctypes.data, a.nbytes) for a in arrays]} if m.bounds_check else {}
    return m.get_kernel(name).launch((1,), (block,), 0, params, **kw)


@pytest.mark.parametrize("tier,checked", CASES)
def test_nvcc_alloca_kernels(tier: str, checked: bool) -> None:
    m = compile_module(PTX, bounds_check=checked, tier=tier)
    n = 128
    x = np.random.default_rng(3).integers(0, 1000, n).astype(np.int32)
    out = np.zeros(n, np.int32)
    t = np.arange(n)
    # every thread's block holds its values across __syncthreads
    launch(m, "across_barrier", n, struct.pack("<QQ", x.ctypes.data, out.ctypes.data), x, out)
    assert out.tolist() == [t[j] * (x[j] & 15) * ((x[j] & 15) + 1) // 2 for j in range(n)]
    # a __noinline__ function allocating on each of its 3 calls
    launch(m, "per_call", n, struct.pack("<QQ", x.ctypes.data, out.ctypes.data), x, out)
    want = [sum(sum(i + j for i in range(((int(x[j]) + r) & 7) + 1)) for r in range(3)) for j in range(n)]
    assert out.tolist() == want
    # 64 rounds of 1000 bytes: only stacksave/stackrestore (.u32, through cvta.local) keep it within 4 KiB
    words = 250
    launch(m, "in_loop", n, struct.pack("<Qi", out.ctypes.data, words), out)
    assert out.tolist() == [sum(i ^ r ^ j for r in range(64) for i in range(words)) for j in range(n)]


@pytest.mark.parametrize("checked", [False, True])
def test_running_out_of_stack_is_a_launch_failure(checked: bool) -> None:
    m = compile_module(PTX, bounds_check=checked, tier="optimized")
    out = np.zeros(64, np.uint64)
    for n in (1, 100, STACK_BYTES):  # within the stack (all of it, for the first alloca): 16-aligned
        launch(m, "sized", 32, struct.pack("<QQ", out.ctypes.data, n), out)
        assert (out[1::2] % 16 == 0).all()  # (the kernel's -3 undoes what it read back: 1 + 2)
    for n in (STACK_BYTES + 1, 1 << 40, 2**64 - 8):  # too big, including sizes that wrap the address
        with pytest.raises(JitError) as ei:
            launch(m, "sized", 32, struct.pack("<QQ", out.ctypes.data, n), out)
        assert ei.value.name == "CUDA_ERROR_LAUNCH_FAILED" and "out of stack" in ei.value.message


ALIGN = (
    HEADER
    + """
.visible .entry k(.param .u64 out, .param .u64 n)
{
  .reg .b64 %rd<12>; .reg .b32 %r<3>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [n];
  stacksave.u64 %rd9;
  alloca.u64 %rd3, 3;
  alloca.u64 %rd4, %rd2, 256;
  alloca.u64 %rd5, 1, 1;
  stacksave.u64 %rd10;
  stackrestore.u64 %rd9;
  alloca.u64 %rd6, 8, 64;
  st.global.u64 [%rd1], %rd3; st.global.u64 [%rd1+8], %rd4; st.global.u64 [%rd1+16], %rd5;
  st.global.u64 [%rd1+24], %rd6; st.global.u64 [%rd1+32], %rd9; st.global.u64 [%rd1+40], %rd10;
  ret;
}
"""
)


@pytest.mark.parametrize("tier", ["quick", "optimized"])
def test_alignment_and_save_restore(tier: str) -> None:
    m = compile_module(ALIGN, tier=tier)
    out = np.zeros(6, np.uint64)
    m.get_kernel("k").launch((1,), (1,), 0, struct.pack("<QQ", out.ctypes.data, 40))
    a3, a4, a5, a6, saved, after = (int(v) for v in out)
    assert a3 % 8 == 0 and a3 >= saved  # the default alignment is 8
    assert a4 % 256 == 0 and a4 >= a3 + 3 and a4 - (a3 + 3) < 256
    assert a5 % 8 == 0 and a5 >= a4 + 40  # align 1 still gets the guaranteed 8
    assert after >= a5 + 1
    assert a6 % 64 == 0 and a6 - saved < 64  # after stackrestore the stack is reused from the saved point


@pytest.mark.parametrize(
    "src,code,words",
    [
        (".reg .b32 %r1; alloca.u32 %r1, 8;", "CUDA_ERROR_NOT_SUPPORTED", "alloca.u32"),
        (".reg .b64 %rd1; alloca.u64 %rd1, 8, 12;", "CUDA_ERROR_INVALID_PTX", "not a power of 2"),
        (".reg .b64 %rd<3>; alloca.u64 %rd1, 8, %rd2;", "CUDA_ERROR_INVALID_PTX", "integer constant"),
        (".reg .b64 %rd1; stacksave.b64 %rd1;", "CUDA_ERROR_INVALID_PTX", "one of .u32/.u64"),
        (".reg .b64 %rd1; stackrestore.u64 %rd1, %rd1;", "CUDA_ERROR_INVALID_PTX", "wrong operands"),
    ],
)
def test_bad_forms_are_named(src: str, code: str, words: str) -> None:
    with pytest.raises(JitError) as ei:
        compile_module(HEADER + f".visible .entry k() {{ {src} ret; }}", tier="quick")
    assert ei.value.name == code and words in ei.value.message
