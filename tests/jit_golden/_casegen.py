"""Shared helpers for the golden-case generators (gen_numba.py, gen_nvrtc.py, gen_nvcc.py).

A case is three files in cases/: <name>.ptx (the module text, exactly as the producer emitted it),
<name>.json (the launch spec, see README.md) and <name>.npz (initial contents of every array, `in__<array>`,
and the numpy-computed expected contents of every output array, `out__<array>`).

Expected outputs are computed by numpy from the inputs, never by running the kernel.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CASES_DIR = Path(__file__).resolve().parent / "cases"

_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%.]*)\s*\(")


def entries(ptx: str) -> list[str]:
    return _ENTRY_RE.findall(ptx)


@dataclass
class Arr:
    """A device array. `init` is its initial contents (inputs, or the pre-launch fill of outputs)."""

    name: str
    init: np.ndarray
    role: str = "in"  # in | out | inout
    expected: np.ndarray | None = None
    tol: dict = field(default_factory=dict)  # {} = exact; {"rtol": .., "atol": ..} for floats
    desc: str = ""  # how init was built (documentation; the npz is authoritative)


@dataclass
class Scalar:
    name: str
    dtype: str
    value: float | int


@dataclass
class Raw:
    """A by-value parameter given as raw bytes (structs passed by value)."""

    name: str
    data: bytes


def numba_params(args: list) -> list[dict]:
    """Expand arguments with numba-cuda's kernel ABI.

    NOTE [numba array ABI]: each array argument becomes 5 + 2*ndim `.param`s, in this order:
      meminfo (u64, unused by kernels -> 0), parent (u64, unused -> 0), nitems (i64), itemsize (i64),
      data (u64 pointer), shape[0..ndim) (i64 each), strides[0..ndim) (i64 each, in BYTES).
    A 1-D array is therefore 7 params. Scalars are one param each (.f32/.f64/.u32/.u64/...).
    """
    out: list[dict] = []
    for a in args:
        if isinstance(a, Arr):
            arr = a.init
            out += [
                {"kind": "scalar", "dtype": "uint64", "value": 0, "what": f"{a.name}.meminfo"},
                {"kind": "scalar", "dtype": "uint64", "value": 0, "what": f"{a.name}.parent"},
                {"kind": "scalar", "dtype": "int64", "value": int(arr.size), "what": f"{a.name}.nitems"},
                {"kind": "scalar", "dtype": "int64", "value": int(arr.itemsize), "what": f"{a.name}.itemsize"},
                {"kind": "ptr", "array": a.name, "what": f"{a.name}.data"},
            ]
            out += [
                {"kind": "scalar", "dtype": "int64", "value": int(s), "what": f"{a.name}.shape[{i}]"}
                for i, s in enumerate(arr.shape)
            ]
            out += [
                {"kind": "scalar", "dtype": "int64", "value": int(s), "what": f"{a.name}.strides[{i}]"}
                for i, s in enumerate(arr.strides)
            ]
        else:
            out += c_params([a])
    return out


def c_params(args: list) -> list[dict]:
    """CUDA C++ ABI: an array is one u64 pointer param; scalars are one param each."""
    out: list[dict] = []
    for a in args:
        if isinstance(a, Arr):
            out.append({"kind": "ptr", "array": a.name, "what": a.name})
        elif isinstance(a, Scalar):
            v = float(a.value) if a.dtype.startswith("float") else int(a.value)
            out.append({"kind": "scalar", "dtype": a.dtype, "value": v, "what": a.name})
        elif isinstance(a, Raw):
            out.append({"kind": "bytes", "hex": a.data.hex(), "what": a.name})
        else:
            raise TypeError(a)
    return out


def write_case(
    name: str,
    *,
    producer: str,
    category: str,
    ptx: str,
    args: list,
    grid=(1, 1, 1),
    block=(1, 1, 1),
    shared_mem: int = 0,
    abi: str = "c",
    entry: str | None = None,
    seed: int | None = None,
    printf: dict | None = None,
    expect_error: dict | None = None,
    notes: str = "",
) -> None:
    CASES_DIR.mkdir(parents=True, exist_ok=True)
    found = entries(ptx)
    if entry is None:
        assert len(found) == 1, (name, found)
        entry = found[0]
    assert entry in found, (name, entry, found)
    params = numba_params(args) if abi == "numba" else c_params(args)
    arrays = {}
    npz = {}
    for a in args:
        if not isinstance(a, Arr):
            continue
        assert a.init.flags.c_contiguous, a.name
        assert a.role in ("in", "out", "inout"), a.role
        spec = {"dtype": str(a.init.dtype), "shape": list(a.init.shape), "role": a.role, "init": a.desc}
        npz["in__" + a.name] = a.init
        if a.role != "in":
            assert a.expected is not None, (name, a.name)
            exp = np.asarray(a.expected)
            assert exp.dtype == a.init.dtype and exp.shape == a.init.shape, (name, a.name, exp.dtype, exp.shape)
            npz["out__" + a.name] = exp
            spec["tol"] = a.tol
        arrays[a.name] = spec

    def _t(v):
        v = tuple(int(x) for x in (v if isinstance(v, (tuple, list)) else (v,)))
        return list(v + (1,) * (3 - len(v)))

    spec = {
        "name": name,
        "producer": producer,
        "category": category,
        "ptx": name + ".ptx",
        "entry": entry,
        "abi": abi,
        "grid": _t(grid),
        "block": _t(block),
        "shared_mem": int(shared_mem),
        "seed": seed,
        "arrays": arrays,
        "params": params,
        "printf": printf,
        "expect_error": expect_error,
        "notes": notes,
    }
    (CASES_DIR / (name + ".ptx")).write_text(ptx)
    (CASES_DIR / (name + ".json")).write_text(json.dumps(spec, indent=1) + "\n")
    np.savez_compressed(CASES_DIR / (name + ".npz"), **npz)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def f32_round_dir(exact: np.ndarray, mode: str) -> np.ndarray:
    """Round float64 values (assumed exact results) to float32 with a directed rounding mode."""
    r = exact.astype(np.float32)  # round to nearest even
    back = r.astype(np.float64)
    if mode == "rn":
        return r
    up = np.nextafter(r, np.float32(np.inf))
    dn = np.nextafter(r, np.float32(-np.inf))
    if mode == "ru":
        return np.where(back < exact, up, r).astype(np.float32)
    if mode == "rd":
        return np.where(back > exact, dn, r).astype(np.float32)
    if mode == "rz":
        toward0 = np.where(exact > 0, np.where(back > exact, dn, r), np.where(back < exact, up, r))
        return toward0.astype(np.float32)
    raise ValueError(mode)


def sat_cvt(x: np.ndarray, dtype, mode: str = "rz") -> np.ndarray:
    """PTX cvt.{rni,rzi,rmi,rpi}.<int>.<float>: round, saturate to the int range, NaN -> 0."""
    info = np.iinfo(dtype)
    x = np.asarray(x, dtype=np.float64)
    f = {"rn": np.rint, "rz": np.trunc, "rd": np.floor, "ru": np.ceil}[mode]
    with np.errstate(invalid="ignore"):
        r = f(x)
        r = np.where(np.isnan(r), 0, r)
        r = np.clip(r, info.min, info.max)
    # float64 cannot hold int64 max exactly; clip then convert with explicit handling
    out = np.empty(x.shape, dtype=dtype)
    big = r >= float(info.max)
    small = r <= float(info.min)
    mid = ~(big | small)
    out[mid] = r[mid].astype(dtype)
    out[big] = info.max
    out[small] = info.min
    return out
