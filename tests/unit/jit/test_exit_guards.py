"""NOTE [exit-guard versioning] and NOTE [masked vectors]: a barrier-free kernel that opens with `if (i >= n)
return;` runs every block in which no thread leaves at the guard through a copy of the body without it (and, in
bounds-checked modules, without the per-access checks the block already passed). Results must be exactly those of the
body as written, whichever copy a block takes."""

from __future__ import annotations

import re

import numpy as np
import pytest

from jit.emit.cpu.guard import find_exit_guards
from jit.errors import JitError
from jit.pipeline import front_end, translate
from tests.unit.jit.helpers import HEADER, pack

_PROLOGUE = """
  .reg .b32 %r<12>; .reg .b64 %rd<12>; .reg .pred %p<4>; .reg .f32 %f<4>;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  ld.param.u32 %r5, [n];
"""
_BODY = """
  ld.param.u64 %rd1, [x]; cvta.to.global.u64 %rd1, %rd1;
  ld.param.s32 %r6, [shift]; add.s32 %r7, %r4, %r6;
  mul.wide.s32 %rd2, %r7, 4; add.s64 %rd3, %rd1, %rd2; ld.global.f32 %f1, [%rd3];
  add.f32 %f2, %f1, 0f3F800000;
  ld.param.u64 %rd4, [out]; cvta.to.global.u64 %rd4, %rd4;
  mul.wide.s32 %rd5, %r4, 4; add.s64 %rd6, %rd4, %rd5; st.global.f32 [%rd6], %f2;
"""


def _kernel(guard: str) -> str:
    """out[i] = x[i + shift] + 1 for the threads that pass ``guard``."""
    return (
        HEADER
        + ".visible .entry k(.param .u64 out, .param .u64 x, .param .u32 n, .param .s32 shift)\n{"
        + _PROLOGUE
        + guard
        + _BODY
        + "DONE:\n  ret;\n}\n"
    )


# pattern 1: a branch to the exit when the thread is out of range
GUARD_TAKEN = _kernel("  setp.ge.s32 %p1, %r4, %r5;\n  @%p1 bra DONE;\n")
# the same with a negated predicate
GUARD_NEGATED = _kernel("  setp.lt.s32 %p1, %r4, %r5;\n  @!%p1 bra DONE;\n")
# pattern 2: a branch over the exit when the thread is in range
GUARD_FALLTHROUGH = _kernel("  setp.lt.s32 %p1, %r4, %r5;\n  @%p1 bra BODY;\n  ret;\nBODY:\n")
# not monotone in the thread index: odd threads leave, so every block takes the body as written
GUARD_ODD = _kernel(
    "  setp.ge.s32 %p1, %r4, %r5;\n  @%p1 bra DONE;\n"
    "  and.b32 %r8, %r3, 1;\n  setp.ne.u32 %p2, %r8, 0;\n  @%p2 bra DONE;\n"
)
# a store before the guard: no versioning
NOT_A_PREFIX = _kernel(
    "  ld.param.u64 %rd9, [out]; st.global.u32 [%rd9], 7;\n  setp.ge.s32 %p1, %r4, %r5;\n  @%p1 bra DONE;\n"
)

GRID_2D = (
    HEADER
    + """
.visible .entry k(.param .u64 out, .param .u32 rows, .param .u32 cols)
{
  .reg .b32 %r<16>; .reg .b64 %rd<8>; .reg .pred %p<4>;
  mov.u32 %r1, %ctaid.y; mov.u32 %r2, %ntid.y; mov.u32 %r3, %tid.y; mad.lo.s32 %r4, %r1, %r2, %r3;
  mov.u32 %r5, %ctaid.x; mov.u32 %r6, %ntid.x; mov.u32 %r7, %tid.x; mad.lo.s32 %r8, %r5, %r6, %r7;
  ld.param.u32 %r9, [rows]; ld.param.u32 %r10, [cols];
  setp.ge.s32 %p1, %r4, %r9;
  @%p1 bra DONE;
  setp.ge.s32 %p2, %r8, %r10;
  @%p2 bra DONE;
  mad.lo.s32 %r11, %r4, %r10, %r8;
  mad.lo.s32 %r12, %r4, 1000, %r8;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1;
  mul.wide.s32 %rd2, %r11, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r12;
DONE:
  ret;
}
"""
)


