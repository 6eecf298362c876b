"""Lower the analysed PTX module to an LLVM IR module for a target (functions, kernels, runtime glue)."""

from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from jit.lower.module import KernelMeta, ModuleCodegen
from jit.ptx import ast as A


@dataclass
class Lowered:
    ast: A.Module
    ir_module: ir.Module
    kernels: list[KernelMeta] = field(default_factory=list)
    globals: dict[str, int] = field(default_factory=dict)  # name -> size
    dyn_offset: int = 0


def run(module: A.Module, target: str = "cpu") -> Lowered:
    from jit.emit.cpu import build_kernel
    from jit.emit.cpu_kernel import emit_funcs
    cg = ModuleCodegen(module)
    emit_funcs(cg)
    kernels = []
    for i, f in enumerate(fn for fn in module.functions if fn.is_entry and fn.body is not None):
        kernels.append(build_kernel(cg, f, i))
    sizes = {name: size for name, (_, size) in cg.globals.items()}
    return Lowered(module, cg.module, kernels, sizes, cg.dyn_offset)
