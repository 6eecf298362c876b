"""Which modifiers each instruction's lowering implements.

# NOTE [modifier table]
# A handler reads the modifiers it implements (`ins.has("sat")`) and never sees the others, so a modifier it does
# not know used to be dropped: `.xorsign.abs` once gave plain min/max, `cvt.rs` rounded to nearest. Both are
# silently wrong results, where the rule of this translator is CUDA_ERROR_NOT_SUPPORTED naming what is missing.
# So before an instruction is lowered, each of its modifiers (other than types, vector widths and `::`-qualified
# ones, which NOTE [qualified modifiers] guards) must be in its opcode's entry here: the modifiers of the PTX ISA
# (up to 9.x) for that opcode that the handler implements, or may ignore without changing a result (cache
# operators, `.uni`, `.aligned`). Opcodes without an entry (the barrier and warp-collective family, fences, async
# copies, mbarriers, video instructions and the other nops) validate their own modifiers in their handlers.
"""

from __future__ import annotations

from jit.lower.types import TYPE_NAMES
from jit.ptx import ast as A

_RND = "rn rz rm rp"
_CMP = "eq ne lt le gt ge lo ls hi hs equ neu ltu leu gtu geu num nan"
_SPACE = "global shared local const param"
# memory ordering (honoured: atomic loads/stores, jit/lower/ops_mem.py), scopes (one address space on the host), cache
# operators (hints), vector widths
_ORDER = "weak relaxed acquire release acq_rel volatile mmio cta cluster gpu sys"
_CACHE = "ca cg cs lu cv wb wt nc"
_VEC = "v2 v4 v8"
_ATOMIC = f"global shared {_ORDER} add and or xor exch cas inc dec min max noftz {_VEC}"

_TABLE = {
    "add sub": f"sat cc ftz {_RND}",
    "addc subc": "cc",
    "mul": f"lo hi wide ftz sat {_RND}",
    "mad": f"lo hi wide sat cc ftz {_RND}",
    "madc": "lo hi cc",
    "mul24 mad24": "lo hi",
    "div": f"approx full ftz {_RND}",
    "abs neg": "ftz",
    "min max": "ftz NaN relu xorsign abs",
    "sad rem popc clz brev bfe bfi fns not cnot and or xor shl shr copysign selp dp4a": "",
    "lop3": "and or",
    "bfind": "shiftamt",
    "bmsk szext": "clamp wrap",
    "dp2a": "lo hi",
    "prmt": "f4e b4e rc8 ecl ecr rc16",
    "shf": "l r clamp wrap",
    "fma": f"ftz sat relu {_RND}",
    "rcp sqrt": f"approx ftz {_RND}",
    "rsqrt sin cos lg2 ex2": "approx ftz",
    "tanh": "approx",
    "testp": "finite infinite number notanumber normal subnormal",
    "set setp": f"{_CMP} and or xor ftz",
    "slct": "ftz",
    "mov": _VEC,
    "cvt": f"{_RND} rni rzi rmi rpi rna rs ftz sat relu satfinite pack u4 s4 u2 s2",  # cvt.pack's narrow types
    "cvta": f"to {_SPACE}",
    "isspacep": _SPACE,
    "ld st": f"{_SPACE} {_ORDER} {_CACHE} {_VEC}",
    "ldu": f"global {_VEC}",
    "atom": _ATOMIC,
    "red": _ATOMIC,
    "bra call ret": "uni",
}

ALLOWED: dict[str, frozenset[str]] = {op: frozenset(mods.split()) for ops, mods in _TABLE.items() for op in ops.split()}


def unknown_modifier(ins: A.Instr) -> str | None:
    """The first modifier of ``ins`` its opcode's lowering does not implement (see the NOTE), or None."""
    allowed = ALLOWED.get(ins.opcode)
    if allowed is None:
        return None
    for m in ins.mods:
        if m not in allowed and m not in TYPE_NAMES and "::" not in m:
            return m
    return None


__all__ = ["ALLOWED", "unknown_modifier"]
