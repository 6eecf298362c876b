"""Every state space is bounds-checked in a checked module (NOTE [state space checks], jit/emit/bounds.py), and
.func recursion is bounded (NOTE [bounded recursion], jit/emit/cpu/func.py): a register holding another tenant's
address reaches nothing through .shared, .local, .const or .param, and a wild address is
CUDA_ERROR_ILLEGAL_ADDRESS for the launch, never a host fault. Each kernel runs in the test process; before these
checks most of them read or wrote the "secret" buffer, and the wild .local store and the recursion killed the
process with SIGSEGV."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from jit import compile_module
from jit.errors import JitError
from tests.unit.jit.helpers import HEADER

ILLEGAL_ADDRESS, LAUNCH_FAILED, INVALID_PTX = 700, 719, 218

SIG = ".visible .entry k(.param .u64 p, .param .u64 o)"
WILD = {  # each reads or writes through the address in p (the secret's), or an address made up outright
    "ld.shared": "ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [o]; ld.shared.u32 %r1, [%rd1]; st.global.u32 [%rd2], %r1;",
    "st.shared": "ld.param.u64 %rd1, [p]; mov.u32 %r1, 7; st.shared.u32 [%rd1], %r1;",
    "ld.shared, negative offset": "mov.u64 %rd1, -16; ld.shared.u32 %r1, [%rd1]; ld.param.u64 %rd2, [o]; st.global.u32 [%rd2], %r1;",
    "atom.shared": "ld.param.u64 %rd1, [p]; atom.shared.add.u32 %r1, [%rd1], 5;",
    "ld.local": "ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [o]; ld.local.u32 %r1, [%rd1]; st.global.u32 [%rd2], %r1;",
    "st.local": "ld.param.u64 %rd1, [p]; mov.u32 %r1, 7; st.local.u32 [%rd1], %r1;",
    "st.local to 0x40": "mov.u64 %rd1, 64; mov.u32 %r1, 7; st.local.u32 [%rd1], %r1;",
    "ld.const": "ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [o]; ld.const.u32 %r1, [%rd1]; st.global.u32 [%rd2], %r1;",
    "ld.param through a register": "ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [o]; ld.param.u32 %r1, [%rd1]; st.global.u32 [%rd2], %r1;",
    "st.shared past a symbol": "mov.u32 %r1, 7; st.shared.u32 [s+1048576], %r1;",
    "cp.async into a wild shared address": "ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [o]; cp.async.ca.shared.global [%rd1], [%rd2], 4;",
}


def _run(body: str, funcs: str = "") -> tuple[np.ndarray, np.ndarray]:
    secret = np.full(16, 0x1234, dtype=np.uint32)
    out = np.zeros(4, dtype=np.uint32)
    ptx = (
        HEADER
        + funcs
        + SIG
        + "\n{ .reg .b64 %rd<4>; .reg .b32 %r<3>; .shared .align 4 .b32 s[4];\n"
        + body
        + "\n ret; }\n"
    )
    k = compile_module(ptx, bounds_check=True).get_kernel("k")
    params = struct.pack("<QQ", secret.ctypes.data, out.ctypes.data)
    try:
        k.launch(1, 1, 0, params, allowed_ranges=[(out.ctypes.data, out.nbytes)])
    finally:
        assert (secret == 0x1234).all(), "the other tenant's memory was written"
        assert (out == 0).all(), "the other tenant's memory was read"
    return secret, out


@pytest.mark.parametrize("case", sorted(WILD))
def test_wild_state_space_access_is_an_illegal_address(case: str) -> None:
    with pytest.raises(JitError) as ei:
        _run(WILD[case])
    assert ei.value.code == ILLEGAL_ADDRESS, ei.value.message


@pytest.mark.parametrize(
    "body",
    [
        "mov.u32 %r1, 7; st.local.u32 [buf+4096], %r1;",
        "ld.param.u32 %r1, [p+64];",
    ],
)
def test_symbol_access_past_a_frame_variable_is_invalid_ptx(body: str) -> None:
    """[sym+imm] past a .local or .param variable's size: refused when compiled, with its line."""
    ptx = HEADER + SIG + "\n{ .reg .b32 %r<3>; .local .align 4 .b8 buf[16];\n" + body + "\n ret; }\n"
    with pytest.raises(JitError) as ei:
        compile_module(ptx, bounds_check=True)
    assert ei.value.code == INVALID_PTX
    assert "outside" in ei.value.message and ":" in ei.value.message


