"""Address forms of the memory accesses in the body of a fused grid-stride loop (CPU target).

NOTE [fused loop address forms]
In `for (i ...) body(i)` of a fused grid-stride loop (NOTE [fused grid-stride loops]) most addresses have one of
two shapes, and knowing which lets the emitter (jit/emit/cpu/fused.py) drop per-element work:

* affine, `B + coef*i + off`, with B a register the body reads but never writes (`x[i]`): every address such an
  access touches during a block's loop lies in one interval computed once before the loop, so the combining
  buffer's overlap test (NOTE [combined global reductions]) can be made once for the whole loop instead of once
  per element;
* indexed, `B + off + scale*k` with 0 <= k < count (`bins[v & 255]`): a buffered reduction at such an address
  can go to a private array of per-worker counters indexed by k (NOTE [dense reduction slots], jit/emit/cpu/red.py)
  instead of the tag-checked buffer.

This is a forward pass over the straight-line body, one abstract value per register:

    Aff(base, coef, off, w)      the register's w bits are (base + coef*i + off) mod 2**w
    Idx(base, scale, count, off) the register holds base + off + scale*k for some 0 <= k < count, exactly

where `base` is None or an invariant register (one the body reads and never writes) and i is the iteration's
index, which the fused loop keeps in [0, limit) (limit from the loop's width: 2**31, 2**32 or 2**62). Modular
forms are exact through add, sub, mul and shl (arithmetic mod 2**w is a ring homomorphism); a widening cvt or
mul.wide, and a shift right, are only followed when the value's true range (known when base is None) fits the
source type, so the form stays an identity between integers. Everything else makes a register unknown. An
Idx with base None is an exact small non-negative integer: `and x, imm` (any x; k runs over the multiples of
imm's lowest set bit), `rem.u x, imm`, and `ld.u8/u16` produce one.
"""

from __future__ import annotations

from dataclasses import dataclass

from jit.analysis.liveness import defs_uses
from jit.ptx import ast as A

LIMIT = {(32, True): 1 << 31, (32, False): 1 << 32, (64, True): 1 << 62, (64, False): 1 << 62}
_INT = {
    "b8": 8,
    "u8": 8,
    "s8": 8,
    "b16": 16,
    "u16": 16,
    "s16": 16,
    "b32": 32,
    "u32": 32,
    "s32": 32,
    "b64": 64,
    "u64": 64,
    "s64": 64,
}
MEM_OPS = ("ld", "ldu", "st", "atom", "red")


@dataclass(frozen=True)
class Aff:
    base: str | None
    coef: int
    off: int
    w: int


@dataclass(frozen=True)
class Idx:
    base: str | None
    scale: int
    count: int
    off: int


Form = Aff | Idx


def _ty(ins: A.Instr) -> tuple[int, bool] | None:
    """Width and signedness of an integer instruction's (last) type modifier."""
    t = next((m for m in reversed(ins.mods) if m in _INT), None)
    return (_INT[t], t.startswith("s")) if t else None


def _imm(o: A.Operand) -> int | None:
    return int(o.value) if isinstance(o, A.Imm) and not o.is_float else None


def _norm(v: int, w: int) -> int:
    """The representative of v mod 2**w in [-2**(w-1), 2**(w-1))."""
    v %= 1 << w
    return v - (1 << w) if v >> (w - 1) else v


def _aff(base: str | None, coef: int, off: int, w: int) -> Aff:
    return Aff(base, _norm(coef, w), _norm(off, w), w)


def _fits(span: tuple[int, int] | None, w: int, signed: bool) -> bool:
    if span is None:
        return False
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)
    return lo <= span[0] and span[1] <= hi


class _State:
    def __init__(self, iv: str, limit: int, width: int, written: set[str]) -> None:
        self.forms: dict[str, Form | None] = {iv: Aff(None, 1, 0, width)}
        self.limit = limit
        self.written = written

    def get(self, o: A.Operand, w: int) -> Form | None:
        if isinstance(o, A.Imm):
            v = _imm(o)
            return None if v is None else _aff(None, 0, v, w)
        if not isinstance(o, A.Reg):
            return None
        if o.name not in self.forms:
            return None if o.name in self.written else Aff(o.name, 0, 0, w)  # an invariant
        f = self.forms[o.name]
        return None if isinstance(f, Aff) and f.w != w else f

    def span(self, f: Form | None) -> tuple[int, int] | None:
        """The true integer range of a base-free form (the value its bits stand for), or None."""
        if f is None or f.base is not None:
            return None
        if isinstance(f, Idx):
            return f.off, f.off + f.scale * (f.count - 1)
        a, b = f.off, f.off + f.coef * (self.limit - 1)
        return min(a, b), max(a, b)


def _add(st: _State, x: Form | None, y: Form | None, w: int) -> Form | None:
    if isinstance(y, Idx) and not isinstance(x, Idx):
        x, y = y, x
    if isinstance(x, Idx):
        if not isinstance(y, Aff) or y.coef or w != 64 or x.base is not None and y.base is not None:
            return None
        if y.base is None:
            return Idx(x.base, x.scale, x.count, x.off + y.off)
        return Idx(y.base, x.scale, x.count, x.off + y.off) if _fits(st.span(x), 64, True) else None
    if not isinstance(x, Aff) or not isinstance(y, Aff) or x.base and y.base:
        return None
    return _aff(x.base or y.base, x.coef + y.coef, x.off + y.off, w)


