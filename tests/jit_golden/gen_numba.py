"""Generate the numba-cuda golden cases: `python tests/jit_golden/gen_numba.py` (no GPU needed).

Kernels are compiled with `numba.cuda.compile_ptx(fn, sig, cc=(8, 0))`; expected outputs come from numpy.
Array arguments use numba's kernel ABI (5 + 2*ndim params each; see NOTE [numba array ABI] in _casegen.py).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import os  # noqa: E402

import numba  # noqa: E402
from _casegen import Arr, Scalar, rng, sat_cvt, write_case  # noqa: E402
from numba import cuda, float32, int32  # noqa: E402

SIMCHECK = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
if SIMCHECK:  # the simulator has no fp16 module; fp16 kernels are skipped there
    fp16 = None
else:
    from numba.cuda import fp16
SIM_RESULTS: list[tuple[str, str]] = []

if not SIMCHECK:
    import numba.cuda.dispatcher as _nbdisp

    class _FakeDevice:  # device functions ask the current device for its cc; there is no GPU here
        compute_capability = (8, 0)

    _nbdisp.get_current_device = lambda: _FakeDevice()

PRODUCER = f"numba-cuda {getattr(numba.cuda, '__version__', '0.30')} (numba {numba.__version__}), compile_ptx cc=(8,0)"
F32 = {"rtol": 2e-6, "atol": 1e-6}
F64 = {"rtol": 1e-13, "atol": 1e-14}


def nb(name, fn, sig, args, *, category, grid, block, shared_mem=0, fastmath=False, seed=None, printf=None, notes=""):
    if SIMCHECK:
        return simcheck("nb_" + name, fn, args, grid, block, shared_mem)
    ptx, _ = cuda.compile_ptx(fn, sig, cc=(8, 0), fastmath=fastmath)
    if ".extern .func" in ptx and "_nbst" in ptx:
        ptx = link_fp16_shim(ptx)
        notes += (
            "; numba's fp16 ops are .extern .func shims (C++ compiled by NVRTC and linked by numba at load "
            "time); this PTX has the shim's PTX merged in textually so the module is self-contained"
        )
    write_case(
        "nb_" + name,
        producer=PRODUCER + (" fastmath" if fastmath else ""),
        category=category,
        ptx=ptx,
        args=args,
        grid=grid,
        block=block,
        shared_mem=shared_mem,
        abi="numba",
        seed=seed,
        printf=printf,
        notes=notes,
    )


def link_fp16_shim(ptx: str) -> str:
    """Merge the NVRTC-compiled PTX of numba's fp16 shim functions into the kernel's PTX."""
    import re

    from _nvrtc import compile_nvrtc
    from numba.cuda._internal import cuda_fp16 as _cf

    shim, _ = compile_nvrtc(_cf.shim_stream.getvalue(), "fp16_shim.cu", ("-rdc=true",))
    defined = set(re.findall(r"\.visible\s+\.func\s+(?:\([^)]*\)\s*)?([\w$]+)\s*\(", shim))
    for name in defined:  # drop the matching `.extern .func ... name(...);` declarations
        ptx = re.sub(r"\.extern\s+\.func\s+(?:\([^)]*\)\s*)?" + re.escape(name) + r"\s*\([^)]*\)\s*;\n?", "", ptx)
    body = "\n".join(ln for ln in shim.splitlines() if not ln.startswith((".version", ".target", ".address_size")))
    return (
        ptx.rstrip() + "\n\n// ---- numba fp16 shim (NVRTC " + "-rdc=true), merged by gen_numba.py ----\n" + body + "\n"
    )


def simcheck(name, fn, args, grid, block, shared_mem):
    """Cross-check the numpy expectations by running the Python kernel in numba's CUDA simulator."""
    from test_golden import compare

    if ONLY and name not in ONLY:
        return
    vals = [a.init.copy() if isinstance(a, Arr) else a.value for a in args]
    try:
        cuda.jit(fn)[grid, block, 0, shared_mem](*vals)
        for a, v in zip(args, vals, strict=True):
            if isinstance(a, Arr) and a.role != "in":
                compare(a.name, v, a.expected, a.tol)
        SIM_RESULTS.append((name, "ok"))
    except Exception as e:  # noqa: BLE001
        SIM_RESULTS.append((name, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]))


ONLY = set(sys.argv[1:])


def out(name, like, expected, tol=None, fill=0):
    return Arr(
        name, np.full_like(like, fill), "out", np.asarray(expected).astype(like.dtype), tol or {}, f"full({fill})"
    )


# ----------------------------------------------------------------------------------------------- elementwise
def k_saxpy(o, a, x, y):
    i = cuda.grid(1)
    if i < o.size:
        o[i] = a * x[i] + y[i]


def k_math(x, y, e, lg, s, c, q, t, p):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        e[i] = math.exp(v)
        lg[i] = math.log(abs(v) + 0.1)
        s[i] = math.sin(v)
        c[i] = math.cos(v)
        q[i] = math.sqrt(abs(v))
        t[i] = math.tanh(v)
        p[i] = math.pow(abs(v) + 0.5, y[i])


def math_case(name, dt, tol, fastmath=False, seed=1):
    r = rng(seed)
    n = 700
    lim = 3.0 if fastmath else 5.0
    x = r.uniform(-lim, lim, n).astype(dt)
    y = r.uniform(-2, 2, n).astype(dt)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    exps = [
        np.exp(xd),
        np.log(np.abs(xd) + (0.1 if dt == np.float64 else np.float64(np.float32(0.1)))),
        np.sin(xd),
        np.cos(xd),
        np.sqrt(np.abs(xd)),
        np.tanh(xd),
        np.power(np.abs(xd) + 0.5, yd),
    ]
    names = ["e", "lg", "s", "c", "q", "t", "p"]
    ty = "float32" if dt == np.float32 else "float64"
    args = [Arr("x", x, desc="uniform"), Arr("y", y, desc="uniform")]
    # tanh.approx.f32 (fastmath) has a max relative error of 2^-10.99
    tols = {nm: ({"rtol": 1e-3, "atol": 1e-5} if fastmath and nm == "t" else tol) for nm in names}
    args += [out(nm, x, ex, tols[nm]) for nm, ex in zip(names, exps, strict=True)]
    nb(
        name,
        k_math,
        f"void({', '.join([ty + '[:]'] * 9)})",
        args,
        category="elementwise-math",
        grid=6,
        block=128,
        fastmath=fastmath,
        seed=seed,
    )


