"""Replace special-register operands (%tid.x, %laneid, %clock64, ...) with ``Special`` nodes."""

from __future__ import annotations

from jit.errors import invalid_ptx, not_supported
from jit.ptx import ast as A

_XYZ = ("tid", "ntid", "ctaid", "nctaid")
KNOWN = (
    {f"{b}.{c}" for b in _XYZ for c in "xyz"}
    | {
        "laneid",
        "warpid",
        "nwarpid",
        "smid",
        "nsmid",
        "gridid",
        "clock",
        "clock64",
        "clock_hi",
        "globaltimer",
        "globaltimer_lo",
        "globaltimer_hi",
        "lanemask_eq",
        "lanemask_le",
        "lanemask_lt",
        "lanemask_ge",
        "lanemask_gt",
        "dynamic_smem_size",
        "total_smem_size",
        "aggr_smem_size",
        "is_explicit_cluster",
    }
    | {f"{b}.{c}" for b in ("cluster_ctaid", "cluster_nctaid", "clusterid", "nclusterid") for c in "xyz"}
    | {"cluster_ctarank", "cluster_nctarank"}
)


# NOTE [reserved shared memory]: since sm_80 the driver reserves shared memory at the start of each block's window
# for the system (cooperative groups keeps the scratch of tiles wider than a warp there) and names it with the
# special registers %reserved_smem_offset_begin/_end/_cap/_0/_1. Here the reserved region is a .shared variable
# the pass adds to the module when a kernel reads one of them; _0 and _1 are its two halves.
RESERVED = "__wooly_reserved_smem"
RESERVED_BYTES = 1024
_RESERVED: dict[str, A.Operand] = {
    "reserved_smem_offset_begin": A.SymOff(RESERVED, 0),
    "reserved_smem_offset_end": A.SymOff(RESERVED, RESERVED_BYTES),
    "reserved_smem_offset_cap": A.Imm(RESERVED_BYTES),
    "reserved_smem_offset_0": A.SymOff(RESERVED, 0),
    "reserved_smem_offset_1": A.SymOff(RESERVED, RESERVED_BYTES // 2),
}


def _fix(op: A.Operand, regs: dict[str, str], line: int) -> A.Operand:
    # registers may be declared without a '%' prefix (inline asm in libdevice does this)
    if isinstance(op, A.Sym) and op.name in regs:
        return A.Reg(op.name)
    if isinstance(op, A.Sym) and op.name == "WARP_SZ":  # PTX's predefined constant (a plain immediate)
        return A.Imm(32)
    if isinstance(op, A.Addr) and isinstance(op.base, A.Sym) and op.base.name in regs:
        return A.Addr(A.Reg(op.base.name), op.offset)
    if isinstance(op, A.Reg) and op.name not in regs:
        name = op.name[1:]
        if name in KNOWN:
            return A.Special(name)
        if name in _RESERVED:
            return _RESERVED[name]
        if name in ("envreg1", "envreg2"):  # the grid-sync workspace of a cooperative launch (NOTE [grid sync])
            return A.Special(name)
        if name.startswith(("envreg", "pm")) and name[-1].isdigit():
            return A.Special("zero")
        if name in _XYZ:
            raise not_supported(f"vector special register %{name} (use %{name}.x)", line)
        raise invalid_ptx(f"undeclared register {op.name}", line)
    if isinstance(op, A.Vec):
        return A.Vec(tuple(_fix(x, regs, line) for x in op.items))
    if isinstance(op, A.Group):
        return A.Group(tuple(_fix(x, regs, line) for x in op.items))
    if isinstance(op, A.Addr) and isinstance(op.base, A.Reg) and op.base.name not in regs:
        raise invalid_ptx(f"undeclared register {op.base.name}", line)
    if isinstance(op, A.PredPair):
        return A.PredPair(_fix(op.first, regs, line), _fix(op.second, regs, line))
    if isinstance(op, A.Not) and op.reg.name not in regs:
        raise invalid_ptx(f"undeclared register {op.reg.name}", line)
    return op


VIDEO_OPS = ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax", "vset")
SCALAR_VIDEO_OPS = ("vadd", "vsub", "vabsdiff", "vmin", "vmax", "vshl", "vshr", "vset")


def _video_selectors(st: A.Instr, regs: dict[str, str]) -> None:
    """SIMD video instructions write lane masks and selectors as register suffixes (`d.b10, a.b3210, b.b7654`):
    they become modifiers `sel0=10`, `sel1=3210`, `sel2=7654` (digits only) so that every pass sees plain
    registers."""
    for k, o in enumerate(st.operands[:3]):
        if isinstance(o, A.Reg) and "." in o.name and o.name not in regs:  # not a vector register's component
            base, sel = o.name.rsplit(".", 1)
            if sel[:1] not in ("b", "h") or not sel[1:].isdigit():
                raise invalid_ptx(f"bad lane selector '.{sel}' of {st.opcode}", st.line, st.col)
            st.operands[k] = A.Reg(base)
            st.mods.append(f"sel{k}={sel}")


def _uses_reserved(op: A.Operand) -> bool:
    if isinstance(op, A.SymOff):
        return op.name == RESERVED
    if isinstance(op, (A.Vec, A.Group)):
        return any(_uses_reserved(x) for x in op.items)
    return False


def run(module: A.Module) -> A.Module:
    reserved = False
    for fn in module.functions:
        if fn.body is None:
            continue
        for st in fn.body:
            if isinstance(st, A.Instr):
                if st.opcode[:-1] in VIDEO_OPS and st.opcode[-1] in "24" or st.opcode in SCALAR_VIDEO_OPS:
                    _video_selectors(st, fn.regs)
                st.operands = [_fix(o, fn.regs, st.line) for o in st.operands]
                reserved = reserved or any(_uses_reserved(o) for o in st.operands)
                if st.pred and st.pred not in fn.regs:
                    raise invalid_ptx(f"undeclared predicate {st.pred}", st.line, st.col)
    if reserved and not any(v.name == RESERVED for v in module.globals):
        module.globals.insert(0, A.VarDecl("shared", "b8", RESERVED, align=16, dims=[RESERVED_BYTES]))
    return module
