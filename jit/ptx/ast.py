"""PTX abstract syntax tree: plain dataclasses, no behaviour."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

# 32- and 64-bit integer register types: (bits, signed)
INT_WIDTH = {
    "s32": (32, True),
    "u32": (32, False),
    "b32": (32, False),
    "s64": (64, True),
    "u64": (64, False),
    "b64": (64, False),
}


@dataclass(frozen=True)
class Reg:
    name: str  # '%r1', '%tid.x', '%SP'


@dataclass(frozen=True)
class Imm:
    value: int | float
    is_float: bool = False
    bits: int = 0  # 32 or 64 for 0f/0d hex floats (value is then the raw bit pattern)


@dataclass(frozen=True)
class Sym:
    name: str  # variable, function or label name


@dataclass(frozen=True)
class SymOff:
    name: str  # sym+imm used as a value (address of sym plus offset)
    offset: int


@dataclass(frozen=True)
class Addr:
    base: Reg | Sym | Imm | None
    offset: int = 0


@dataclass(frozen=True)
class Vec:
    items: tuple[Operand, ...]


@dataclass(frozen=True)
class Sink:
    pass


@dataclass(frozen=True)
class Not:
    reg: Reg  # !%p


@dataclass(frozen=True)
class PredPair:
    first: Operand  # %r|%p (shfl, setp)
    second: Operand


@dataclass(frozen=True)
class Group:
    items: tuple[Operand, ...]  # (a, b) in call


@dataclass(frozen=True)
class Special:
    name: str  # 'tid.x', 'laneid', ... set by the special_regs pass


Operand = Reg | Imm | Sym | SymOff | Addr | Vec | Sink | Not | PredPair | Group | Special


@dataclass
class Instr:
    opcode: str
    mods: list[str]
    operands: list[Operand]
    pred: str | None = None
    pred_neg: bool = False
    line: int = 0
    col: int = 0

    def has(self, *mods: str) -> bool:
        return any(m in self.mods for m in mods)


@dataclass
class Label:
    name: str
    line: int = 0


@dataclass
class RegDecl:
    type: str  # 'b32', 'pred', ...
    names: list[str]  # expanded
    vec: int = 1


@dataclass
class VarDecl:
    space: str  # global, const, shared, local, param
    type: str
    name: str
    align: int = 0
    dims: list[int] = field(default_factory=list)  # [] scalar; [0] = unsized (extern)
    init: list | None = None  # flat list of Imm/Sym/SymOff
    vec: int = 1
    extern: bool = False
    visible: bool = False
    weak: bool = False
    common: bool = False
    ptr_attrs: list[str] = field(default_factory=list)
    line: int = 0


@dataclass
class Scope:
    body: list[Stmt]


Stmt = Instr | Label | RegDecl | VarDecl | Scope


@dataclass
class Param:
    name: str
    type: str
    align: int = 0
    dims: list[int] = field(default_factory=list)
    ptr_attrs: list[str] = field(default_factory=list)
    space: str = "param"  # .param or .reg (old-style func params: jit/passes/reg_params.py)
    vec: int = 1  # .v2/.v4


@dataclass
class Function:
    name: str
    is_entry: bool
    params: list[Param]
    rets: list[Param]
    body: list[Stmt] | None  # None: declaration only
    attrs: dict[str, list[int]] = field(default_factory=dict)
    visible: bool = False
    extern: bool = False
    line: int = 0
    weak: bool = False  # .weak: another definition of the same name may replace it (linked modules)
    # filled by passes
    regs: dict[str, str] = field(default_factory=dict)  # register name -> type
    vars: list[VarDecl] = field(default_factory=list)  # function-scope .local/.shared/.param variables
    sync_points: dict[int, SyncPoint] = field(default_factory=dict)
    branch_tables: dict[str, list[str]] = field(default_factory=dict)  # 'ts: .branchtargets L0, L1;'
    ptr_roots: dict[str, tuple[str, int]] = field(default_factory=dict)  # register -> (kernel param, offset)
    fused: Any = None  # jit.passes.fused_loops.FusedLoop: NOTE [fused grid-stride loops]
    lockstep: Any = None  # jit.passes.lockstep_loops.LockstepLoop: NOTE [lockstep grid-stride loops]
    num_regs: int = 0  # len(regs) before the passes that only add speed (jit/pipeline.py SPEED_ONLY); 0: len(regs)


@dataclass
class SyncPoint:
    id: int
    kind: str  # 'bar', 'warp' or 'yield' (NOTE [interleaved strided loops])
    instr: Instr
    live: list[str]  # registers live across the sync point (saved per thread)
    remat: list[Instr] = field(default_factory=list)  # recomputed at resume instead (NOTE [rematerialised registers])


@dataclass
class Module:
    version: str = ""
    target: list[str] = field(default_factory=list)
    address_size: int = 64
    globals: list[VarDecl] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)

    def function(self, name: str) -> Function | None:
        for f in self.functions:
            if f.name == name and f.body is not None:
                return f
        for f in self.functions:
            if f.name == name:
                return f
        return None


def max_threads(fn: Function) -> int:
    """The most threads a block of kernel ``fn`` may have: 1024, or less under .maxntid/.reqntid."""
    n = 1024
    for k in ("maxntid", "reqntid"):
        if fn.attrs.get(k):
            m = 1
            for x in fn.attrs[k]:
                m *= x
            n = min(n, m)
    return n


@functools.cache  # called for every operand of every lowered instruction
def type_bits(t: str) -> int:
    """Bit width of a PTX fundamental type name ('u32' -> 32, 'pred' -> 1, 'f16x2' -> 32)."""
    if t == "pred":
        return 1
    if t.endswith("x2"):
        return 2 * int(t[1:-2]) if t[1:-2].isdigit() else 32
    digits = "".join(ch for ch in t if ch.isdigit())
    if t.startswith("bf"):
        return 16 if t == "bf16" else 32
    if t.startswith("e4m3") or t.startswith("e5m2"):
        return 8
    return int(digits) if digits else 32


def type_bytes(t: str) -> int:
    return max(1, type_bits(t) // 8)


def var_size(v: VarDecl | Param) -> int:
    """Bytes a variable or parameter declares (0 for an unsized extern array)."""
    n = type_bytes(v.type) * getattr(v, "vec", 1)
    for d in v.dims:
        n *= d
    return n
