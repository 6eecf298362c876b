"""cuRAND's host API, remoted: the client half of NOTE [random numbers] (proto/rand.py).

The native library exports every cuRAND symbol (src/exports_curand.h; the entry points with floating-point
arguments are written out in wooly_native.c, which hands them on as double bit patterns) and is found as
libcurand.so.10 under ``wooly run``. A generator is kept here: its seed, its position in its stream and its stream.
Each ``curandGenerate*`` queues one ``rand_generate`` on that stream, as a kernel launch is, and moves the position
on. Pseudo-random generators of every type are accepted and all draw from one counter-based stream (the numbers
differ from a GPU's, the distributions and their reproducibility do not). Host generators
(curandCreateGeneratorHost) run the same definition (proto/rand.py) here, on host memory, synchronously: a host
and a device generator of one seed give the same numbers. The 32-bit Sobol generator (QUASI_DEFAULT,
QUASI_SOBOL32) and ``curandGetDirectionVectors32`` follow NOTE [sobol] (shim/native/sobol.py): a quasi-random
sequence has no seed, so its points are computed here and copied to the device on the generator's stream.
Scrambled and 64-bit Sobol, and 64-bit integers, return CURAND_STATUS_TYPE_ERROR.
"""

from __future__ import annotations

import ctypes
import itertools
import struct
from ctypes import c_int, c_size_t, c_uint64, c_void_p
from dataclasses import dataclass
from typing import Any

import numpy as np

from proto import errors as codes
from proto import rand
from proto.codec import ProtocolError, check
from proto.errors import CudaError
from proto.messages import RandDist, RandGenerate, RandType
from shim.native import cu_capture, sobol
from shim.native.registry import StatusError, api, put_i32, put_u64
from shim.native.state import STATE

P = c_void_p
VERSION = 10310  # the cuRAND these signatures follow (CUDA 12.9's cuRAND 10.3.10)
PSEUDO = {100, 101, 121, 141, 142, 161}  # DEFAULT, XORWOW, MRG32K3A, MTGP32, MT19937, PHILOX4_32_10
QUASI = {200, 201}  # QUASI_DEFAULT, QUASI_SOBOL32 (not the scrambled or 64-bit Sobol generators)
TYPE_ERROR, OUT_OF_RANGE, LENGTH_NOT_MULTIPLE = 103, 104, 105
DIRECTION_VECTORS_32_JOEKUO6 = 101


@dataclass
class Generator:
    type: int
    seed: int = 0
    offset: int = 0
    stream: int = 0
    host: bool = False  # curandCreateGeneratorHost: generates into host memory, on the client
    dims: int = 1  # a quasi-random generator's dimensions (curandSetQuasiRandomGeneratorDimensions)

    @property
    def quasi(self) -> bool:
        return self.type in QUASI


_gens: dict[int, Generator] = {}
_ids = itertools.count(0x0BAD5EED)


def _g(h: int | None) -> Generator:
    g = _gens.get(int(h or 0))
    if g is None:
        raise CudaError(codes.INVALID_HANDLE, f"invalid cuRAND generator 0x{int(h or 0):x}")
    return g


def _f64(bits: int) -> float:
    return struct.unpack("<d", int(bits & ((1 << 64) - 1)).to_bytes(8, "little"))[0]


@api("curandCreateGenerator", 0, P, c_int, library="curand")
def curandCreateGenerator(out: int, typ: int) -> None:
    _create(out, typ, host=False)


def _create(out: int, typ: int, host: bool) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, "curandCreateGenerator: generator is NULL")
    if typ not in PSEUDO and typ not in QUASI:
        raise StatusError(TYPE_ERROR, f"generator type {typ} (scrambled and 64-bit Sobol generators are not supported)")
    if not STATE.initialized:  # cuRAND initialises CUDA itself
        STATE.init()
    h = next(_ids)
    _gens[h] = Generator(typ, host=host)
    put_u64(out, h)


@api("curandCreateGeneratorHost", 0, P, c_int, library="curand")
def curandCreateGeneratorHost(out: int, typ: int) -> None:
    _create(out, typ, host=True)


@api("curandDestroyGenerator", 0, P, library="curand")
def curandDestroyGenerator(h: int | None) -> None:
    _g(h)
    del _gens[int(h or 0)]


