"""The numbers of the cuRAND stand-in (NOTE [vendor libraries]): one definition, run by gpud's CPU backend on
tenants' device memory and by the client for host generators (curandCreateGeneratorHost) on host memory, so the
two give the same numbers for the same seed, as cuRAND's device and host generators of one type do.

NOTE [random numbers]
A cuRAND generator is a seed and a position in its stream. The client keeps both (shim/native/curand.py) and each
generation travels as one ``rand_generate`` with them, so gpud holds no generator state and a session that moves
or is restored generates what it would have. On the CPU backend the numbers come from NumPy's Philox counter-based
generator keyed by the seed, its counter set to the position: the same seed and position give the same numbers
on every node and every run, and calls that follow each other read disjoint stretches of the stream (the client
moves the position on by ``n`` counter blocks per call, each block four 64-bit words, more than any of the
distributions here consumes per value). They are not NVIDIA's XORWOW/Philox sequences: a program gets the
distribution it asked for, reproducibly, not the bits a GPU would have produced. ``uniform`` is in (0, 1] as in
cuRAND; normal and log-normal take their mean and standard deviation; ``bits`` are 32-bit integers.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from proto import errors as codes
from proto.errors import CudaError

NUMPY: dict[str, Any] = {"u32": np.uint32, "f32": np.float32, "f64": np.float64}
_PAIRS = {
    ("bits", "u32"),
    ("uniform", "f32"),
    ("uniform", "f64"),
    ("normal", "f32"),
    ("normal", "f64"),
    ("lognormal", "f32"),
    ("lognormal", "f64"),
    ("poisson", "u32"),
}


def check(r: Any) -> None:
    if (r.dist, r.dtype) not in _PAIRS:
        raise CudaError(codes.NOT_SUPPORTED, f"curand: {r.dist} values of type {r.dtype}")
    if r.dist in ("normal", "lognormal") and not (r.stddev > 0 and np.isfinite(r.stddev) and np.isfinite(r.mean)):
        raise CudaError(codes.INVALID_VALUE, f"curand: a {r.dist} distribution with stddev {r.stddev}")
    if r.dist == "poisson" and not (0 < r.lam < 1e10):
        raise CudaError(codes.INVALID_VALUE, f"curand: a Poisson distribution with lambda {r.lam}")


def generate_numpy(r: Any) -> None:
    gen = np.random.Generator(np.random.Philox(key=r.seed, counter=r.offset))
    n, typ = r.n, NUMPY[r.dtype]
    if r.dist == "bits":
        v = gen.integers(0, 1 << 32, n, dtype=np.uint32)
    elif r.dist == "uniform":
        v = 1.0 - gen.random(n, dtype=typ)  # (0, 1], as cuRAND's uniform
    elif r.dist == "normal":
        v = gen.standard_normal(n, dtype=typ) * typ(r.stddev) + typ(r.mean)
    elif r.dist == "lognormal":
        v = np.exp(gen.standard_normal(n, dtype=typ) * typ(r.stddev) + typ(r.mean))
    else:
        v = gen.poisson(r.lam, n).astype(np.uint32)
    raw = (ctypes.c_char * (n * np.dtype(typ).itemsize)).from_address(r.out)
    np.frombuffer(memoryview(raw), dtype=typ)[...] = v.astype(typ, copy=False)
