"""Generate the NVRTC (CUDA C++) golden cases: `python tests/jit_golden/gen_nvrtc.py` (no GPU needed).

Every kernel is compiled by NVRTC (cuda-bindings) with --gpu-architecture=compute_80 against the CUDA 12 headers of
the nvidia-cuda-runtime-cu12 wheel; expected outputs come from numpy / Python, never from running the kernel.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _casegen import Arr, Raw, Scalar, f32_round_dir, rng, sat_cvt, write_case  # noqa: E402
from _nvrtc import compile_nvrtc, nvrtc_version  # noqa: E402

PRODUCER = f"NVRTC {nvrtc_version()} --gpu-architecture=compute_80"
HDR = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"


def nv(
    name,
    src,
    args,
    *,
    category,
    grid,
    block,
    shared_mem=0,
    opts=(),
    name_expr=None,
    seed=None,
    printf=None,
    expect_error=None,
    notes="",
):
    ptx, lowered = compile_nvrtc(HDR + src, name + ".cu", tuple(opts), (name_expr,) if name_expr else ())
    entry = lowered[name_expr] if name_expr else None
    write_case(
        "nv_" + name,
        producer=PRODUCER + (" " + " ".join(opts) if opts else ""),
        category=category,
        ptx=ptx,
        args=args,
        grid=grid,
        block=block,
        shared_mem=shared_mem,
        abi="c",
        entry=entry,
        seed=seed,
        printf=printf,
        expect_error=expect_error,
        notes=notes,
    )


def out(name, like, expected, tol=None, fill=0):
    return Arr(
        name, np.full_like(like, fill), "out", np.asarray(expected).astype(like.dtype), tol or {}, f"full({fill})"
    )


def I32(v):
    return Scalar("n", "int32", v)


def u32(v):
    return int(v) & 0xFFFFFFFF


def s32(v):
    v = int(v) & 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


# =============================================================================================== elementwise
def case_saxpy():
    src = r"""extern "C" __global__ void saxpy(float* __restrict__ o, float a, const float* __restrict__ x,
                                      const float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = a * x[i] + y[i];
}"""
    r = rng(100)
    n = 1000
    x = r.standard_normal(n).astype(np.float32)
    y = r.standard_normal(n).astype(np.float32)
    e = (2.5 * x.astype(np.float64) + y).astype(np.float32)
    nv(
        "saxpy",
        src,
        [out("o", x, e, {"ulps": 1}), Scalar("a", "float32", 2.5), Arr("x", x), Arr("y", y), I32(n)],
        category="elementwise",
        grid=8,
        block=128,
        seed=100,
        notes="__restrict__ const -> ld.global.nc",
    )


MATH_SRC = r"""extern "C" __global__ void math_k(const T* x, const T* y, T* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  T a = x[i], b = y[i];
  T* r = o + 12 * i;
  r[0] = EXP(a); r[1] = LOG(FABS(a) + (T)0.25); r[2] = SIN(a); r[3] = COS(a);
  r[4] = SQRT(FABS(a)); r[5] = TANH(a); r[6] = POW(FABS(a) + (T)0.5, b); r[7] = RSQRT(FABS(a) + (T)0.1);
  r[8] = EXP2(b); r[9] = LOG2(FABS(b) + (T)1); r[10] = ERF(a); r[11] = ATAN2(a, b);
}"""


def math_case(name, dt, tol, fast=False, seed=101):
    suf = "f" if dt == np.float32 else ""
    fn = lambda f: f"{f}{suf}"  # noqa: E731
    defs = {"T": "float" if dt == np.float32 else "double"}
    for k, f in [
        ("EXP", "exp"),
        ("LOG", "log"),
        ("SIN", "sin"),
        ("COS", "cos"),
        ("SQRT", "sqrt"),
        ("TANH", "tanh"),
        ("POW", "pow"),
        ("RSQRT", "rsqrt"),
        ("EXP2", "exp2"),
        ("LOG2", "log2"),
        ("ERF", "erf"),
        ("ATAN2", "atan2"),
        ("FABS", "fabs"),
    ]:
        defs[k] = fn(f)
    src = "".join(f"#define {k} {v}\n" for k, v in defs.items()) + MATH_SRC
    r = rng(seed)
    n = 400
    lim = 3.0 if fast else 6.0
    x = r.uniform(-lim, lim, n).astype(dt)
    y = r.uniform(-3, 3, n).astype(dt)
    a, b = x.astype(np.float64), y.astype(np.float64)
    c = lambda v: np.float64(dt(v))  # noqa: E731  constants as the kernel sees them
    e = np.stack(
        [
            np.exp(a),
            np.log(np.abs(a) + c(0.25)),
            np.sin(a),
            np.cos(a),
            np.sqrt(np.abs(a)),
            np.tanh(a),
            np.power(np.abs(a) + c(0.5), b),
            1 / np.sqrt(np.abs(a) + c(0.1)),
            np.exp2(b),
            np.log2(np.abs(b) + 1),
            np.array([math.erf(v) for v in a]),
            np.arctan2(a, b),
        ],
        1,
    )
    o = np.zeros((n, 12), dt)
    nv(
        name,
        src,
        [Arr("x", x), Arr("y", y), Arr("o", o, "out", e.astype(dt), tol), I32(n)],
        category="elementwise-math",
        grid=4,
        block=128,
        seed=seed,
        opts=("--use_fast_math",) if fast else (),
        notes="libdevice-free CUDA math (inlined by NVRTC)",
    )


def case_ieee_exact():
    """Correctly rounded f32 ops (add/sub/mul/div/sqrt/fma/rcp) in all four rounding modes: exact compare."""
    src = r"""extern "C" __global__ void ieee(const float* x, const float* y, const float* z, float* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i], c = z[i];
  float* r = o + 20 * i;
  r[0] = a + b; r[1] = a - b; r[2] = a * b; r[3] = a / b; r[4] = sqrtf(fabsf(a));
  r[5] = __fadd_rz(a, b); r[6] = __fadd_rd(a, b); r[7] = __fadd_ru(a, b);
  r[8] = __fmul_rz(a, b); r[9] = __fmul_rd(a, b); r[10] = __fmul_ru(a, b);
  r[11] = __fdiv_rz(a, b); r[12] = __fdiv_rd(a, b); r[13] = __fdiv_ru(a, b);
  r[14] = __fsqrt_rd(fabsf(a)); r[15] = __fsqrt_ru(fabsf(a));
  r[16] = __fmaf_rn(a, b, c); r[17] = __fmaf_rz(a, b, c); r[18] = __frcp_rn(b); r[19] = __frcp_rd(b);
}"""
    r = rng(102)
    n = 300
    x = (r.uniform(1, 2, n) * r.choice([-1, 1], n) * 2.0 ** r.integers(-3, 4, n)).astype(np.float32)
    y = (r.uniform(1, 2, n) * r.choice([-1, 1], n) * 2.0 ** r.integers(-3, 4, n)).astype(np.float32)
    z = (r.uniform(1, 2, n) * r.choice([-1, 1], n) * 2.0 ** r.integers(-3, 4, n)).astype(np.float32)
    a, b, c = (v.astype(np.float64) for v in (x, y, z))

    def div_dir(a, b, mode):
        q = (a / b).astype(np.float32)
        res = q.copy()
        for i in range(len(a)):
            exact = Fraction(float(a[i])) / Fraction(float(b[i]))
            res[i] = _round_fraction_f32(exact, mode)
        return res

    def sqrt_dir(v, mode):
        res = np.zeros(len(v), np.float32)
        for i in range(len(v)):
            s = np.float32(math.sqrt(v[i]))
            # exact compare via squares (exact in f64)
            cands = [np.nextafter(s, np.float32(-1)), s, np.nextafter(s, np.float32(np.inf))]
            if mode == "rd":
                res[i] = max(cc for cc in cands if float(cc) * float(cc) <= v[i])
            else:
                res[i] = min(cc for cc in cands if float(cc) * float(cc) >= v[i])
        return res

    cols = [
        f32_round_dir(a + b, "rn"),
        f32_round_dir(a - b, "rn"),
        f32_round_dir(a * b, "rn"),
        div_dir(a, b, "rn"),
        np.sqrt(np.abs(x)),
        f32_round_dir(a + b, "rz"),
        f32_round_dir(a + b, "rd"),
        f32_round_dir(a + b, "ru"),
        f32_round_dir(a * b, "rz"),
        f32_round_dir(a * b, "rd"),
        f32_round_dir(a * b, "ru"),
        div_dir(a, b, "rz"),
        div_dir(a, b, "rd"),
        div_dir(a, b, "ru"),
        sqrt_dir(np.abs(a), "rd"),
        sqrt_dir(np.abs(a), "ru"),
        np.array(
            [
                _round_fraction_f32(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(s)), "rn")
                for p, q, s in zip(a, b, c, strict=True)
            ],
            np.float32,
        ),
        np.array(
            [
                _round_fraction_f32(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(s)), "rz")
                for p, q, s in zip(a, b, c, strict=True)
            ],
            np.float32,
        ),
        div_dir(np.ones(n), b, "rn"),
        div_dir(np.ones(n), b, "rd"),
    ]
    e = np.stack([np.asarray(v, np.float32) for v in cols], 1)
    nv(
        "ieee_f32_rounding",
        src,
        [
            Arr("x", x),
            Arr("y", y),
            Arr("z", z),
            Arr("o", np.zeros((n, 20), np.float32), "out", e, {"exact": True}),
            I32(n),
        ],
        category="elementwise-math",
        grid=3,
        block=128,
        seed=102,
        notes="div.rn/div.rz/.rm/.rp, sqrt.rn/.rm/.rp, fma.rz, rcp.rn/.rm, add/mul directed: all exact",
    )


def _round_fraction_f32(q: Fraction, mode: str) -> np.float32:
    """Round an exact rational to float32 (normal range) with the given mode."""
    if q == 0:
        return np.float32(0.0)
    f = np.float32(float(q))  # float(Fraction) is correctly rounded to f64; then f64->f32 may double-round
    # fix up: pick among neighbours the correct one
    cands = sorted(
        {np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))}, key=lambda v: float(v)
    )
    fr = [Fraction(float(v)) for v in cands]
    if mode == "rn":
        best = min(range(3), key=lambda k: (abs(fr[k] - q), (int(cands[k].view(np.uint32)) & 1)))
        return cands[best]
    if mode == "rd":
        return max((c for c, v in zip(cands, fr, strict=True) if v <= q), key=float)
    if mode == "ru":
        return min((c for c, v in zip(cands, fr, strict=True) if v >= q), key=float)
    if mode == "rz":
        return _round_fraction_f32(q, "rd" if q > 0 else "ru")
    raise ValueError(mode)


def case_f64_exact():
    src = r"""extern "C" __global__ void f64ops(const double* x, const double* y, const double* z, double* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double a = x[i], b = y[i], c = z[i];
  o[6*i+0] = a + b; o[6*i+1] = a * b; o[6*i+2] = a / b; o[6*i+3] = sqrt(fabs(a));
  o[6*i+4] = fma(a, b, c); o[6*i+5] = __dadd_rz(a, c);
}"""
    r = rng(103)
    n = 200
    x, y, z = (r.standard_normal(n) * 10 for _ in range(3))
    fmas = np.array([float(Fraction(p) * Fraction(q) + Fraction(s)) for p, q, s in zip(x, y, z, strict=True)])
    rz = []
    for p, s in zip(x, z, strict=True):
        ex = Fraction(p) + Fraction(s)
        v = float(ex)
        if abs(Fraction(v)) > abs(ex):
            v = np.nextafter(v, 0.0)
        rz.append(v)
    e = np.stack([x + y, x * y, x / y, np.sqrt(np.abs(x)), fmas, np.array(rz)], 1)
    nv(
        "ieee_f64",
        src,
        [Arr("x", x), Arr("y", y), Arr("z", z), Arr("o", np.zeros((n, 6)), "out", e, {"exact": True}), I32(n)],
        category="elementwise-math",
        grid=2,
        block=128,
        seed=103,
        notes="div.rn.f64 / sqrt.rn.f64 / fma.rn.f64 / add.rz.f64 are exact",
    )


# =============================================================================================== integers
def case_intdiv():
    src = r"""extern "C" __global__ void idiv(const int* a, const int* b, const unsigned* ua, const unsigned* ub,
                                   const long long* la, const long long* lb, int* o, long long* lo, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = a[i], y = b[i];
  unsigned ux = ua[i], uy = ub[i];
  long long lx = la[i], ly = lb[i];
  int* r = o + 10 * i;
  r[0] = x / y; r[1] = x % y; r[2] = (int)(ux / uy); r[3] = (int)(ux % uy);
  r[4] = x / 7; r[5] = x % 7; r[6] = x / -3; r[7] = (int)(ux / 10u); r[8] = (int)(ux % 1000u); r[9] = x >> 3;
  lo[4*i+0] = lx / ly; lo[4*i+1] = lx % ly; lo[4*i+2] = lx / 1000; lo[4*i+3] = (long long)((unsigned long long)lx / 3ull);
}"""
    r = rng(104)
    n = 300
    a = r.integers(-(2**31), 2**31, n).astype(np.int32)
    b = r.integers(-100, 100, n).astype(np.int32)
    b[b == 0] = -1
    b[:3] = [1, -1, 2**31 - 1]
    a[:3] = [-(2**31), 2**31 - 1, -(2**31)]
    ua = r.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    ub = r.integers(1, 2**32, n, dtype=np.uint64).astype(np.uint32)
    ub[::3] = r.integers(1, 50, len(ub[::3]))
    la = r.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    lb = r.integers(-(2**40), 2**40, n, dtype=np.int64)
    lb[::2] = r.integers(-9, 9, len(lb[::2]))
    lb[lb == 0] = 5

    def tdiv(p, q):
        qq = abs(p) // abs(q)
        return qq if (p >= 0) == (q > 0) else -qq

    e = np.zeros((n, 10), np.int32)
    el = np.zeros((n, 4), np.int64)
    for i in range(n):
        x, y, ux, uy, lx, ly = int(a[i]), int(b[i]), int(ua[i]), int(ub[i]), int(la[i]), int(lb[i])
        e[i] = [
            s32(tdiv(x, y)),
            s32(x - tdiv(x, y) * y),
            s32(ux // uy),
            s32(ux % uy),
            tdiv(x, 7),
            x - tdiv(x, 7) * 7,
            tdiv(x, -3),
            s32(ux // 10),
            s32(ux % 1000),
            x >> 3,
        ]
        el[i] = [tdiv(lx, ly), lx - tdiv(lx, ly) * ly, tdiv(lx, 1000), (lx & (2**64 - 1)) // 3]
    el = el.astype(np.int64)
    nv(
        "int_divmod",
        src,
        [
            Arr("a", a),
            Arr("b", b),
            Arr("ua", ua),
            Arr("ub", ub),
            Arr("la", la),
            Arr("lb", lb),
            out("o", e, e),
            out("lo", el, el),
            I32(n),
        ],
        category="integer",
        grid=3,
        block=128,
        seed=104,
        notes="C truncating division; INT_MIN/1, INT_MIN/-(2^31-1); constant divisors -> mul.hi magic numbers",
    )


def _brev(v, bits):
    return int(format(int(v) & ((1 << bits) - 1), f"0{bits}b")[::-1], 2)


def _clz(v, bits):
    return bits - (int(v) & ((1 << bits) - 1)).bit_length()


def _ffs(v):
    v = int(v)
    return (v & -v).bit_length()


def _prmt(x, y, s):
    b = [(x >> (8 * k)) & 0xFF for k in range(4)] + [(y >> (8 * k)) & 0xFF for k in range(4)]
    r = 0
    for k in range(4):
        sel = (s >> (4 * k)) & 0xF
        v = b[sel & 7]
        if sel & 8:
            v = 0xFF if v & 0x80 else 0
        r |= v << (8 * k)
    return r


def case_bits():
    src = r"""extern "C" __global__ void bits(const unsigned* u, const unsigned* v, const unsigned long long* w,
                                   unsigned* o, unsigned long long* o64, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = u[i], y = v[i];
  unsigned long long z = w[i];
  unsigned* r = o + 20 * i;
  r[0] = __popc(x); r[1] = __clz(x); r[2] = __brev(x); r[3] = __ffs(x);
  r[4] = __byte_perm(x, y, y & 0x7777); r[5] = __byte_perm(x, y, 0x3210 ^ (y >> 16));
  r[6] = __funnelshift_l(x, y, y & 63); r[7] = __funnelshift_r(x, y, y & 63); r[8] = __funnelshift_lc(x, y, y & 63);
  r[9] = __mulhi((int)x, (int)y); r[10] = __umulhi(x, y); r[11] = __sad((int)x, (int)y, 7u); r[12] = __usad(x, y, 1u);
  r[13] = __mul24((int)x, (int)y); r[14] = __umul24(x, y); r[15] = __hadd((int)x, (int)y); r[16] = __urhadd(x, y);
  r[17] = __popcll(z); r[18] = __clzll(z); r[19] = __ffsll(z);
  o64[3*i+0] = __brevll(z); o64[3*i+1] = __umul64hi(z, (unsigned long long)x * y); o64[3*i+2] = (unsigned long long)__mul64hi((long long)z, -(long long)y);
}"""
    r = rng(105)
    n = 256
    u = r.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    v = r.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    w = r.integers(0, 2**64 - 1, n, dtype=np.uint64)
    u[:3] = [0, 0xFFFFFFFF, 0x80000000]
    w[:2] = [0, 1 << 63]
    e = np.zeros((n, 20), np.uint32)
    e64 = np.zeros((n, 3), np.uint64)
    M32, M64 = 2**32 - 1, 2**64 - 1
    for i in range(n):
        x, y, z = int(u[i]), int(v[i]), int(w[i])
        sx, sy = s32(x), s32(y)

        def fsl(lo, hi, sh, clamp):
            s = min(sh, 32) if clamp else sh & 31
            return ((((hi << 32) | lo) << s) >> 32) & M32

        def fsr(lo, hi, sh):
            s = sh & 31
            return (((hi << 32) | lo) >> s) & M32

        s24 = lambda q: ((q & 0xFFFFFF) ^ 0x800000) - 0x800000  # noqa: E731
        e[i] = [
            bin(x).count("1"),
            _clz(x, 32),
            _brev(x, 32),
            _ffs(x),
            _prmt(x, y, y & 0x7777),
            _prmt(x, y, (0x3210 ^ (y >> 16)) & 0x7777),  # __byte_perm uses 3-bit selectors
            fsl(x, y, y & 63, False),
            fsr(x, y, y & 63),
            fsl(x, y, y & 63, True),
            u32((sx * sy) >> 32),
            (x * y) >> 32,
            u32(abs(sx - sy) + 7),
            u32(abs(x - y) + 1),
            u32(s24(x) * s24(y)),
            u32((x & 0xFFFFFF) * (y & 0xFFFFFF)),
            u32((sx + sy) >> 1),
            (x + y + 1) >> 1,
            bin(z).count("1"),
            _clz(z, 64),
            _ffs(z),
        ]
        sz = z - (1 << 64) if z >> 63 else z
        e64[i] = [_brev(z, 64), (z * ((x * y) & M64)) >> 64, ((sz * -y) >> 64) & M64]
    nv(
        "int_bits",
        src,
        [Arr("u", u), Arr("v", v), Arr("w", w), out("o", e, e), out("o64", e64, e64), I32(n)],
        category="integer",
        grid=2,
        block=128,
        seed=105,
        notes="popc/clz/brev/ffs(ll), prmt (byte_perm), shf (funnelshift wrap/clamp), mul.hi, sad, mul24, hadd",
    )


def case_asm_edges():
    """Inline PTX whose semantics a translator must reproduce exactly (shift clamping, bfe/bfi, lop3, sat)."""
    src = r"""extern "C" __global__ void asm_edges(const unsigned* u, const unsigned* s, unsigned* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = u[i], sh = s[i], r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11;
  unsigned long long q = ((unsigned long long)x << 32) | (x ^ 0x5a5a5a5au), q0, q1;
  asm("shl.b32 %0, %1, %2;" : "=r"(r0) : "r"(x), "r"(sh));
  asm("shr.u32 %0, %1, %2;" : "=r"(r1) : "r"(x), "r"(sh));
  asm("shr.s32 %0, %1, %2;" : "=r"(r2) : "r"(x), "r"(sh));
  asm("bfe.u32 %0, %1, %2, %3;" : "=r"(r3) : "r"(x), "r"(sh & 31), "r"((sh >> 3) & 15));
  asm("bfe.s32 %0, %1, %2, %3;" : "=r"(r4) : "r"(x), "r"(sh & 31), "r"((sh >> 3) & 15));
  asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(r5) : "r"(sh), "r"(x), "r"(sh & 31), "r"((sh >> 2) & 15));
  asm("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(r6) : "r"(x), "r"(sh), "r"(~x));
  asm("lop3.b32 %0, %1, %2, %3, 0xe8;" : "=r"(r7) : "r"(x), "r"(sh), "r"(x >> 4));
  asm("add.sat.s32 %0, %1, %2;" : "=r"(r8) : "r"(x), "r"(x));
  asm("sub.sat.s32 %0, %1, %2;" : "=r"(r9) : "r"(sh), "r"(x));
  asm("shf.r.clamp.b32 %0, %1, %2, %3;" : "=r"(r10) : "r"(x), "r"(sh), "r"(sh));
  asm("mad.hi.u32 %0, %1, %2, %3;" : "=r"(r11) : "r"(x), "r"(sh), "r"(x));
  asm("shl.b64 %0, %1, %2;" : "=l"(q0) : "l"(q), "r"(sh));
  asm("shr.s64 %0, %1, %2;" : "=l"(q1) : "l"(q), "r"(sh));
  unsigned* r = o + 16 * i;
  r[0] = r0; r[1] = r1; r[2] = r2; r[3] = r3; r[4] = r4; r[5] = r5; r[6] = r6; r[7] = r7; r[8] = r8; r[9] = r9;
  r[10] = r10; r[11] = r11; r[12] = (unsigned)q0; r[13] = (unsigned)(q0 >> 32); r[14] = (unsigned)q1;
  r[15] = (unsigned)(q1 >> 32);
}"""
    r = rng(106)
    n = 256
    u = r.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    s = r.integers(0, 80, n).astype(np.uint32)
    s[:8] = [0, 31, 32, 33, 63, 64, 65, 255]
    s[8:16] = r.integers(0, 2**32, 8, dtype=np.uint64).astype(np.uint32)
    e = np.zeros((n, 16), np.uint32)
    M = 2**32 - 1
    for i in range(n):
        x, sh = int(u[i]), int(s[i])
        sx = s32(x)

        def bfe(val, pos, ln, signed):
            if ln == 0:
                return 0
            f = (val >> pos) & ((1 << ln) - 1) if pos < 32 else 0
            top = min(pos + ln, 32) - 1  # sign bit position (clamped to msb)
            if signed:
                sb = (val >> top) & 1 if pos < 32 else (val >> 31) & 1
                width = min(ln, 32 - pos) if pos < 32 else 0
                f = (val >> pos) & ((1 << width) - 1) if width else 0
                if sb:
                    f |= (M << width) & M
                return f & M
            return f & M

        def bfi(a, b, pos, ln):
            if ln == 0 or pos > 31:
                return b
            mask = (((1 << ln) - 1) << pos) & M
            return ((b & ~mask) | ((a << pos) & mask)) & M

        def lop3(a, b, c, lut):
            res = 0
            for bit in range(32):
                idx = (((a >> bit) & 1) << 2) | (((b >> bit) & 1) << 1) | ((c >> bit) & 1)
                res |= ((lut >> idx) & 1) << bit
            return res

        q = ((x << 32) | (x ^ 0x5A5A5A5A)) & (2**64 - 1)
        sq = q - (1 << 64) if q >> 63 else q
        pos, ln = sh & 31, (sh >> 3) & 15
        clamp = min(sh, 32)
        e[i] = [
            (x << min(sh, 32)) & M,
            x >> min(sh, 32),
            u32(sx >> min(sh, 32)),
            bfe(x, pos, ln, False),
            bfe(x, pos, ln, True),
            bfi(sh, x, sh & 31, (sh >> 2) & 15),
            lop3(x, sh, (~x) & M, 0x96),
            lop3(x, sh, x >> 4, 0xE8),
            u32(max(-(2**31), min(2**31 - 1, sx + sx))),
            u32(max(-(2**31), min(2**31 - 1, s32(sh) - sx))),
            ((((sh << 32) | x) >> clamp) & M),
            ((x * sh) >> 32) + x & M,
            ((q << min(sh, 64)) & (2**64 - 1)) & M,
            ((q << min(sh, 64)) & (2**64 - 1)) >> 32,
            (sq >> min(sh, 64)) & M,
            ((sq >> min(sh, 64)) >> 32) & M,
        ]
    nv(
        "ptx_asm_edges",
        src,
        [Arr("u", u), Arr("s", s), out("o", e, e), I32(n)],
        category="integer",
        grid=2,
        block=128,
        seed=106,
        notes="inline asm: shl/shr with amounts >= width (PTX clamps), bfe/bfi edge positions, lop3 LUTs, "
        "add/sub.sat, shf.r.clamp, mad.hi (wraps mod 2^32)",
    )


# =============================================================================================== reductions / warp
def case_block_reduce():
    src = r"""extern "C" __global__ void reduce(const float* __restrict__ x, float* __restrict__ o, int n) {
  __shared__ float sdata[256];
  unsigned t = threadIdx.x;
  unsigned i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;
  float s = 0.f;
  if (i < n) s = x[i];
  if (i + blockDim.x < n) s += x[i + blockDim.x];
  sdata[t] = s;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 32; k >>= 1) {
    if (t < k) sdata[t] = s = s + sdata[t + k];
    __syncthreads();
  }
  if (t < 32) {
    if (blockDim.x >= 64) s += sdata[t + 32];
    for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffff, s, off);
  }
  if (t == 0) o[blockIdx.x] = s;
}"""
    r = rng(110)
    n = 3000
    x = r.integers(-64, 64, n).astype(np.float32)
    nb = 6
    xp = np.zeros(nb * 512, np.float32)
    xp[:n] = x
    nv(
        "block_reduce_shfl",
        src,
        [Arr("x", x), out("o", np.zeros(nb, np.float32), xp.reshape(nb, 512).sum(1)), I32(n)],
        category="reduction",
        grid=nb,
        block=256,
        seed=110,
        notes="CUDA-samples reduce6 style: shared tree then warp shuffle tail; 32-bit .shared addressing",
    )


def case_warp_segments():
    src = r"""extern "C" __global__ void warp_seg(const int* x, int* o) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = x[i];
  int* r = o + 8 * i;
  r[0] = __shfl_down_sync(0xffffffff, v, 3, 8);
  r[1] = __shfl_up_sync(0xffffffff, v, 2, 16);
  r[2] = __shfl_xor_sync(0xffffffff, v, 5, 8);
  r[3] = __shfl_sync(0xffffffff, v, 11, 4);
  r[4] = __shfl_sync(0xffffffff, v, v & 31);
  int s = v;
  for (int m = 1; m < 16; m <<= 1) s += __shfl_xor_sync(0xffffffff, s, m, 16);
  r[5] = s;
  r[6] = __shfl_down_sync(0xffffffff, v, 20);
  r[7] = __shfl_up_sync(0xffffffff, v, 7);
}"""
    r = rng(111)
    n = 128
    x = r.integers(-1000, 1000, n).astype(np.int32)
    e = np.zeros((n, 8), np.int32)
    for i in range(n):
        w0 = i - i % 32
        lane = i % 32
        X = lambda L: int(x[w0 + L])  # noqa: E731, B023

        def down(d, w):  # noqa: B023 (used within this iteration)
            return X(lane + d) if (lane % w) + d < w else X(lane)  # noqa: B023

        def up(d, w):
            return X(lane - d) if (lane % w) >= d else X(lane)  # noqa: B023

        seg16 = lane - lane % 16
        e[i] = [
            down(3, 8),
            up(2, 16),
            X(lane ^ 5),
            X((lane - lane % 4) + 11 % 4),
            X(int(x[i]) & 31),
            sum(X(seg16 + k) for k in range(16)),
            down(20, 32),
            up(7, 32),
        ]
    nv(
        "warp_shfl_width",
        src,
        [Arr("x", x), out("o", e, e)],
        category="warp",
        grid=2,
        block=64,
        seed=111,
        notes="shfl.sync with width < 32: c operand ((32-width)<<8)|clamp; out-of-segment source -> own value",
    )


def case_matmul():
    src = r"""#define TS 16
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[TS][TS];
  __shared__ float Bs[TS][TS];
  int tx = threadIdx.x, ty = threadIdx.y;
  int row = blockIdx.y * TS + ty, col = blockIdx.x * TS + tx;
  float acc = 0.f;
  for (int t = 0; t < (K + TS - 1) / TS; ++t) {
    As[ty][tx] = (row < M && t * TS + tx < K) ? A[row * K + t * TS + tx] : 0.f;
    Bs[ty][tx] = (col < N && t * TS + ty < K) ? B[(t * TS + ty) * N + col] : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TS; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}"""
    r = rng(112)
    M, N, K = 50, 35, 70
    A = r.integers(-4, 5, (M, K)).astype(np.float32)
    B = r.integers(-4, 5, (K, N)).astype(np.float32)
    nv(
        "matmul_tiled",
        src,
        [
            Arr("A", A),
            Arr("B", B),
            out("C", np.zeros((M, N), np.float32), A @ B),
            Scalar("M", "int32", M),
            Scalar("N", "int32", N),
            Scalar("K", "int32", K),
        ],
        category="matmul",
        grid=(3, 4),
        block=(16, 16),
        seed=112,
        notes="unrolled inner loop, 2 barriers per trip",
    )


def case_hist():
    src = r"""extern "C" __global__ void hist(const uchar4* __restrict__ data, unsigned* hist, int n4) {
  __shared__ unsigned sh[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) sh[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
    uchar4 v = data[i];
    atomicAdd(&sh[v.x], 1u); atomicAdd(&sh[v.y], 1u); atomicAdd(&sh[v.z], 1u); atomicAdd(&sh[v.w], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) if (sh[b]) atomicAdd(&hist[b], sh[b]);
}
extern "C" __global__ void hist_global(const unsigned char* data, unsigned* hist, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&hist[data[i]], 1u);
}"""
    r = rng(113)
    d = np.minimum(r.exponential(40, 4096), 255).astype(np.uint8)
    h = np.bincount(d, minlength=256).astype(np.uint32)
    ptx_args = [Arr("data", d), out("hist", h, h)]
    nv(
        "hist_shared_uchar4",
        src.split('extern "C" __global__ void hist_global')[0],
        ptx_args + [I32(1024)],
        category="atomics",
        grid=3,
        block=128,
        seed=113,
        notes="uchar4 vector load, atom.shared.add, grid-stride",
    )
    nv(
        "hist_global_u8",
        'extern "C" __global__ void hist_global' + src.split('extern "C" __global__ void hist_global')[1],
        [Arr("data", d), out("hist", h, h), I32(4096)],
        category="atomics",
        grid=32,
        block=128,
        seed=113,
    )


def case_scan():
    src = r"""extern "C" __global__ void scan(const int* in, int* out, int n) {
  extern __shared__ int temp[];  // 2 * blockDim.x ints
  int t = threadIdx.x, base = blockIdx.x * 2 * blockDim.x, m = 2 * blockDim.x;
  temp[2 * t] = (base + 2 * t < n) ? in[base + 2 * t] : 0;
  temp[2 * t + 1] = (base + 2 * t + 1 < n) ? in[base + 2 * t + 1] : 0;
  int off = 1;
  for (int d = m >> 1; d > 0; d >>= 1) {
    __syncthreads();
    if (t < d) { int ai = off * (2 * t + 1) - 1, bi = off * (2 * t + 2) - 1; temp[bi] += temp[ai]; }
    off *= 2;
  }
  if (t == 0) temp[m - 1] = 0;
  for (int d = 1; d < m; d *= 2) {
    off >>= 1;
    __syncthreads();
    if (t < d) {
      int ai = off * (2 * t + 1) - 1, bi = off * (2 * t + 2) - 1;
      int tv = temp[ai]; temp[ai] = temp[bi]; temp[bi] += tv;
    }
  }
  __syncthreads();
  if (base + 2 * t < n) out[base + 2 * t] = temp[2 * t];
  if (base + 2 * t + 1 < n) out[base + 2 * t + 1] = temp[2 * t + 1];
}"""
    r = rng(114)
    n = 1000
    x = r.integers(-50, 50, n).astype(np.int32)
    xp = np.zeros(4 * 256, np.int32)
    xp[:n] = x
    ex = (np.cumsum(xp.reshape(4, 256), 1) - xp.reshape(4, 256)).reshape(-1)[:n]
    nv(
        "scan_blelloch_dynshared",
        src,
        [Arr("x", x), out("o", x, ex, fill=-9), I32(n)],
        category="scan",
        grid=4,
        block=128,
        shared_mem=256 * 4,
        seed=114,
        notes="extern __shared__ int[]; exclusive scan",
    )
    src2 = r"""extern "C" __global__ void hs(const float* in, float* out) {
  __shared__ float buf[2][128];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t, p = 0;
  buf[0][t] = in[i];
  __syncthreads();
  for (int d = 1; d < blockDim.x; d <<= 1) {
    buf[1 - p][t] = buf[p][t] + (t >= d ? buf[p][t - d] : 0.f);
    p = 1 - p;
    __syncthreads();
  }
  out[i] = buf[p][t];
}"""
    xf = r.integers(-8, 8, 512).astype(np.float32)
    nv(
        "scan_hillis_steele",
        src2,
        [Arr("x", xf), out("o", xf, np.cumsum(xf.reshape(4, 128), 1).reshape(-1))],
        category="scan",
        grid=4,
        block=128,
        seed=114,
    )


def case_vote():
    src = r"""extern "C" __global__ void vote(const int* x, unsigned* o) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x & 31;
  int v = x[i];
  bool p = v > 0;
  unsigned* r = o + 12 * i;
  r[0] = __all_sync(0xffffffff, p);
  r[1] = __any_sync(0xffffffff, p);
  r[2] = __ballot_sync(0xffffffff, p);
  r[3] = __activemask();
  r[4] = __syncthreads_count(p);
  r[5] = __syncthreads_and(p);
  r[6] = __syncthreads_or(p);
  r[7] = __match_any_sync(0xffffffff, v & 3);
  int pred;
  r[8] = __match_all_sync(0xffffffff, v > -100, &pred) ^ (pred << 4);
  r[9] = __reduce_add_sync(0xffffffff, (unsigned)(v & 0xff));
  r[10] = __reduce_max_sync(0xffffffff, (unsigned)(v & 0xff));
  r[11] = 0;
  if (lane < 12) r[11] = __ballot_sync(0x00000fff, v & 1);
}"""
    r = rng(115)
    nb, bs = 2, 128
    x = r.integers(-5, 20, nb * bs).astype(np.int32)
    x[32:64] = np.abs(x[32:64]) + 1
    x[64:96] = -3
    x[128:256] = np.abs(x[128:256]) + 1
    p = (x > 0).reshape(-1, 32)
    pw = 1 << np.arange(32, dtype=np.uint64)
    e = np.zeros((nb * bs, 12), np.uint32)
    for i in range(nb * bs):
        w = i // 32
        lane = i % 32
        wx = x[w * 32 : (w + 1) * 32]
        blk = x[(i // bs) * bs : (i // bs + 1) * bs] > 0
        mine = int(x[i]) & 3
        match = int(sum(int(pw[k]) for k in range(32) if (int(wx[k]) & 3) == mine))
        allm = wx > -100
        ma = (0xFFFFFFFF if allm.all() else 0) ^ ((1 if allm.all() else 0) << 4)
        e[i] = [
            p[w].all(),
            p[w].any(),
            int((p[w] * pw).sum()),
            0xFFFFFFFF,
            blk.sum(),
            blk.all(),
            blk.any(),
            match,
            ma,
            int((wx & 0xFF).sum()),
            int((wx & 0xFF).max()),
            int(sum(int(pw[k]) for k in range(12) if wx[k] & 1)) if lane < 12 else 0,
        ]
    nv(
        "warp_vote_match_redux",
        src,
        [Arr("x", x), out("o", e, e)],
        category="warp",
        grid=nb,
        block=bs,
        seed=115,
        notes="vote.sync, activemask, bar.red.{popc,and,or}, match.any/all.sync, redux.sync (sm_80), "
        "ballot with a partial mask inside a divergent branch",
    )


def case_atomics():
    src = r"""extern "C" __global__ void atomics(const int* x, int* r, unsigned* u, unsigned long long* q, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = x[i];
  atomicAdd(&r[0], v);
  atomicSub(&r[1], v);
  atomicMax(&r[2], v);
  atomicMin(&r[3], v);
  atomicAnd(&r[4], v | 0x40000000);
  atomicOr(&r[5], v & 0x0f0f);
  atomicXor(&r[6], v);
  atomicMax(&u[0], (unsigned)v);
  atomicMin(&u[1], (unsigned)v);
  atomicInc(&u[2], 16u);
  atomicDec(&u[3], 10u);
  atomicAdd(&q[0], (unsigned long long)(unsigned)v);
  atomicMax(&q[1], (unsigned long long)(long long)v);
  atomicAdd_block(&r[7], 1);
  atomicAdd_system(&r[8], 2);
  int old = r[9], assumed;
  do { assumed = old; old = atomicCAS(&r[9], assumed, assumed + (v & 7)); } while (old != assumed);
  unsigned long long o2 = q[2], a2;
  do { a2 = o2; o2 = atomicCAS(&q[2], a2, a2 ^ ((unsigned long long)i << 20)); } while (o2 != a2);
  r[16 + i] = atomicExch(&r[16 + n + i], v);
  unsigned short* hs = (unsigned short*)(u + 4);
  unsigned short ho = hs[0], ha;
  do { ha = ho; ho = atomicCAS(hs, ha, (unsigned short)(ha + 1)); } while (ho != ha);
}"""
    rr = rng(116)
    n = 200
    x = rr.integers(-(10**6), 10**6, n).astype(np.int32)
    r0 = np.zeros(16 + 2 * n, np.int32)
    r0[1] = 5
    r0[2] = -(2**31)
    r0[3] = 2**31 - 1
    r0[4] = -1
    r0[9] = 3
    r0[16 + n :] = np.arange(n) * 3
    er = r0.copy()
    er[0] = x.sum()
    er[1] = 5 - x.sum()
    er[2] = x.max()
    er[3] = x.min()
    er[4] = np.bitwise_and.reduce(x | 0x40000000)
    er[5] = np.bitwise_or.reduce(x & 0x0F0F)
    er[6] = np.bitwise_xor.reduce(x)
    er[7] = n
    er[8] = 2 * n
    er[9] = 3 + (x & 7).sum()
    er[16 : 16 + n] = np.arange(n) * 3
    er[16 + n :] = x
    u0 = np.array([0, 0xFFFFFFFF, 0, 0, 0], np.uint32)
    xu = x.view(np.uint32)
    eu = u0.copy()
    eu[0] = xu.max()
    eu[1] = xu.min()
    eu[2] = n % 17
    eu[3] = (-n) % 11
    eu[4] = n  # low 16 bits incremented by the 16-bit CAS
    q0 = np.array([0, 0, 0x1234], np.uint64)
    eq = q0.copy()
    eq[0] = int(xu.astype(np.uint64).sum())
    eq[1] = x.astype(np.int64).view(np.uint64).max()  # (ull)(long long)v: negatives are huge
    acc = 0x1234
    for i in range(n):
        acc ^= i << 20
    eq[2] = acc
    nv(
        "atomics_int",
        src,
        [Arr("x", x), Arr("r", r0, "inout", er), Arr("u", u0, "inout", eu), Arr("q", q0, "inout", eq), I32(n)],
        category="atomics",
        grid=2,
        block=128,
        seed=116,
        notes="atom.add/sub(→add neg)/max/min/and/or/xor/inc/dec/exch/cas (.b16/.b32/.b64), .cta/.sys scopes; "
        "CAS spin loops inside a warp",
    )


def case_atomic_float():
    src = r"""extern "C" __global__ void fatomics(const float* x, const double* d, float* rf, double* rd,
                                       __half* rh, __half2* rh2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(&rf[0], x[i]);
  atomicAdd(&rd[0], d[i]);
  atomicAdd(&rh[0], __float2half(0.5f));
  atomicAdd(rh2, __floats2half2_rn(1.0f, -0.25f));
  // pre-sm_60 double atomicAdd through CAS on the bit pattern
  unsigned long long* p = (unsigned long long*)&rd[1];
  unsigned long long old = *p, assumed;
  do {
    assumed = old;
    old = atomicCAS(p, assumed, __double_as_longlong(d[i] + __longlong_as_double(assumed)));
  } while (assumed != old);
  // float max via int punning
  float v = x[i];
  if (v >= 0) atomicMax((int*)&rf[1], __float_as_int(v));
  else atomicMin((unsigned*)&rf[1], __float_as_uint(v));
}"""
    r = rng(117)
    n = 256
    x = (r.integers(-512, 512, n) / 4.0).astype(np.float32)
    d = r.integers(-(10**6), 10**6, n) / 64.0
    rf = np.array([0.0, -1e30], np.float32)
    rd = np.zeros(2)
    rh = np.zeros(1, np.float16)
    rh2 = np.zeros(2, np.float16)
    nv(
        "atomics_float_half",
        src,
        [
            Arr("x", x),
            Arr("d", d),
            Arr("rf", rf, "inout", np.array([x.sum(), x.max()], np.float32)),
            Arr("rd", rd, "inout", np.array([d.sum(), d.sum()])),
            Arr("rh", rh, "inout", np.array([n * 0.5], np.float16)),
            Arr("rh2", rh2, "inout", np.array([n * 1.0, n * -0.25], np.float16)),
            I32(n),
        ],
        category="atomics",
        grid=2,
        block=128,
        seed=117,
        notes="atom.add.f32/.f64/.noftz.f16/.noftz.f16x2, 64-bit CAS loop; exact (dyadic) values; "
        "max(x) >= 0 here so the int-punned atomicMax path decides rf[1]",
    )


def case_last_block():
    src = r"""__device__ unsigned int count = 0;
