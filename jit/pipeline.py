"""The PTX translation as one ordered list of passes (DESIGN principle 6)."""

from __future__ import annotations

from jit import devrt, texture
from jit.emit import to_llvm
from jit.passes import (
    branch_tables,
    dynamic_stack,
    flatten_scopes,
    fused_loops,
    index_versioning,
    inline_sync,
    lockstep_loops,
    pointer_roots,
    predication,
    reg_params,
    special_regs,
    sync_points,
    warp_matrix,
    yield_points,
)
from jit.ptx import ast as A
from jit.ptx.parser import parse

# Each pass is run(module) -> module over the PTX AST, in this order.
AST_PASSES = [
    reg_params,  # .funcs with .reg parameters/returns -> .param ones plus registers (the pre-ABI form)
    warp_matrix,  # mma/wmma/ldmatrix/stmatrix/movmatrix -> plain PTX over a per-warp shared area
    flatten_scopes,  # nested { } scopes -> unique names, function-level declarations
    inline_sync,  # calls of .funcs holding barriers / warp collectives -> inlined bodies
    special_regs,  # %tid.x, %laneid, %clock64 ... -> Special operands
    predication,  # @p instr -> @!p bra skip; instr; skip:
    dynamic_stack,  # alloca/stacksave/stackrestore -> a per-thread .local stack and its pointer register
    branch_tables,  # brx.idx i, ts -> compare-and-branch chain over the .branchtargets labels
    pointer_roots,  # 64-bit registers derived from a kernel pointer parameter (NOTE [pointer roots])
    fused_loops,  # kernels that are one grid-stride loop: recorded, for blocks that can run it fused (CPU)
    lockstep_loops,  # grid-stride loops carrying values in kernels that go on after them: bracketed (CPU)
    index_versioning,  # grid-stride loops: a copy without numba's wrap-around of indices that cannot be negative
    yield_points,  # where the CPU scheduler may switch threads: grid-stride and wait loops
    sync_points,  # number barriers and warp collectives; registers live across each
]


# Passes that only make code faster, each by adding a second copy of a loop: the quick tier (NOTE [compile tiers],
# jit/compiler.py) leaves them out, which cuts its IR (and so its compile time) by up to a third.
SPEED_ONLY = (lockstep_loops, index_versioning)


def front_end(ptx: str | bytes, quick: bool = False) -> A.Module:
    """Parse (with the device runtime functions it calls, jit/devrt.py, and its texture and surface statements
    rewritten, jit/texture.py) and run AST_PASSES; ``quick``: without the SPEED_ONLY ones."""
    mod = parse(devrt.supply(texture.supply(ptx)))
    counted = False
    for p in AST_PASSES:
        if p in SPEED_ONLY:
            if not counted:  # the register count a kernel reports must not depend on its tier
                for fn in mod.functions:
                    fn.num_regs = len(fn.regs)
                counted = True
            if quick:
                continue
        mod = p.run(mod)
    return mod


def translate(
    ptx: str | bytes, target: str = "cpu", bounds_check: bool = False, tag: str = "", quick: bool = False
) -> to_llvm.Lowered:
    """PTX text -> LLVM IR module (plus kernel metadata). Registers become allocas; LLVM's mem2reg/SROA (in
    the optimise pass) turns them into SSA values. ``quick``: for the quick tier (front_end)."""
    return to_llvm.run(front_end(ptx, quick), target, bounds_check, tag)