def test_in_window_accesses_are_unchanged() -> None:
    """Register offsets inside the window, dynamic shared memory past the static part, .local through cvta and
    a register: all still legal (and still checked)."""
    ptx = (
        HEADER
        + """
.extern .shared .align 16 .b8 dyn[];
.visible .entry k(.param .u64 o)
{
  .reg .b64 %rd<8>; .reg .b32 %r<8>; .shared .align 4 .b32 s[32]; .local .align 8 .b8 buf[64];
  mov.u32 %r1, %tid.x; shl.b32 %r2, %r1, 2;
  mov.u32 %r3, s; add.u32 %r4, %r3, %r2; st.shared.u32 [%r4], %r1;
  mov.u32 %r5, dyn; add.u32 %r5, %r5, 1020; st.shared.u32 [%r5], %r1;
  bar.sync 0;
  ld.shared.u32 %r6, [%r4]; ld.shared.u32 %r7, [%r5]; add.u32 %r6, %r6, %r7;
  mov.u64 %rd1, buf; add.u64 %rd1, %rd1, 56; st.local.u32 [%rd1], %r6; ld.local.u32 %r6, [%rd1];
  ld.param.u64 %rd2, [o]; cvta.to.global.u64 %rd2, %rd2; mul.wide.u32 %rd3, %r1, 4; add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r6;
  ret;
}
"""
    )
    k = compile_module(ptx, bounds_check=True).get_kernel("k")
    out = np.zeros(32, dtype=np.uint32)
    k.launch(1, 32, 1024, struct.pack("<Q", out.ctypes.data), allowed_ranges=[(out.ctypes.data, out.nbytes)])
    last = 31  # every thread stored its tid at dyn+1020: the last one there wins, as on a GPU, after the barrier
    assert out[0] in range(0, 32 + last + 1)
    assert all(out[t] - t == out[0] for t in range(32))
    # the same kernel with 1020 + 4 bytes of a window of 800 dynamic bytes (128 static + 800, 1024 in whole units)
    with pytest.raises(JitError) as ei:
        k.launch(1, 32, 800, struct.pack("<Q", out.ctypes.data), allowed_ranges=[(out.ctypes.data, out.nbytes)])
    assert ei.value.code == ILLEGAL_ADDRESS


RECURSE = """
.func f(.param .u32 a)
{
  .reg .b32 %r<3>;
  ld.param.u32 %r1, [a]; add.u32 %r1, %r1, 1;
  { .param .u32 b; st.param.u32 [b], %r1; call f, (b); }
  ret;
}
"""


def test_endless_recursion_is_a_launch_failure() -> None:
    """A .func without locals that calls itself forever: the native stack bound (NOTE [bounded recursion])."""
    with pytest.raises(JitError) as ei:
        _run("mov.u32 %r1, 0; { .param .u32 b; st.param.u32 [b], %r1; call f, (b); }", RECURSE)
    assert ei.value.code == LAUNCH_FAILED
    assert "recursion" in ei.value.message


def test_bounded_recursion_still_runs() -> None:
    ptx = (
        HEADER
        + """
.func (.param .u32 r) fact(.param .u32 n)
{
  .reg .b32 %r<5>; .reg .pred %p;
  ld.param.u32 %r1, [n]; setp.le.u32 %p, %r1, 1; mov.u32 %r4, 1; @%p bra DONE;
  sub.u32 %r2, %r1, 1;
  { .param .u32 a; .param .u32 b; st.param.u32 [a], %r2; call (b), fact, (a); ld.param.u32 %r3, [b]; }
  mul.lo.u32 %r4, %r3, %r1;
DONE:
  st.param.u32 [r], %r4; ret;
}
.visible .entry k(.param .u64 o)
{
  .reg .b32 %r<3>; .reg .b64 %rd<2>;
  mov.u32 %r1, 12;
  { .param .u32 a; .param .u32 b; st.param.u32 [a], %r1; call (b), fact, (a); ld.param.u32 %r2, [b]; }
  ld.param.u64 %rd1, [o]; st.global.u32 [%rd1], %r2; ret;
}
"""
    )
    k = compile_module(ptx, bounds_check=True).get_kernel("k")
    out = np.zeros(1, dtype=np.uint32)
    k.launch(1, 1, 0, struct.pack("<Q", out.ctypes.data), allowed_ranges=[(out.ctypes.data, out.nbytes)])
    assert out[0] == 479001600