extern "C" __global__ void sum_last_block(const float* x, volatile float* partial, float* total, int n) {
  __shared__ float s[128];
  __shared__ bool amLast;
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.f;
  __syncthreads();
  for (int k = 64; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }
  if (t == 0) {
    partial[blockIdx.x] = s[0];
    __threadfence();
    unsigned v = atomicInc(&count, gridDim.x);
    amLast = (v == gridDim.x - 1);
  }
  __syncthreads();
  if (amLast && t == 0) {
    float acc = 0.f;
    for (int b = 0; b < gridDim.x; ++b) acc += partial[b];
    total[0] = acc;
    count = 0;
  }
}"""
    r = rng(118)
    n = 1100
    x = r.integers(-30, 30, n).astype(np.float32)
    xp = np.zeros(9 * 128, np.float32)
    xp[:n] = x
    nv(
        "threadfence_last_block",
        src,
        [
            Arr("x", x),
            out("partial", np.zeros(9, np.float32), xp.reshape(9, 128).sum(1)),
            out("total", np.zeros(1, np.float32), [x.sum()]),
            I32(n),
        ],
        category="atomics",
        grid=9,
        block=128,
        seed=118,
        notes="__device__ global variable with initializer (module global state), membar.gl, volatile stores",
    )


# =============================================================================================== f16 / bf16
def _f16_dir(v64: np.ndarray, mode: str) -> np.ndarray:
    """Round exact float64 values to float16 with a directed mode."""
    r = v64.astype(np.float16)
    back = r.astype(np.float64)
    up = np.nextafter(r, np.float16(np.inf))
    dn = np.nextafter(r, np.float16(-np.inf))
    if mode == "rn":
        return r
    if mode == "ru":
        return np.where(back < v64, up, r)
    if mode == "rd":
        return np.where(back > v64, dn, r)
    return np.where(v64 > 0, np.where(back > v64, dn, r), np.where(back < v64, up, r))


def bf16_from_f64(v: np.ndarray) -> np.ndarray:
    """Correctly rounded (nearest-even) float64 -> bfloat16 bits (uint16); finite normal values."""
    v = np.asarray(v, np.float64)
    m, e = np.frexp(v)
    scale = np.ldexp(1.0, e - 8)
    r = np.rint(v / scale) * scale  # 8 significant bits, ties to even
    f = r.astype(np.float32)  # exact
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def bf16_to_f64(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def case_half():
    src = r"""extern "C" __global__ void halfk(const __half* a, const __half* b, const __half* c, const float* f,
                                    __half* o, float* of, float* od, int* oi, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half x = a[i], y = b[i], z = c[i];
  __half* r = o + 12 * i;
  r[0] = x + y; r[1] = x * y; r[2] = x - y; r[3] = __hfma(x, y, z); r[4] = -x; r[5] = __habs(y);
  r[6] = __hmax(x, y); r[7] = __hmin(x, y);
  r[8] = __float2half_rn(f[i]); r[9] = __float2half_rz(f[i]); r[10] = __float2half_rd(f[i]);
  r[11] = __float2half_ru(f[i]);
  __half2 p = __halves2half2(x, y), q = __halves2half2(z, x);
  __half2 s = __hfma2(p, q, __hadd2(p, q));
  __half2 m = __hmul2(p, q);
  of[3 * i + 0] = __low2float(s); of[3 * i + 1] = __high2float(s);
  of[3 * i + 2] = __half2float(__low2half(m)) + __half2float(__high2half(m));
  od[i] = __half2float(x / y);
  oi[2 * i + 0] = (x > y) + 2 * (x == y) + 4 * __hlt(x, z);
  oi[2 * i + 1] = __half2int_rz(__hmul(x, __float2half(3.0f)));
}"""
    r = rng(120)
    n = 256
    a, b, c = (r.uniform(-6, 6, n).astype(np.float16) for _ in range(3))
    f = r.uniform(-70000, 70000, n).astype(np.float32)
    f[: n // 2] = r.uniform(-8, 8, n // 2).astype(np.float32)
    A, B, C, F = (v.astype(np.float64) for v in (a, b, c, f))
    h = lambda v: np.asarray(v, np.float64).astype(np.float16)  # noqa: E731  correctly rounded
    hf = lambda v: h(v).astype(np.float64)  # noqa: E731
    # fp16 finite max 65504; out-of-range -> inf for rn/ru(+), max for rz etc.
    with np.errstate(over="ignore"):
        cvt = [_f16_dir(F, m) for m in ("rn", "rz", "rd", "ru")]
    e = np.stack(
        [h(A + B), h(A * B), h(A - B), h(A * B + C), h(-A), h(np.abs(B)), h(np.maximum(A, B)), h(np.minimum(A, B))]
        + cvt,
        1,
    ).astype(np.float16)
    # half2: s = fma(p, q, p + q) lanewise, p = (x, y), q = (z, x)
    s_lo = hf(A * C + hf(A + C))
    s_hi = hf(B * A + hf(B + A))
    m_sum = (hf(A * C).astype(np.float32) + hf(B * A).astype(np.float32)).astype(np.float64)
    ef = np.stack([s_lo, s_hi, m_sum], 1).astype(np.float32)
    ei = np.stack([(A > B) + 2 * (A == B) + 4 * (A < C), np.trunc(hf(A * 3.0))], 1).astype(np.int32)
    nv(
        "fp16_half_half2",
        src,
        [
            Arr("a", a),
            Arr("b", b),
            Arr("c", c),
            Arr("f", f),
            Arr("o", np.zeros((n, 12), np.float16), "out", e),
            Arr("of", np.zeros((n, 3), np.float32), "out", ef),
            out("od", np.zeros(n, np.float32), hf(A / B), {"rtol": 1e-3}),
            Arr("oi", np.zeros((n, 2), np.int32), "out", ei),
            I32(n),
        ],
        category="fp16",
        grid=2,
        block=128,
        seed=120,
        notes="add/sub/mul/fma.rn.f16(x2), cvt.r{n,z,m,p}.f16.f32 incl. overflow, half division (approx rcp + "
        "fix-up in the header), nested { .reg } scopes from the fp16 header",
    )


def case_bf16():
    src = r"""extern "C" __global__ void bf16k(const float* x, const float* y, unsigned short* o, float* of, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __nv_bfloat16 a = __float2bfloat16(x[i]), b = __float2bfloat16(y[i]);
  __nv_bfloat16 r[6];
  r[0] = a; r[1] = __hadd(a, b); r[2] = __hmul(a, b); r[3] = __hfma(a, b, a); r[4] = __hsub(a, b);
  r[5] = __float2bfloat16_rz(x[i]);
  for (int k = 0; k < 6; ++k) o[6 * i + k] = __bfloat16_as_ushort(r[k]);
  __nv_bfloat162 p = __floats2bfloat162_rn(x[i], y[i]);
  __nv_bfloat162 q = __hmul2(p, p);
  of[2 * i] = __low2float(q); of[2 * i + 1] = __high2float(q) + __bfloat162float(__hmax(a, b));
}"""
    r = rng(121)
    n = 256
    x = r.uniform(-100, 100, n).astype(np.float32)
    y = r.uniform(-2, 2, n).astype(np.float32)
    ab = bf16_from_f64(x)
    bb = bf16_from_f64(y)
    A, B = bf16_to_f64(ab), bf16_to_f64(bb)
    xb = x.view(np.uint32)
    rz = (xb >> 16).astype(np.uint16)
    e = np.stack(
        [ab, bf16_from_f64(A + B), bf16_from_f64(A * B), bf16_from_f64(A * B + A), bf16_from_f64(A - B), rz], 1
    ).astype(np.uint16)
    lo = bf16_to_f64(bf16_from_f64(A * A))
    hi = bf16_to_f64(bf16_from_f64(B * B)).astype(np.float32) + np.maximum(A, B).astype(np.float32)
    ef = np.stack([lo.astype(np.float32), hi], 1).astype(np.float32)
    nv(
        "bf16",
        src,
        [
            Arr("x", x),
            Arr("y", y),
            Arr("o", np.zeros((n, 6), np.uint16), "out", e, {"exact": True}),
            Arr("of", np.zeros((n, 2), np.float32), "out", ef),
            I32(n),
        ],
        category="bf16",
        grid=2,
        block=128,
        seed=121,
        notes="o holds raw bf16 bits; cvt.rn.bf16.f32, fma.rn.bf16 (sm_80), mul.rn.bf16x2, max.bf16",
    )


# =============================================================================================== grids / shared
def case_grid3d():
    src = r"""extern "C" __global__ void g3(int* o, int W, int H, int D) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x >= W || y >= H || z >= D) return;
  int tl = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  o[2 * ((z * H + y) * W + x)] = x + 100 * y + 10000 * z;
  o[2 * ((z * H + y) * W + x) + 1] = (tl & 31) + 32 * gridDim.x + 1000 * gridDim.y + 100000 * gridDim.z + 7 * blockDim.z;
}"""
    W, H, D = 19, 11, 7
    Z, Y, X = np.meshgrid(np.arange(D), np.arange(H), np.arange(W), indexing="ij")
    bx, by, bz = 8, 4, 2
    tl = (X % bx) + bx * ((Y % by) + by * (Z % bz))
    gx, gy, gz = 3, 3, 4
    e = np.stack([X + 100 * Y + 10000 * Z, (tl & 31) + 32 * gx + 1000 * gy + 100000 * gz + 7 * bz], -1)
    e = e.astype(np.int32)
    nv(
        "grid3d_block3d",
        src,
        [out("o", e, e, fill=-1), Scalar("W", "int32", W), Scalar("H", "int32", H), Scalar("D", "int32", D)],
        category="grid",
        grid=(gx, gy, gz),
        block=(bx, by, bz),
    )


def case_dyn_shared_multi():
    src = r"""extern "C" __global__ void dyn(const double* x, double* o, int* oi) {
  extern __shared__ __align__(16) unsigned char smem[];
  double* sd = (double*)smem;
  int* si = (int*)(sd + blockDim.x);
  float* sf = (float*)(si + blockDim.x);
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  sd[t] = x[i];
  si[t] = (int)(x[i] * 10.0);
  sf[t] = (float)t * 0.5f;
  __syncthreads();
  int j = (t * 5 + 3) % blockDim.x;
  o[i] = sd[j] + sd[blockDim.x - 1 - t] + sf[j];
  oi[i] = si[j] - si[t];
}"""
    r = rng(122)
    bs, nb = 80, 3
    x = r.standard_normal(bs * nb) * 4
    xb = x.reshape(nb, bs)
    t = np.arange(bs)
    j = (t * 5 + 3) % bs
    si = np.trunc(xb * 10.0).astype(np.int64)
    eo = xb[:, j] + xb[:, ::-1] + (j.astype(np.float32) * np.float32(0.5)).astype(np.float64)
    eoi = si[:, j] - si
    nv(
        "dynamic_shared_multi_view",
        src,
        [
            Arr("x", x),
            out("o", x, eo.reshape(-1), {"ulps": 1}),
            out("oi", np.zeros(bs * nb, np.int32), eoi.reshape(-1)),
        ],
        category="shared-memory",
        grid=nb,
        block=bs,
        shared_mem=bs * 16,
        seed=122,
        notes="one extern __shared__ byte array viewed as double/int/float",
    )


def case_stencil():
    src = r"""#define B 16
