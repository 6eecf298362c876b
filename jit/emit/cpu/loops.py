"""Counted loops of the CPU kernel scaffolding (thread loops, record loops) and when LLVM may vectorise them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from jit.lower.types import I1

if TYPE_CHECKING:
    from jit.lower.core import FuncLowering


# NOTE [masked vectors]
# LLVM's loop vectoriser turns a conditional load or store inside a vectorised loop into a masked one. On hosts
# without AVX-512 that is `vmaskmov`, whose store form is microcoded on AMD Zen 1-3. Whether the scalar loop is
# better then depends on the branch: a predictable one (a bounds check that always passes) makes the scalar loop
# 1.7x faster (a checked saxpy on a Zen 3 core, 8M elements: 29 ms vectorised with masks, 17 ms scalar), an
# unpredictable one (`if (x[i] > 0.5)` on random data) makes it 6x slower (4 vs 25 ms; mispredictions). So only
# the thread loop of a fast copy (NOTE [exit-guard versioning]: straight-line, so its only conditionals are the
# bounds checks the block could not do up front) is kept scalar there, with `llvm.loop.vectorize.enable = false`;
# every other loop is left to LLVM.
def no_vectorize(module: ir.Module, br: ir.Instruction, unroll: bool = True) -> None:
    """Attach loop metadata to the back-edge branch ``br`` that keeps LLVM from vectorising (and, with ``unroll``
    False, from unrolling) the loop."""
    flags = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.Constant(I1, 0)])]
    if not unroll:
        flags.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]))
    loop_id = module.add_metadata([*flags, *flags])
    loop_id.operands = (loop_id, *flags)  # a loop id refers to itself (a distinct node per loop)
    br.set_metadata("llvm.loop", loop_id)


def keep_checked_copy_scalar(checked: bool) -> bool:
    """Whether the thread loop of a straight-line fast copy whose accesses are still bounds-checked (``checked``)
    should stay scalar on this host (NOTE [masked vectors])."""
    from jit.passes.optimize import fast_masked_memory

    return checked and not fast_masked_memory()


class _Loop:
    """Counted loop helper: `with`-less, explicit begin/end."""

    def __init__(self, fl: FuncLowering, n: ir.Value, name: str, vectorize: bool = True, unroll: bool = True) -> None:
        b = fl.b
        self.b = b
        self.module = fl.module
        self.vectorize, self.unroll = vectorize, unroll
        self.pre = b.block
        self.head = fl.block(f"{name}_head")
        self.body = fl.block(f"{name}_body")
        self.exit = fl.block(f"{name}_exit")
        b.branch(self.head)
        b.position_at_end(self.head)
        self.i = b.phi(n.type, name=name)
        self.i.add_incoming(ir.Constant(n.type, 0), self.pre)
        b.cbranch(b.icmp_unsigned("<", self.i, n), self.body, self.exit)
        b.position_at_end(self.body)
        self.latch = fl.block(f"{name}_latch")

    def end(self) -> None:
        b = self.b
        if not b.block.is_terminated:
            b.branch(self.latch)
        b.position_at_end(self.latch)
        self.i.add_incoming(b.add(self.i, ir.Constant(self.i.type, 1)), self.latch)
        br = b.branch(self.head)
        if not self.vectorize:
            no_vectorize(self.module, br, self.unroll)
        b.position_at_end(self.exit)