def _entry(ptx: str):  # type: ignore[no-untyped-def]
    return next(f for f in front_end(ptx).functions if f.is_entry)


def test_guards_found() -> None:
    for ptx, taken in (
        (GUARD_TAKEN, [True]),
        (GUARD_NEGATED, [True]),
        (GUARD_FALLTHROUGH, [False]),
        (GUARD_ODD, [True, True]),
        (GRID_2D, [True, True]),
    ):
        plan = find_exit_guards(_entry(ptx).body)
        assert plan is not None and [g.exit_if_taken for g in plan.guards] == taken
        assert not any(getattr(st, "opcode", "") == "bra" and st.pred for st in plan.fast_body)
    assert find_exit_guards(_entry(NOT_A_PREFIX).body) is None


def _run(
    ptx: str,
    n: int,
    shift: int,
    grid: int,
    block: int,
    checked: bool = False,
    x_len: int | None = None,
    ranges: list | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    from jit import compile_module

    x = np.arange(x_len or n + 64, dtype=np.float32) * 0.5
    out = np.full(grid * block + 8, -7.0, np.float32)
    k = compile_module(ptx, bounds_check=checked).get_kernel("k")
    if checked and ranges is None:
        ranges = [(x.ctypes.data, x.nbytes), (out.ctypes.data, out.nbytes)]
    k.launch(grid, block, 0, pack(k, out, x, n, shift), **({"allowed_ranges": ranges} if checked else {}))
    return out, x


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("ptx", [GUARD_TAKEN, GUARD_NEGATED, GUARD_FALLTHROUGH], ids=["taken", "negated", "fall"])
@pytest.mark.parametrize("n", [1024, 1000, 1])
def test_versioned_results_are_exact(ptx: str, n: int, checked: bool) -> None:
    """Full blocks take the copy without the guard, the partial last block the body as written; nothing past n is
    written."""
    out, x = _run(ptx, n, 3, 4, 256, checked)
    assert (out[:n] == x[3 : n + 3] + 1).all()
    assert (out[n:] == -7.0).all()


@pytest.mark.parametrize("checked", [False, True])
def test_guard_not_monotone_in_the_thread_index(checked: bool) -> None:
    n = 700
    out, x = _run(GUARD_ODD, n, 0, 3, 256, checked)
    i = np.arange(n)
    assert (out[:n][i % 2 == 0] == x[:n][i % 2 == 0] + 1).all()
    assert (out[:n][i % 2 == 1] == -7.0).all() and (out[n:] == -7.0).all()


@pytest.mark.parametrize("checked", [False, True])
def test_two_guards_in_two_dimensions(checked: bool) -> None:
    from jit import compile_module

    rows, cols = 37, 50
    out = np.full(rows * cols + 16, -1, np.int32)
    k = compile_module(GRID_2D, bounds_check=checked).get_kernel("k")
    extra = {"allowed_ranges": [(out.ctypes.data, out.nbytes)]} if checked else {}
    k.launch((4, 3), (16, 16), 0, pack(k, out, rows, cols), **extra)  # 64 x 48 threads over 50 x 37
    r, c = np.divmod(np.arange(rows * cols), cols)
    assert (out[: rows * cols] == r * 1000 + c).all() and (out[rows * cols :] == -1).all()


def test_checked_full_block_past_the_end_is_still_reported() -> None:
    """Every thread passes the guard, but the block's last thread reads one element past x's allocation: the
    block-wide check fails, the block runs the checked body, and the launch reports that address."""
    n = 512
    with pytest.raises(JitError) as ei:
        _run(GUARD_TAKEN, n, 1, 2, 256, checked=True, x_len=n)
    assert ei.value.code == 700
    x_end = int(ei.value.message.split("illegal address 0x")[1].split()[0], 16)
    out, x = _run(GUARD_TAKEN, n, 0, 2, 256, checked=True, x_len=n)  # and in range it runs
    assert (out[:n] == x + 1).all()
    assert x_end > 0


def test_checked_parameter_outside_every_range_is_reported() -> None:
    """A pointer parameter in no allowed range has the empty root range (1, 0): no access through it may pass."""
    n = 256
    with pytest.raises(JitError) as ei:
        x = np.zeros(1, np.float32)
        _run(GUARD_TAKEN, n, 0, 1, 256, checked=True, ranges=[(x.ctypes.data, 4)])
    assert ei.value.code == 700


def test_checked_fast_copy_has_no_per_access_checks() -> None:
    """The check loop verifies both accesses for the whole block, so only the body as written keeps its checks."""
    ir_text = str(translate(GUARD_TAKEN, "cpu", True, "t").ir_module)
    assert len(re.findall(r"^oob_rooted[.\d]*:", ir_text, re.M)) == 2


# the stored-to address is loaded from memory, so the block cannot check it up front
POINTER_CHASE = (
    HEADER
    + """
.visible .entry k(.param .u64 ptrs, .param .u32 n)
{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  ld.param.u32 %r5, [n];
  setp.ge.s32 %p1, %r4, %r5;
  @%p1 bra DONE;
  ld.param.u64 %rd1, [ptrs]; mul.wide.s32 %rd2, %r4, 8; add.s64 %rd3, %rd1, %rd2;
  ld.global.u64 %rd4, [%rd3];
  st.global.u32 [%rd4], %r4;
DONE:
  ret;
}
"""
)


@pytest.mark.parametrize("fast", [False, True])
def test_checked_fast_copy_stays_scalar_where_masks_are_slow(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    """NOTE [masked vectors]: without AVX-512 the fast copy's loop carries vectorize.enable=false when bounds
    checks are left in it (predictable branches: scalar is faster than masked stores); otherwise only the slow copy
    (run in a block where a guard fails) is kept scalar and not unrolled, to save compile time."""
    import jit.passes.optimize as opt

    monkeypatch.setattr(opt, "_FAST_MASKS", fast)

    def loops(ptx: str, checked: bool) -> tuple[int, int]:
        text = str(translate(ptx, "cpu", checked, "t").ir_module)
        return text.count("!llvm.loop"), text.count('!"llvm.loop.unroll.disable"')

    assert loops(GUARD_TAKEN, False) == (1, 1)  # the slow copy
    assert loops(GUARD_TAKEN, True) == (1, 1)  # every access prechecked
    assert loops(POINTER_CHASE, True) == ((1, 1) if fast else (2, 1))
    assert loops(GUARD_ODD.replace("@%p2 bra DONE;", "@%p2 bra DONE;\n  ld.param.u64 %rd9, [out];"), False) == (1, 1)


def test_pointer_chase_checked() -> None:
    """A loaded address keeps its per-thread check in the fast copy: a bad pointer is still reported."""
    from jit import compile_module

    n = 300
    dst = np.zeros(n, np.uint32)
    ptrs = dst.ctypes.data + 4 * np.arange(n, dtype=np.uint64)
    k = compile_module(POINTER_CHASE, bounds_check=True).get_kernel("k")
    ranges = [(dst.ctypes.data, dst.nbytes), (ptrs.ctypes.data, ptrs.nbytes)]
    k.launch(2, 256, 0, pack(k, ptrs, n), allowed_ranges=ranges)
    assert (dst == np.arange(n)).all()
    ptrs[7] = dst.ctypes.data + dst.nbytes  # one past the end
    with pytest.raises(JitError) as ei:
        k.launch(2, 256, 0, pack(k, ptrs, n), allowed_ranges=ranges)
    assert ei.value.code == 700


def test_checked_kernel_without_guard_is_checked_per_block() -> None:
    """A straight-line checked body with no guard: the check loop only checks accesses."""
    ptx = _kernel("")
    ir_text = str(translate(ptx, "cpu", True, "t").ir_module)
    assert "guards_pass" in ir_text and len(re.findall(r"^oob_rooted[.\d]*:", ir_text, re.M)) == 2
    out, x = _run(ptx, 512, 2, 2, 256, checked=True)
    assert (out[:512] == x[2:514] + 1).all()
    with pytest.raises(JitError):
        _run(ptx, 512, 2, 2, 256, checked=True, x_len=512)  # the last threads read past x


def test_fast_copy_vectorises_without_masks() -> None:
    from jit.passes import optimize

    tm = optimize.host_target_machine(2)
    mod = str(optimize.run(str(translate(GUARD_TAKEN, "cpu", False, "t").ir_module), tm, 2))
    assert re.search(r"store <\d+ x float>", mod)