#define R 1
extern "C" __global__ void blur(const float* in, float* out, int W, int H) {
  __shared__ float tile[B + 2 * R][B + 2 * R];
  int gx = blockIdx.x * B + threadIdx.x, gy = blockIdx.y * B + threadIdx.y;
  for (int dy = threadIdx.y; dy < B + 2 * R; dy += B)
    for (int dx = threadIdx.x; dx < B + 2 * R; dx += B) {
      int sx = min(max((int)(blockIdx.x * B) + dx - R, 0), W - 1);
      int sy = min(max((int)(blockIdx.y * B) + dy - R, 0), H - 1);
      tile[dy][dx] = in[sy * W + sx];
    }
  __syncthreads();
  if (gx < W && gy < H) {
    float s = 0.f;
    for (int ky = 0; ky <= 2 * R; ++ky)
      for (int kx = 0; kx <= 2 * R; ++kx) s += tile[threadIdx.y + ky][threadIdx.x + kx];
    out[gy * W + gx] = s;
  }
}"""
    r = rng(123)
    H, W = 37, 45
    img = r.integers(0, 16, (H, W)).astype(np.float32)
    p = np.pad(img, 1, mode="edge")
    e = sum(p[dy : dy + H, dx : dx + W] for dy in range(3) for dx in range(3))
    nv(
        "stencil_blur_halo",
        src,
        [Arr("img", img), out("o", img, e), Scalar("W", "int32", W), Scalar("H", "int32", H)],
        category="shared-memory",
        grid=(3, 3),
        block=(16, 16),
        seed=123,
        notes="halo loads in a loop, clamp-to-edge, nested loops over shared tile",
    )


def case_bitonic():
    src = r"""extern "C" __global__ void bitonic(int* data) {
  __shared__ int s[512];
  int t = threadIdx.x, base = blockIdx.x * 512;
  s[t] = data[base + t]; s[t + 256] = data[base + t + 256];
  for (int size = 2; size <= 512; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      int pos = 2 * t - (t & (stride - 1));
      bool up = ((pos & size) == 0);
      int a = s[pos], b = s[pos + stride];
      if ((a > b) == up) { s[pos] = b; s[pos + stride] = a; }
    }
  }
  __syncthreads();
  data[base + t] = s[t]; data[base + t + 256] = s[t + 256];
}"""
    r = rng(124)
    d = r.integers(-(10**6), 10**6, 1024).astype(np.int32)
    e = np.sort(d.reshape(2, 512), axis=1).reshape(-1)
    nv(
        "bitonic_sort_shared",
        src,
        [Arr("data", d, "inout", e)],
        category="shared-memory",
        grid=2,
        block=256,
        seed=124,
        notes="barrier inside doubly nested loop",
    )


# =============================================================================================== calls / control flow
def case_noinline():
    src = r"""struct Acc { float s; int c; double p; };
