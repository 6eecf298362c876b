"""The CPU code generator's entry point: one PTX entry function becomes one native kernel (NOTE [CPU work-group
execution] in jit/emit/cpu/__init__.py)."""

from __future__ import annotations

from jit.emit.cpu.env import FUNC_STACK_HEADROOM, EntryEnv
from jit.lower.module import KernelMeta, ModuleCodegen, ParamLayout, align_up, var_align, var_size
from jit.ptx import ast as A


def build_kernel(cg: ModuleCodegen, fn: A.Function, index: int, tag: str = "") -> KernelMeta:
    """``tag`` makes the symbol unique per module (wooly_run_<tag>_<i>), so that many objects can share one MCJIT
    engine in the loader (NOTE [one shared engine] in jit/loader.py)."""
    from jit.emit.cpu.kernel import emit_kernel

    meta = KernelMeta(fn.name, f"wooly_run_{tag}_{index}" if tag else f"wooly_run_{index}")
    off = 0
    for p in fn.params:
        a = var_align(p)
        off = align_up(off, a)
        meta.params.append(ParamLayout(p.name, var_size(p), a, off))
        off += var_size(p)
    meta.param_size = off
    meta.static_shared = cg.reported_static_shared(fn.name)
    meta.local_bytes = cg.local_layout(fn)[1]
    if cg.bounds_check and cg.has_calls:  # NOTE [checked .func stack] (jit/emit/cpu/func.py)
        frames = sum(
            align_up(cg.local_layout(f)[1], 16) + cg.local_align(f) - 16
            for f in cg.ast.functions
            if not f.is_entry and f.body
        )
        meta.func_stack = frames + FUNC_STACK_HEADROOM if frames else 0
    meta.max_threads = min(meta.max_threads, A.max_threads(fn))
    meta.num_regs = min(255, max(16, fn.num_regs or len(fn.regs)))
    env = EntryEnv(cg, fn, meta)
    emit_kernel(cg, fn, env, meta)
    return meta
