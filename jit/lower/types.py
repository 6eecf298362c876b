"""PTX type names -> LLVM types, and small IR helpers shared by the lowering modules."""

from __future__ import annotations

from llvmlite import ir

from jit.ptx.ast import type_bits

I1, I8, I16, I32, I64, I128 = (ir.IntType(n) for n in (1, 8, 16, 32, 64, 128))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()

TYPE_NAMES = {f"{k}{n}" for k in "bus" for n in (8, 16, 32, 64)} | {
    "b128",
    "f16",
    "f16x2",
    "bf16",
    "bf16x2",
    "f32",
    "f64",
    "pred",
    "tf32",
    "e4m3x2",
    "e5m2x2",
    "u16x2",
    "s16x2",
}


def is_float(t: str) -> bool:
    return t in ("f16", "f32", "f64", "bf16")


def is_signed(t: str) -> bool:
    return t.startswith("s")


def compute_type(t: str) -> ir.Type:
    """Type an instruction of PTX type ``t`` computes in (bf16 is kept as raw i16 bits)."""
    if t == "pred":
        return I1
    if t == "f32" or t == "tf32":
        return F32
    if t == "f64":
        return F64
    if t == "f16":
        return F16
    return ir.IntType(type_bits(t))


def reg_type(t: str) -> ir.Type:
    if t in ("f32", "f64", "pred"):
        return compute_type(t)
    return ir.IntType(type_bits(t))


def ins_types(mods: list[str]) -> list[str]:
    return [m for m in mods if m in TYPE_NAMES]


def convert_bits(b: ir.IRBuilder, v: ir.Value, to: ir.Type, signed: bool = False) -> ir.Value:
    """Reinterpret/resize ``v`` to type ``to``: bitcast when sizes match, else int trunc/ext (PTX register rules)."""
    src = v.type
    if src == to:
        return v
    sw, dw = _width(src), _width(to)
    if sw == dw:
        return b.bitcast(v, to)
    if not isinstance(src, ir.IntType):
        v = b.bitcast(v, ir.IntType(sw))
    it = ir.IntType(dw)
    if sw > dw:
        v = b.trunc(v, it)
    elif signed:
        v = b.sext(v, it)
    else:
        v = b.zext(v, it)
    return v if to == it else b.bitcast(v, to)


def _width(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return t.width
    return {F16: 16, F32: 32, F64: 64}[t] if t in (F16, F32, F64) else 64


def width(t: ir.Type) -> int:
    return _width(t)


def const(t: ir.Type, v: int | float) -> ir.Constant:
    if isinstance(t, ir.IntType):
        return ir.Constant(t, int(v) & ((1 << t.width) - 1))
    return ir.Constant(t, float(v))


def float_bits_const(t: ir.Type, bits: int) -> ir.Constant:
    """A float constant with an exact bit pattern (keeps NaN payloads)."""
    if t == F32:
        return ir.Constant(I32, bits & 0xFFFFFFFF).bitcast(F32)
    if t == F64:
        return ir.Constant(I64, bits & 0xFFFFFFFFFFFFFFFF).bitcast(F64)
    if t == F16:
        return ir.Constant(I16, bits & 0xFFFF).bitcast(F16)
    return ir.Constant(t, bits)


def opaque_alloca(ab: ir.IRBuilder, ty: ir.Type, name: str = "", align: int = 16) -> ir.Value:
    """An alloca seen as an opaque ``ptr`` (llvmlite's IR layer keeps typed pointers otherwise)."""
    a = ab.alloca(ty, name=name)
    a.align = align
    return to_opaque(ab, a)


def to_opaque(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    if getattr(v.type, "is_opaque", True):
        return v
    from llvmlite.ir.instructions import CastInstr

    c = CastInstr(b.block, "bitcast", v, PTR)
    b._insert(c)
    return c


def suffix(t: ir.Type) -> str:
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{suffix(t.element)}"
    return {F16: "f16", F32: "f32", F64: "f64"}[t]