__device__ __noinline__ int fib(int k) { return k < 2 ? k : fib(k - 1) + fib(k - 2); }
__device__ __noinline__ Acc accum(Acc a, float v, int w) { a.s += v * w; a.c += w; a.p *= 1.0 + v; return a; }
__device__ __noinline__ float many(float a, float b, float c, float d, int e, int f, double g, double h,
                                   long long i, unsigned char j, short k, float l) {
  return a - b + c * d + e - f + (float)(g * h) + (float)i + j + k + l;
}
__device__ __noinline__ void write2(int* p, int a, int b) { p[0] = a; p[1] = b; }
extern "C" __global__ void calls(const float* x, int* oi, float* of, double* od, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Acc a = {0.f, 0, 1.0};
  for (int k = 0; k < 4; ++k) a = accum(a, x[i] * (k + 1), k);
  write2(oi + 3 * i, fib(i % 15), a.c);
  oi[3 * i + 2] = fib(3 + (i & 3));
  of[2 * i] = a.s;
  of[2 * i + 1] = many(x[i], 1.f, 2.f, 3.f, 4, 5, 0.5, 4.0, -3ll, (unsigned char)200, (short)-7, x[i]);
  od[i] = a.p;
}"""
    r = rng(125)
    n = 100
    x = (r.integers(-64, 64, n) / 16.0).astype(np.float32)

    def fib(k):
        return k if k < 2 else fib(k - 1) + fib(k - 2)

    ei = np.zeros((n, 3), np.int32)
    ef = np.zeros((n, 2), np.float32)
    ed = np.zeros(n)
    for i in range(n):
        s, c, p = np.float32(0), 0, 1.0
        for k in range(4):
            v = np.float32(x[i] * np.float32(k + 1))
            s = np.float32(s + np.float32(v * np.float32(k)))
            c += k
            p *= 1.0 + float(v)
        ei[i] = [fib(i % 15), c, fib(3 + (i & 3))]
        xi = np.float32(x[i])
        ef[i] = [s, np.float32(xi - 1 + 6 + 4 - 5 + 2.0 - 3 + 200 - 7 + xi)]
        ed[i] = p
    nv(
        "noinline_calls_recursion",
        src,
        [Arr("x", x), out("oi", ei, ei), out("of", ef, ef, {"rtol": 1e-6}), out("od", ed, ed, {"rtol": 1e-15}), I32(n)],
        category="calls",
        grid=1,
        block=128,
        seed=125,
        notes=".func with struct by-value param and return (.param .align 8 .b8), recursion (call stack), "
        "12-argument call, void .func with pointer arg",
    )


def case_early_exit():
    src = r"""extern "C" __global__ void early(const unsigned* seeds, int* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned s = seeds[i];
  if (s % 5 == 0) { o[i] = -2; return; }
  int k = 0;
  while (true) {
    s ^= s << 13; s ^= s >> 17; s ^= s << 5;
    if ((s & 0xff) == 0x2a) break;
    if (++k >= 300) { o[i] = -1; return; }
    if (s & 0x80000000u) continue;
    k += 1;
  }
  o[i] = k;
}"""
    r = rng(126)
    n = 500
    sd = r.integers(1, 2**32, n, dtype=np.uint64).astype(np.uint32)
    e = np.zeros(n, np.int32)
    for i in range(n):
        s = int(sd[i])
        if s % 5 == 0:
            e[i] = -2
            continue
        k = 0
        res = None
        while True:
            s ^= (s << 13) & 0xFFFFFFFF
            s ^= s >> 17
            s ^= (s << 5) & 0xFFFFFFFF
            if (s & 0xFF) == 0x2A:
                break
            k += 1
            if k >= 300:
                res = -1
                break
            if s & 0x80000000:
                continue
            k += 1
        e[i] = k if res is None else res
    nv(
        "early_exit_loops",
        src,
        [Arr("s", sd), out("o", e, e, fill=99), I32(n)],
        category="control-flow",
        grid=4,
        block=128,
        seed=126,
        notes="return at the top, break/continue/return inside a divergent loop",
    )


def case_switch():
    src = r"""__device__ __noinline__ int op(int sel, int a, int b) {
  switch (sel) {
    case 0: return a + b;   case 1: return a - b;   case 2: return a * b;   case 3: return a ^ b;
    case 4: return a & b;   case 5: return a | b;   case 6: return a << (b & 7); case 7: return a >> (b & 7);
    case 8: return max(a, b); case 9: return min(a, b); case 10: return -a; case 11: return a % 13;
    default: return 12345;
  }
}
extern "C" __global__ void sw(const int* a, const int* b, int* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = op(i % 14, a[i], b[i]);
}"""
    r = rng(127)
    n = 280
    a = r.integers(-1000, 1000, n).astype(np.int32)
    b = r.integers(-1000, 1000, n).astype(np.int32)

    def ref(sel, x, y):
        return [
            x + y,
            x - y,
            x * y,
            x ^ y,
            x & y,
            x | y,
            x << (y & 7),
            x >> (y & 7),
            max(x, y),
            min(x, y),
            -x,
            int(math.fmod(x, 13)),
            12345,
            12345,
        ][sel]

    e = np.array([s32(ref(i % 14, int(a[i]), int(b[i]))) for i in range(n)], np.int32)
    nv(
        "switch_jump_table",
        src,
        [Arr("a", a), Arr("b", b), out("o", a, e), I32(n)],
        category="control-flow",
        grid=3,
        block=128,
        seed=127,
        notes="dense switch in a __noinline__ function (may become brx.idx)",
    )


def case_gridstride():
    src = r"""extern "C" __global__ void gs(const double* x, double* y, unsigned long long n, double a) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] = a * x[i] + y[i] * y[i];
}"""
    r = rng(128)
    n = 3333
    x = r.standard_normal(n)
    y = r.standard_normal(n)
    e = 1.75 * x + y * y
    nv(
        "grid_stride_f64",
        src,
        [
            Arr("x", x),
            Arr("y", y, "inout", e, {"rtol": 1e-14, "atol": 1e-14}),
            Scalar("n", "uint64", n),
            Scalar("a", "float64", 1.75),
        ],
        category="control-flow",
        grid=5,
        block=96,
        seed=128,
    )


def case_local():
    src = r"""struct P { int k; float v; };
