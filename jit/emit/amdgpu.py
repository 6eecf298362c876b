"""AMDGPU target: the same front end and instruction lowering, an Env that maps PTX onto the AMDGPU execution model,
emitted as an HSA code object (gfx90a, gfx942: wave64; gfx1100: wave32) linked with ``ld.lld -shared``.

# NOTE [AMDGPU lowering]
# One PTX thread is one work-item; there are no thread loops. Special registers come from llvm.amdgcn.* intrinsics
# (%ntid/%nctaid from the HSA dispatch packet). Kernel parameters keep the CUDA layout: the kernel is declared with
# ceil(param_size / 8) i64 arguments, so the kernarg segment is byte-for-byte the CUDA parameter buffer, and
# ld.param reads it through llvm.amdgcn.kernarg.segment.ptr. Module globals live in one addrspace(1) block
# `wooly.data` (offsets in the metadata, see NOTE [module globals live in a data block]); static shared memory is
# one addrspace(3) block `wooly.lds` at LDS address 0 whose size is the dynamic-shared offset, so dynamic shared
# memory (placed by the runtime after static LDS) lands where the front end expects it. Registers and .local are
# addrspace(5) allocas seen through flat pointers (InferAddressSpaces undoes the casts).
# Warps stay 32 lanes wide: lane = linear tid & 31, and a warp is one half of a wave64 (or a whole wave32).
# shfl.sync computes the PTX source lane exactly as on the CPU and reads it with ds_bpermute; vote/ballot/
# activemask use llvm.amdgcn.ballot shifted to the warp's half; redux.sync is a butterfly of bpermutes (all 32 lanes
# must take part); bar.sync is a workgroup fence + s_barrier. Not on AMDGPU yet: match.sync, printf/assert, malloc,
# bounds checking, pointer initializers of globals. Code objects can be built and inspected here; running them
# needs the HIP loader of the AMD backend.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import asdict

from llvmlite import ir

from jit.emit import ARCHS
from jit.errors import CUDA_ERROR_INVALID_PTX, JitError, not_supported
from jit.lower.core import FuncLowering, Storage
from jit.lower.module import KernelMeta, ModuleCodegen, ParamLayout, align_up, var_align, var_size
from jit.lower.types import I1, I8, I16, I32, I64, PTR, VOID
from jit.ptx import ast as A
from proto import settings

LDS_BYTES = 65536  # per work-group on gfx90a, gfx942 and gfx1100

TRIPLE = "amdgcn-amd-amdhsa"
CODE_OBJECT_VERSION = 400  # v4: understood by the ld.lld of older distributions as well as by the HIP runtime


def _i32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


class AmdEnv:
    """Env (jit/lower/core.py) for kernels and .func bodies on AMDGPU (NOTE [AMDGPU lowering])."""

    def __init__(
        self,
        cg: ModuleCodegen,
        fn: A.Function,
        wave: int,
        lds: ir.GlobalVariable,
        data: ir.GlobalVariable | None,
        local_bytes: int,
    ) -> None:
        self.cg, self.fn, self.wave, self.lds, self.data, self.local_bytes = cg, fn, wave, lds, data, local_bytes
        self.local: ir.Value | None = None

    def _intr(self, fl: FuncLowering, name: str, ret: ir.Type = I32, args: list | None = None) -> ir.Value:
        return fl.call_intr(name, ret, args or [])

    def _dispatch_u16(self, fl: FuncLowering, off: int) -> ir.Value:
        p = self._intr(fl, "llvm.amdgcn.dispatch.ptr", ir.PointerType(addrspace=4))
        b = fl.b
        return b.zext(b.load(b.gep(p, [ir.Constant(I64, off)], source_etype=I8), typ=I16), I32)

    def _ntid(self, fl: FuncLowering, k: int) -> ir.Value:
        return self._dispatch_u16(fl, 4 + 2 * k)  # hsa_kernel_dispatch_packet_t.workgroup_size_{x,y,z}

    def _linear(self, fl: FuncLowering) -> ir.Value:
        b = fl.b
        t = [self._intr(fl, f"llvm.amdgcn.workitem.id.{c}") for c in "xyz"]
        n = [self._ntid(fl, k) for k in range(2)]
        return b.add(b.mul(b.add(b.mul(t[2], n[1]), t[1]), n[0]), t[0])

    def special(self, fl: FuncLowering, name: str) -> ir.Value:
        b = fl.b
        base, _, comp = name.partition(".")
        if comp in ("x", "y", "z") and base in ("tid", "ntid", "ctaid", "nctaid"):
            k = "xyz".index(comp)
            if base == "tid":
                return self._intr(fl, f"llvm.amdgcn.workitem.id.{comp}")
            if base == "ctaid":
                return self._intr(fl, f"llvm.amdgcn.workgroup.id.{comp}")
            if base == "ntid":
                return self._ntid(fl, k)
            p = self._intr(fl, "llvm.amdgcn.dispatch.ptr", ir.PointerType(addrspace=4))
            grid = b.load(b.gep(p, [ir.Constant(I64, 12 + 4 * k)], source_etype=I8), typ=I32)  # grid_size (items)
            nt = self._ntid(fl, k)
            return b.udiv(b.add(grid, b.sub(nt, _i32(1))), nt)
        t = self._linear(fl)
        lane = b.and_(t, _i32(31))
        if name == "laneid":
            return lane
        if name == "warpid":
            return b.lshr(t, _i32(5))
        if name.startswith("lanemask"):
            eq = b.shl(_i32(1), lane)
            lt = b.sub(eq, _i32(1))
            le = b.or_(lt, eq)
            return {
                "lanemask_eq": eq,
                "lanemask_lt": lt,
                "lanemask_le": le,
                "lanemask_gt": b.not_(le),
                "lanemask_ge": b.not_(lt),
            }[name]
        if name.startswith("clock") or name.startswith("globaltimer"):
            c = fl.call_intr("llvm.readcyclecounter", I64, [])
            return c if name in ("clock64", "globaltimer") else b.trunc(c, I32)
        return _i32(0)

    def shared_base(self, fl: FuncLowering) -> ir.Value:
        return fl.b.addrspacecast(self.lds, PTR)

    def globals_base(self, fl: FuncLowering) -> ir.Value:
        if self.data is None:
            raise not_supported("module globals (none defined)")
        return fl.b.addrspacecast(self.data, PTR)

    def local_ptr(self, fl: FuncLowering, offset: int) -> ir.Value:
        if self.local is None:
            a = fl.ab.alloca(ir.ArrayType(I8, max(self.local_bytes, 16)), name="local")
            a.align = self.cg.local_align(self.fn)
            self.local = a
        return fl.b.gep(self.local, [ir.Constant(I64, 0), ir.Constant(I64, offset)])

    def param_base(self, fl: FuncLowering) -> ir.Value:
        p = self._intr(fl, "llvm.amdgcn.kernarg.segment.ptr", ir.PointerType(addrspace=4))
        return fl.b.addrspacecast(p, PTR)

    def launch_ctx(self, fl: FuncLowering) -> ir.Value:
        raise not_supported("printf/assert/device runtime services on AMDGPU")

    def exit_thread(self, fl: FuncLowering) -> None:
        fl.b.ret_void()

    def trap(self, fl: FuncLowering, code: int) -> None:
        fl.call_intr("llvm.trap", VOID, [])
        fl.b.unreachable()

    def printf(self, fl: FuncLowering, fmt: ir.Value, args: ir.Value) -> ir.Value:
        raise not_supported("device printf on AMDGPU")

    def assert_fail(self, fl: FuncLowering, msg: ir.Value, file: ir.Value, line: ir.Value) -> None:
        raise not_supported("__assertfail on AMDGPU")

    def tctx(self, fl: FuncLowering) -> ir.Value:
        return ir.Constant(PTR, None)

    def after_call(self, fl: FuncLowering) -> None:
        pass

    def sync(self, fl: FuncLowering, ins: A.Instr) -> None:
        from jit.emit.amdgpu_warp import lower_sync

        lower_sync(self, fl, ins)

    def yield_point(self, fl: FuncLowering, ins: A.Instr) -> None:
        pass  # the threads of a wavefront run concurrently: nothing to interleave


def _fix_allocas(text: str) -> str:
    """Every alloca in addrspace(5), used through a flat pointer (llvmlite cannot spell alloca address spaces)."""
    out = []
    for line in text.splitlines():
        m = re.match(r'^(\s*)(%"?[^ =]+"?) = alloca (.*?)((?:, align \d+)?)$', line)
        if m:
            ind, name, ty, al = m.groups()
            tmp = name[:-1] + '.p5"' if name.endswith('"') else name + ".p5"
            out.append(f"{ind}{tmp} = alloca {ty}{al}, addrspace(5)")
            out.append(f"{ind}{name} = addrspacecast ptr addrspace(5) {tmp} to ptr")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def translate(mod: A.Module, arch: str) -> tuple[str, list[KernelMeta], ModuleCodegen]:
    if arch not in ARCHS:
        raise not_supported(f"AMDGPU architecture '{arch}' (supported: {', '.join(ARCHS)})")
    cg = ModuleCodegen(mod, triple=TRIPLE)
    cg.target = "amdgpu"  # type: ignore[attr-defined]
    if cg.grelocs or cg.frelocs:
        raise not_supported("pointer-valued initializers of module globals on AMDGPU")
    data = None
    if cg.gdata:
        data = ir.GlobalVariable(cg.module, ir.ArrayType(I8, len(cg.gdata)), "wooly.data", addrspace=1)
        data.initializer = ir.Constant(ir.ArrayType(I8, len(cg.gdata)), bytearray(cg.gdata))
        data.align = 16
    if cg.dyn_offset > LDS_BYTES:  # LLVM would abort the worker with only "local memory exceeds limit"
        hidden = max(cg.hidden_shared.values(), default=0)
        raise JitError(
            CUDA_ERROR_INVALID_PTX,
            f"{cg.dyn_offset} bytes of static shared memory exceed the "
            f"{LDS_BYTES // 1024} KiB LDS of {arch}"
            + (
                f" ({hidden} of them the per-warp area of warp matrix instructions, NOTE [warp matrix "
                "ops]; .maxntid on the kernel shrinks it)"
                if hidden
                else ""
            ),
        )
    lds = ir.GlobalVariable(cg.module, ir.ArrayType(I8, max(cg.dyn_offset, 16)), "wooly.lds", addrspace=3)
    lds.initializer = ir.Constant(ir.ArrayType(I8, max(cg.dyn_offset, 16)), ir.Undefined)  # LDS: no init
    lds.align = 16
    lds.linkage = "internal"
    wave = ARCHS[arch]
    for f in mod.functions:
        if f.is_entry or f.body is None:
            continue
        llfn = cg.funcs[f.name]
        ab = ir.IRBuilder(llfn.append_basic_block("entry"))
        body = llfn.append_basic_block("body")
        fl = FuncLowering(cg, f, llfn, AmdEnv(cg, f, wave, lds, data, cg.local_layout(f)[1]), ab, ir.IRBuilder(body))
        cg.bind_locals_and_params(fl, f)
        for i, p in enumerate(list(f.rets) + list(f.params)):
            fl.sym[p.name] = Storage("ptr", llfn.args[1 + i])
        fl.declare_labels()
        fl.lower_body()
        ab.branch(body)
    metas = []
    for f in mod.functions:
        if not f.is_entry or f.body is None:
            continue
        meta = KernelMeta(f.name, f.name)
        off = 0
        for p in f.params:
            a = var_align(p)
            off = align_up(off, a)
            meta.params.append(ParamLayout(p.name, var_size(p), a, off))
            off += var_size(p)
        meta.param_size = off
        meta.static_shared = cg.reported_static_shared(f.name)
        meta.local_bytes = cg.local_layout(f)[1]
        nargs = (off + 7) // 8
        llfn = ir.Function(cg.module, ir.FunctionType(VOID, [I64] * nargs), f.name)
        llfn.calling_convention = "amdgpu_kernel"
        ab = ir.IRBuilder(llfn.append_basic_block("entry"))
        body = llfn.append_basic_block("body")
        env = AmdEnv(cg, f, wave, lds, data, meta.local_bytes)
        fl = FuncLowering(cg, f, llfn, env, ab, ir.IRBuilder(body))  # type: ignore[arg-type]
        cg.bind_locals_and_params(fl, f)
        for p, lay in zip(f.params, meta.params, strict=True):
            fl.sym[p.name] = Storage(
                "ptr",
                (
                    lambda o=lay.offset, fl=fl, env=env: fl.b.gep(
                        env.param_base(fl), [ir.Constant(I64, o)], source_etype=I8
                    )
                ),
            )
        fl.zero_regs()
        fl.declare_labels()
        fl.lower_body()
        ab.branch(body)
        metas.append(meta)
    text = _fix_allocas(str(cg.module))
    text += (
        f'!llvm.module.flags = !{{!900}}\n!900 = !{{i32 1, !"amdhsa_code_object_version", i32 {CODE_OBJECT_VERSION}}}\n'
    )
    return text, metas, cg


def compile_amdgpu(mod: A.Module, arch: str, opt: int = 2) -> tuple[bytes, dict]:
    """PTX AST -> linked HSA code object bytes + metadata (kernels, globals offsets)."""
    import llvmlite.binding as llvm

    from jit.passes.optimize import init_llvm, run

    init_llvm()
    text, metas, cg = translate(mod, arch)
    tm = llvm.Target.from_triple(TRIPLE).create_target_machine(
        cpu=arch, features="", opt=opt, reloc="pic", codemodel="default"
    )
    m = run(text, tm, opt)
    obj = tm.emit_object(m)
    lld = next((p for p in (settings.jit().ld_lld, "ld.lld", "ld.lld-14", "ld.lld-18") if p and _which(p)), None)
    if lld is None:
        raise not_supported("AMDGPU code objects need ld.lld (Debian package 'lld')")
    with tempfile.TemporaryDirectory(prefix="wooly-amdgpu-") as d:
        o, so = os.path.join(d, "k.o"), os.path.join(d, "k.hsaco")
        with open(o, "wb") as fh:
            fh.write(obj)
        r = subprocess.run([lld, "-shared", "-o", so, o], capture_output=True, text=True, timeout=60)
        if r.returncode:
            raise JitError(CUDA_ERROR_INVALID_PTX, f"ld.lld failed: {r.stderr.strip()[:2000]}")
        with open(so, "rb") as fh:
            hsaco = fh.read()
    meta = {
        "kernels": [asdict(k) for k in metas],
        "globals": dict(cg.globals),
        "dyn_offset": cg.dyn_offset,
        "arch": arch,
        "wavefront": ARCHS[arch],
        "data_symbol": "wooly.data" if cg.gdata else None,
        "gdata": bytes(cg.gdata).hex(),
    }
    return hsaco, meta


def _which(p: str) -> bool:
    from shutil import which

    return which(p) is not None


__all__ = ["ARCHS", "compile_amdgpu", "translate", "I1"]
