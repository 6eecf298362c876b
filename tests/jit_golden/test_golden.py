"""Golden tests for the PTX JIT: every cases/<name>.json is one test (see README.md).

Each case runs a real producer's PTX (numba-cuda, NVRTC, nvcc) through `jit.compile_module` on the CPU and compares
the output arrays with numpy-computed expectations. Device pointers are host addresses (`arr.ctypes.data`).

Every case runs in its own subprocess by default, so a crash or a hang fails one case instead of the
whole session (`JIT_GOLDEN_TIMEOUT` seconds, default 120); `JIT_GOLDEN_ISOLATE=0` runs them in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"
CASE_FILES = sorted(CASES.glob("*.json"))


def _jit():
    jit = pytest.importorskip("jit", reason="jit package not importable")
    if not hasattr(jit, "compile_module"):
        pytest.skip("jit.compile_module not implemented yet")
    return jit


def load_case(path: Path) -> tuple[dict, str, dict[str, np.ndarray]]:
    spec = json.loads(path.read_text())
    ptx = (CASES / spec["ptx"]).read_text()
    with np.load(CASES / (spec["name"] + ".npz")) as z:
        data = {k: z[k].copy() for k in z.files}
    return spec, ptx, data


def pack_params(spec: dict, kernel, arrays: dict[str, np.ndarray]) -> bytes:
    kparams = list(kernel.params)
    want = spec["params"]
    assert len(kparams) == len(want), f"kernel has {len(kparams)} params, case describes {len(want)}"
    buf = bytearray(int(kernel.param_buffer_size))
    for i, (kp, p) in enumerate(zip(kparams, want, strict=True)):
        off, size = int(kp.offset), int(kp.size)
        if p["kind"] == "ptr":
            raw = np.uint64(arrays[p["array"]].ctypes.data).tobytes()
        elif p["kind"] == "scalar":
            raw = np.array(p["value"], dtype=p["dtype"]).tobytes()
        elif p["kind"] == "bytes":
            raw = bytes.fromhex(p["hex"])
        else:
            raise AssertionError(p)
        assert len(raw) == size, f"param {i} ({p.get('what')}, {kp.name}): JIT says {size} bytes, case has {len(raw)}"
        assert off % int(kp.align) == 0, f"param {i} offset {off} not aligned to {kp.align}"
        buf[off : off + size] = raw
    return bytes(buf)


def _as_compared(a: np.ndarray, tol: dict) -> np.ndarray:
    if tol.get("as") == "bfloat16":  # stored as raw uint16 bits
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a


def compare(name: str, got: np.ndarray, exp: np.ndarray, tol: dict) -> None:
    got, exp = _as_compared(got, tol), _as_compared(exp, tol)
    if tol.get("sorted"):  # schedule-dependent order (atomic tickets): compare as multisets
        got, exp = np.sort(got.ravel()), np.sort(exp.ravel())
    if got.dtype.kind == "c":  # compare real and imaginary parts as floats
        got, exp = got.view(got.real.dtype), exp.view(exp.real.dtype)
    if not tol or tol.get("exact"):
        if got.dtype.kind == "f":
            bad = ~((got == exp) | (np.isnan(got) & np.isnan(exp)))
        else:
            bad = got != exp
    elif "ulps" in tol:
        assert got.dtype.kind == "f"
        ib = {2: np.int16, 4: np.int32, 8: np.int64}[got.dtype.itemsize]
        gi, ei = got.view(ib).astype(np.int64), exp.view(ib).astype(np.int64)
        # map sign-magnitude to a monotonic integer line
        mx = np.int64(1) << (8 * got.dtype.itemsize - 1)
        gi = np.where(gi < 0, -(gi + mx), gi)
        ei = np.where(ei < 0, -(ei + mx), ei)
        bad = (np.abs(gi - ei) > tol["ulps"]) & ~(np.isnan(got) & np.isnan(exp))
    else:
        rtol, atol = tol.get("rtol", 0.0), tol.get("atol", 0.0)
        g, e = got.astype(np.float64), exp.astype(np.float64)
        with np.errstate(invalid="ignore"):
            ok = (np.abs(g - e) <= atol + rtol * np.abs(e)) | (g == e) | (np.isnan(g) & np.isnan(e))
        bad = ~ok
    if bad.any():
        idx = np.argwhere(bad)[:5]
        sample = ", ".join(f"{tuple(int(j) for j in i)}: got {got[tuple(i)]!r} want {exp[tuple(i)]!r}" for i in idx)
        raise AssertionError(f"{name}: {int(bad.sum())}/{bad.size} elements differ (tol={tol}); {sample}")


def run_case(path: Path, checked: bool = False, tier: str = "optimized") -> None:
    """``checked``: compiled with bounds checks (gpud's default) and launched with the case's arrays as the only
    allowed ranges: every case must give the same results. ``tier``: the optimised or the quick code (NOTE
    [compile tiers], jit/compiler.py), which must agree too."""
    jit = _jit()
    spec, ptx, data = load_case(path)
    err = spec.get("expect_error")
    if err and err.get("at") == "compile":
        with pytest.raises(jit.JitError) as ei:
            jit.compile_module(ptx, bounds_check=checked, tier=tier)
        assert ei.value.code == err["code"], (ei.value.code, ei.value.name, ei.value.message)
        return
    mod = jit.compile_module(ptx, bounds_check=checked, tier=tier)
    k = mod.get_kernel(spec["entry"])
    arrays = {n: data["in__" + n].copy() for n in spec["arrays"]}
    buf = pack_params(spec, k, arrays)
    launch = dict(grid=tuple(spec["grid"]), block=tuple(spec["block"]), shared_mem=spec["shared_mem"], params=buf)
    if checked:
        launch["allowed_ranges"] = [(a.ctypes.data, max(1, a.nbytes)) for a in arrays.values()]
    if err:
        with pytest.raises(jit.JitError) as ei:
            k.launch(**launch)
        assert ei.value.code == err["code"], (ei.value.code, ei.value.name, ei.value.message)
        return
    res = k.launch(**launch)
    failures = []
    for n, a in spec["arrays"].items():
        if a["role"] == "in":
            continue
        try:
            compare(n, arrays[n], data["out__" + n], a.get("tol") or {})
        except AssertionError as e:
            failures.append(str(e))
    if spec.get("printf"):
        got = getattr(res, "printf", None)
        if isinstance(got, bytes):
            got = got.decode()
        want = spec["printf"]["text"]
        if spec["printf"].get("compare") == "sorted_lines":
            ok = got is not None and sorted(got.splitlines()) == sorted(want.splitlines())
        else:
            ok = got == want
        if not ok:
            failures.append(f"printf: got {got!r} want {want!r}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("tier", ["optimized", "quick"])
@pytest.mark.parametrize("checked", [False, True], ids=["plain", "checked"])
@pytest.mark.parametrize("case", CASE_FILES, ids=[p.stem for p in CASE_FILES])
def test_golden(case: Path, checked: bool, tier: str) -> None:
    if os.environ.get("JIT_GOLDEN_ISOLATE", "1") != "0":
        _jit()
        timeout = float(os.environ.get("JIT_GOLDEN_TIMEOUT", "120"))
        try:
            r = subprocess.run(
                [sys.executable, __file__, str(case), *(["--checked"] if checked else []), tier],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=HERE.parents[1],
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"timed out after {timeout}s")
        if r.returncode != 0:
            tail = (r.stdout + r.stderr).strip().splitlines()[-15:]
            pytest.fail(f"rc={r.returncode}\n" + "\n".join(tail))
        return
    run_case(case, checked, tier)


def test_corpus_present() -> None:
    assert len(CASE_FILES) >= 50, "golden corpus missing; run the generators (README.md)"


if __name__ == "__main__":  # one case, in this process (used by JIT_GOLDEN_ISOLATE)
    sys.path.insert(0, str(HERE.parents[1]))
    run_case(Path(sys.argv[1]), "--checked" in sys.argv[2:], "quick" if "quick" in sys.argv[2:] else "optimized")
    print("PASS")


# ------------------------------------------------------------------------ corpus self-checks (no JIT needed)
_TYPE_SIZES = {
    "b8": 1,
    "u8": 1,
    "s8": 1,
    "b16": 2,
    "u16": 2,
    "s16": 2,
    "f16": 2,
    "b32": 4,
    "u32": 4,
    "s32": 4,
    "f32": 4,
    "b64": 8,
    "u64": 8,
    "s64": 8,
    "f64": 8,
}


def ptx_entry_param_sizes(ptx: str, entry: str) -> list[int]:
    import re

    start = ptx.index(f".entry {entry}(")
    body = ptx[start + len(entry) + 8 : ptx.index(")", start)]
    sizes = []
    for decl in body.split(","):
        m = re.search(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+[\w$]+(?:\[(\d+)\])?", decl)
        assert m, decl
        sizes.append(_TYPE_SIZES[m.group(1)] * int(m.group(2) or 1))
    return sizes


@pytest.mark.parametrize("case", CASE_FILES, ids=[p.stem for p in CASE_FILES])
def test_case_spec_consistent(case: Path) -> None:
    """The spec's parameter list matches the PTX entry's .param list, and the npz holds every array."""
    spec, ptx, data = load_case(case)
    sizes = ptx_entry_param_sizes(ptx, spec["entry"])
    assert len(sizes) == len(spec["params"])
    for s, p in zip(sizes, spec["params"], strict=True):
        if p["kind"] == "ptr":
            assert s == 8, p
        elif p["kind"] == "scalar":
            assert np.dtype(p["dtype"]).itemsize == s, (p, s)
        else:
            assert len(bytes.fromhex(p["hex"])) == s, (p, s)
    for n, a in spec["arrays"].items():
        assert data["in__" + n].shape == tuple(a["shape"])
        if a["role"] != "in":
            assert ("out__" + n) in data