extern "C" __global__ void loc(const int* x, int* o, float* of, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int a[24];
  P ps[8];
  for (int k = 0; k < 24; ++k) a[k] = x[i * 24 + k];
  for (int k = 0; k < 8; ++k) { ps[k].k = a[k] & 7; ps[k].v = (float)a[k + 8]; }
  // bubble sort with dynamic indices
  for (int p = 0; p < 23; ++p)
    for (int q = 0; q < 23 - p; ++q)
      if (a[q] > a[q + 1]) { int t = a[q]; a[q] = a[q + 1]; a[q + 1] = t; }
  int idx = x[i * 24] & 15;
  o[3 * i] = a[idx]; o[3 * i + 1] = a[23 - idx]; o[3 * i + 2] = a[(idx * 7) % 24];
  float s = 0.f;
  for (int k = 0; k < 8; ++k) s += ps[ps[k].k].v;
  of[i] = s;
}"""
    r = rng(129)
    n = 100
    x = r.integers(-500, 500, (n, 24)).astype(np.int32)
    srt = np.sort(x, 1)
    idx = x[:, 0] & 15
    e = np.stack([srt[np.arange(n), idx], srt[np.arange(n), 23 - idx], srt[np.arange(n), (idx * 7) % 24]], 1)
    ef = np.array([sum(float(x[i, 8 + (x[i, k] & 7)]) for k in range(8)) for i in range(n)], np.float32)
    nv(
        "local_arrays",
        src,
        [Arr("x", x), out("o", np.zeros((n, 3), np.int32), e), out("of", ef, ef), I32(n)],
        category="local-memory",
        grid=1,
        block=128,
        seed=129,
        notes="per-thread int[24] and struct array indexed dynamically -> .local depot",
    )


def case_constant():
    tab = [int((k * 2654435761) >> 7) & 0xFFFF for k in range(256)]
    coef = [1.0, -0.5, 0.25, 0.125, -0.0625, 2.0, 0.75, -1.5]
    src = (
        "__constant__ float coef[8] = {" + ", ".join(f"{c}f" for c in coef) + "};\n"
        "__constant__ unsigned short lut[256] = {" + ", ".join(map(str, tab)) + "};\n"
        "__constant__ int scalar_k = 37;\n"
        + r"""
