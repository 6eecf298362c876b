"""NOTE [range pre-check] (jit/emit/cpu/ranges.py): a block decides from value ranges, once, that no thread leaves
at an exit guard, and otherwise falls back to the exact per-thread check loop. Which copy a block runs must never
change a result, so these tests run guards whose prefixes overflow, wrap, compare signed and unsigned, narrow and
widen, against a Python model of PTX's integer semantics."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from jit import compile_module
from jit.errors import JitError
from jit.pipeline import translate
from tests.unit.jit.helpers import HEADER, pack

# -- a model of the integer instructions the generator uses ----------------------------------------------------


def _w(t: str) -> int:
    return int(t[1:])


def _val(bits: int, t: str) -> int:
    w = _w(t)
    v = bits & ((1 << w) - 1)
    return v - (1 << w) if t[0] == "s" and v >> (w - 1) else v


def _bits(v: int, w: int) -> int:
    return v & ((1 << w) - 1)


_CMPS = {
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}
_BINARY = {
    "add": lambda x, y, t: x + y,
    "sub": lambda x, y, t: x - y,
    "mul": lambda x, y, t: x * y,
    "and": lambda x, y, t: x & y,
    "xor": lambda x, y, t: x ^ y,
    "min": lambda x, y, t: min(_val(x, t), _val(y, t)),
    "max": lambda x, y, t: max(_val(x, t), _val(y, t)),
}
_UCMPS = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}
_INTERESTING = [
    0,
    1,
    3,
    100,
    255,
    256,
    1000,
    4095,
    2**31 - 300,
    2**31 - 1,
    2**31,
    2**32 - 200,
    2**32 - 1,
    -1,
    -5,
    -300,
    -(2**31),
    2**62,
    2**63 - 100,
    -(2**63) + 5,
    2**40 + 17,
]


class _Gen:
    """A random guard prefix over %tid.x, %ctaid.x, %ntid.x and two 64-bit parameters, as PTX text and as a
    per-thread Python function."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.ops: list = []
        self.regs: dict[int, list[str]] = {32: [], 64: []}
        self.n = 0

    def _new(self, w: int) -> str:
        self.n += 1
        r = f"%{'r' if w == 32 else 'rd'}{self.n}"
        return r

    def _src(self, w: int, imm_ok: bool = True) -> tuple[str, object]:
        if imm_ok and self.rng.random() < 0.3 or not self.regs[w]:
            v = self.rng.choice([0, 1, 2, 4, 7, 31, 64, 255, 1000, -1, -64, 2**31 - 1, 2**w - 1 if w == 32 else 2**40])
            return str(v), ("imm", v)
        r = self.rng.choice(self.regs[w][-4:] + self.regs[w][:2])
        return r, ("reg", r)

    def build(self) -> None:
        rng = self.rng
        for s in ("tid.x", "ctaid.x", "ntid.x"):
            d = self._new(32)
            self.lines.append(f"mov.u32 {d}, %{s};")
            self.ops.append(("special", d, s))
            self.regs[32].append(d)
        for p in ("A", "B"):
            t = rng.choice(["s64", "u64"])
            d = self._new(64)
            self.lines.append(f"ld.param.{t} {d}, [{p}];")
            self.ops.append(("param", d, p, 64))
            self.regs[64].append(d)
            d = self._new(32)
            t = rng.choice(["s32", "u32"])
            self.lines.append(f"ld.param.{t} {d}, [{p}];")
            self.ops.append(("param", d, p, 32))
            self.regs[32].append(d)
        # the usual linear index, so that many blocks pass or fail as a whole
        d = self._new(32)
        self.lines.append(f"mad.lo.s32 {d}, %r2, %r3, %r1;")
        self.ops.append(("mad", "s32", d, ("reg", "%r2"), ("reg", "%r3"), ("reg", "%r1")))
        self.regs[32].append(d)
        for _ in range(rng.randint(1, 6)):
            self._op()

    def _op(self) -> None:
        rng = self.rng
        w = rng.choice([32, 64])
        t = rng.choice(["s", "u"]) + str(w)
        kind = rng.choice(["add", "sub", "mul", "wide", "mad", "shl", "shr", "and", "min", "max", "cvt", "neg", "xor"])
        if kind == "wide":
            t = rng.choice(["s32", "u32"])
            a, ao = self._src(32)
            b, bo = self._src(32)
            d = self._new(64)
            self.lines.append(f"mul.wide.{t} {d}, {a}, {b};")
            self.ops.append(("wide", t, d, ao, bo))
            self.regs[64].append(d)
            return
        if kind == "cvt":
            st = rng.choice(["s", "u"]) + str(rng.choice([32, 64]))
            a, ao = self._src(_w(st), imm_ok=False)
            d = self._new(w)
            self.lines.append(f"cvt.{t}.{st} {d}, {a};")
            self.ops.append(("cvt", t, st, d, ao))
            self.regs[w].append(d)
            return
        d = self._new(w)
        a, ao = self._src(w, imm_ok=False)
        if kind in ("shl", "shr"):
            k = rng.choice([0, 1, 2, 3, 5, w - 1, w, w + 3])
            tt = f"b{w}" if kind == "shl" else t
            self.lines.append(f"{kind}.{tt} {d}, {a}, {k};")
            self.ops.append((kind, tt, d, ao, k))
        elif kind == "neg":
            self.lines.append(f"neg.s{w} {d}, {a};")
            self.ops.append(("neg", f"s{w}", d, ao))
        else:
            b, bo = self._src(w)
            if kind == "mad":
                c, co = self._src(w)
                self.lines.append(f"mad.lo.{t} {d}, {a}, {b}, {c};")
                self.ops.append(("mad", t, d, ao, bo, co))
            else:
                name = {"mul": f"mul.lo.{t}", "and": f"and.b{w}", "xor": f"xor.b{w}"}.get(kind, f"{kind}.{t}")
                self.lines.append(f"{name} {d}, {a}, {b};")
                self.ops.append((kind, t, d, ao, bo))
        self.regs[w].append(d)

    def guard(self, label: str, last: bool) -> tuple[str, object]:
        """A guard on a random register: its PTX and (cmp, type, a, b, exits-when-true)."""
        rng = self.rng
        w = rng.choice([32, 64])
        t = rng.choice(["s", "u"]) + str(w)
        cmp = rng.choice(list(_CMPS) + (list(_UCMPS) if t[0] == "u" else []))
        a, ao = rng.choice([(r, ("reg", r)) for r in self.regs[w][-3:]])
        b, bo = self._src(w)
        self.n += 1
        p = f"%p{self.n}"
        form = rng.choice(["taken", "negated"] + (["fall"] if last else []))
        text = f"setp.{cmp}.{t} {p}, {a}, {b};\n"
        if form == "taken":
            text += f"@{p} bra {label};\n"
        elif form == "negated":
            text += f"@!{p} bra {label};\n"
        else:
            text += f"@{p} bra BODY;\nret;\nBODY:\n"
        return text, (cmp, t, ao, bo, form == "taken")

    def run(self, guards: list, tid: int, ctaid: int, ntid: int, params: dict[str, int]) -> bool:
        """Whether the thread passes every guard."""
        env: dict[str, int] = {}

        def get(o: tuple[str, object], w: int) -> int:
            return _bits(int(o[1]), w) if o[0] == "imm" else _bits(env[str(o[1])], w)  # type: ignore[arg-type]

        for op in self.ops:
            k = op[0]
            if k == "special":
                env[op[1]] = {"tid.x": tid, "ctaid.x": ctaid, "ntid.x": ntid}[op[2]]
            elif k == "param":
                env[op[1]] = _bits(params[op[2]], op[3])
            elif k == "wide":
                _, t, d, a, b = op
                env[d] = _bits(_val(get(a, 32), t) * _val(get(b, 32), t), 64)
            elif k == "cvt":
                _, t, st, d, a = op
                env[d] = _bits(_val(get(a, _w(st)), st), _w(t))
            elif k in ("shl", "shr"):
                _, t, d, a, sh = op
                w = _w(t)
                x = get(a, w)
                if k == "shl":
                    env[d] = _bits(x << sh, w) if sh < w else 0
                elif t[0] == "s":
                    env[d] = _bits(_val(x, t) >> min(sh, w - 1), w)
                else:
                    env[d] = x >> sh if sh < w else 0
            elif k == "neg":
                env[op[2]] = _bits(-get(op[3], _w(op[1])), _w(op[1]))
            elif k == "mad":
                _, t, d, a, b, c = op
                w = _w(t)
                env[d] = _bits(get(a, w) * get(b, w) + get(c, w), w)
            else:
                _, t, d, a, b = op
                w = _w(t)
                x, y = get(a, w), get(b, w)
                env[d] = _bits(_BINARY[k](x, y, t), w)
        for cmp, t, a, b, exit_when_true in guards:
            f = _CMPS[_UCMPS.get(cmp, cmp)]
            w = _w(t)
            if f(_val(get(a, w), t), _val(get(b, w), t)) == exit_when_true:
                return False
        return True


