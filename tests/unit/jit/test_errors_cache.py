"""Error codes, launch validation, module globals and the kernel cache."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import numpy as np
import pytest

from jit import JitError, compile_module
from tests.unit.jit.helpers import HEADER, PTX_DIR


def test_invalid_ptx_has_line_col() -> None:
    with pytest.raises(JitError) as ei:
        compile_module(HEADER + ".visible .entry k()\n{\n  add.u32 %r1, , 3;\n}\n")
    assert ei.value.code == 218 and ei.value.name == "CUDA_ERROR_INVALID_PTX"
    assert "6:" in ei.value.message


def test_undeclared_register() -> None:
    with pytest.raises(JitError) as ei:
        compile_module(HEADER + ".visible .entry k() { mov.u32 %r1, 3; ret; }")
    assert ei.value.code == 218 and "%r1" in ei.value.message


def test_unsupported_instruction_is_named() -> None:
    with pytest.raises(JitError) as ei:
        compile_module(HEADER + ".visible .entry k() { .reg .b32 %r<2>; tex.1d.v4.f32.s32 %r1, [t, %r0]; ret; }")
    assert ei.value.code == 801 and "tex" in ei.value.message


def test_not_found_and_bad_config() -> None:
    m = compile_module(HEADER + ".visible .entry k() .maxntid 64, 1, 1 { ret; }")
    assert m.kernel_names == ["k"]
    with pytest.raises(JitError) as ei:
        m.get_kernel("nope")
    assert ei.value.code == 500
    k = m.get_kernel("k")
    assert k.max_threads_per_block == 64
    with pytest.raises(JitError) as ei:
        k.launch((1,), (128,), 0, b"")
    assert ei.value.code == 1
    with pytest.raises(JitError):
        k.launch((0,), (1,), 0, b"")
    k.launch((3, 2, 2), (4, 4, 4), 0, b"")


def test_globals_have_host_addresses() -> None:
    m = compile_module((PTX_DIR / "nvrtc_mix.ptx").read_text())
    g = m.globals["ctab"]
    assert g.size == 16
    vals = (ctypes.c_int32 * 4).from_address(g.address)
    assert list(vals) == [10, 20, 30, 40]
    vals[1] = 5  # cuMemcpyHtoD into a __constant__ then launch
    out = np.zeros(8, np.float32)
    import struct

    m.get_kernel("globk").launch((1,), (8,), 0, struct.pack("<Q", out.ctypes.data))
    assert out.tolist() == [10.0, 10.0, 90.0, 160.0] * 2


def test_disk_cache_hit_is_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jit.compiler as c

    monkeypatch.setenv("WOOLY_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("WOOLY_JIT_CACHE", "1")
    src = HEADER + f".visible .entry k(.param .u32 x) {{ ret; }} // cache-test {time.time_ns()}"
    compile_module(src)
    assert list(tmp_path.glob("??/*.o"))  # NOTE [bounded disk cache]: sharded by the key's first two hex digits
    c._MEM_CACHE.clear()
    t = time.perf_counter()
    m = compile_module(src)
    assert m.kernel_names == ["k"]
    assert time.perf_counter() - t < 0.5


_FRESH_HIT = """
import sys, jit, jit.compiler as jc
jc.warm_load_path()
before = set(sys.modules)
m = jit.compile_module(open(sys.argv[1]).read())
assert m.kernel_names == ["k"] and not jc._POOL, "not a disk hit"
print(sorted(set(sys.modules) - before))
"""


def test_warm_load_path_leaves_nothing_to_a_disk_hit(tmp_path: Path) -> None:
    """A restarted daemon's first disk cache hit must not import anything (the runtime import alone is ~25 ms):
    jit.warm_up() pays for it at start."""
    import subprocess
    import sys

    env = dict(os.environ, WOOLY_JIT_CACHE_DIR=str(tmp_path), WOOLY_JIT_CACHE="1")
    src = tmp_path / "k.ptx"
    src.write_text(HEADER + f".visible .entry k(.param .u32 x) {{ ret; }} // fresh-hit {time.time_ns()}")
    fill = "import sys, jit; jit.compile_module(open(sys.argv[1]).read(), tier='optimized')"
    subprocess.run([sys.executable, "-c", fill, str(src)], env=env, check=True)
    r = subprocess.run(
        [sys.executable, "-c", _FRESH_HIT, str(src)], env=env, check=True, capture_output=True, text=True
    )
    assert r.stdout.strip() == "[]"


def test_worker_restarts_after_death() -> None:
    import jit.compiler as c

    compile_module(HEADER + ".visible .entry k1() { ret; }")
    for w in c._POOL:
        if w.proc is not None:
            w.proc.kill()
            w.proc.wait()
    m = compile_module(HEADER + f".visible .entry k2() {{ ret; }} // {time.time_ns()}")
    assert m.kernel_names == ["k2"]


def test_shared_engine_keeps_modules_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """NOTE [one shared engine] (jit/loader.py): modules with the same kernel name share one MCJIT engine, each
    runs its own code; the same PTX compiled twice with the cache off (identical object) reuses the loaded code."""
    import struct

    import jit.loader as rt

    def src(v: int) -> str:
        return HEADER + (
            ".visible .entry k(.param .u64 p) { .reg .b64 %rd<2>; .reg .b32 %r<2>;\n"
            f"  ld.param.u64 %rd1, [p]; mov.u32 %r1, {v}; st.global.u32 [%rd1], %r1; ret; }}"
            f" // shared-engine {time.time_ns()}"
        )

    out = np.zeros(1, np.uint32)
    prm = struct.pack("<Q", out.ctypes.data)
    mods = [compile_module(src(v)) for v in (11, 22)]
    for v, m in zip((11, 22), mods, strict=True):
        assert m._code.engine is rt._SHARED
        m.get_kernel("k").launch((1,), (1,), 0, prm)
        assert out[0] == v
    monkeypatch.setenv("WOOLY_JIT_CACHE", "0")
    s = src(33)
    a, b = compile_module(s), compile_module(s)
    assert a._code is not b._code and a._code.engine is rt._SHARED and b._code.engine is rt._SHARED
    for m in (a, b):
        out[0] = 0
        m.get_kernel("k").launch((1,), (1,), 0, prm)
        assert out[0] == 33


def _relocation_types(obj: bytes) -> set[int]:
    """The x86-64 relocation types used by an ELF64 relocatable object (.rela sections)."""
    import struct

    (shoff,) = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    types = set()
    for i in range(shnum):
        sh = shoff + i * shentsize
        (sh_type,) = struct.unpack_from("<I", obj, sh + 4)
        if sh_type != 4:  # SHT_RELA
            continue
        off, size = struct.unpack_from("<QQ", obj, sh + 0x18)
        (entsize,) = struct.unpack_from("<Q", obj, sh + 0x38)
        for j in range(size // entsize):
            _, info, _ = struct.unpack_from("<QQq", obj, off + j * entsize)
            types.add(info & 0xFFFFFFFF)
    return types


def test_objects_need_no_32_bit_relocations() -> None:
    """Objects are loaded into gpud's own process by MCJIT's RuntimeDyld, which *asserts* (aborting gpud) when a
    32-bit PC-relative relocation cannot reach its target: sections of a long-running shared engine end up more than
    2 GiB apart. The code is generated with the large code model, so every relocation is 64-bit."""
    from jit.worker import compile_ptx
    from tests.unit.jit.helpers import HEADER

    ptx = (
        HEADER
        + """
.visible .entry k(.param .u64 out, .param .f32 x)
{
  .reg .f32 %f<4>; .reg .b64 %rd<2>; .reg .b32 %r<2>;
  ld.param.u64 %rd1, [out]; ld.param.f32 %f1, [x];
  sin.approx.f32 %f2, %f1; ex2.approx.f32 %f3, %f2; mov.u32 %r1, %tid.x;
  st.global.f32 [%rd1], %f3;
  ret;
}
"""
    )
    for bc in (False, True):
        obj, _ = compile_ptx(ptx.encode(), "cpu", 2, bc)
        types = _relocation_types(obj)
        assert types and types <= {1}, types  # R_X86_64_64 only (2: PC32, 4: PLT32, 9: GOTPCREL, 41/42: GOTPCRELX)