extern "C" __global__ void cst(const float* x, const unsigned char* b, float* o, int* oi, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i], acc = 0.f;
  for (int k = 7; k >= 0; --k) acc = acc * v + coef[k];
  o[i] = acc;
  oi[i] = lut[b[i]] * scalar_k + lut[(b[i] + i) & 255];
}"""
    )
    r = rng(130)
    n = 300
    x = (r.integers(-4, 5, n) / 4.0).astype(np.float32)  # Horner stays exact (fma or not)
    b = r.integers(0, 256, n).astype(np.uint8)
    acc = np.zeros(n, np.float32)
    for k in range(7, -1, -1):
        acc = (acc * x + np.float32(coef[k])).astype(np.float32)
    T = np.array(tab)
    ei = (T[b] * 37 + T[(b.astype(int) + np.arange(n)) & 255]).astype(np.int32)
    nv(
        "constant_tables",
        src,
        [Arr("x", x), Arr("b", b), out("o", x, acc), out("oi", ei, ei), I32(n)],
        category="constant-memory",
        grid=3,
        block=128,
        seed=130,
        notes="initialised __constant__ arrays and scalar -> ld.const",
    )


# =============================================================================================== conversions
def case_conversions():
    src = r"""extern "C" __global__ void conv(const float* f, const double* d, const int* iv, const long long* lv,
                                   int* oi, unsigned* ou, long long* ol, float* of, double* od, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = f[i];
  double y = d[i];
  int* ri = oi + 6 * i;
  ri[0] = __float2int_rn(x); ri[1] = __float2int_rz(x); ri[2] = __float2int_rd(x); ri[3] = __float2int_ru(x);
  ri[4] = __double2int_rz(y); ri[5] = __double2int_rn(y);
  ou[2 * i] = __float2uint_rz(x); ou[2 * i + 1] = __double2uint_rn(y);
  ol[2 * i] = __float2ll_rz(x); ol[2 * i + 1] = (long long)__double2ull_rz(y);
  float* rf = of + 8 * i;
  rf[0] = __saturatef(x); rf[1] = __int2float_rz(iv[i]); rf[2] = __int2float_rd(iv[i]); rf[3] = __int2float_ru(iv[i]);
  rf[4] = __ll2float_rn(lv[i]); rf[5] = __uint2float_rz((unsigned)iv[i]); rf[6] = __double2float_rz(y);
  rf[7] = __int_as_float(__float_as_int(x) ^ 0x80000000);
  od[2 * i] = __ll2double_rn(lv[i]); od[2 * i + 1] = __hiloint2double(__double2hiint(y), __double2loint(y) ^ 1);
}"""
    specials = [
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        1e9,
        3e9,
        -3e9,
        5e9,
        1e20,
        -1e20,
        np.inf,
        -np.inf,
        np.nan,
        2147483520.0,
        -2147483648.0,
        4294967040.0,
        9.2e18,
        -9.3e18,
        123.99,
        -123.99,
        1e-30,
        0.99999994,
        1.5e-45,
    ]
    r = rng(131)
    n = 96
    f = np.concatenate([specials, r.uniform(-1e10, 1e10, n - len(specials) - 20), r.uniform(-3, 3, 20)])
    f = f.astype(np.float32)
    d = np.concatenate([f[: n // 2].astype(np.float64) * 1.000001, r.uniform(-5e9, 5e9, n - n // 2)])
    d[15] = np.nan
    iv = r.integers(-(2**31), 2**31, n).astype(np.int32)
    iv[:4] = [16777217, -16777217, 2**31 - 1, -(2**31)]
    lv = r.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    lv[:2] = [2**53 + 1, -(2**62) - 1]
    F, D = f.astype(np.float64), d
    ei = np.stack(
        [
            sat_cvt(F, np.int32, "rn"),
            sat_cvt(F, np.int32, "rz"),
            sat_cvt(F, np.int32, "rd"),
            sat_cvt(F, np.int32, "ru"),
            sat_cvt(D, np.int32, "rz"),
            sat_cvt(D, np.int32, "rn"),
        ],
        1,
    )
    eu = np.stack([sat_cvt(F, np.uint32, "rz"), sat_cvt(D, np.uint32, "rn")], 1)
    el = np.stack([sat_cvt(F, np.int64, "rz"), sat_cvt(D, np.uint64, "rz").view(np.int64)], 1)

    def i2f(vals, mode):
        return np.array(
            [_round_fraction_f32(Fraction(int(v)), mode) if v != 0 else np.float32(0) for v in vals], np.float32
        )

    with np.errstate(invalid="ignore"):
        sat = np.where(np.isnan(f), 0, np.clip(f, 0, 1)).astype(np.float32)
    drz = np.array(
        [_round_fraction_f32(Fraction(float(v)), "rz") if np.isfinite(v) and v != 0 else np.float32(v) for v in D],
        np.float32,
    )
    ef = np.stack(
        [sat, i2f(iv, "rz"), i2f(iv, "rd"), i2f(iv, "ru"), i2f(lv, "rn"), i2f(iv.view(np.uint32), "rz"), drz, -f], 1
    )
    dbits = d.view(np.uint64) ^ np.uint64(1)
    ed = np.stack([np.array([float(int(v)) for v in lv]), dbits.view(np.float64)], 1)
    nv(
        "float_int_conversions",
        src,
        [
            Arr("f", f),
            Arr("d", d),
            Arr("iv", iv),
            Arr("lv", lv),
            out("oi", ei, ei),
            out("ou", eu, eu),
            out("ol", el, el),
            out("of", ef, ef, {"exact": True}),
            out("od", ed, ed, {"exact": True}),
            I32(n),
        ],
        category="conversion",
        grid=1,
        block=128,
        seed=131,
        notes="cvt.r{n,z,m,p}i.{s32,u32,s64,u64}.{f32,f64} saturate + NaN->0; cvt.sat.f32 (NaN->0); "
        "int->float directed rounding; mov.b64 {hi,lo} pack/unpack",
    )


def case_nan_math():
    src = r"""extern "C" __global__ void nanm(const float* x, const float* y, float* o, int* oi, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i];
  float* r = o + 12 * i;
  r[0] = fminf(a, b); r[1] = fmaxf(a, b); r[2] = copysignf(a, b); r[3] = fabsf(a);
  r[4] = truncf(a); r[5] = roundf(a); r[6] = rintf(a); r[7] = floorf(a); r[8] = ceilf(a);
  r[9] = fmodf(a, b); r[10] = ldexpf(a, 3); r[11] = nextafterf(a, b);
  int* q = oi + 4 * i;
  q[0] = (a < b) | ((a <= b) << 1) | ((a == b) << 2) | ((a != b) << 3) | (!(a >= b) << 4) | (!(a > b) << 5);
  q[1] = isnan(a) | (isinf(a) << 1) | (signbit(a) << 2) | (isfinite(b) << 3);
  q[2] = (int)lrintf(fminf(fmaxf(a, -1e6f), 1e6f));
  int e; frexpf(a, &e);
  q[3] = isfinite(a) ? e : -999;
}"""
    vals = np.array(
        [
            0.0,
            -0.0,
            1.0,
            -1.0,
            2.5,
            -2.5,
            3.5,
            0.5,
            -0.5,
            1e30,
            -1e30,
            np.inf,
            -np.inf,
            np.nan,
            1.17549435e-38,
            7.0,
            -7.25,
            1e-40,
        ],
        np.float32,
    )
    a = np.repeat(vals, len(vals))
    b = np.tile(vals, len(vals))
    A, B = a, b
    with np.errstate(all="ignore"):
        e = np.stack(
            [
                np.fmin(A, B),
                np.fmax(A, B),
                np.copysign(A, B),
                np.abs(A),
                np.trunc(A),
                np.where(np.isfinite(A), np.sign(A) * np.floor(np.abs(A) + np.float32(0.5)), A),
                np.rint(A),
                np.floor(A),
                np.ceil(A),
                np.fmod(A, B),
                np.ldexp(A, 3),
                np.nextafter(A, B),
            ],
            1,
        )
        e = e.astype(np.float32)
        # roundf(0.49999997f) pitfall is not in the inputs; -0.5 -> -1, 0.5 -> 1
        q0 = (
            (A < B).astype(int)
            | ((A <= B) << 1)
            | ((A == B) << 2)
            | ((A != B) << 3)
            | ((~(A >= B)) << 4)
            | ((~(A > B)) << 5)
        )
        q1 = np.isnan(A) | (np.isinf(A) << 1) | (np.signbit(A) << 2) | (np.isfinite(B) << 3)
        cl = np.fmin(np.fmax(A, np.float32(-1e6)), np.float32(1e6))
        q2 = np.rint(cl)
        fe = np.array([math.frexp(float(v))[1] if np.isfinite(v) else -999 for v in A])
    ei = np.stack([q0, q1, q2, fe], 1).astype(np.int32)
    n = len(a)
    nv(
        "nan_inf_classify",
        src,
        [
            Arr("x", a),
            Arr("y", b),
            out("o", np.zeros((n, 12), np.float32), e, {"exact": True}),
            out("oi", np.zeros((n, 4), np.int32), ei),
            I32(n),
        ],
        category="elementwise-math",
        grid=3,
        block=128,
        notes="min/max with NaN (returns the other), unordered setp (.ltu/.geu/.nan), signed zero, denormal 1e-40 "
        "(no ftz), cvt.rni vs roundf(half away), testp-like classification",
    )


# =============================================================================================== printf / ABI
def case_printf():
    src = r"""