def test_cp_async_src_size_is_bounded_by_cp_size() -> None:
    """cp.async's src-size from a register cannot make the copy read past cp-size bytes."""
    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 src, .param .u64 o, .param .u32 n)
{
  .reg .b64 %rd<4>; .reg .b32 %r<4>; .shared .align 16 .b8 s[64];
  ld.param.u64 %rd1, [src]; ld.param.u64 %rd2, [o]; ld.param.u32 %r1, [n];
  mov.u32 %r2, s; cp.async.ca.shared.global [%r2], [%rd1], 16, %r1; cp.async.wait_all;
  ld.shared.v4.u32 {%r0, %r1, %r2, %r3}, [s+16];
  st.global.u32 [%rd2], %r0;
  ret;
}
""".replace("%r<4>", "%r<4>; .reg .b32 %r0")
    )
    k = compile_module(ptx, bounds_check=True).get_kernel("k")
    src = np.arange(32, dtype=np.uint32) + 1
    out = np.zeros(1, dtype=np.uint32)
    ranges = [(src.ctypes.data, 16), (out.ctypes.data, 4)]  # only the first 16 bytes of src are the tenant's
    k.launch(1, 1, 0, struct.pack("<QQI", src.ctypes.data, out.ctypes.data, 1 << 20), allowed_ranges=ranges)
    assert out[0] == 0  # s[16..] was never written: the copy stopped at 16 bytes


PRINTF = """
.extern .func (.param .b32 r) vprintf(.param .b64 f, .param .b64 a);
.global .align 1 .b8 fmt[6] = {37, 115, 32, 37, 100, 0};
.visible .entry k(.param .u64 p, .param .u64 s)
{
  .reg .b64 %rd<6>; .reg .b32 %r<3>; .local .align 8 .b8 buf[16];
  ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [s];
  mov.u64 %rd3, buf; st.local.u64 [%rd3], %rd2; mov.u32 %r1, 42; st.local.u32 [%rd3+8], %r1;
  cvta.local.u64 %rd4, %rd3;
  { .param .b64 f; .param .b64 a; .param .b32 r; st.param.b64 [f], %rd1; st.param.b64 [a], %rd4;
    call.uni (r), vprintf, (f, a); ld.param.b32 %r2, [r]; }
  ret;
}
"""


def test_printf_reads_only_the_tenants_memory() -> None:
    """NOTE [checked host services]: the format and %s strings are device pointers, checked like any access (a
    mutated format pointer made gpud's printf read 0x7f1c and die)."""
    m = compile_module(HEADER + PRINTF, bounds_check=True)
    k = m.get_kernel("k")
    fmt = m.get_global("fmt").address if hasattr(m, "get_global") else m.globals["fmt"].address
    mine = np.frombuffer(b"mine\0", dtype=np.uint8).copy()
    secret = np.frombuffer(b"secret\0", dtype=np.uint8).copy()
    ranges = [(mine.ctypes.data, mine.nbytes)]
    res = k.launch(1, 1, 0, struct.pack("<QQ", fmt, mine.ctypes.data), allowed_ranges=ranges)
    assert res.printf == "mine 42"
    for f, s in ((fmt, secret.ctypes.data), (0x7F1C, mine.ctypes.data), (secret.ctypes.data, mine.ctypes.data)):
        with pytest.raises(JitError) as ei:
            k.launch(1, 1, 0, struct.pack("<QQ", f, s), allowed_ranges=ranges)
        assert ei.value.code == ILLEGAL_ADDRESS
        assert "secret" not in getattr(ei.value, "printf", "")


def _shared_through(offset_of_register: int, imm: int) -> int:
    """Store 42 at s[25] (byte 100), then load through a register ``offset_of_register`` bytes from the start of the
    256-byte window and the immediate ``imm``; the loaded word, written to the output."""
    out = np.zeros(4, dtype=np.uint32)
    ptx = (
        HEADER
        + SIG
        + "\n{ .reg .b64 %rd<4>; .reg .b32 %r<4>; .shared .align 4 .b32 s[64];\n"
        + "mov.u32 %r1, 42; st.shared.u32 [s+100], %r1; bar.sync 0;\n"
        + f"mov.u32 %r2, s; add.u32 %r2, %r2, {offset_of_register}; ld.shared.u32 %r3, [%r2+{imm}];\n"
        + "ld.param.u64 %rd2, [o]; st.global.u32 [%rd2], %r3;\n ret; }\n"
    )
    k = compile_module(ptx, bounds_check=True).get_kernel("k")
    k.launch(1, 1, 0, struct.pack("<QQ", 0, out.ctypes.data), allowed_ranges=[(out.ctypes.data, out.nbytes)])
    return int(out[0])


@pytest.mark.parametrize(("reg", "imm"), [(256 + 1000, -1156), (-1000, 1100), (256 + 3000, -3156)])
def test_a_register_outside_the_window_with_an_offset_back_into_it_is_legal(reg: int, imm: int) -> None:
    """CUB's radix sort addresses its staged keys as [%r-46080] ... [%r-3072] with %r past its shared window's end
    (NOTE [confined windows]); such an access lies inside the window and must not be an illegal address."""
    assert _shared_through(reg, imm) == 42


@pytest.mark.parametrize(("reg", "imm"), [(256 + 5000, -100), (-6000, 8), (100, 9000), (256 + 4000, -5000)])
def test_a_shared_access_far_outside_the_window_is_still_an_illegal_address(reg: int, imm: int) -> None:
    with pytest.raises(JitError) as ei:
        _shared_through(reg, imm)
    assert ei.value.code == ILLEGAL_ADDRESS, ei.value.message


def test_shared_memory_comes_in_allocation_units() -> None:
    """A read past the dynamic bytes a launch asked for, inside the 128-byte unit a GPU allocates, is legal:
    numba reads `dynsmem[0:7]` of a 28-byte window as two 16-byte vectors (test_sm.py::test_dynshared_slice_gaps)."""
    ptx = (
        HEADER
        + """
.extern .shared .align 16 .b8 dyn[];
.visible .entry k(.param .u64 o)
{
  .reg .b64 %rd<4>; .reg .b32 %r<12>;
  mov.u32 %r1, 7; st.shared.v4.u32 [dyn], {%r1, %r1, %r1, %r1}; st.shared.v2.u32 [dyn+16], {%r1, %r1};
  st.shared.u32 [dyn+24], %r1;
  ld.shared.v4.u32 {%r2, %r3, %r4, %r5}, [dyn+16];
  ld.param.u64 %rd1, [o]; st.global.u32 [%rd1], %r4;
  mov.u32 %r6, dyn; add.u32 %r6, %r6, 132; ld.shared.u32 %r7, [%r6];
  st.global.u32 [%rd1+4], %r7;
  ret;
}
"""
    )
    k = compile_module(ptx, bounds_check=True).get_kernel("k")
    out = np.zeros(2, dtype=np.uint32)
    params = struct.pack("<Q", out.ctypes.data)
    with pytest.raises(JitError) as ei:  # byte 132: the next unit, not the block's
        k.launch(1, 1, 28, params, allowed_ranges=[(out.ctypes.data, out.nbytes)])
    assert ei.value.code == ILLEGAL_ADDRESS
    k2 = compile_module(
        ptx.replace("mov.u32 %r6, dyn; add.u32 %r6, %r6, 132; ld.shared.u32 %r7, [%r6];", "mov.u32 %r7, 0;"),
        bounds_check=True,
    )
    k2.get_kernel("k").launch(1, 1, 28, params, allowed_ranges=[(out.ctypes.data, out.nbytes)])
    assert out[0] == 7  # dyn[24..28) holds 7; dyn[28..32) is past the 28 bytes, inside the unit
