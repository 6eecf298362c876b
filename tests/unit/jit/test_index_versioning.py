"""Loop versioning of numba's index wrap-around (NOTE [non-negative index versioning], jit/passes/index_versioning.py):
which loops get a fast copy, that the guard sends every loop that could wrap to the unchanged copy, and numba
kernels that keep their results."""

from __future__ import annotations

import numpy as np
import pytest

from jit.pipeline import front_end
from jit.ptx import ast as A
from tests.unit.jit.helpers import HEADER, launch, module

# out[k] = (i < 0 ? i + size : i) for the i of iteration k of `do { ... i += step } while (i < n)`, numba's shape
WRAP = (
    HEADER
    + """
.visible .entry wrap(.param .s64 start, .param .s64 n, .param .s64 step, .param .s64 size, .param .u64 out)
{
  .reg .b64 %rd<12>; .reg .pred %p<3>;
  ld.param.s64 %rd1, [start]; ld.param.s64 %rd2, [n]; ld.param.s64 %rd3, [step]; ld.param.s64 %rd4, [size];
  ld.param.u64 %rd5, [out];
LOOP:
  shr.s64 %rd6, %rd1, 63;
  and.b64 %rd7, %rd6, %rd4;
  add.s64 %rd8, %rd7, %rd1;
  st.global.s64 [%rd5], %rd8;
  add.s64 %rd5, %rd5, 8;
  STEP
  setp.lt.s64 %p1, %rd1, %rd2;
  @%p1 bra LOOP;
  ret;
}
"""
)
STEP = "add.s64 %rd1, %rd1, %rd3;"


def wrap(step: str = STEP) -> str:
    return WRAP.replace("STEP", step)


def simulate(start: int, n: int, step: int, size: int, cap: int = 64) -> list[int]:
    """The loop with 64-bit wrapping arithmetic, as a GPU runs it."""

    def s64(v: int) -> int:
        v %= 1 << 64
        return v - (1 << 64) if v >= 1 << 63 else v

    i, out = s64(start), []
    while True:
        out.append(s64(i + size if i < 0 else i))
        i = s64(i + step)
        if not i < n:
            return out
        assert len(out) < cap


def fast_copies(ptx: str) -> list[list[A.Instr]]:
    """The fast copies the front end made: the instructions after each `..._wooly_fast<k>` label, to its back edge."""
    body = [f for f in front_end(ptx).functions if f.is_entry][0].body or []
    out = []
    for k, st in enumerate(body):
        if isinstance(st, A.Label) and "_wooly_fast" in st.name:
            j = next(
                j
                for j in range(k + 1, len(body))
                if isinstance(body[j], A.Instr) and body[j].opcode == "bra" and body[j].operands[0] == A.Sym(st.name)
            )  # type: ignore[union-attr]
            out.append([x for x in body[k + 1 : j] if isinstance(x, A.Instr)])
    return out


def wrap_adds(instrs: list[A.Instr]) -> int:
    """Adds of a sign mask: `add j, u, i` with u = (x >> 63) & s."""
    signs, masks = set(), set()
    n = 0
    for i in instrs:
        if i.opcode == "shr" and i.has("s64") and i.operands[2] == A.Imm(63):
            signs.add(i.operands[0])
        elif i.opcode == "and" and any(o in signs for o in i.operands[1:]):
            masks.add(i.operands[0])
        elif i.opcode == "add" and any(o in masks for o in i.operands[1:]):
            n += 1
    return n


def test_fast_copy_drops_the_wrap_around() -> None:
    (fast,) = fast_copies(wrap())
    assert wrap_adds(fast) == 0
    assert any(i.opcode == "mov" and i.operands == [A.Reg("%rd8"), A.Reg("%rd1")] for i in fast)


@pytest.mark.parametrize(
    "start,n,step",
    [
        (0, 50, 7),  # the fast copy
        (3, 4, 1),  # one iteration
        (-20, 30, 7),  # starts negative: the guard picks the unchanged copy
        (-(1 << 63), -(1 << 63) + 10, 3),
        ((1 << 62) + 5, (1 << 62) + 40, 9),  # starts above 2**62
        (1 << 62, 1 << 62, (1 << 62) + (1 << 61)),  # a step above 2**56: i wraps to a negative index, then 0
        (0, 1 << 62, -1 << 61),  # a negative step
    ],
)
def test_results_match_wrapping_arithmetic(start: int, n: int, step: int) -> None:
    size = 1000
    want = simulate(start, n, step, size)
    out = np.zeros(len(want) + 1, np.int64)
    launch(wrap(), "wrap", 1, 1, start, n, step, size, out)
    assert out[: len(want)].tolist() == want and out[len(want)] == 0