@api("curandSetPseudoRandomGeneratorSeed", 0, P, c_uint64, library="curand")
def curandSetPseudoRandomGeneratorSeed(h: int | None, seed: int) -> None:
    g = _g(h)
    if g.quasi:
        raise StatusError(TYPE_ERROR, "curandSetPseudoRandomGeneratorSeed: a quasi-random generator has no seed")
    g.seed, g.offset = int(seed), 0  # cuRAND: a new seed restarts the stream


@api("curandSetGeneratorOffset", 0, P, c_uint64, library="curand")
def curandSetGeneratorOffset(h: int | None, offset: int) -> None:
    _g(h).offset = int(offset)


@api("curandSetQuasiRandomGeneratorDimensions", 0, P, c_int, library="curand")
def curandSetQuasiRandomGeneratorDimensions(h: int | None, dims: int) -> None:
    g = _g(h)
    if not g.quasi:
        raise StatusError(TYPE_ERROR, "curandSetQuasiRandomGeneratorDimensions: not a quasi-random generator")
    if not 1 <= dims <= sobol.DIMENSIONS:
        raise StatusError(OUT_OF_RANGE, f"quasi-random dimensions must be 1..{sobol.DIMENSIONS}, got {dims}")
    g.dims, g.offset = int(dims), 0


@api("curandGetDirectionVectors32", 0, P, c_int, library="curand")
def curandGetDirectionVectors32(out: int, which: int) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, "curandGetDirectionVectors32: vectors is NULL")
    if which != DIRECTION_VECTORS_32_JOEKUO6:
        raise StatusError(OUT_OF_RANGE, f"direction vector set {which} (JOEKUO6 = 101 is the 32-bit set offered)")
    put_u64(out, sobol.direction_vectors().ctypes.data)  # kept for the process's life, as cuRAND's table is


@api("curandSetGeneratorOrdering", 0, P, c_int, library="curand")
def curandSetGeneratorOrdering(h: int | None, order: int) -> None:
    _g(h)  # one ordering here: the counter's


@api("curandSetStream", 0, P, P, library="curand")
def curandSetStream(h: int | None, stream: int | None) -> None:
    _g(h).stream = int(stream or 0)


@api("curandGetVersion", 0, P, library="curand")
def curandGetVersion(out: int) -> None:
    put_i32(out, VERSION)