def k_math_misc(x, y, o):
    i = cuda.grid(1)
    if i < x.size:
        a = x[i]
        b = y[i]
        o[i, 0] = math.atan2(a, b)
        o[i, 1] = math.hypot(a, b)
        o[i, 2] = math.erf(a)
        o[i, 3] = math.floor(a)
        o[i, 4] = math.ceil(a)
        o[i, 5] = math.copysign(a, b)
        o[i, 6] = math.fmod(a, b)
        o[i, 7] = math.expm1(a * 0.1)
        o[i, 8] = math.log1p(abs(b))
        o[i, 9] = math.atan(a)
        o[i, 10] = math.cosh(a * 0.5)
        o[i, 11] = cuda.cbrt(a)
        o[i, 12] = cuda.fma(a, b, a)
        o[i, 13] = math.isnan(a * 0.0 / b) * 1.0
        o[i, 14] = math.log10(abs(a) + 1.0)
        o[i, 15] = math.asin(b / 4.0)


def case_math_misc():
    r = rng(2)
    n = 300
    x = r.uniform(-6, 6, n).astype(np.float32)
    y = r.uniform(-4, 4, n).astype(np.float32)
    x[:4] = [0.0, -0.0, 2.5, -2.5]
    y[:4] = [1.0, -1.0, 0.0, 0.0]
    a, b = x.astype(np.float64), y.astype(np.float64)
    f = np.float32
    cols = [
        np.arctan2(a, b),
        np.hypot(a, b),
        np.array([math.erf(v) for v in a]),
        np.floor(a),
        np.ceil(a),
        np.copysign(a, b),
        np.fmod(a, b),
        np.expm1(a * np.float64(f(0.1))),
        np.log1p(np.abs(b)),
        np.arctan(a),
        np.cosh(a * 0.5),
        np.cbrt(a),
        a * b + a,
        np.isnan(a * 0.0 / b) * 1.0,
        np.log10(np.abs(a) + 1.0),
        np.arcsin(b / 4.0),
    ]
    with np.errstate(all="ignore"):
        exp = np.stack(cols, axis=1).astype(np.float32)
    o = np.zeros((n, 16), np.float32)
    nb(
        "math_misc_f32",
        k_math_misc,
        "void(float32[:], float32[:], float32[:, :])",
        [Arr("x", x), Arr("y", y), Arr("o", o, "out", exp, {"rtol": 4e-6, "atol": 2e-6})],
        category="elementwise-math",
        grid=3,
        block=128,
        seed=2,
        notes="2-D output array (9 params); fmod(x, 0) = NaN; 0*0/0 NaN test",
    )


# ----------------------------------------------------------------------------------------------- integers
def k_divmod(a, b, q, m):
    i = cuda.grid(1)
    if i < a.size:
        q[i] = a[i] // b[i]
        m[i] = a[i] % b[i]


def case_divmod(dt, seed):
    r = rng(seed)
    n = 512
    info = np.iinfo(dt)
    a = r.integers(-1000, 1000, n).astype(dt)
    b = r.integers(-37, 37, n).astype(dt)
    b[b == 0] = 7
    a[:6] = [info.max, info.min + 1, -7, 7, -7, 7]
    b[:6] = [3, 3, 2, -2, -2, 2]
    ty = str(np.dtype(dt))
    nb(
        f"divmod_{ty}",
        k_divmod,
        f"void({ty}[:], {ty}[:], {ty}[:], {ty}[:])",
        [Arr("a", a), Arr("b", b), out("q", a, np.floor_divide(a, b)), out("m", a, np.mod(a, b))],
        category="integer",
        grid=4,
        block=128,
        seed=seed,
        notes="Python semantics: floor division, modulo has the divisor's sign (numba adds fix-up code)",
    )


def k_bits(u, s, sh, o32, o64):
    i = cuda.grid(1)
    if i < u.size:
        x = u[i]
        o32[i, 0] = cuda.popc(x)
        o32[i, 1] = cuda.clz(x)
        o32[i, 2] = cuda.brev(x)
        o32[i, 3] = cuda.ffs(x)
        o32[i, 4] = x << sh[i]
        o32[i, 5] = x >> sh[i]
        o32[i, 6] = s[i] >> sh[i]
        o32[i, 7] = (x ^ (x >> 3)) & ~s[i] | 5
        y = np.uint64(x) * np.uint64(2654435761) + np.uint64(s[i])
        o64[i, 0] = cuda.popc(y)
        o64[i, 1] = cuda.clz(y)
        o64[i, 2] = cuda.brev(y)
        o64[i, 3] = cuda.ffs(y)


def _brev(v, bits):
    return int(format(int(v), f"0{bits}b")[::-1], 2)


def _clz(v, bits):
    return bits - int(v).bit_length()


def _ffs(v):
    v = int(v)
    return (v & -v).bit_length()