extern "C" __global__ void pf(const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    long long big = 1234567890123ll * (i + 1);
    printf("i=%d x=%.3f e=%e hex=%08x u=%u ll=%lld c=%c s=%s g=%g\n", i, x[i], (double)x[i] * 1e10,
           0xbeef0000u + i, 4000000000u, big, 'A' + i, i & 1 ? "odd" : "even", 0.1 * i);
  }
  if (i == 0) printf("%5.1f|%-4d|%%|%x\n", 3.14159, 42, 255);
}"""
    x = np.array([0.5, -1.25, 3.0, 100.125, 7.75], np.float32)
    lines = []
    for i in range(len(x)):
        xv = float(x[i])
        lines.append(
            "i=%d x=%.3f e=%e hex=%08x u=%u ll=%d c=%c s=%s g=%g"  # noqa: UP031
            % (
                i,
                xv,
                xv * 1e10,
                0xBEEF0000 + i,
                4000000000,
                1234567890123 * (i + 1),
                chr(65 + i),
                "odd" if i & 1 else "even",
                0.1 * i,
            )
        )  # noqa: UP031 (C printf semantics on purpose)
    lines.append("%5.1f|%-4d|%%|%x" % (3.14159, 42, 255))  # noqa: UP031
    text = "\n".join(lines) + "\n"
    nv(
        "printf_formats",
        src,
        [Arr("x", x), I32(len(x))],
        category="printf",
        grid=1,
        block=32,
        printf={"text": text, "compare": "sorted_lines"},
        notes="vprintf with a .local argument buffer (doubles 8-aligned); format strings in .global .b8",
    )


def case_struct_param():
    src = r"""struct Params { float scale; int offset; double bias; short s; char c; float3 v; unsigned long long mask; };
extern "C" __global__ void sp(Params p, const float* x, double* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  o[i] = x[i] * p.scale + p.offset + p.bias + p.s * p.c + p.v.x - p.v.y * p.v.z + (double)((p.mask >> (i & 63)) & 1);
}"""
    dt = np.dtype(
        [
            ("scale", "<f4"),
            ("offset", "<i4"),
            ("bias", "<f8"),
            ("s", "<i2"),
            ("c", "i1"),
            ("v", "<f4", (3,)),
            ("mask", "<u8"),
        ],
        align=True,
    )
    p = np.zeros(1, dt)
    p["scale"], p["offset"], p["bias"], p["s"], p["c"] = 1.5, -3, 0.25, -12, 5
    p["v"] = [2.0, 0.5, 8.0]
    p["mask"] = 0xF0F0_1234_8001_FFFF
    raw = p.tobytes()
    assert len(raw) == 40, len(raw)
    r = rng(132)
    n = 100
    x = (r.integers(-100, 100, n) / 4.0).astype(np.float32)
    m = int(p["mask"][0])
    # float part: x*scale + offset (float) + bias (double) + s*c (int) + v.x (float) - v.y*v.z (float)
    e = []
    for i in range(n):
        t = np.float32(np.float32(x[i]) * np.float32(1.5) + np.float32(-3))  # float (maybe fma; exact here)
        v = float(t) + 0.25 + (-60) + 2.0 - float(np.float32(4.0)) + ((m >> (i & 63)) & 1)
        e.append(v)
    e = np.array(e)
    nv(
        "struct_by_value_param",
        src,
        [Raw("p", raw), Arr("x", x), out("o", e, e), I32(n)],
        category="abi",
        grid=1,
        block=128,
        seed=132,
        notes="kernel param `.param .align 8 .b8 p[40]` (packed as raw bytes)",
    )


def case_template():
    src = r"""template <typename T, int N>