@api("curandGetProperty", 0, c_int, P, library="curand")
def curandGetProperty(which: int, out: int) -> None:
    put_i32(out, (VERSION // 1000, VERSION // 100 % 10, VERSION % 100)[which] if 0 <= which <= 2 else 0)


@api("curandGenerateSeeds", 0, P, library="curand")
def curandGenerateSeeds(h: int | None) -> None:
    _g(h)  # a counter-based stream needs no seeding kernel


def _quasi(g: Generator, out: int | None, n: int, dist: RandDist, dtype: RandType, **params: Any) -> None:
    """n values of a Sobol generator: n / dims points of each dimension, dimension after dimension."""
    if n % g.dims:
        raise StatusError(LENGTH_NOT_MULTIPLE, f"curand: {n} values for {g.dims} quasi-random dimensions")
    if dist == "poisson":
        raise StatusError(TYPE_ERROR, "curandGeneratePoisson: not offered for quasi-random generators here")
    if not out:
        raise CudaError(codes.INVALID_VALUE, "curandGenerate: outputPtr is NULL")
    try:
        x = sobol.points(g.dims, g.offset, n // g.dims).reshape(-1)
    except ValueError as exc:
        raise StatusError(OUT_OF_RANGE, f"curand: {exc}") from None
    if dist == "bits":
        vals: Any = x
    else:
        ftype: Any = np.float32 if dtype == "f32" else np.float64
        u: Any = x.astype(ftype) * ftype(2.0**-32) + ftype(2.0**-33)  # as curand_uniform: never 0, never 1
        if dist == "uniform":
            vals = u
        else:  # quasi-random normals come from the inverse normal CDF (cuRAND's _curand_normal_icdf)
            from scipy.special import ndtri

            z = ndtri(u.astype(np.float64)) * params["stddev"] + params["mean"]
            vals = (np.exp(z) if dist == "lognormal" else z).astype(ftype)
    data = np.ascontiguousarray(vals)
    if g.host:
        ctypes.memmove(int(out), data.ctypes.data, data.nbytes)
    else:
        drv = STATE.driver()
        drv._check_range(int(out), data.nbytes, f"curandGenerate ({dist})")
        drv.memcpy_htod(int(out), data, stream=g.stream)  # ordered on the generator's stream, bytes taken now
    g.offset += n // g.dims


def _generate(h: int | None, out: int | None, n: int, dist: RandDist, dtype: RandType, **params: Any) -> None:
    g = _g(h)
    if g.quasi:
        if n:
            _quasi(g, out, n, dist, dtype, **params)
        return
    if dist in ("normal", "lognormal") and n % 2:
        raise StatusError(LENGTH_NOT_MULTIPLE, f"curand: {dist} values come in pairs, {n} asked")
    if n == 0:
        return
    drv = STATE.driver()
    msg = RandGenerate(
        dist=dist,
        dtype=dtype,
        out=int(out or 0),
        n=n,
        seed=g.seed,
        offset=g.offset,
        stream=drv._stream(g.stream),
        **params,
    )
    try:
        check(msg)
    except ProtocolError as exc:
        raise CudaError(codes.INVALID_VALUE, f"curandGenerate: {exc.message}") from None
    if g.host:
        if not msg.out:
            raise CudaError(codes.INVALID_VALUE, "curandGenerate: outputPtr is NULL")
        rand.check(msg)
        rand.generate_numpy(msg)  # into the program's host memory, now (a host generator is synchronous)
        g.offset += n
        return
    drv._check_range(msg.out, msg.writes([])[0][1], f"curandGenerate ({dist})")
    cu_capture.post(msg)
    g.offset += n  # NOTE [random numbers]: n counter blocks, at least a value's worth each


@api("curandGenerate", 0, P, P, c_size_t, library="curand")
def curandGenerate(h: int | None, out: int, n: int) -> None:
    _generate(h, out, n, "bits", "u32")


@api("curandGenerateUniform", 0, P, P, c_size_t, library="curand")
def curandGenerateUniform(h: int | None, out: int, n: int) -> None:
    _generate(h, out, n, "uniform", "f32")


@api("curandGenerateUniformDouble", 0, P, P, c_size_t, library="curand")
def curandGenerateUniformDouble(h: int | None, out: int, n: int) -> None:
    _generate(h, out, n, "uniform", "f64")


@api("curandGenerateNormal", 0, P, P, c_size_t, c_uint64, c_uint64, library="curand")
def curandGenerateNormal(h: int | None, out: int, n: int, mean: int, sd: int) -> None:
    _generate(h, out, n, "normal", "f32", mean=_f64(mean), stddev=_f64(sd))


@api("curandGenerateNormalDouble", 0, P, P, c_size_t, c_uint64, c_uint64, library="curand")
def curandGenerateNormalDouble(h: int | None, out: int, n: int, mean: int, sd: int) -> None:
    _generate(h, out, n, "normal", "f64", mean=_f64(mean), stddev=_f64(sd))


@api("curandGenerateLogNormal", 0, P, P, c_size_t, c_uint64, c_uint64, library="curand")
def curandGenerateLogNormal(h: int | None, out: int, n: int, mean: int, sd: int) -> None:
    _generate(h, out, n, "lognormal", "f32", mean=_f64(mean), stddev=_f64(sd))


@api("curandGenerateLogNormalDouble", 0, P, P, c_size_t, c_uint64, c_uint64, library="curand")
def curandGenerateLogNormalDouble(h: int | None, out: int, n: int, mean: int, sd: int) -> None:
    _generate(h, out, n, "lognormal", "f64", mean=_f64(mean), stddev=_f64(sd))


@api("curandGeneratePoisson", 0, P, P, c_size_t, c_uint64, library="curand")
def curandGeneratePoisson(h: int | None, out: int, n: int, lam: int) -> None:
    _generate(h, out, n, "poisson", "u32", lam=_f64(lam))


@api("curandGeneratePoissonMethod", 0, P, P, c_size_t, c_uint64, c_int, library="curand")
def curandGeneratePoissonMethod(h: int | None, out: int, n: int, lam: int, method: int) -> None:
    _generate(h, out, n, "poisson", "u32", lam=_f64(lam))