def test_only_wrap_arounds_of_the_induction_chain_are_dropped() -> None:
    """x[i - 30]: i - 30 is negative for the first iterations and keeps its wrap-around in the fast copy."""
    ptx = wrap().replace(
        "add.s64 %rd5, %rd5, 8;",
        """add.s64 %rd5, %rd5, 8;
  sub.s64 %rd10, %rd1, 30; shr.s64 %rd6, %rd10, 63; and.b64 %rd7, %rd6, %rd4; add.s64 %rd8, %rd7, %rd10;
  st.global.s64 [%rd5], %rd8; add.s64 %rd5, %rd5, 8;""",
    )
    (fast,) = fast_copies(ptx)
    assert wrap_adds(fast) == 1
    want = []
    for v in simulate(0, 50, 7, 1000):
        want += [v, v - 30 + (1000 if v < 30 else 0)]
    out = np.zeros(len(want), np.int64)
    launch(ptx, "wrap", 1, 1, 0, 50, 7, 1000, out)
    assert out.tolist() == want


def test_step_that_may_wrap_is_guarded() -> None:
    """A step of 2**62 + 2**61 takes i = 2**62 past 2**63: the wrapped (negative) i must get size added."""
    out = np.zeros(4, np.int64)
    launch(wrap(), "wrap", 1, 1, 1 << 62, 1 << 62, (1 << 62) + (1 << 61), 1000, out)
    assert out[1] == -(1 << 63) + (1 << 61) + 1000


@pytest.mark.parametrize(
    "step,versioned",
    [
        ("add.s64 %rd1, %rd1, %rd3;", True),
        ("add.s64 %rd9, %rd1, %rd3; add.s64 %rd1, %rd9, %rd3;", True),  # a chain of two steps (an unrolled loop)
        ("mov.b64 %rd9, %rd1; add.s64 %rd1, %rd9, 4;", True),  # through a mov, an immediate step
        ("add.s64 %rd1, %rd1, %rd5;", False),  # the step changes in the loop (%rd5 is the moving out pointer)
        ("add.s64 %rd1, %rd1, -4;", False),  # a negative immediate step
        ("mul.lo.s64 %rd1, %rd1, %rd3;", False),  # not an add
        ("sub.s64 %rd1, %rd1, %rd3;", False),
        ("", False),  # i never changes
    ],
)
def test_which_loops_are_versioned(step: str, versioned: bool) -> None:
    assert len(fast_copies(wrap(step))) == int(versioned)


def test_loops_with_branches_or_a_moving_bound_are_left_alone() -> None:
    # a predicated store (a branch after the predication pass) inside the body
    branchy = wrap().replace(
        "st.global.s64 [%rd5], %rd8;", "setp.ne.s64 %p2, %rd8, 5; @%p2 st.global.s64 [%rd5], %rd8;"
    )
    assert not fast_copies(branchy)
    moving = wrap().replace("add.s64 %rd5, %rd5, 8;", "add.s64 %rd5, %rd5, 8; add.s64 %rd2, %rd2, 1;")
    assert not fast_copies(moving)
    # the exit test before the step reads the iteration's old i: the next one could start past n
    early = (
        wrap()
        .replace("STEP", "")
        .replace("  setp.lt.s64 %p1, %rd1, %rd2;\n", "  setp.lt.s64 %p1, %rd1, %rd2;\n  " + STEP + "\n")
    )
    assert not fast_copies(early.replace("STEP", ""))


def test_numba_grid_stride_kernels_get_fast_copies() -> None:
    """The block reduction and histogram of benchmarks/jit.py, as numba-cuda compiles them."""
    pytest.importorskip("numba.cuda")
    from numba import cuda, float32, uint32, void

    from benchmarks.jit import k_hist, k_reduce, numba_params

    for fn, sig, launch_cfg, make in (
        (k_reduce, void(float32[::1], float32[::1]), ((64,), (256,)), "reduce"),
        (k_hist, void(uint32[::1], uint32[::1]), ((16,), (128,)), "hist"),
    ):
        ptx = cuda.compile_ptx(fn, sig, cc=(8, 0))[0]
        fast = fast_copies(ptx)
        assert len(fast) == 1 and wrap_adds(fast[0]) == 0
        m = module(ptx)
        k = m.get_kernel(m.kernel_names[0])
        rng = np.random.default_rng(1)
        if make == "reduce":
            x = rng.random(300_001, dtype=np.float32)
            part = np.zeros(64, np.float32)
            k.launch(*launch_cfg, 0, numba_params(k, x, part))
            assert abs(part.sum() - x.sum(dtype=np.float64)) < 1e-2
        else:
            d = rng.integers(0, 1 << 30, 300_001, dtype=np.uint32)
            bins = np.zeros(256, np.uint32)
            k.launch(*launch_cfg, 0, numba_params(k, d, bins))
            assert (bins == np.bincount(d & 255, minlength=256)).all()
