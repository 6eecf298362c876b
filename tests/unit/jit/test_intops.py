"""Tier-2 integer instructions against Python reference models on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.jit.helpers import run_elementwise

RNG = np.random.default_rng(1)
M32 = 0xFFFFFFFF


def rand(n: int = 64) -> np.ndarray:
    v = RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    v[:4] = [0, 1, M32, 0x80000000]
    return v


def s32(x: int) -> int:
    x = int(x) & M32
    return x - (1 << 32) if x >> 31 else x


def test_mul_hi_wide_mad() -> None:
    a, b = rand(), rand()
    hi = run_elementwise("mul.hi.u32 %d, %a, %b;", "u32", "u32", a, b)
    assert hi.tolist() == [(int(x) * int(y)) >> 32 for x, y in zip(a, b, strict=False)]
    his = run_elementwise("mul.hi.s32 %d, %a, %b;", "s32", "s32", a.view(np.int32), b.view(np.int32))
    assert his.tolist() == [s32((s32(x) * s32(y)) >> 32) for x, y in zip(a, b, strict=False)]
    body = "mul.wide.s32 %rd30, %a, %b; cvt.u32.u64 %r1, %rd30; shr.u64 %rd31, %rd30, 32; cvt.u32.u64 %r2, %rd31; xor.b32 %d, %r1, %r2;"
    w = run_elementwise(body, "s32", "u32", a.view(np.int32), b.view(np.int32))
    exp = [((s32(x) * s32(y)) & M32) ^ (((s32(x) * s32(y)) >> 32) & M32) for x, y in zip(a, b, strict=False)]
    assert w.tolist() == exp
    mad = run_elementwise("mad.lo.u32 %d, %a, %b, %c;", "u32", "u32", a, b, a)
    assert mad.tolist() == [(int(x) * int(y) + int(x)) & M32 for x, y in zip(a, b, strict=False)]


def test_add_carry_chain() -> None:
    a, b = rand(), rand()
    body = "add.cc.u32 %r1, %a, %b; addc.u32 %d, 0, 0;"
    assert run_elementwise(body, "u32", "u32", a, b).tolist() == [
        int(int(x) + int(y) > M32) for x, y in zip(a, b, strict=False)
    ]
    body = "sub.cc.u32 %r1, %a, %b; subc.u32 %d, 0, 0;"
    assert run_elementwise(body, "u32", "u32", a, b).tolist() == [
        M32 if x < y else 0 for x, y in zip(a, b, strict=False)
    ]
    # CF is a carry for subtraction too (NOTE [carry flag]): sub.cc leaves 1 when nothing was borrowed ...
    body = "sub.cc.u32 %r1, %a, %b; addc.u32 %d, 0, 0;"
    assert run_elementwise(body, "u32", "u32", a, b).tolist() == [int(x >= y) for x, y in zip(a, b, strict=True)]
    # ... and subc adds it to a + ~b: after add.cc, 0 - 0 with carry-in c is 0xFFFFFFFF + c
    body = "add.cc.u32 %r1, %a, %b; subc.u32 %d, 0, 0;"
    want = [(M32 + int(int(x) + int(y) > M32)) & M32 for x, y in zip(a, b, strict=True)]
    assert run_elementwise(body, "u32", "u32", a, b).tolist() == want


def test_bit_ops() -> None:
    a, _b = rand(), rand()
    assert run_elementwise("popc.b32 %d, %a;", "u32", "u32", a).tolist() == [bin(int(x)).count("1") for x in a]
    assert run_elementwise("clz.b32 %d, %a;", "u32", "u32", a).tolist() == [32 - int(x).bit_length() for x in a]
    assert run_elementwise("brev.b32 %d, %a;", "u32", "u32", a).tolist() == [int(f"{int(x):032b}"[::-1], 2) for x in a]
    bf = run_elementwise("bfind.u32 %d, %a;", "u32", "u32", a).tolist()
    assert bf == [int(x).bit_length() - 1 if x else M32 for x in a]
    bs = run_elementwise("bfind.s32 %d, %a;", "s32", "u32", a.view(np.int32)).tolist()
    assert bs == [(int(x) ^ M32 if x >> 31 else int(x)).bit_length() - 1 if x not in (0, M32) else M32 for x in a]


def _bfe(x: int, pos: int, ln: int, signed: bool) -> int:
    pos &= 0xFF
    ln &= 0xFF
    if ln == 0:
        return 0
    bits = [(x >> min(i, 31)) & 1 for i in range(64)]
    sbit = bits[min(pos + ln - 1, 31)] if signed else 0
    r = 0
    for i in range(32):
        bit = bits[pos + i] if (i < ln and pos + i <= 31) else sbit
        r |= bit << i
    return r


def test_bfe_bfi() -> None:
    a = rand()
    pos = RNG.integers(0, 40, 64).astype(np.uint32)
    ln = RNG.integers(0, 40, 64).astype(np.uint32)
    ex = "\n.reg .b32 %p_, %l_;"
    body = (
        "ld.param.u64 %rd31, [p2]; add.s64 %rd31, %rd31, %rd22; ld.global.u32 %r1, [%rd31];"
        "ld.param.u64 %rd32, [p3]; add.s64 %rd32, %rd32, %rd22; ld.global.u32 %r2, [%rd32];"
    )
    body = body.replace("%rd22", "%rd20")
    r = run_elementwise(body + "bfe.u32 %d, %a, %r1, %r2;", "u32", "u32", a, pos, ln, extra_regs=ex)
    assert r.tolist() == [_bfe(int(x), int(p), int(n), False) for x, p, n in zip(a, pos, ln, strict=False)]
    r = run_elementwise(body + "bfe.s32 %d, %a, %r1, %r2;", "u32", "u32", a, pos, ln, extra_regs=ex)
    assert r.tolist() == [_bfe(int(x), int(p), int(n), True) for x, p, n in zip(a, pos, ln, strict=False)]
    f = run_elementwise("bfi.b32 %d, %a, %b, 8, 12;", "u32", "u32", a, a[::-1].copy())
    exp = [(int(y) & ~(0xFFF << 8) | ((int(x) & 0xFFF) << 8)) & M32 for x, y in zip(a, a[::-1], strict=False)]
    assert f.tolist() == exp


def test_prmt_shf_lop3_dp4a() -> None:
    a, b = rand(), rand()
    r = run_elementwise("prmt.b32 %d, %a, %b, 0x5140;", "u32", "u32", a, b)

    def prmt(x: int, y: int, s: int) -> int:
        both = x | (y << 32)
        out = 0
        for i in range(4):
            sel = (s >> (4 * i)) & 0xF
            byte = (both >> (8 * (sel & 7))) & 0xFF
            if sel & 8:
                byte = 0xFF if byte & 0x80 else 0
            out |= byte << (8 * i)
        return out

    assert r.tolist() == [prmt(int(x), int(y), 0x5140) for x, y in zip(a, b, strict=False)]
    r = run_elementwise("prmt.b32 %d, %a, %b, 0x8888;", "u32", "u32", a, b)
    assert r.tolist() == [prmt(int(x), int(y), 0x8888) for x, y in zip(a, b, strict=False)]
    r = run_elementwise("shf.l.wrap.b32 %d, %a, %b, 40;", "u32", "u32", a, b)
    assert r.tolist() == [(((int(y) << 32 | int(x)) << 8) >> 32) & M32 for x, y in zip(a, b, strict=False)]
    r = run_elementwise("shf.r.clamp.b32 %d, %a, %b, 40;", "u32", "u32", a, b)
    assert r.tolist() == [int(y) for y in b]
    r = run_elementwise("lop3.b32 %d, %a, %b, %a, 0x96;", "u32", "u32", a, b)  # a ^ b ^ a
    assert r.tolist() == [int(y) for y in b]
    r = run_elementwise("dp4a.s32.s32 %d, %a, %b, 7;", "u32", "u32", a, b)

    def sb(v: int, i: int) -> int:
        x = (v >> (8 * i)) & 0xFF
        return x - 256 if x & 0x80 else x

    assert r.tolist() == [
        (7 + sum(sb(int(x), i) * sb(int(y), i) for i in range(4))) & M32 for x, y in zip(a, b, strict=False)
    ]


def test_f16() -> None:
    a = np.array([1.5, -2.0, 65504.0, 0.1], np.float16)
    b = np.array([2.25, 0.5, 65504.0, 0.2], np.float16)
    r = run_elementwise("add.f16 %d, %a, %b;", "f16", "f16", a, b)
    assert r.tolist() == (a + b).tolist()
    r = run_elementwise("fma.rn.f16 %d, %a, %b, %a;", "f16", "f16", a, b)
    exp = (a.astype(np.float64) * b + a).astype(np.float16)
    assert r.tolist() == exp.tolist()
    c = run_elementwise("cvt.f32.f16 %d, %a;", "f16", "f32", a)
    assert c.tolist() == a.astype(np.float32).tolist()


_VCMP = {
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y,
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
}


def _video_ref(
    op: str,
    lanes: int,
    dt: str,
    at: str,
    bt: str,
    sat: bool,
    add: bool,
    a: int,
    b: int,
    c: int,
    mask: str | None = None,
    asel: str | None = None,
    bsel: str | None = None,
    cmp: str = "",
) -> int:
    """PTX ISA model of vop2/vop4 (SIMD video instructions)."""
    w = 32 // lanes
    pool = (int(b) << 32) | int(a)

    def lane(sel: str | None, first: int, signed: bool, i: int) -> int:
        k = int(sel[lanes - 1 - i]) if sel else first + i
        v = (pool >> (k * w)) & ((1 << w) - 1)
        return v - (1 << w) if signed and v >> (w - 1) else v

    written = {int(ch) for ch in mask} if mask else set(range(lanes))
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if dt == "s32" else (0, (1 << w) - 1)
    acc, merged = int(c), 0
    for i in range(lanes):
        x, y = lane(asel, 0, at == "s32", i), lane(bsel, lanes, bt == "s32", i)
        s = x + y
        t = (
            int(_VCMP[cmp](x, y))
            if op == "vset"
            else {
                "vadd": s,
                "vsub": x - y,
                "vavrg": (s + 1) >> 1 if s >= 0 else s >> 1,
                "vabsdiff": abs(x - y),
                "vmin": min(x, y),
                "vmax": max(x, y),
            }[op]
        )
        if sat and not add:
            t = min(max(t, lo), hi)
        if i in written:
            if add:
                acc += t
            else:
                merged |= (t & ((1 << w) - 1)) << (i * w)
    if add:
        return acc & M32
    keep = sum(((1 << w) - 1) << (i * w) for i in range(lanes) if i not in written)
    return merged | (int(c) & keep)


def test_simd_video_instructions() -> None:
    """vadd/vsub/vavrg/vabsdiff/vmin/vmax on 4 bytes and 2 half-words: types, .sat, .add, masks, lane selectors
    (nvcc emits vabsdiff4 for __vabsdiffu4 and __vsadu4)."""
    a, b, c = rand(), rand(), rand()
    cases = [("", None, None, None), (".sat", None, None, None), (".add", None, None, None)]
    for lanes, sels in ((4, [(".b20", "b0123", "b7361"), (".b3", "b4444", "b0000")]), (2, [(".h1", "h32", "h01")])):
        for op in ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax"):
            for dt, at, bt in (("u32", "u32", "u32"), ("s32", "s32", "s32"), ("s32", "u32", "s32")):
                for mod, mask, asel, bsel in cases + [("", *s) for s in sels]:
                    d = "%d" + (mask or "")
                    aa = "%a" + ("." + asel if asel else "")
                    bb = "%b" + ("." + bsel if bsel else "")
                    body = f"{op}{lanes}.{dt}.{at}.{bt}{mod} {d}, {aa}, {bb}, %c;"
                    got = run_elementwise(body, "u32", "u32", a, b, c)
                    want = [
                        _video_ref(
                            op,
                            lanes,
                            dt,
                            at,
                            bt,
                            mod == ".sat",
                            mod == ".add",
                            x,
                            y,
                            z,
                            (mask or "")[2:] or None,
                            (asel or "")[1:] or None,
                            (bsel or "")[1:] or None,
                        )
                        for x, y, z in zip(a, b, c, strict=True)
                    ]
                    assert got.tolist() == want, body


def test_simd_vset() -> None:
    """vset2/vset4: each lane 1 or 0 by the comparison of its (extended) operands, under a mask or summed (.add)."""
    a, b, c = rand(), rand(), rand()
    a[::3] = b[::3]  # equal lanes too
    for lanes, sel in ((4, (".b31", "b0123", "b7361")), (2, (".h1", "h32", "h01"))):
        for cmp in _VCMP:
            for at, bt in (("u32", "u32"), ("s32", "s32"), ("u32", "s32")):
                for mod, mask, asel, bsel in (("", None, None, None), (".add", None, None, None), ("", *sel)):
                    d = "%d" + (mask or "")
                    aa = "%a" + ("." + asel if asel else "")
                    bb = "%b" + ("." + bsel if bsel else "")
                    body = f"vset{lanes}.{at}.{bt}.{cmp}{mod} {d}, {aa}, {bb}, %c;"
                    got = run_elementwise(body, "u32", "u32", a, b, c)
                    want = [
                        _video_ref(
                            "vset",
                            lanes,
                            "u32",
                            at,
                            bt,
                            False,
                            mod == ".add",
                            x,
                            y,
                            z,
                            (mask or "")[2:] or None,
                            (asel or "")[1:] or None,
                            (bsel or "")[1:] or None,
                            cmp,
                        )
                        for x, y, z in zip(a, b, c, strict=True)
                    ]
                    assert got.tolist() == want, body


def test_fns() -> None:
    """fns.b32 d, mask, base, offset: the offset-th set bit from base (up for > 0, down for < 0, base included)."""

    def ref(mask: int, base: int, off: int) -> int:
        if off == 0:
            return base if mask >> base & 1 else M32
        pos, left, inc = base, abs(off), 1 if off > 0 else -1
        while 0 <= pos < 32:
            if mask >> pos & 1:
                left -= 1
                if left == 0:
                    return pos
            pos += inc
        return M32

    masks = rand()
    bases = (rand() % 32).astype(np.uint32)
    offs = (RNG.integers(-9, 10, len(masks))).astype(np.int32).view(np.uint32)
    got = run_elementwise("fns.b32 %d, %a, %b, %c;", "u32", "u32", masks, bases, offs)
    assert got.tolist() == [
        ref(int(m), int(bs), int(np.int32(o))) for m, bs, o in zip(masks, bases, offs.view(np.int32), strict=True)
    ]


def test_szext() -> None:
    def ref(a: int, b: int, clamp: bool, signed: bool) -> int:  # extend the low N bits of a (PTX ISA szext)
        if clamp and b >= 32:
            return a
        n = b if clamp else b % 32
        if n == 0:
            return 0
        v = a & ((1 << n) - 1)
        return v | (M32 << n) & M32 if signed and v >> (n - 1) & 1 else v

    a = rand()
    b = RNG.integers(0, 70, 64).astype(np.uint32)
    b[:8] = [0, 1, 31, 32, 33, 64, 8, 16]
    for mode in ("clamp", "wrap"):
        for t in ("u32", "s32"):
            got = run_elementwise(f"szext.{mode}.{t} %d, %a, %b;", "u32", "u32", a, b)
            assert got.tolist() == [
                ref(int(x), int(y), mode == "clamp", t == "s32") for x, y in zip(a, b, strict=True)
            ], (mode, t)
    assert (
        run_elementwise("szext.wrap.u32 %d, 0xffffffff, 0;", "u32", "u32", a, b).tolist() == [0] * 64
    )  # the ISA's example


def test_cluster_of_one() -> None:
    """getctarank is 0, mapa to rank 0 is the address itself, setmaxnreg changes nothing."""
    a = rand()
    assert run_elementwise("getctarank.shared::cluster.u32 %d, %a;", "u32", "u32", a).tolist() == [0] * 64
    assert (
        run_elementwise(
            "mapa.shared::cluster.u32 %d, %a, 0; setmaxnreg.inc.sync.aligned.u32 64;", "u32", "u32", a
        ).tolist()
        == a.tolist()
    )


def test_bmsk() -> None:
    def ref(a: int, b: int, clamp: bool) -> int:
        a1, b1 = a & 31, b & 31
        mask0, s = (M32 << a1) & M32, a1 + b1
        mask1 = (M32 << s) & M32 if s < 32 else 0
        over = s >= 32
        if clamp:
            if a >= 32:
                over, mask0 = True, 0
            over = over or b >= 32
        mask1 = 0 if over else (M32 if b1 == 0 else mask1)
        return mask0 & ~mask1 & M32

    a = (RNG.integers(0, 40, 64)).astype(np.uint32)
    b = (RNG.integers(0, 40, 64)).astype(np.uint32)
    a[:6] = [0, 31, 32, 5, 1, 33]
    b[:6] = [32, 1, 3, 0, 2, 40]
    for mode in ("clamp", "wrap"):
        got = run_elementwise(f"bmsk.{mode}.b32 %d, %a, %b;", "u32", "u32", a, b)
        assert got.tolist() == [ref(int(x), int(y), mode == "clamp") for x, y in zip(a, b, strict=True)], mode
    assert run_elementwise("bmsk.wrap.b32 %d, 1, 2;", "u32", "u32", a, b).tolist() == [6] * 64  # the ISA's example


def test_min_max_16x2() -> None:
    """min/max on half-word pairs (PTX 8.0; nvcc's __vmins2, __vmaxu2 ... on sm_90), .relu on s16x2."""

    def halves(x: int, signed: bool) -> list[int]:
        h = [x & 0xFFFF, x >> 16 & 0xFFFF]
        return [v - 0x10000 if signed and v >> 15 else v for v in h]

    def ref(x: int, y: int, fn, signed: bool, relu: bool) -> int:  # type: ignore[no-untyped-def]
        out = 0
        for k, (p, q) in enumerate(zip(halves(x, signed), halves(y, signed), strict=True)):
            r = fn(p, q)
            out |= ((max(r, 0) if relu else r) & 0xFFFF) << 16 * k
        return out

    a, b = rand(), rand()
    for op, fn in (("min", min), ("max", max)):
        for t, relu in (("u16x2", False), ("s16x2", False), ("s16x2", True)):
            mods = f"{op}.relu.{t}" if relu else f"{op}.{t}"
            got = run_elementwise(f"{mods} %d, %a, %b;", "u32", "u32", a, b)
            want = [ref(int(x), int(y), fn, t == "s16x2", relu) for x, y in zip(a, b, strict=True)]
            assert got.tolist() == want, mods


def test_lop3_with_predicate() -> None:
    """lop3.{and,or}.b32 d|p, a, b, c, lut, q: d as plain lop3, p = (d != 0) and/or q (here q = a is odd)."""
    a, b, c = rand(), rand(), rand()
    for boolop in ("and", "or"):
        body = (
            f"and.b32 %r1, %a, 1; setp.ne.u32 %p2, %r1, 0; "
            f"lop3.{boolop}.b32 %r2|%p1, %a, %b, %c, 0x96, %p2; selp.u32 %d, 1, 0, %p1; add.u32 %d, %d, %r2;"
        )
        got = run_elementwise(body, "u32", "u32", a, b, c)
        want = []
        for x, y, z in zip(a.tolist(), b.tolist(), c.tolist(), strict=True):
            d = x ^ y ^ z  # lut 0x96: three-way xor
            p = (d != 0) and bool(x & 1) if boolop == "and" else (d != 0) or bool(x & 1)
            want.append((d + int(p)) & M32)
        assert got.tolist() == want, boolop


def test_elect_sync() -> None:
    """The lowest lane of membermask leads: lanes 0-15 elect with 0x0000FFFF (lane 0), lanes 16-31 with 0xFFFF0000
    (lane 16)."""
    a = np.zeros(64, np.uint32)
    body = (
        "mov.u32 %r1, %laneid; setp.lt.u32 %p3, %r1, 16; @%p3 bra LOW;"
        " elect.sync %r2|%p1, 0xFFFF0000; bra DONE;"
        " LOW: elect.sync %r2|%p1, 0x0000FFFF;"
        " DONE: selp.u32 %d, 100, 0, %p1; add.u32 %d, %d, %r2;"
    )
    got = run_elementwise(body, "u32", "u32", a)
    lanes = np.arange(64) % 32
    assert got.tolist() == [(16 + (100 if ln == 16 else 0)) if ln >= 16 else (100 if ln == 0 else 0) for ln in lanes]


_SEL = {"": (0, 32), "b0": (0, 8), "b1": (8, 8), "b2": (16, 8), "b3": (24, 8), "h0": (0, 16), "h1": (16, 16)}


def _video_model(
    op: str,
    dt: str,
    at: str,
    bt: str,
    x: int,
    y: int,
    c: int,
    asel: str = "",
    bsel: str = "",
    dsel: str = "",
    sat: bool = False,
    op2: str = "",
    mode: str = "",
    cmp: str = "",
) -> int:
    """The PTX ISA's pseudocode of the scalar video instructions, in Python integers."""

    def part(v: int, sel: str, signed: bool) -> int:
        lo, w = _SEL[sel]
        v = v >> lo & (1 << w) - 1
        return v - (1 << w) if signed and v >> (w - 1) else v

    ta, tb = part(x, asel, at == "s32"), part(y, bsel, bt == "s32")
    if op == "vset":
        t = int(_VCMP[cmp](ta, tb))
    elif op in ("vshl", "vshr"):
        n = min(tb, 32) if mode == "clamp" else tb & 31
        t = ta << n if op == "vshl" else ta >> n
    else:
        t = {"vadd": ta + tb, "vsub": ta - tb, "vabsdiff": abs(ta - tb), "vmin": min(ta, tb), "vmax": max(ta, tb)}[op]
    if sat:
        w = _SEL[dsel][1]
        lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if dt == "s32" else (0, (1 << w) - 1)
        t = min(max(t, lo), hi)
    r = t & M32
    if dsel:
        lo, w = _SEL[dsel]
        return c & ~((1 << w) - 1 << lo) & M32 | (r & (1 << w) - 1) << lo
    if op2 == "add":
        return (r + c) & M32
    if op2 in ("min", "max"):
        rs, cs = (s32(r), s32(c)) if dt == "s32" else (r, c)
        return r if (rs < cs) == (op2 == "min") else c
    return r


@pytest.mark.parametrize(
    "form",
    [
        dict(op="vadd", dt="s32", at="u32", bt="s32", asel="b0", bsel="h0", sat=True),
        dict(op="vsub", dt="u32", at="s32", bt="s32", sat=True, op2="max"),
        dict(op="vabsdiff", dt="u32", at="u32", bt="u32", asel="b3", bsel="b1", op2="add"),
        dict(op="vmin", dt="s32", at="s32", bt="u32", bsel="h1", dsel="h0", sat=True),
        dict(op="vmax", dt="u32", at="u32", bt="s32", asel="h1", dsel="b2"),
        dict(op="vshl", dt="u32", at="u32", bt="u32", mode="clamp", sat=True),
        dict(op="vshr", dt="s32", at="s32", bt="u32", mode="wrap", op2="min"),
        dict(op="vshr", dt="u32", at="u32", bt="u32", mode="clamp", op2="add"),
        dict(op="vset", dt="u32", at="s32", bt="u32", cmp="lt"),
        dict(op="vset", dt="u32", at="s32", bt="s32", cmp="ge", asel="b1", bsel="b2", op2="add"),
        dict(op="vset", dt="u32", at="u32", bt="u32", cmp="eq", asel="h0", bsel="h1", dsel="b3"),
        dict(op="vset", dt="u32", at="s32", bt="s32", cmp="ne", op2="max"),
    ],
)
def test_scalar_video(form: dict) -> None:
    a, b, c = rand(), rand(), rand()
    a[::3] = (b[::3] >> 16) | (b[::3] << 16)  # equal half-words too
    if form["op"] in ("vshl", "vshr"):
        b = (b % 48).astype(np.uint32)
    types = [form["at"], form["bt"], form["cmp"]] if form["op"] == "vset" else [form["dt"], form["at"], form["bt"]]
    mods = (
        types
        + (["sat"] if form.get("sat") else [])
        + ([form["mode"]] if form.get("mode") else [])
        + ([form["op2"]] if form.get("op2") else [])
    )
    sel = {k: f".{form[k]}" if form.get(k) else "" for k in ("asel", "bsel", "dsel")}
    third = ", %c" if form.get("op2") or form.get("dsel") else ""
    body = f"{form['op']}.{'.'.join(mods)} %d{sel['dsel']}, %a{sel['asel']}, %b{sel['bsel']}{third};"
    if form.get("dsel"):
        body = "mov.u32 %d, %c; " + body
    got = run_elementwise(body, "u32", "u32", a, b, c)
    want = [_video_model(c=int(z), x=int(x), y=int(y), **form) for x, y, z in zip(a, b, c, strict=True)]
    assert got.tolist() == want, body
