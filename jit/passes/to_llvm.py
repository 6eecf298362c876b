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
    globals: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (offset, size) in the data block
    dyn_offset: int = 0
    gdata: bytes = b""  # initial image of the module's data block
    grelocs: list[tuple[int, int, int]] = field(default_factory=list)


def run(module: A.Module, target: str = "cpu", bounds_check: bool = False, tag: str = "") -> Lowered:
    from jit.emit.cpu import build_kernel
    from jit.emit.cpu_func import emit_funcs
    cg = ModuleCodegen(module, bounds_check=bounds_check)
    cg.private_shared = True  # each block runs on one worker thread with its own shared window
    emit_funcs(cg)
    kernels = []
    for i, f in enumerate(fn for fn in module.functions if fn.is_entry and fn.body is not None):
        kernels.append(build_kernel(cg, f, i, tag))
    # Only the kernel entry points are exported: everything else defined here is internal, so objects loaded
    # into one shared MCJIT engine never resolve each other's symbols (NOTE [one shared engine], jit/loader.py).
    entry = {k.symbol for k in kernels}
    for gv in cg.module.global_values:
        defined = not getattr(gv, "is_declaration", True) or getattr(gv, "initializer", None) is not None
        if defined and gv.name not in entry and gv.linkage in ("", "external"):
            gv.linkage = "internal"
    return Lowered(module, cg.module, kernels, dict(cg.globals), cg.dyn_offset, bytes(cg.gdata), list(cg.grelocs))
