"""PTX text for the warp matrix rewrite (NOTE [warp matrix ops], jit/passes/warp_matrix.py): a snippet builder
with typed temporaries, fragments packed in registers, the per-warp area and address operands."""

from __future__ import annotations

from jit.errors import not_supported
from jit.passes.warp_matrix_layouts import Layout
from jit.ptx import ast as A

BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "f64": 64, "s8": 8, "u8": 8, "s32": 32}


def txt(op: A.Operand) -> str:
    if isinstance(op, A.Reg | A.Sym):
        return op.name
    if isinstance(op, A.Imm):
        if op.is_float and op.bits:
            return f"0f{op.value:08X}" if op.bits == 32 else f"0d{op.value:016X}"
        return repr(op.value) if op.is_float else str(op.value)
    raise not_supported(f"warp matrix operand {op}")


def regs(op: A.Operand) -> list[A.Operand]:
    return list(op.items) if isinstance(op, A.Vec) else [op]


class Snippet:
    """PTX text of one rewritten instruction; temporaries are declared at the top of its scope."""

    PREFIX = {"pred": "%wmp", "b16": "%wmh", "b32": "%wmr", "b64": "%wmd", "f32": "%wmf", "f64": "%wmfd"}

    def __init__(self, n: int, scratch: str) -> None:
        self.n, self.scratch = n, scratch
        self.count: dict[str, int] = {}
        self.lines: list[str] = []

    def reg(self, t: str) -> str:
        k = self.count.get(t, 0)
        self.count[t] = k + 1
        return f"{self.PREFIX[t]}{k}"

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def text(self) -> str:
        decls = [f".reg .{t} {self.PREFIX[t]}<{k}>;" for t, k in self.count.items()]
        return "{\n" + "\n".join(decls + self.lines) + "\n}"

    def lane_terms(self, lay: Layout, lane: str) -> tuple[str, str]:
        hi, lo = self.reg("b32"), self.reg("b32")
        self(f"shr.u32 {hi}, {lane}, {lay.sh};")
        self(f"and.b32 {lo}, {lane}, {lay.mask};")
        return hi, lo

    def linear(self, hi: str, lo: str, a: int, b: int) -> str:
        """a * hi + b * lo as a 64-bit register."""
        t, d = self.reg("b32"), self.reg("b64")
        self(f"mul.lo.u32 {t}, {hi}, {a};")
        self(f"mad.lo.u32 {t}, {lo}, {b}, {t};")
        self(f"cvt.u64.u32 {d}, {t};")
        return d


def ctype(t: str) -> str:
    return "f64" if t == "f64" else "s32" if t in ("s8", "u8", "s32") else "f32"


class Fragment:
    """Reading and writing the elements of a fragment held in registers (packed for types under 32 bits)."""

    def __init__(self, g: Snippet, regs: list[A.Operand], typ: str) -> None:
        if typ not in BITS:
            raise not_supported(f"warp matrix element type .{typ}")
        self.g, self.regs, self.typ = g, regs, typ
        self.per = max(1, 32 // BITS[typ])
        self._halves: dict[int, tuple[str, str]] = {}

    def need(self, n: int, what: str) -> None:
        if len(self.regs) * self.per < n:
            raise not_supported(f"{what}: {len(self.regs)} registers hold fewer than {n} .{self.typ} elements")

    def half(self, i: int) -> str:
        """Element i of a 16-bit type as a b16 register."""
        k = i // self.per
        if k not in self._halves:
            h = (self.g.reg("b16"), self.g.reg("b16"))
            self.g(f"mov.b32 {{{h[0]}, {h[1]}}}, {txt(self.regs[k])};")
            self._halves[k] = h
        return self._halves[k][i % self.per]

    def get(self, i: int) -> str:
        """Element i converted to the compute type."""
        g, t = self.g, self.typ
        r = txt(self.regs[i // self.per])
        j = i % self.per
        if t in ("f32", "f64", "s32"):
            return r
        if t == "f16":
            f = g.reg("f32")
            g(f"cvt.f32.f16 {f}, {self.half(i)};")
            return f
        if t in ("bf16", "tf32"):
            w, f = g.reg("b32"), g.reg("f32")
            g(
                f"and.b32 {w}, {r}, -8192;"
                if t == "tf32"
                else f"shl.b32 {w}, {r}, 16;"
                if j == 0
                else f"and.b32 {w}, {r}, -65536;"
            )
            g(f"mov.b32 {f}, {w};")
            return f
        w = g.reg("b32")
        g(f"bfe.{'s' if t == 's8' else 'u'}32 {w}, {r}, {8 * j}, 8;")
        return w

    def put(self, vals: list[str]) -> None:
        """Write elements (registers of the type's own width: b16 for f16/bf16, b32 for bytes) into the fragment;
        registers beyond them are zeroed."""
        g = self.g
        for k, r in enumerate(self.regs):
            part = vals[k * self.per : (k + 1) * self.per]
            dst = txt(r)
            if not part:
                g(f"mov.b{64 if self.typ == 'f64' else 32} {dst}, 0;")
            elif self.per == 1:
                g(f"mov.b{64 if self.typ == 'f64' else 32} {dst}, {part[0]};")
            elif self.per == 2:
                g(f"mov.b32 {dst}, {{{part[0]}, {part[1]}}};")
            else:
                w = g.reg("b32")
                g(f"mov.b32 {w}, {part[0]};")
                for j, v in enumerate(part[1:], 1):
                    g(f"bfi.b32 {w}, {v}, {w}, {8 * j}, 8;")
                g(f"mov.b32 {dst}, {w};")


def warp_area(g: Snippet, area: int) -> tuple[str, str]:
    lane, warp, base, off = g.reg("b32"), g.reg("b32"), g.reg("b64"), g.reg("b64")
    g(f"mov.u32 {lane}, %laneid;")
    g(f"mov.u32 {warp}, %warpid;")
    g(f"mov.u64 {base}, {g.scratch};")
    g(f"mul.wide.u32 {off}, {warp}, {area};")
    g(f"add.u64 {base}, {base}, {off};")
    return lane, base


def space(ins: A.Instr) -> str:
    sp = next((m for m in ins.mods if m.split("::")[0] in ("global", "shared")), None)
    return "." + sp.split("::")[0] if sp else ""


def address(g: Snippet, op: A.Operand, regtypes: dict[str, str]) -> str:
    """A 64-bit register holding the address operand [base+off] (32-bit shared addresses are widened)."""
    if not isinstance(op, A.Addr) or op.base is None:
        raise not_supported("warp matrix address operand")
    p = g.reg("b64")
    if isinstance(op.base, A.Reg) and regtypes.get(op.base.name, "b64")[1:] in ("32",):
        g(f"cvt.u64.u32 {p}, {op.base.name};")
    else:
        g(f"mov.u64 {p}, {txt(op.base)};")
    if op.offset:
        g(f"add.u64 {p}, {p}, {op.offset};")
    return p