_BODY = """mov.u32 %q1, %tid.x; mov.u32 %q2, %ctaid.x; mov.u32 %q3, %ntid.x; mad.lo.s32 %q4, %q2, %q3, %q1;
ld.param.u64 %qd1, [out]; cvta.to.global.u64 %qd1, %qd1; mul.wide.u32 %qd2, %q4, 4; add.s64 %qd3, %qd1, %qd2;
st.global.u32 [%qd3], 1;
DONE:
ret;
"""


def _random_kernels(seed: int, count: int) -> tuple[str, list]:
    rng = random.Random(seed)
    text, models = HEADER, []
    for i in range(count):
        g = _Gen(rng)
        g.build()
        guards, gtext = [], ""
        ng = rng.choice([1, 1, 2])
        for j in range(ng):
            t, m = g.guard("DONE", j == ng - 1)
            gtext += t
            guards.append(m)
        text += (
            f".visible .entry k{i}(.param .u64 out, .param .u64 A, .param .u64 B)\n{{\n"
            f".reg .b32 %r<{g.n + 1}>; .reg .b64 %rd<{g.n + 1}>; .reg .pred %p<{g.n + 1}>;\n"
            ".reg .b32 %q<5>; .reg .b64 %qd<4>;\n" + "\n".join(g.lines) + "\n" + gtext + _BODY + "}\n"
        )
        models.append((g, guards))
    return text, models


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_guards_match_the_model(seed: int) -> None:
    """Random prefixes and guards, parameters at the edges of 32- and 64-bit ranges: every thread's outcome is the
    model's, whichever way each block decided. Most kernels must get a pre-check, or this tests nothing."""
    text, models = _random_kernels(seed, 40)
    ir_text = str(translate(text, "cpu", False, "t").ir_module)
    prechecked = len(re.findall(r"^guards_check[.\d]*:", ir_text, re.M))
    assert prechecked >= 20, prechecked
    mod = compile_module(text, tier="quick")
    rng = random.Random(seed * 7919)
    grid, block = 5, 64
    for i, (g, guards) in enumerate(models):
        k = mod.get_kernel(f"k{i}")
        for _ in range(6):
            params = {
                "A": rng.choice(_INTERESTING + [rng.randrange(-(2**63), 2**63)]),
                "B": rng.choice(_INTERESTING + [rng.randrange(0, 2**33)]),
            }
            out = np.zeros(grid * block, np.uint32)
            k.launch(grid, block, 0, pack(k, out, params["A"], params["B"]))
            want = [g.run(guards, t % block, t // block, block, params) for t in range(grid * block)]
            assert (out == np.array(want, np.uint32)).all(), (i, params, "\n".join(g.lines), guards)


WRAP = (
    HEADER
    + """
.visible .entry k(.param .u64 out, .param .u32 base)
{
  .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<2>;
  mov.u32 %r1, %tid.x; ld.param.u32 %r2, [base];
  add.s32 %r3, %r2, %r1;
  setp.lt.s32 %p1, %r3, 0;
  @%p1 bra DONE;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r3;
DONE:
  ret;
}
"""
)


@pytest.mark.parametrize("tier", ["quick", "optimized"])
def test_a_wrapping_index_takes_the_check_loop(tier: str) -> None:
    """base + tid passes 2^31 - 1 inside the block: as integers the range [base, base + 63] is never negative, but
    the s32 values of its upper part are. Those threads must leave."""
    k = compile_module(WRAP, tier=tier).get_kernel("k")
    base = 2**31 - 10
    out = np.full(64, 7, np.uint32)
    k.launch(1, 64, 0, pack(k, out, base))
    want = np.array([(base + t) & 0xFFFFFFFF if base + t < 2**31 else 7 for t in range(64)], np.uint32)
    assert (out == want).all()
    out[:] = 7
    k.launch(1, 64, 0, pack(k, out, 5))  # in range: the whole block passes
    assert (out == 5 + np.arange(64)).all()


SAXPY_LIKE = (
    HEADER
    + """
.visible .entry k(.param .u64 out, .param .u64 x, .param .u64 n)
{
  .reg .b32 %r<4>; .reg .b64 %rd<20>; .reg .pred %p<2>; .reg .f32 %f<4>;
  ld.param.u64 %rd8, [n]; ld.param.u64 %rd2, [x]; ld.param.u64 %rd6, [out];
  mov.u32 %r1, %tid.x; cvt.s64.s32 %rd9, %r1; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mul.wide.s32 %rd10, %r2, %r3; add.s64 %rd1, %rd10, %rd9;
  setp.ge.s64 %p1, %rd1, %rd8;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd11, %rd2; shr.s64 %rd12, %rd1, 63; and.b64 %rd13, %rd12, %rd8; add.s64 %rd14, %rd13, %rd1;
  shl.b64 %rd15, %rd14, 2; add.s64 %rd16, %rd11, %rd15; ld.global.f32 %f1, [%rd16];
  add.f32 %f2, %f1, %f1;
  cvta.to.global.u64 %rd17, %rd6; add.s64 %rd18, %rd17, %rd15; st.global.f32 [%rd18], %f2;
DONE:
  ret;
}
"""
)


def test_numba_style_guard_and_wraparound_are_modelled() -> None:
    """numba's index (a 64-bit mul.wide of ntid and ctaid plus a sign-extended tid) and its Python-style
    wrap-around (`shr.s64 63; and; add`) are within the model: the unchecked module gets the pre-check, and so does
    the bounds-checked one, for its guard and both accesses."""
    for checked in (False, True):
        ir_text = str(translate(SAXPY_LIKE, "cpu", checked, "t").ir_module)
        assert re.search(r"^guards_check[.\d]*:", ir_text, re.M), checked


@pytest.mark.parametrize("n", [1, 255, 256, 1000, 1024])
def test_numba_style_kernel_checked(n: int) -> None:
    """Bounds-checked: full blocks pass by ranges, the partial one by the check loop; an x one element short is
    reported by the block whose range reaches past it."""
    k = compile_module(SAXPY_LIKE, bounds_check=True, tier="quick").get_kernel("k")
    x = np.arange(n, dtype=np.float32)
    out = np.full(1024 + 8, -1.0, np.float32)
    grid = (n + 255) // 256
    k.launch(
        grid, 256, 0, pack(k, out, x, n), allowed_ranges=[(x.ctypes.data, x.nbytes), (out.ctypes.data, out.nbytes)]
    )
    assert (out[:n] == 2 * x).all() and (out[n:] == -1.0).all()
    short = x[:-1].copy() if n > 1 else np.zeros(0, np.float32)
    with pytest.raises(JitError) as ei:
        k.launch(
            grid,
            256,
            0,
            pack(k, out, short if n > 1 else x, n),
            allowed_ranges=[
                (short.ctypes.data, short.nbytes) if n > 1 else (x.ctypes.data, 0),
                (out.ctypes.data, out.nbytes),
            ],
        )
    assert ei.value.code == 700


UNMODELLED = (
    HEADER
    + """
.visible .entry k(.param .u64 out, .param .u32 n)
{
  .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<2>;
  mov.u32 %r1, %tid.x; ld.param.u32 %r2, [n];
  rem.u32 %r3, %r1, 7;
  setp.ge.u32 %p1, %r3, %r2;
  @%p1 bra DONE;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r3;
DONE:
  ret;
}
"""
)


def test_a_guard_on_an_unmodelled_value_has_no_pre_check() -> None:
    ir_text = str(translate(UNMODELLED, "cpu", False, "t").ir_module)
    assert "guards_pass" in ir_text and not re.search(r"^guards_check[.\d]*:", ir_text, re.M)
    k = compile_module(UNMODELLED, tier="quick").get_kernel("k")
    out = np.full(64, 99, np.uint32)
    k.launch(1, 64, 0, pack(k, out, 4))
    t = np.arange(64)
    assert (out == np.where(t % 7 < 4, t % 7, 99)).all()


WIDE_OF_NEGATIVE = (
    HEADER
    + """
.visible .entry k(.param .u64 out, .param .u32 a)
{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  mov.u32 %r1, %tid.x; ld.param.u32 %r2, [a];
  mul.wide.s32 %rd4, %r2, %r1;
  setp.lt.s64 %p1, %rd4, 0;
  @%p1 bra DONE;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r1;
DONE:
  ret;
}
"""
)


def test_a_widening_multiply_reads_signed_values() -> None:
    """a = 0xFFFFFFFF was loaded as u32, so its range is [2^32 - 1, 2^32 - 1]; mul.wide.s32 reads it as -1, and
    a * tid is negative for every thread but the first."""
    k = compile_module(WIDE_OF_NEGATIVE, tier="quick").get_kernel("k")
    out = np.full(64, 99, np.uint32)
    k.launch(1, 64, 0, pack(k, out, 0xFFFFFFFF))
    assert out[0] == 0 and (out[1:] == 99).all()
    k.launch(1, 64, 0, pack(k, out, 3))
    assert (out == np.arange(64)).all()


def _minus_one_kernel(prefix: str, guard: str) -> str:
    return (
        HEADER
        + f"""
.visible .entry k(.param .u64 out, .param .u32 a)
{{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  mov.u32 %r1, %tid.x; ld.param.u32 %r2, [a];
  {prefix}
  {guard}
  @%p1 bra DONE;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r1;
DONE:
  ret;
}}
"""
    )


@pytest.mark.parametrize(
    "prefix,guard",
    [
        ("cvt.s64.s32 %rd4, %r2;", "setp.eq.s64 %p1, %rd4, -1;"),  # sign extension of 0xFFFFFFFF
        ("shr.s32 %r3, %r2, 1;", "setp.eq.u32 %p1, %r3, 0xFFFFFFFF;"),  # -1 >> 1 is still -1
        ("min.s32 %r3, %r2, 5;", "setp.eq.s32 %p1, %r3, -1;"),  # min(-1, 5)
    ],
    ids=["cvt", "shr", "min"],
)
def test_readers_of_values_see_the_signed_value(prefix: str, guard: str) -> None:
    """a = 0xFFFFFFFF loaded as u32: its range is the point 2^32 - 1, and a reader that needs an s32 value must not
    take that for the value (-1). Every thread leaves."""
    k = compile_module(_minus_one_kernel(prefix, guard), tier="quick").get_kernel("k")
    out = np.full(64, 99, np.uint32)
    k.launch(1, 64, 0, pack(k, out, 0xFFFFFFFF))
    assert (out == 99).all()
    k.launch(1, 64, 0, pack(k, out, 7))
    assert (out == np.arange(64)).all()