def case_bits():
    r = rng(3)
    n = 256
    u = r.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    u[:4] = [0, 1, 0x80000000, 0xFFFFFFFF]
    s = r.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    sh = r.integers(0, 32, n).astype(np.uint32)
    o32 = np.zeros((n, 8), np.uint32)
    e32 = np.zeros_like(o32)
    o64 = np.zeros((n, 4), np.uint64)
    e64 = np.zeros_like(o64)
    for i in range(n):
        x = int(u[i])
        e32[i] = [
            bin(x).count("1"),
            _clz(x, 32),
            _brev(x, 32),
            _ffs(x),
            (x << int(sh[i])) & 0xFFFFFFFF,
            x >> int(sh[i]),
            (int(s[i]) >> int(sh[i])) & 0xFFFFFFFF,
            ((x ^ (x >> 3)) & (~int(s[i]) & 0xFFFFFFFFFFFFFFFF) | 5) & 0xFFFFFFFF,
        ]
        y = (x * 2654435761 + (int(s[i]) & 0xFFFFFFFFFFFFFFFF)) & 0xFFFFFFFFFFFFFFFF
        e64[i] = [bin(y).count("1"), _clz(y, 64), _brev(y, 64), _ffs(y)]
    nb(
        "bits",
        k_bits,
        "void(uint32[:], int32[:], uint32[:], uint32[:, :], uint64[:, :])",
        [Arr("u", u), Arr("s", s), Arr("sh", sh), Arr("o32", o32, "out", e32), Arr("o64", o64, "out", e64)],
        category="integer",
        grid=2,
        block=128,
        seed=3,
        notes="popc/clz/brev/ffs 32 and 64 bit; shifts < width; numba's mixed-sign int promotion to int64",
    )


def k_narrow(a8, b8, au8, bu8, a16, o8, ou8, o16, ou32):
    i = cuda.grid(1)
    if i < a8.size:
        o8[i] = a8[i] * b8[i] + a8[i]
        ou8[i] = au8[i] - bu8[i]
        o16[i] = a16[i] * 3 + b8[i]
        ou32[i] = np.uint32(a16[i]) * np.uint32(2246822519) + np.uint32(au8[i])


def case_narrow():
    r = rng(4)
    n = 300
    a8 = r.integers(-128, 128, n).astype(np.int8)
    b8 = r.integers(-128, 128, n).astype(np.int8)
    au8 = r.integers(0, 256, n).astype(np.uint8)
    bu8 = r.integers(0, 256, n).astype(np.uint8)
    a16 = r.integers(-(2**15), 2**15, n).astype(np.int16)
    A8, B8, AU, BU, A16 = (v.astype(np.int64) for v in (a8, b8, au8, bu8, a16))
    e8 = (A8 * B8 + A8).astype(np.int8)
    eu8 = (AU - BU).astype(np.uint8)
    e16 = (A16 * 3 + B8).astype(np.int16)
    eu32 = ((A16 & 0xFFFFFFFF) * 2246822519 + AU) & 0xFFFFFFFF
    nb(
        "narrow_ints",
        k_narrow,
        "void(int8[:], int8[:], uint8[:], uint8[:], int16[:], int8[:], uint8[:], int16[:], uint32[:])",
        [
            Arr("a8", a8),
            Arr("b8", b8),
            Arr("au8", au8),
            Arr("bu8", bu8),
            Arr("a16", a16),
            out("o8", a8, e8),
            out("ou8", au8, eu8),
            out("o16", a16, e16),
            out("ou32", np.zeros(n, np.uint32), eu32.astype(np.uint32)),
        ],
        category="integer",
        grid=3,
        block=128,
        seed=4,
        notes="8/16-bit loads/stores, wraparound",
    )


def k_minmax(a, b, f, g, oi, of):
    i = cuda.grid(1)
    if i < a.size:
        oi[i, 0] = min(a[i], b[i])
        oi[i, 1] = max(a[i], b[i])
        oi[i, 2] = abs(a[i])
        oi[i, 3] = cuda.selp(a[i] > b[i], a[i] - b[i], b[i] - a[i])
        of[i, 0] = min(f[i], g[i])
        of[i, 1] = max(f[i], g[i])
        of[i, 2] = abs(f[i])
        of[i, 3] = f[i] if f[i] > g[i] else -g[i]


def case_minmax():
    r = rng(5)
    n = 256
    a = r.integers(-1000, 1000, n).astype(np.int32)
    b = r.integers(-1000, 1000, n).astype(np.int32)
    f = r.uniform(-5, 5, n).astype(np.float32)
    g = r.uniform(-5, 5, n).astype(np.float32)
    ei = np.stack([np.minimum(a, b), np.maximum(a, b), np.abs(a), np.abs(a - b)], 1).astype(np.int32)
    ef = np.stack([np.minimum(f, g), np.maximum(f, g), np.abs(f), np.where(f > g, f, -g)], 1).astype(np.float32)
    nb(
        "minmax_select",
        k_minmax,
        "void(int32[:], int32[:], float32[:], float32[:], int32[:, :], float32[:, :])",
        [
            Arr("a", a),
            Arr("b", b),
            Arr("f", f),
            Arr("g", g),
            Arr("oi", np.zeros((n, 4), np.int32), "out", ei),
            Arr("of", np.zeros((n, 4), np.float32), "out", ef),
        ],
        category="integer",
        grid=2,
        block=128,
        seed=5,
    )


def k_f2i(x, oi, ou, ol):
    i = cuda.grid(1)
    if i < x.size:
        oi[i] = int32(x[i])
        ou[i] = numba.uint32(x[i])
        ol[i] = numba.int64(x[i])


def case_f2i():
    x = np.array(
        [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
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
        ],
        np.float32,
    )
    nb(
        "f32_to_int_saturate",
        k_f2i,
        "void(float32[:], int32[:], uint32[:], int64[:])",
        [
            Arr("x", x),
            out("oi", np.zeros(x.size, np.int32), sat_cvt(x, np.int32)),
            out("ou", np.zeros(x.size, np.uint32), sat_cvt(x, np.uint32)),
            out("ol", np.zeros(x.size, np.int64), sat_cvt(x, np.int64)),
        ],
        category="conversion",
        grid=1,
        block=32,
        notes="cvt.rzi.{s32,u32,s64}.f32 saturates and maps NaN to 0 on NVIDIA hardware (LLVM fptosi would be poison)",
    )


