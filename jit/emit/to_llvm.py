"""Lower the analysed PTX module to an LLVM IR module for a target (functions, kernels, runtime glue)."""

from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from jit.lower.forwarding import drop_unread_allocas
from jit.lower.module import KernelMeta, ModuleCodegen
from jit.lower.types import I64, PTR
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
    frelocs: list[tuple[int, int, int]] = field(default_factory=list)  # (where, index into ftab's table, bytes)
    ftab: str = ""  # symbol of the function-address table writer (NOTE [function addresses in globals])


def run(module: A.Module, target: str = "cpu", bounds_check: bool = False, tag: str = "") -> Lowered:
    from jit.emit.cpu.codegen import build_kernel
    from jit.emit.cpu.func import emit_funcs

    cg = ModuleCodegen(module, bounds_check=bounds_check)
    cg.private_shared = True  # each block runs on one worker thread with its own shared window
    emit_funcs(cg)
    kernels = []
    for i, f in enumerate(fn for fn in module.functions if fn.is_entry and fn.body is not None):
        kernels.append(build_kernel(cg, f, i, tag))
    frelocs, ftab = _function_table(cg, tag)
    for fn in cg.module.functions:
        drop_unread_allocas(fn)
    # Only the kernel entry points are exported: everything else defined here is internal, so objects loaded
    # into one shared MCJIT engine never resolve each other's symbols (NOTE [one shared engine], jit/loader.py).
    entry = {k.symbol for k in kernels} | {ftab}
    for gv in cg.module.global_values:
        defined = not getattr(gv, "is_declaration", True) or getattr(gv, "initializer", None) is not None
        if defined and gv.name not in entry and gv.linkage in ("", "external"):
            gv.linkage = "internal"
    return Lowered(
        module, cg.module, kernels, dict(cg.globals), cg.dyn_offset, bytes(cg.gdata), list(cg.grelocs), frelocs, ftab
    )


# NOTE [function addresses in globals]
# C++ vtables and tables of device-function pointers are .global variables initialised with .func names
# (`.global .u64 _ZTV2Sq[5] = {0, 0, _ZNK2Sq4areaEv, ...}`). The data block is filled in by the runtime
# (NOTE [module globals live in a data block]) and a function's address is known only once its object is loaded,
# so such a module exports one more function, wooly_run_<tag>_f(out, _), which writes the address of each function
# the initializers name into out[i] (the same address `mov.u64 %rd, func` gives, so calls through the table work);
# the runtime calls it after loading and patches the data block at the `frelocs` it lists. A module keeps the code
# it was patched from alive (NOTE [compile tiers]: after a switch, the table still points at quick-tier functions,
# which stay correct).
def _function_table(cg: ModuleCodegen, tag: str) -> tuple[list[tuple[int, int, int]], str]:
    if not cg.frelocs:
        return [], ""
    names = list(dict.fromkeys(name for _, name, _ in cg.frelocs))
    fn = ir.Function(cg.module, ir.FunctionType(ir.VoidType(), [PTR, PTR]), f"wooly_run_{tag}_f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for i, name in enumerate(names):
        slot = b.gep(fn.args[0], [ir.Constant(I64, i)], source_etype=I64)
        b.store(b.ptrtoint(cg.funcs[name], I64), slot)
    b.ret_void()
    return [(where, names.index(name), size) for where, name, size in cg.frelocs], fn.name
