"""Module-level lowering: globals with initializers, shared-memory layout, .func declarations and bodies."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from llvmlite import ir

from jit.errors import invalid_ptx
from jit.lower import (  # noqa: F401  (handlers)
    ops_atomic,
    ops_bits,
    ops_cmp,
    ops_ctrl,
    ops_cvt,
    ops_float,
    ops_int,
    ops_mbarrier,
    ops_mem,
    ops_video,
)
from jit.lower.core import FuncLowering, Storage
from jit.lower.types import I8, I32, I64, PTR, VOID, opaque_alloca
from jit.passes.warp_matrix import SCRATCH as HIDDEN_SHARED
from jit.ptx import ast as A
from jit.ptx.ast import type_bytes, var_size  # noqa: F401 (var_size: re-exported to the emitters)


def var_align(v: A.VarDecl | A.Param) -> int:
    return v.align or type_bytes(v.type) * getattr(v, "vec", 1)


def align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclass
class ParamLayout:
    name: str
    size: int
    align: int
    offset: int


@dataclass
class KernelMeta:
    name: str
    symbol: str
    params: list[ParamLayout] = field(default_factory=list)
    param_size: int = 0
    static_shared: int = 0
    local_bytes: int = 0
    rec_bytes: int = 0
    rec_threads: int = 0  # records laid out for this many threads; 0: for the launch's block (NOTE [thread records])
    func_stack: int = 0  # per-thread bytes for .func frames of a bounds-checked kernel (NOTE [checked .func stack])
    bc_roots: list[int] = field(default_factory=list)  # param-buffer offsets of rooted pointers (bounds checks)
    red_bytes: int = 0  # per-worker reduction buffer (NOTE [combined global reductions], jit/emit/cpu/red.py)
    scheduler: bool = False
    max_threads: int = 1024
    num_regs: int = 32


class ModuleCodegen:
    def __init__(self, mod: A.Module, triple: str = "", bounds_check: bool = False) -> None:
        self.ast = mod
        self.bounds_check = bounds_check  # NOTE [bounds checking] in jit/emit/bounds.py
        self.func_hint_sites = 0  # .func access sites given a slot of the worker's hint array (NOTE [.func hints])
        # True where a block's shared memory is only ever touched by the one OS thread running the block (the CPU
        # target): `atom`/`red` on .shared then need no lock prefix (see ops_atomic.atomic)
        self.private_shared = False
        self.module = ir.Module(name="ptx")
        if triple:
            self.module.triple = triple
        self.globals: dict[str, tuple[int, int]] = {}  # name -> (offset in the data block, size)
        self.gdata = bytearray()
        self.grelocs: list[tuple[int, int, int]] = []  # (where, target offset, bytes): pointer initializers
        # (where, .func name, bytes): function addresses in initializers (NOTE [function addresses in globals])
        self.frelocs: list[tuple[int, str, int]] = []
        self.shared: dict[str, int] = {}
        self.funcs: dict[str, ir.Function] = {}
        self.kernels: list[KernelMeta] = []
        # kernels defined here: their names are values a device-side launch passes (NOTE [device launches])
        self.entry_names = frozenset(f.name for f in mod.functions if f.is_entry and f.body is not None)
        self.has_calls = any(
            isinstance(s, A.Instr) and s.opcode == "call" for f in mod.functions for s in (f.body or [])
        )
        self._layout_shared()
        for v in mod.globals:
            if v.space in ("global", "const"):
                self._define_global(v)
        for f in mod.functions:
            for v in f.vars:
                if v.space in ("global", "const"):
                    self._define_global(v)
        for f in mod.functions:
            if not f.is_entry and f.body is not None:
                ty = ir.FunctionType(VOID, [PTR] * (1 + len(f.rets) + len(f.params)))
                fn = ir.Function(self.module, ty, f"wooly.f.{f.name}")
                fn.linkage = "internal"
                self.funcs[f.name] = fn

    # -- layout --------------------------------------------------------------------------------
    def _layout_shared(self) -> None:
        extern: list[str] = []
        module_vars = [v for v in self.ast.globals if v.space == "shared"]
        module_vars += [v for f in self.ast.functions if not f.is_entry for v in f.vars if v.space == "shared"]
        entries = [f for f in self.ast.functions if f.is_entry and f.body is not None]

        def place(vs: list[A.VarDecl], off: int, into: dict[str, int]) -> int:
            for v in vs:
                if v.extern or (v.dims and v.dims[-1] == 0):
                    extern.append(v.name)
                    continue
                off = align_up(off, var_align(v))
                into[v.name] = off
                off += var_size(v)
            return off

        # NOTE [hidden shared areas first]: our own areas (NOTE [warp matrix ops]: the .funcs' at module level, each
        # kernel's own) lie below all of the program's variables, so that the program's static shared memory ends
        # where the dynamic area begins, as on a GPU: a kernel that writes past a static array into what it knows
        # is dynamic shared memory must not land on our scratch
        hidden_mod = place([v for v in module_vars if not _not_hidden(v)], 0, self.shared)
        self.entry_shared: dict[str, dict[str, int]] = {f.name: {} for f in entries}
        user = hidden_mod
        for f in entries:
            mine = [v for v in f.vars if v.space == "shared" and not _not_hidden(v)]
            user = max(user, place(mine, hidden_mod, self.entry_shared[f.name]))
        off = place([v for v in module_vars if _not_hidden(v)], user, self.shared)
        self.module_shared = off
        biggest = off
        self.hidden_shared: dict[str, int] = {}
        self.entry_static: dict[str, int] = {}
        for f in entries:
            o = place([v for v in f.vars if v.space == "shared" and _not_hidden(v)], off, self.entry_shared[f.name])
            self.entry_static[f.name] = o
            self.hidden_shared[f.name] = user
            biggest = max(biggest, o)
        # NOTE [dynamic shared offset]: every kernel of the module sees dynamic shared memory at the same offset,
        # after the largest static area, so .func code that touches `extern .shared` needs no per-kernel fix-up.
        ext_align = [var_align(v) for v in module_vars if v.name in extern]
        ext_align += [
            var_align(v)
            for f in self.ast.functions
            if f.is_entry
            for v in f.vars
            if v.space == "shared" and v.name in extern
        ]
        self.dyn_offset = align_up(biggest, max([16] + ext_align))
        from jit.ptx.parser import MAX_VAR_BYTES  # NOTE [declaration limits]: the totals too

        if self.dyn_offset > MAX_VAR_BYTES["shared"]:
            raise invalid_ptx(f"{self.dyn_offset} bytes of static shared memory: at most {MAX_VAR_BYTES['shared']}")
        for name in extern:
            self.shared[name] = self.dyn_offset

    def reported_static_shared(self, entry: str) -> int:
        """The static shared size a kernel reports (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES): its variables, not our
        hidden per-warp areas (NOTE [warp matrix ops]), which live below the dynamic area all the same."""
        return max(0, self.entry_static.get(entry, self.module_shared) - self.hidden_shared.get(entry, 0))

    # NOTE [module globals live in a data block]: .global/.const variables are not LLVM globals but offsets into
    # one data block per loaded module instance (its address reaches kernels through the launch context). The
    # compiled code is then pure, so one loaded engine serves every instance of the same PTX (a cache hit only
    # copies the initial image), while each cuModuleLoad still gets its own globals, as on a GPU.
    def _define_global(self, v: A.VarDecl) -> None:
        size = max(var_size(v), 1)
        off = align_up(len(self.gdata), max(var_align(v), 8))
        from jit.ptx.parser import MAX_VAR_BYTES  # NOTE [declaration limits]: the module's data block in all

        if off + size > MAX_VAR_BYTES["global"]:
            raise invalid_ptx(
                f"the module's .global and .const variables need more than {MAX_VAR_BYTES['global']} bytes", v.line
            )
        self.gdata += bytes(off - len(self.gdata))
        self.gdata += self._initializer(v, size, off)
        self.globals[v.name] = (off, size)

    def _initializer(self, v: A.VarDecl, size: int, base: int) -> bytes:
        if not v.init:
            return bytes(size)
        esz = type_bytes(v.type)
        data = bytearray()
        for x in v.init:
            if isinstance(x, (A.Sym, A.SymOff)):
                tgt = self.globals.get(x.name)
                if tgt is None and any(f.name == x.name and not f.is_entry for f in self.ast.functions):
                    if not any(f.name == x.name and f.body is not None for f in self.ast.functions):
                        raise invalid_ptx(f"initializer refers to function {x.name}, which is never defined", v.line)
                    self.frelocs.append((base + len(data), x.name, esz))  # a vtable, a table of callbacks
                    data += bytes(esz)
                    continue
                if tgt is None:
                    raise invalid_ptx(f"initializer refers to unknown symbol {x.name}", v.line)
                add = x.offset if isinstance(x, A.SymOff) else 0
                self.grelocs.append((base + len(data), tgt[0] + add, esz))
                data += bytes(esz)
            else:
                data += _encode(v.type, x)
        return bytes(data[:size] + bytes(max(0, size - len(data))))

    # -- symbol lookup -------------------------------------------------------------------------
    def storage(self, name: str) -> Storage | None:
        if name in self.globals:
            return Storage("global", self.globals[name][0])
        if name in self.shared:
            return Storage("shared", self.shared[name])
        return None

    _LIBC = {
        "malloc": ir.FunctionType(PTR, [I64]),
        "free": ir.FunctionType(VOID, [PTR]),
        "clock_gettime": ir.FunctionType(I32, [I32, PTR]),  # NOTE [time registers] (jit/emit/cpu/env.py)
    }

    def libc(self, name: str) -> ir.Function:
        """The declaration of a libc function the CPU code calls (the loader's engine resolves it in the process)."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, self._LIBC[name], name)
        return fn  # type: ignore[return-value]

    def local_align(self, f: A.Function) -> int:
        """Alignment of a thread's .local area: the largest .align its variables declare (at least 16)."""
        return max([16] + [var_align(v) for v in f.vars if v.space == "local"])

    def local_layout(self, f: A.Function) -> tuple[dict[str, int], int]:
        off = 0
        out: dict[str, int] = {}
        for v in f.vars:
            if v.space == "local":
                off = align_up(off, var_align(v))
                out[v.name] = off
                off += var_size(v)
        from jit.ptx.parser import MAX_VAR_BYTES  # NOTE [declaration limits]: the total too

        if off > MAX_VAR_BYTES["local"]:
            raise invalid_ptx(
                f"{f.name} declares {off} bytes of .local memory per thread: at most {MAX_VAR_BYTES['local']}", f.line
            )
        # the per-thread stride keeps every thread's area aligned like the first (the base is page-aligned)
        return out, align_up(off, self.local_align(f))

    def bind_locals_and_params(self, fl: FuncLowering, f: A.Function) -> None:
        """Storage for function-scope .local/.shared/.param variables (call-site buffers)."""
        offs, _ = self.local_layout(f)
        for v in f.vars:
            if v.space == "local":
                fl.sym[v.name] = Storage("ptr", _lazy(lambda v=v, o=offs[v.name]: fl.env.local_ptr(fl, o)))
            elif v.space == "shared":
                off = self.entry_shared.get(f.name, {}).get(v.name, self.shared.get(v.name))
                if off is None:
                    raise invalid_ptx(f"shared variable {v.name} has no layout", v.line)
                fl.sym[v.name] = Storage("shared", off)
            elif v.space == "param":
                buf = opaque_alloca(fl.ab, ir.ArrayType(I8, max(var_size(v), 8)), v.name.replace("$", "_"))
                fl.sym[v.name] = Storage("ptr", buf)


def _not_hidden(v: A.VarDecl) -> bool:
    """Sort key: our hidden shared areas first (NOTE [hidden shared areas first])."""
    return not v.name.startswith(HIDDEN_SHARED)


class _lazy:
    """A storage value computed on first use inside the function (needs the builder positioned)."""

    def __init__(self, fn) -> None:  # type: ignore[no-untyped-def]
        self.fn = fn

    def __call__(self) -> ir.Value:
        return self.fn()


def _encode(t: str, x: A.Operand) -> bytes:
    n = type_bytes(t)
    assert isinstance(x, A.Imm)
    if t in ("f32", "f64"):
        if x.is_float and x.bits:
            return int(x.value).to_bytes(x.bits // 8, "little")
        return struct.pack("<f" if t == "f32" else "<d", float(x.value))
    if x.is_float and x.bits:
        return int(x.value).to_bytes(n, "little")
    return (int(x.value) & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