__global__ void axpy_n(T* __restrict__ y, const T* __restrict__ x, T a, int n) {
  int i = (blockIdx.x * blockDim.x + threadIdx.x) * N;
#pragma unroll
  for (int k = 0; k < N; ++k)
    if (i + k < n) y[i + k] = a * x[i + k] + y[i + k];
}
template __global__ void axpy_n<long long, 4>(long long*, const long long*, long long, int);"""
    r = rng(133)
    n = 1001
    x = r.integers(-(2**40), 2**40, n, dtype=np.int64)
    y = r.integers(-(2**40), 2**40, n, dtype=np.int64)
    a = -37
    e = a * x + y
    nv(
        "template_mangled_entry",
        src,
        [Arr("y", y, "inout", e), Arr("x", x), Scalar("a", "int64", a), I32(n)],
        category="abi",
        grid=2,
        block=128,
        name_expr="axpy_n<long long, 4>",
        seed=133,
        notes="C++-mangled entry name from nvrtcGetLoweredName",
    )


def case_vectors():
    src = r"""extern "C" __global__ void vec(const float4* __restrict__ a, const double2* __restrict__ b,
                                  const short2* c, int2* o, float4* of, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float4 v = __ldg(&a[i]);
  double2 w = b[i];
  short2 s = c[i];
  of[i] = make_float4(v.w, v.z * 2.f, v.y + v.x, (float)(w.x - w.y));
  o[i] = make_int2(s.x * s.y, s.x - s.y);
}"""
    r = rng(134)
    n = 200
    a = (r.integers(-1000, 1000, (n, 4)) / 8.0).astype(np.float32)
    b = r.integers(-1000, 1000, (n, 2)) / 2.0
    c = r.integers(-(2**15), 2**15, (n, 2)).astype(np.int16)
    C = c.astype(np.int64)
    eo = np.stack([C[:, 0] * C[:, 1], C[:, 0] - C[:, 1]], 1).astype(np.int32)
    ef = np.stack([a[:, 3], a[:, 2] * 2, a[:, 1] + a[:, 0], (b[:, 0] - b[:, 1])], 1).astype(np.float32)
    nv(
        "vector_types_ldg",
        src,
        [Arr("a", a), Arr("b", b), Arr("c", c), out("o", np.zeros((n, 2), np.int32), eo), out("of", a, ef), I32(n)],
        category="memory",
        grid=2,
        block=128,
        seed=134,
        notes="ld.global.nc.v4.f32, ld.v2.f64, ld.v2.u16, st.v4.f32, st.v2.u32",
    )


def case_trap():
    src = r"""extern "C" __global__ void trapk(const int* x, int* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (x[i] < 0) __trap();
  o[i] = x[i] * 2;
}"""
    x = np.arange(64, dtype=np.int32)
    x[37] = -1
    nv(
        "trap_launch_failed",
        src,
        [Arr("x", x), out("o", x, x * 2), I32(64)],
        category="errors",
        grid=1,
        block=64,
        expect_error={"at": "launch", "code": 719, "name": "CUDA_ERROR_LAUNCH_FAILED"},
        notes="trap -> launch fails with 719; outputs are not checked",
    )


# =============================================================================================== sm_80 / advanced
def case_cp_async():
    src = r"""#include <cuda_pipeline.h>
extern "C" __global__ void cpa(const float* __restrict__ in, float* out, int n) {
  __shared__ __align__(16) float buf[2][128];
  int t = threadIdx.x;
  int tiles = n / 128;
  int base = blockIdx.x * tiles * 128;
  float acc = 0.f;
  __pipeline_memcpy_async(&buf[0][t], &in[base + t], sizeof(float));
  __pipeline_commit();
  for (int k = 0; k < tiles; ++k) {
    if (k + 1 < tiles) __pipeline_memcpy_async(&buf[(k + 1) & 1][t], &in[base + (k + 1) * 128 + t], sizeof(float));
    __pipeline_commit();
    __pipeline_wait_prior(1);
    __syncthreads();
    acc += buf[k & 1][(t + k) & 127];
    __syncthreads();
  }
  out[blockIdx.x * 128 + t] = acc;
}"""
    r = rng(135)
    tiles, nb = 6, 2
    n = tiles * 128
    x = r.integers(-100, 100, nb * n).astype(np.float32)
    e = np.zeros((nb, 128), np.float32)
    for b in range(nb):
        for k in range(tiles):
            e[b] += x[b * n + k * 128 + (np.arange(128) + k) % 128]
    nv(
        "cp_async_pipeline",
        src,
        [Arr("x", x), out("o", np.zeros(nb * 128, np.float32), e.reshape(-1)), I32(n)],
        category="sm80",
        grid=nb,
        block=128,
        seed=135,
        notes="cp.async.ca.shared.global + commit_group + wait_group (double buffering)",
    )


def case_coop_groups():
    src = r"""#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
extern "C" __global__ void cgk(const int* x, int* o, int* tot) {
  cg::thread_block blk = cg::this_thread_block();
  cg::thread_block_tile<8> t8 = cg::tiled_partition<8>(blk);
  int v = x[blk.group_index().x * blk.size() + blk.thread_rank()];
  int s8 = cg::reduce(t8, v, cg::plus<int>());
  int mx = cg::reduce(t8, v, cg::greater<int>());
  int sh = t8.shfl_down(v, 1);
  unsigned b = t8.ballot(v > 0);
  int i = blk.group_index().x * blk.size() + blk.thread_rank();
  o[4 * i] = s8; o[4 * i + 1] = mx; o[4 * i + 2] = sh; o[4 * i + 3] = (int)b + 100 * t8.meta_group_rank();
  blk.sync();
  if (t8.thread_rank() == 0) atomicAdd(tot, s8);
}"""
    r = rng(136)
    n = 192
    x = r.integers(-50, 50, n).astype(np.int32)
    g = x.reshape(-1, 8)
    e = np.zeros((n, 4), np.int32)
    for i in range(n):
        grp = g[i // 8]
        lane = i % 8
        e[i] = [
            grp.sum(),
            grp.max(),
            grp[lane + 1] if lane + 1 < 8 else grp[lane],
            sum(1 << k for k in range(8) if grp[k] > 0) + 100 * ((i % 96) // 8),
        ]
    nv(
        "cooperative_groups_tile",
        src,
        [Arr("x", x), out("o", np.zeros((n, 4), np.int32), e), out("tot", np.zeros(1, np.int32), [x.sum()])],
        category="warp",
        grid=2,
        block=96,
        seed=136,
        notes="cg::tiled_partition<8>, cg::reduce (redux.sync / shfl), tile ballot with masks",
    )


def case_syncwarp_divergent():
    src = r"""extern "C" __global__ void swd(const int* x, int* o) {
  __shared__ int s[64];
  int t = threadIdx.x, lane = t & 31;
  int v = x[blockIdx.x * 64 + t];
  int r = 0;
  if (lane < 16) {
    s[t] = v * 2;
    __syncwarp(0x0000ffff);
    r = s[(t & ~15) + ((lane + 3) & 15)];
    r += __shfl_sync(0x0000ffff, v, (lane + 1) & 15);
  } else {
    s[t] = v * 3;
    __syncwarp(0xffff0000);
    r = -s[(t & ~15) + ((lane + 5) & 15)];
    r += __shfl_xor_sync(0xffff0000, v, 2);
  }
  o[blockIdx.x * 64 + t] = r;
}"""
    r = rng(137)
    x = r.integers(-1000, 1000, 128).astype(np.int32)
    e = np.zeros(128, np.int32)
    for i in range(128):
        lane = i % 32
        w0 = i - lane
        if lane < 16:
            e[i] = 2 * x[w0 + ((lane + 3) & 15)] + x[w0 + ((lane + 1) & 15)]
        else:
            h = w0 + 16
            e[i] = -3 * x[h + ((lane + 5) & 15)] + x[w0 + (lane ^ 2)]
    nv(
        "syncwarp_divergent_halves",
        src,
        [Arr("x", x), out("o", x, e)],
        category="warp",
        grid=2,
        block=64,
        seed=137,
        notes="bar.warp.sync / shfl.sync with partial member masks inside divergent branches",
    )


def case_int64():
    src = r"""extern "C" __global__ void i64(const long long* a, const long long* b, unsigned long long* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long x = a[i], y = b[i];
  unsigned long long ux = (unsigned long long)x;
  int s = (int)(y & 127);
  unsigned long long* r = o + 8 * i;
  r[0] = (unsigned long long)(x * y);
  r[1] = ux << (s & 63);
  r[2] = (unsigned long long)(x >> (s & 63));
  r[3] = (ux >> (s & 63)) | (ux << ((64 - (s & 63)) & 63));
  r[4] = (unsigned long long)(x / (y | 1));
  r[5] = ux % ((unsigned long long)y | 1);
  r[6] = (unsigned long long)max(x, y) ^ (unsigned long long)min(x, y);
  r[7] = (unsigned long long)(x < y) + 2 * (ux < (unsigned long long)y) + 4 * (x == y);
}"""
    r = rng(138)
    n = 256
    a = r.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    b = r.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    b[::4] = r.integers(-300, 300, len(b[::4]))
    M = 2**64 - 1
    e = np.zeros((n, 8), np.uint64)
    for i in range(n):
        x, y = int(a[i]), int(b[i])
        ux, uy = x & M, y & M
        sh = (y & 127) & 63
        d = y | 1
        q = abs(x) // abs(d)
        q = q if (x >= 0) == (d > 0) else -q
        e[i] = [
            (x * y) & M,
            (ux << sh) & M,
            (x >> sh) & M,
            ((ux >> sh) | (ux << ((64 - sh) & 63))) & M,
            q & M,
            ux % (uy | 1),
            (max(x, y) & M) ^ (min(x, y) & M),
            int(x < y) + 2 * int(ux < uy) + 4 * int(x == y),
        ]
    nv(
        "int64_ops",
        src,
        [Arr("a", a), Arr("b", b), out("o", e, e), I32(n)],
        category="integer",
        grid=2,
        block=128,
        seed=138,
        notes="64-bit mul/shift/rotate/div/rem, signed vs unsigned compares",
    )


def main():
    case_saxpy()
    math_case("math_f32", np.float32, {"rtol": 2e-6, "atol": 1e-6})
    math_case("math_f64", np.float64, {"rtol": 1e-13, "atol": 1e-14})
    # --use_fast_math: tanhf -> tanh.approx.f32 (rel. error 2^-10.99), ex2/lg2/sin/cos.approx elsewhere
    math_case("math_f32_fastmath", np.float32, {"rtol": 1e-3, "atol": 2e-5}, fast=True)
    case_ieee_exact()
    case_f64_exact()
    case_intdiv()
    case_bits()
    case_asm_edges()
    case_block_reduce()
    case_warp_segments()
    case_matmul()
    case_hist()
    case_scan()
    case_vote()
    case_atomics()
    case_atomic_float()
    case_last_block()
    case_half()
    case_bf16()
    case_grid3d()
    case_dyn_shared_multi()
    case_stencil()
    case_bitonic()
    case_noinline()
    case_early_exit()
    case_switch()
    case_gridstride()
    case_local()
    case_constant()
    case_conversions()
    case_nan_math()
    case_printf()
    case_struct_param()
    case_template()
    case_vectors()
    case_trap()
    case_cp_async()
    case_coop_groups()
    case_syncwarp_divergent()
    case_int64()


if __name__ == "__main__":
    main()