def _scale(st: _State, x: Form | None, k: int, w: int) -> Form | None:
    """x * k mod 2**w (x base-free)."""
    if isinstance(x, Idx):
        span = st.span(x)
        if span is not None and span[0] >= 0 and k >= 0 and span[1] * k < 1 << (w - 1):
            return Idx(None, x.scale * k, x.count, x.off * k)
        return None
    if isinstance(x, Aff) and x.base is None:
        return _aff(None, x.coef * k, x.off * k, w)
    return None


def _resize(st: _State, f: Form | None, sw: int, signed: bool, dw: int) -> Form | None:
    """A base-free value of sw bits converted to dw bits (sign- or zero-extended, or truncated)."""
    if f is None or f.base is not None:
        return None
    if dw > sw and not _fits(st.span(f), sw, signed):
        return None  # the extension would not give the same integer
    if isinstance(f, Idx):
        return f if _fits(st.span(f), dw, True) or _fits(st.span(f), dw, False) else None
    return _aff(None, f.coef, f.off, dw)  # exact when widening (checked above); truncation is a ring homomorphism


def _step(st: _State, ins: A.Instr) -> Form | None:
    """The form of the (single) register ``ins`` defines, or None."""
    op, ops = ins.opcode, ins.operands
    ty = _ty(ins)
    if ty is None or len(ops) < 2:
        return None
    w, signed = ty
    if op in ("ld", "ldu"):
        return Idx(None, 1, 1 << w, 0) if w <= 16 and not signed else None
    if op == "mov" or op == "cvta" and not ins.has("shared"):
        return st.get(ops[1], w) if len(ops) == 2 else None
    if op == "cvt":
        types = [m for m in ins.mods if m in _INT]
        if len(types) != 2 or ins.has("sat"):
            return None
        dw, sw = _INT[types[0]], _INT[types[1]]
        f = st.get(ops[1], sw)
        return f if dw == sw else _resize(st, f, sw, types[1].startswith("s"), dw)
    if len(ops) != 3:
        return None
    a, c = ops[1], ops[2]
    if op == "add":
        return _add(st, st.get(a, w), st.get(c, w), w)
    if op == "sub":
        k = _imm(c)
        return None if k is None else _add(st, st.get(a, w), _aff(None, 0, -k, w), w)
    if op == "shl":
        k = _imm(c)
        return _scale(st, st.get(a, w), 1 << k, w) if k is not None and 0 <= k < w else None
    if op == "mul":
        k, x = (_imm(c), a) if _imm(c) is not None else (_imm(a), c)
        if k is None:
            return None
        if ins.has("wide"):
            if not _fits(st.span(st.get(x, w)), w, signed):
                return None
            return _scale(
                st, _resize(st, st.get(x, w), w, signed, 2 * w), _norm(k, w) if signed else k % (1 << w), 2 * w
            )
        return _scale(st, st.get(x, w), k, w) if ins.has("lo") else None
    if op == "shr":
        k, x = _imm(c), st.get(a, w)
        span = st.span(x)
        if k is None or not 0 <= k < w or span is None or span[0] < 0 or not _fits(span, w, signed):
            return None
        if span[1] >> k == 0:
            return _aff(None, 0, 0, w)
        if isinstance(x, Idx) and x.scale % (1 << k) == 0 and x.off % (1 << k) == 0:
            return Idx(None, x.scale >> k, x.count, x.off >> k)
        return None
    if op == "and":
        x, y = st.get(a, w), st.get(c, w)
        if any(isinstance(f, Aff) and f.base is None and f.coef == 0 and f.off == 0 for f in (x, y)):
            return _aff(None, 0, 0, w)
        k = _imm(c) if _imm(c) is not None else _imm(a)
        if k is None:
            return None
        k %= 1 << w
        if k == 0:
            return _aff(None, 0, 0, w)
        low = k & -k
        return Idx(None, low, k // low + 1, 0)
    if op == "rem" and not signed:
        k = _imm(c)
        return Idx(None, 1, k, 0) if k is not None and 0 < k < 1 << w else None
    return None


def address_forms(body: list[A.Instr], iv: str, width: int, signed: bool) -> dict[int, Form]:
    """id(instruction) -> the form of its address, for the ld/st/atom/red of ``body`` whose address is an Aff or
    Idx with an invariant base (in any state space; the caller picks)."""
    written = {r for ins in body for r in defs_uses(ins)[0]}
    st = _State(iv, LIMIT[(width, signed)], width, written)
    out: dict[int, Form] = {}
    for ins in body:
        if ins.opcode in MEM_OPS:
            k = 0 if ins.opcode in ("st", "red") else 1
            o = ins.operands[k] if len(ins.operands) > k else None
            if isinstance(o, A.Addr) and isinstance(o.base, A.Reg):
                f = _add(st, st.get(o.base, 64), _aff(None, 0, o.offset, 64), 64)
                if f is not None and f.base is not None:
                    out[id(ins)] = f
        defs = defs_uses(ins)[0]
        form = _step(st, ins) if len(defs) == 1 else None
        for r in defs:
            st.forms[r] = None
        if form is not None:
            st.forms[defs[0]] = form
    return out