# ----------------------------------------------------------------------------------------------- reductions
def k_block_reduce(x, o):
    sm = cuda.shared.array(256, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    sm[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    s = 128
    while s > 0:
        if t < s:
            sm[t] += sm[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        o[cuda.blockIdx.x] = sm[0]


def case_block_reduce():
    r = rng(6)
    n = 2000
    x = r.integers(-50, 50, n).astype(np.float32)
    nblk = 8
    xp = np.zeros(nblk * 256, np.float32)
    xp[:n] = x
    exp = xp.reshape(nblk, 256).sum(1)
    nb(
        "block_reduce_shared",
        k_block_reduce,
        "void(float32[:], float32[:])",
        [Arr("x", x), out("o", np.zeros(nblk, np.float32), exp)],
        category="reduction",
        grid=nblk,
        block=256,
        seed=6,
        notes="static shared array, barrier inside a while loop; integer-valued floats -> exact",
    )


def k_warp_down(x, o):
    i = cuda.grid(1)
    v = x[i]
    off = 16
    while off > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        off //= 2
    if cuda.laneid == 0:
        o[i // 32] = v


def k_warp_xor(x, o):
    i = cuda.grid(1)
    v = x[i]
    m = 1
    while m < 32:
        v += cuda.shfl_xor_sync(0xFFFFFFFF, v, m)
        m *= 2
    o[i] = v


def k_warp_scan(x, o, b):
    i = cuda.grid(1)
    lane = cuda.laneid
    v = x[i]
    d = 1
    while d < 32:
        u = cuda.shfl_up_sync(0xFFFFFFFF, v, d)
        if lane >= d:
            v += u
        d *= 2
    o[i] = v
    b[i] = cuda.shfl_sync(0xFFFFFFFF, v, (lane * 7 + 3) % 32)


def case_warp():
    r = rng(7)
    n = 256
    x = r.integers(-1000, 1000, n).astype(np.int32)
    nb(
        "warp_shfl_down_reduce",
        k_warp_down,
        "void(int32[:], int32[:])",
        [Arr("x", x), out("o", np.zeros(n // 32, np.int32), x.reshape(-1, 32).sum(1))],
        category="warp",
        grid=2,
        block=128,
        seed=7,
    )
    xf = r.integers(-100, 100, n).astype(np.float32)
    nb(
        "warp_shfl_xor_allreduce",
        k_warp_xor,
        "void(float32[:], float32[:])",
        [Arr("x", xf), out("o", xf, np.repeat(xf.reshape(-1, 32).sum(1), 32))],
        category="warp",
        grid=2,
        block=128,
        seed=7,
    )
    sc = np.cumsum(x.reshape(-1, 32), axis=1)
    src = (np.arange(32) * 7 + 3) % 32
    nb(
        "warp_shfl_up_scan_idx",
        k_warp_scan,
        "void(int32[:], int32[:], int32[:])",
        [Arr("x", x), out("o", x, sc.reshape(-1)), out("b", x, sc[:, src].reshape(-1))],
        category="warp",
        grid=2,
        block=128,
        seed=7,
        notes="shfl_up with lane>=d guard, shfl_sync indexed broadcast",
    )


TILE = 16


def k_matmul(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        k = t * TILE + tx
        sA[ty, tx] = A[row, k] if (row < A.shape[0] and k < A.shape[1]) else 0.0
        k = t * TILE + ty
        sB[ty, tx] = B[k, col] if (k < B.shape[0] and col < B.shape[1]) else 0.0
        cuda.syncthreads()
        for j in range(TILE):
            acc += sA[ty, j] * sB[j, tx]
        cuda.syncthreads()
    if row < C.shape[0] and col < C.shape[1]:
        C[row, col] = acc


def case_matmul():
    r = rng(8)
    M, K, N = 45, 40, 54
    A = r.integers(-3, 4, (M, K)).astype(np.float32)
    B = r.integers(-3, 4, (K, N)).astype(np.float32)
    nb(
        "matmul_tiled",
        k_matmul,
        "void(float32[:, :], float32[:, :], float32[:, :])",
        [Arr("A", A), Arr("B", B), out("C", np.zeros((M, N), np.float32), A @ B)],
        category="matmul",
        grid=(4, 3),
        block=(16, 16),
        seed=8,
        notes="2-D shared tiles, __syncthreads twice per loop trip, 2-D grid; small ints -> exact",
    )


def k_transpose(a, o):
    tile = cuda.shared.array((32, 33), float32)
    x = cuda.blockIdx.x * 32 + cuda.threadIdx.x
    y = cuda.blockIdx.y * 32 + cuda.threadIdx.y
    for j in range(0, 32, 8):
        if x < a.shape[1] and y + j < a.shape[0]:
            tile[cuda.threadIdx.y + j, cuda.threadIdx.x] = a[y + j, x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * 32 + cuda.threadIdx.x
    y = cuda.blockIdx.x * 32 + cuda.threadIdx.y
    for j in range(0, 32, 8):
        if x < o.shape[1] and y + j < o.shape[0]:
            o[y + j, x] = tile[cuda.threadIdx.x, cuda.threadIdx.y + j]


def case_transpose():
    r = rng(9)
    a = r.standard_normal((50, 70)).astype(np.float32)
    nb(
        "transpose_shared",
        k_transpose,
        "void(float32[:, :], float32[:, :])",
        [Arr("a", a), out("o", np.zeros((70, 50), np.float32), a.T.copy())],
        category="shared-memory",
        grid=(3, 2),
        block=(32, 8),
        seed=9,
        notes="padded 32x33 tile, block (32,8)",
    )


# ----------------------------------------------------------------------------------------------- atomics
def k_hist_global(x, h):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(h, x[i], 1)


def k_hist_shared(x, h):
    sh = cuda.shared.array(64, int32)
    t = cuda.threadIdx.x
    if t < 64:
        sh[t] = 0
    cuda.syncthreads()
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < x.size:
        cuda.atomic.add(sh, x[i] & 63, 1)
        i += stride
    cuda.syncthreads()
    if t < 64:
        cuda.atomic.add(h, t, sh[t])


def case_hist():
    r = rng(10)
    x = r.integers(0, 64, 3000).astype(np.int32)
    h = np.bincount(x, minlength=64).astype(np.int32)
    nb(
        "hist_global_atomic",
        k_hist_global,
        "void(int32[:], int32[:])",
        [Arr("x", x), out("h", np.zeros(64, np.int32), h)],
        category="atomics",
        grid=24,
        block=128,
        seed=10,
    )
    nb(
        "hist_shared_atomic",
        k_hist_shared,
        "void(int32[:], int32[:])",
        [Arr("x", x), out("h", np.zeros(64, np.int32), h)],
        category="atomics",
        grid=4,
        block=128,
        seed=10,
        notes="shared-memory atomics (generic address of a shared array), grid-stride loop",
    )


def k_atomics(x, r, tick, olds):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        cuda.atomic.max(r, 0, v)
        cuda.atomic.min(r, 1, v)
        cuda.atomic.inc(r, 2, 9)  # wraps at 9 -> final = n % 10
        cuda.atomic.dec(r, 3, 6)  # final = (-n) mod 7
        cuda.atomic.and_(r, 4, v | 0x10000)
        cuda.atomic.or_(r, 5, v & 0xFF)
        cuda.atomic.xor(r, 6, v)
        cuda.atomic.sub(r, 7, 2)
        while True:  # CAS loop: r[8] += 3
            old = r[8]
            if cuda.atomic.cas(r, 8, old, old + 3) == old:
                break
        olds[i] = cuda.atomic.exch(tick, i, v + 1)  # each slot written once: deterministic
        tick[x.size + i] = cuda.atomic.add(tick, 2 * x.size, 1)  # unique tickets (compare sorted)


def case_atomics():
    rr = rng(11)
    n = 200
    x = rr.integers(0, 1 << 20, n).astype(np.uint32)
    r0 = np.array([0, 0xFFFFFFFF, 0, 0, 0xFFFFFFFF, 0, 0, 1000, 0], np.uint32)
    ex = r0.copy()
    ex[0] = x.max()
    ex[1] = x.min()
    ex[2] = n % 10
    ex[3] = (-n) % 7
    ex[4] = np.bitwise_and.reduce(x | 0x10000)
    ex[5] = np.bitwise_or.reduce(x & 0xFF)
    ex[6] = np.bitwise_xor.reduce(x)
    ex[7] = 1000 - 2 * n
    ex[8] = 3 * n
    tick = np.zeros(2 * n + 1, np.uint32)
    tick[:n] = np.arange(n) + 7
    etick = np.concatenate([x + 1, np.arange(n), [n]]).astype(np.uint32)
    args = [
        Arr("x", x),
        Arr("r", r0, "inout", ex),
        Arr("tick", tick, "inout", etick, {"sorted": True}),
        Arr("olds", np.zeros(n, np.uint32), "out", (np.arange(n) + 7).astype(np.uint32)),
    ]
    nb(
        "atomics_int",
        k_atomics,
        "void(uint32[:], uint32[:], uint32[:], uint32[:])",
        args,
        category="atomics",
        grid=2,
        block=128,
        seed=11,
        notes="tick is compared sorted (ticket order is schedule-dependent); inc/dec wrap; CAS spin loop",
    )


def k_atomic_float(x, d, r32, r64):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(r32, 0, x[i])
        cuda.atomic.max(r32, 1, x[i])
        cuda.atomic.min(r32, 2, x[i])
        cuda.atomic.add(r64, 0, d[i])
        cuda.atomic.max(r64, 1, d[i])


def case_atomic_float():
    r = rng(12)
    n = 500
    x = (r.integers(-400, 400, n) / 8.0).astype(np.float32)
    d = (r.integers(-4000, 4000, n) / 16.0).astype(np.float64)
    e32 = np.array([x.sum(), x.max(), x.min()], np.float32)
    e64 = np.array([d.sum(), d.max()], np.float64)
    nb(
        "atomics_float",
        k_atomic_float,
        "void(float32[:], float64[:], float32[:], float64[:])",
        [
            Arr("x", x),
            Arr("d", d),
            Arr("r32", np.array([0, -np.inf, np.inf], np.float32), "inout", e32),
            Arr("r64", np.array([0, -np.inf], np.float64), "inout", e64),
        ],
        category="atomics",
        grid=4,
        block=128,
        seed=12,
        notes="values are multiples of 1/8: sums are exact",
    )


def k_last_block(x, partial, counter, total):
    sm = cuda.shared.array(128, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    sm[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    s = 64
    while s > 0:
        if t < s:
            sm[t] += sm[t + s]
        cuda.syncthreads()
        s //= 2
    is_last = cuda.shared.array(1, int32)
    if t == 0:
        partial[cuda.blockIdx.x] = sm[0]
        cuda.threadfence()
        ticket = cuda.atomic.inc(counter, 0, 0xFFFFFFFF)
        is_last[0] = ticket == cuda.gridDim.x - 1
    cuda.syncthreads()
    if is_last[0] and t == 0:
        acc = float32(0)
        for b in range(cuda.gridDim.x):
            acc += partial[b]
        total[0] = acc


def case_last_block():
    r = rng(13)
    n = 1000
    x = r.integers(-20, 20, n).astype(np.float32)
    nblk = 8
    xp = np.zeros(nblk * 128, np.float32)
    xp[:n] = x
    part = xp.reshape(nblk, 128).sum(1)
    nb(
        "threadfence_last_block",
        k_last_block,
        "void(float32[:], float32[:], uint32[:], float32[:])",
        [
            Arr("x", x),
            out("partial", np.zeros(nblk, np.float32), part),
            out("counter", np.zeros(1, np.uint32), [nblk]),
            out("total", np.zeros(1, np.float32), [x.sum()]),
        ],
        category="atomics",
        grid=nblk,
        block=128,
        seed=13,
        notes="membar + atomic ticket; last block finalises",
    )


# ----------------------------------------------------------------------------------------------- scans
def k_hillis(x, o):
    buf = cuda.shared.array(512, int32)
    t = cuda.threadIdx.x
    n = cuda.blockDim.x
    i = cuda.grid(1)
    buf[t] = x[i]
    cuda.syncthreads()
    pout = 0
    d = 1
    while d < n:
        pin = pout
        pout = 1 - pout
        v = buf[pin * n + t]
        if t >= d:
            v += buf[pin * n + t - d]
        buf[pout * n + t] = v
        cuda.syncthreads()
        d *= 2
    o[i] = buf[pout * n + t]


def k_blelloch(x, o):
    temp = cuda.shared.array(256, int32)
    t = cuda.threadIdx.x
    base = cuda.blockIdx.x * 256
    temp[2 * t] = x[base + 2 * t]
    temp[2 * t + 1] = x[base + 2 * t + 1]
    off = 1
    d = 128
    while d > 0:
        cuda.syncthreads()
        if t < d:
            ai = off * (2 * t + 1) - 1
            bi = off * (2 * t + 2) - 1
            temp[bi] += temp[ai]
        off *= 2
        d //= 2
    if t == 0:
        temp[255] = 0
    d = 1
    while d < 256:
        off //= 2
        cuda.syncthreads()
        if t < d:
            ai = off * (2 * t + 1) - 1
            bi = off * (2 * t + 2) - 1
            tmp = temp[ai]
            temp[ai] = temp[bi]
            temp[bi] += tmp
        d *= 2
    cuda.syncthreads()
    o[base + 2 * t] = temp[2 * t]
    o[base + 2 * t + 1] = temp[2 * t + 1]


def case_scans():
    r = rng(14)
    x = r.integers(-100, 100, 1024).astype(np.int32)
    xi = np.cumsum(x.reshape(-1, 256), 1).reshape(-1)
    nb(
        "scan_hillis_steele",
        k_hillis,
        "void(int32[:], int32[:])",
        [Arr("x", x), out("o", x, xi)],
        category="scan",
        grid=4,
        block=256,
        seed=14,
        notes="double-buffered inclusive scan, barrier in loop",
    )
    xe = (np.cumsum(x.reshape(-1, 256), 1) - x.reshape(-1, 256)).reshape(-1)
    nb(
        "scan_blelloch",
        k_blelloch,
        "void(int32[:], int32[:])",
        [Arr("x", x), out("o", x, xe)],
        category="scan",
        grid=4,
        block=128,
        seed=14,
        notes="work-efficient exclusive scan, 2 elements per thread",
    )


# ----------------------------------------------------------------------------------------------- warp vote
def k_vote(x, o):
    i = cuda.grid(1)
    p = x[i] > 0
    o[i, 0] = cuda.all_sync(0xFFFFFFFF, p)
    o[i, 1] = cuda.any_sync(0xFFFFFFFF, p)
    o[i, 2] = cuda.ballot_sync(0xFFFFFFFF, p)
    o[i, 3] = cuda.activemask()
    pi = int32(1) if p else int32(0)
    o[i, 4] = cuda.syncthreads_count(pi)
    o[i, 5] = cuda.syncthreads_and(pi)
    o[i, 6] = cuda.syncthreads_or(pi)
    o[i, 7] = cuda.lanemask_lt()


def case_vote():
    r = rng(15)
    nblk, bs = 3, 128
    x = r.integers(-3, 10, nblk * bs).astype(np.int32)
    x[32:64] = 1  # warp 1 of block 0: all true
    x[64:96] = -1  # warp 2: none true
    x[128 + 13] = -5  # block 1 has a false somewhere
    x[256:384] = 4  # block 2 all true
    p = (x > 0).reshape(-1, 32)
    ballot = (p * (1 << np.arange(32, dtype=np.uint64))).sum(1).astype(np.uint32)
    pb = (x > 0).reshape(nblk, bs)
    lane = np.arange(nblk * bs) % 32
    e = np.zeros((nblk * bs, 8), np.uint32)
    e[:, 0] = np.repeat(p.all(1), 32)
    e[:, 1] = np.repeat(p.any(1), 32)
    e[:, 2] = np.repeat(ballot, 32)
    e[:, 3] = 0xFFFFFFFF
    e[:, 4] = np.repeat(pb.sum(1), bs)
    e[:, 5] = np.repeat(pb.all(1), bs)
    e[:, 6] = np.repeat(pb.any(1), bs)
    e[:, 7] = ((1 << lane.astype(np.uint64)) - 1).astype(np.uint32)
    nb(
        "warp_vote",
        k_vote,
        "void(int32[:], uint32[:, :])",
        [Arr("x", x), Arr("o", np.zeros_like(e), "out", e)],
        category="warp",
        grid=nblk,
        block=bs,
        seed=15,
        notes="vote.sync.all/any/ballot, activemask, bar.red.popc/and/or, %lanemask_lt",
    )


# ----------------------------------------------------------------------------------------------- f16
def k_half(a, b, c, o):
    i = cuda.grid(1)
    if i < a.size:
        o[i, 0] = fp16.hadd(a[i], b[i])
        o[i, 1] = fp16.hmul(a[i], b[i])
        o[i, 2] = fp16.hsub(a[i], b[i])
        o[i, 3] = fp16.hfma(a[i], b[i], c[i])
        o[i, 4] = fp16.hneg(a[i])
        o[i, 5] = fp16.habs(b[i])
        o[i, 6] = fp16.hmax(a[i], b[i])
        o[i, 7] = a[i] * b[i] + c[i]


def case_half():
    r = rng(16)
    n = 256
    a, b, c = (r.uniform(-8, 8, n).astype(np.float16) for _ in range(3))
    A, B, C = (v.astype(np.float64) for v in (a, b, c))
    e = np.stack(
        [
            A + B,
            A * B,
            A - B,
            A * B + C,
            -A,
            np.abs(B),
            np.maximum(A, B),
            (A * B).astype(np.float16).astype(np.float64) + C,
        ],
        1,
    ).astype(np.float16)
    nb(
        "fp16_arith",
        k_half,
        "void(float16[:], float16[:], float16[:], float16[:, :])",
        [Arr("a", a), Arr("b", b), Arr("c", c), Arr("o", np.zeros((n, 8), np.float16), "out", e, {"ulps": 1})],
        category="fp16",
        grid=2,
        block=128,
        seed=16,
        notes="add/mul/sub/fma.rn.f16; col 7 may be contracted to fma by the compiler (hence 1 ulp)",
    )


# ----------------------------------------------------------------------------------------------- grids
def k_grid2d(a, o):
    i, j = cuda.grid(2)
    if i < o.shape[0] and j < o.shape[1]:
        o[i, j] = a[i, j] * 2 + i * 1000 + j


def k_grid3d(o):
    x, y, z = cuda.grid(3)
    nx, ny, nz = cuda.gridsize(3)
    if x < o.shape[2] and y < o.shape[1] and z < o.shape[0]:
        o[z, y, x] = x + 100 * y + 10000 * z + 1000000 * (nx + ny + nz)


def case_grids():
    r = rng(17)
    a = r.integers(-50, 50, (37, 53)).astype(np.int32)
    II, JJ = np.meshgrid(np.arange(37), np.arange(53), indexing="ij")
    nb(
        "grid2d",
        k_grid2d,
        "void(int32[:, :], int32[:, :])",
        [Arr("a", a), out("o", a, a * 2 + II * 1000 + JJ, fill=-1)],
        category="grid",
        grid=(3, 4),
        block=(16, 16),
        seed=17,
        notes="cuda.grid(2): x indexes rows",
    )
    shape = (7, 9, 10)
    Z, Y, X = np.meshgrid(*(np.arange(s) for s in shape), indexing="ij")
    nx, ny, nz = 3 * 4, 2 * 5, 2 * 4
    exp = X + 100 * Y + 10000 * Z + 1000000 * (nx + ny + nz)
    nb(
        "grid3d",
        k_grid3d,
        "void(int32[:, :, :])",
        [out("o", np.zeros(shape, np.int32), exp, fill=-1)],
        category="grid",
        grid=(3, 2, 2),
        block=(4, 5, 4),
    )


def k_lanes(o):
    t = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    b = cuda.blockIdx.x + cuda.gridDim.x * cuda.blockIdx.y
    o[b, t] = cuda.laneid + 100 * (t // 32) + 10000 * cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z


def case_lanes():
    nthr = 12 * 5 * 2
    t = np.arange(nthr)
    e = np.tile(t % 32 + 100 * (t // 32) + 10000 * nthr, (6, 1)).astype(np.int32)
    nb(
        "laneid_3d_block",
        k_lanes,
        "void(int32[:, :])",
        [out("o", np.zeros((6, nthr), np.int32), e, fill=-1)],
        category="grid",
        grid=(3, 2),
        block=(12, 5, 2),
        notes="3-D block of 120 threads: warps are formed from the linear thread id; last warp is partial",
    )


# ----------------------------------------------------------------------------------------------- misc
def k_dyn_shared(x, o):
    sm = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    n = cuda.blockDim.x
    i = cuda.grid(1)
    sm[t] = x[i]
    cuda.syncthreads()
    o[i] = sm[n - 1 - t] + sm[(t + 1) % n]


def case_dyn_shared():
    r = rng(18)
    bs, nblk = 96, 5
    x = r.standard_normal(bs * nblk).astype(np.float32)
    xb = x.reshape(nblk, bs)
    e = xb[:, ::-1] + np.roll(xb, -1, axis=1)
    nb(
        "dynamic_shared",
        k_dyn_shared,
        "void(float32[:], float32[:])",
        [Arr("x", x), out("o", x, e.reshape(-1))],
        category="shared-memory",
        grid=nblk,
        block=bs,
        shared_mem=bs * 4,
        seed=18,
        notes="cuda.shared.array(0, ...) -> .extern .shared",
    )


@cuda.jit(device=True)
def collatz_steps(v):
    s = 0
    while v != 1 and s < 1000:
        if v % 2 == 0:
            v //= 2
        else:
            v = 3 * v + 1
        s += 1
    return s


@cuda.jit(device=True)
def weird(a, b):
    return collatz_steps(a) * 1000 + collatz_steps(b), a ^ b


def k_devfunc(x, o):
    i = cuda.grid(1)
    if i < x.size:
        p, q = weird(x[i], x[i] + 1)
        o[i, 0] = p
        o[i, 1] = q


def _collatz(v):
    s = 0
    while v != 1 and s < 1000:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        s += 1
    return s


def case_devfunc():
    r = rng(19)
    x = r.integers(1, 5000, 200).astype(np.int64)
    e = np.array([[_collatz(int(v)) * 1000 + _collatz(int(v) + 1), int(v) ^ (int(v) + 1)] for v in x], np.int64)
    nb(
        "device_func_divergent_loop",
        k_devfunc,
        "void(int64[:], int64[:, :])",
        [Arr("x", x), Arr("o", np.zeros((200, 2), np.int64), "out", e)],
        category="control-flow",
        grid=2,
        block=128,
        seed=19,
        notes="device functions returning a tuple; data-dependent loop trip counts per lane",
    )


def k_early(x, o):
    i = cuda.grid(1)
    if i >= x.size:
        return
    v = x[i]
    for k in range(64):
        v = (v * 1103515245 + 12345) & 0x7FFFFFFF
        if v % 97 == 0:
            o[i] = k
            return
    o[i] = -1


def case_early():
    r = rng(20)
    x = r.integers(0, 2**31 - 1, 777).astype(np.int64)
    e = []
    for v in x:
        v = int(v)
        res = -1
        for k in range(64):
            v = (v * 1103515245 + 12345) & 0x7FFFFFFF
            if v % 97 == 0:
                res = k
                break
        e.append(res)
    nb(
        "early_return_loop",
        k_early,
        "void(int64[:], int64[:])",
        [Arr("x", x), out("o", x, np.array(e), fill=-7)],
        category="control-flow",
        grid=7,
        block=128,
        seed=20,
    )


def k_gridstride(x, y, o):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, x.size, stride):
        o[i] = x[i] * y[i % y.size] - 1.0


def case_gridstride():
    r = rng(21)
    x = r.standard_normal(5000).astype(np.float32)
    y = r.standard_normal(33).astype(np.float32)
    e = (x.astype(np.float64) * y[np.arange(5000) % 33] - 1.0).astype(np.float32)  # fma.rn
    nb(
        "grid_stride_loop",
        k_gridstride,
        "void(float32[:], float32[:], float32[:])",
        [Arr("x", x), Arr("y", y), out("o", x, e, {"ulps": 1})],
        category="control-flow",
        grid=3,
        block=64,
        seed=21,
        notes="5000 elements with 192 threads; may be fma-contracted (1 ulp)",
    )


def k_local(x, o):
    i = cuda.grid(1)
    if i >= o.shape[0]:
        return
    buf = cuda.local.array(16, int32)
    for k in range(16):
        buf[k] = x[i, k]
    for k in range(1, 16):  # insertion sort: dynamic indices
        v = buf[k]
        j = k - 1
        while j >= 0 and buf[j] > v:
            buf[j + 1] = buf[j]
            j -= 1
        buf[j + 1] = v
    for k in range(16):
        o[i, k] = buf[k]
    o[i, 16] = buf[x[i, 0] & 15]


def case_local():
    r = rng(22)
    x = r.integers(-1000, 1000, (150, 16)).astype(np.int32)
    s = np.sort(x, axis=1)
    e = np.concatenate([s, s[np.arange(150), x[:, 0] & 15][:, None]], 1).astype(np.int32)
    nb(
        "local_array_sort",
        k_local,
        "void(int32[:, :], int32[:, :])",
        [Arr("x", x), Arr("o", np.zeros((150, 17), np.int32), "out", e)],
        category="local-memory",
        grid=2,
        block=96,
        seed=22,
        notes="cuda.local.array indexed dynamically",
    )


TABLE = np.array([math.sin(k * 0.1) * 100 for k in range(64)], np.float32)


def k_const(idx, o):
    tab = cuda.const.array_like(TABLE)
    i = cuda.grid(1)
    if i < idx.size:
        o[i] = tab[idx[i] & 63] * 2.0 + tab[(idx[i] >> 6) & 63]


def case_const():
    r = rng(23)
    idx = r.integers(0, 4096, 400).astype(np.int32)
    e = TABLE[idx & 63] * np.float32(2.0) + TABLE[(idx >> 6) & 63]
    nb(
        "const_table",
        k_const,
        "void(int32[:], float32[:])",
        [Arr("idx", idx), out("o", e, e, {"ulps": 1})],
        category="constant-memory",
        grid=4,
        block=128,
        seed=23,
        notes="cuda.const.array_like -> initialised .const",
    )


def k_print(x):
    i = cuda.grid(1)
    if i < x.size:
        print("thread", i, "value", x[i], -7)


def case_print():
    x = np.array([0.5, -1.25, 3.0, 100.125], np.float32)
    text = "".join(f"thread {i} value {float(v):f} -7\n" for i, v in enumerate(x))
    nb(
        "printf",
        k_print,
        "void(float32[:])",
        [Arr("x", x)],
        category="printf",
        grid=1,
        block=32,
        printf={"text": text, "compare": "sorted_lines"},
        notes="numba print -> vprintf('%s %lld %s %f %lld\\n')",
    )


def k_complex(a, b, o, m):
    i = cuda.grid(1)
    if i < a.size:
        o[i] = a[i] * b[i] + a[i].conjugate()
        m[i] = abs(a[i])


def case_complex():
    r = rng(24)
    n = 200
    a = (r.standard_normal(n) + 1j * r.standard_normal(n)).astype(np.complex64)
    b = (r.standard_normal(n) + 1j * r.standard_normal(n)).astype(np.complex64)
    e = (a.astype(np.complex128) * b + np.conj(a)).astype(np.complex64)
    nb(
        "complex64",
        k_complex,
        "void(complex64[:], complex64[:], complex64[:], float32[:])",
        [
            Arr("a", a),
            Arr("b", b),
            out("o", a, e, {"rtol": 1e-5, "atol": 1e-6}),
            out("m", np.zeros(n, np.float32), np.abs(a), {"rtol": 2e-6}),
        ],
        category="elementwise-math",
        grid=2,
        block=128,
        seed=24,
    )


def k_bool(a, b, o):
    i = cuda.grid(1)
    if i < a.size:
        o[i] = (a[i] and not b[i]) or (b[i] and i % 3 == 0)


def case_bool():
    r = rng(25)
    a = r.integers(0, 2, 300).astype(np.bool_)
    b = r.integers(0, 2, 300).astype(np.bool_)
    e = (a & ~b) | (b & (np.arange(300) % 3 == 0))
    nb(
        "bool_arrays",
        k_bool,
        "void(b1[:], b1[:], b1[:])",
        [Arr("a", a), Arr("b", b), out("o", a, e)],
        category="integer",
        grid=3,
        block=128,
        seed=25,
    )


def main():
    r = rng(0)
    x = r.standard_normal(1000).astype(np.float32)
    y = r.standard_normal(1000).astype(np.float32)
    a = np.float32(2.5)
    e = (np.float64(a) * x.astype(np.float64) + y.astype(np.float64)).astype(np.float32)
    nb(
        "saxpy",
        k_saxpy,
        "void(float32[:], float32, float32[:], float32[:])",
        [out("o", x, e, {"ulps": 1}), Scalar("a", "float32", a), Arr("x", x), Arr("y", y)],
        category="elementwise",
        grid=8,
        block=128,
        seed=0,
    )
    math_case("math_f32", np.float32, F32, seed=1)
    math_case("math_f64", np.float64, F64, seed=1)
    math_case("math_f32_fastmath", np.float32, {"rtol": 2e-5, "atol": 2e-6}, fastmath=True, seed=1)
    case_math_misc()
    case_divmod(np.int32, 30)
    case_divmod(np.int64, 31)
    case_bits()
    case_narrow()
    case_minmax()
    case_f2i()
    case_block_reduce()
    case_warp()
    case_matmul()
    case_transpose()
    case_hist()
    case_atomics()
    case_atomic_float()
    case_last_block()
    case_scans()
    case_vote()
    case_half()
    case_grids()
    case_lanes()
    case_dyn_shared()
    case_devfunc()
    case_early()
    case_gridstride()
    case_local()
    case_const()
    case_print()
    case_complex()
    case_bool()


if __name__ == "__main__":
    main()
    for n, r in SIM_RESULTS:
        print(f"{n}: {r}")
