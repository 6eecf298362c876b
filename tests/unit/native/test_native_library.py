"""The C library: builds, exports what programs look up, and hands out trampolines by name and version.

Runs in a subprocess: loading a libcuda.so.1 into the pytest process would change what other
tests see.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

SCRIPT = textwrap.dedent(
    """
    import ctypes, sys
    sys.path.insert(0, %r)
    from shim.native import build, registry
    import shim.native.cu_device, shim.native.cu_memory, shim.native.nvml
    lib = ctypes.CDLL(build.library_path(), mode=ctypes.RTLD_GLOBAL)
    registry.register_with(lib)
    gpa = lib.cuGetProcAddress_v2
    gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
    def get(name, version, flags=0):
        p, st = ctypes.c_void_p(), ctypes.c_int(-1)
        rc = gpa(name, ctypes.byref(p), version, flags, ctypes.byref(st))
        return rc, p.value, st.value
    a = get(b"cuMemAlloc", 3020)
    assert a[0] == 0 and a[1] and a[2] == 0, a
    assert get(b"cuMemAlloc", 3020)[1] == a[1]          # same request, same trampoline
    assert get(b"cuMemAlloc", 3020, 2)[1] != a[1]       # per-thread variant is its own slot
    assert get(b"cuNoSuchThing", 12000)[0] == 500       # CUDA_ERROR_NOT_FOUND
    rc, p, _ = get(b"cuGraphCreate", 10000)             # real but unsupported: a stub
    assert rc == 0 and p
    stub = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint)(p)
    assert stub(None, 0) == 801
    assert get(b"cuGetProcAddress", 12000)[1] == ctypes.cast(gpa, ctypes.c_void_p).value
    # direct exports: cuInit without a gpud to talk to reports no device
    import os; os.environ.pop("WOOLY_SERVER", None)
    assert lib.cuInit(0) == 100, lib.cuInit(0)
    drv = ctypes.c_int()
    assert lib.cuDriverGetVersion(ctypes.byref(drv)) == 0 and drv.value == 13000
    name = ctypes.c_char_p()
    assert lib.cuGetErrorName(1, ctypes.byref(name)) == 0 and name.value == b"CUDA_ERROR_INVALID_VALUE"
    assert lib.cuMemAlloc_v2(ctypes.byref(ctypes.c_uint64()), 16) in (3, 201)  # not initialized
    lib.nvmlErrorString.restype = ctypes.c_char_p
    assert lib.nvmlErrorString(3) == b"Not Supported"
    assert lib.nvmlInit_v2() == 9                       # NVML_ERROR_DRIVER_NOT_LOADED
    # NVIDIA's private tables for its CUDA runtime (NOTE [export tables]): known ids answer with a
    # table whose slot 0 is its size, unknown ids CUDA_ERROR_NOT_FOUND; both ways of asking agree.
    table = ctypes.c_void_p()
    cudart_id = bytes.fromhex("6bd5fb6c5bf4e74a8987d93912fd9df9")
    assert lib.cuGetExportTable(ctypes.byref(table), cudart_id) == 0 and table.value
    assert ctypes.c_uint64.from_address(table.value).value == 13 * 8
    get_table = get(b"cuGetExportTable", 12000)[1]
    assert get_table == ctypes.cast(lib.cuGetExportTable, ctypes.c_void_p).value
    assert lib.cuGetExportTable(ctypes.byref(table), bytes(16)) == 500 and not table.value
    assert lib.cuGetExportTable(ctypes.byref(table), None) == 1
    # the integrity check is HMAC over MD2: the MD2 must match RFC 1319's test vectors
    for text, digest in [(b"", "8350e5a3e24c153df2275c9f80692773"), (b"abc", "da853b0d3f88d99b30283a69e6ded6bb"),
                         (b"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                          "d5976f79d83d3a0dc9806c3c66f3efd8")]:
        out = ctypes.create_string_buffer(16)
        lib.wooly_md2(text, len(text), out)
        assert out.raw.hex() == digest, (text, out.raw.hex())
    lib.wooly_shutdown()
    print("native library OK")
    """
)


def test_native_library_resolves() -> None:
    from shim.native import build

    try:
        build.library_path()
    except build.NativeBuildError as exc:
        pytest.skip(str(exc))
    proc = subprocess.run([sys.executable, "-c", SCRIPT % ROOT], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "native library OK" in proc.stdout


def test_setup_py_loads_the_build_module_with_only_the_standard_library():
    """setup.py runs shim/native/build.py inside pip's isolated build environment, which holds setuptools
    and nothing the package depends on: importing msgpack or pydantic there broke every install (CI)."""
    code = textwrap.dedent(
        """
        import importlib.util, os, sys
        spec = importlib.util.spec_from_file_location("_b", os.path.join("shim", "native", "build.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        assert len(mod._source_hash()) == 16
        for name in ("msgpack", "pydantic", "zmq"):
            assert name not in sys.modules, name
        """
    )
    # -S: no site-packages, as in the build environment; the source tree is the working directory
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
