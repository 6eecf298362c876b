"""The CUDA driver face: make the shim's native library the process's libcuda.so.1.

``activate()`` (run by ``wooly run`` before the program) loads the library with RTLD_GLOBAL, so
any later ``dlopen("libcuda.so.1")`` — from cuda-bindings through cuda.pathfinder, numba's
presence check, ctypes, or a C extension — gets it; registers the Python implementations of the
driver API and NVML with it (shim/native/registry.py); and patches numba-cuda to hand kernels
over as PTX (shim/native/numba_ptx.py). When the library cannot be built (no compiler, no prebuilt
copy), activation says so and returns False: the rest of the program still runs.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading

from proto import settings

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None

API_MODULES = (
    "shim.native.cu_device",
    "shim.native.cu_memory",
    "shim.native.cu_vmm",
    "shim.native.cu_mempool",
    "shim.native.cu_pointer",
    "shim.native.cu_stream",
    "shim.native.cu_module",
    "shim.native.cu_link",
    "shim.native.cu_launch",
    "shim.native.cu_graph",
    "shim.native.cu_texture",
    "shim.native.nvml",
    "shim.native.cublas",
    "shim.native.cublasxt",
    "shim.native.cufft",
    "shim.native.curand",
    "shim.native.cusolver",
    "shim.native.cusolver_sp",
    "shim.native.cusparse",
)


def library() -> ctypes.CDLL | None:
    return _lib


def _shutdown() -> None:
    """At exit: flush queued work and stop the trampolines from entering a dying interpreter."""
    lib = _lib
    if lib is None:
        return
    try:
        from shim import runtime

        drv = runtime.current()
        if drv is not None and drv.conn.alive:
            drv.conn.flush()
    except Exception:  # noqa: BLE001 - exiting anyway
        pass
    lib.wooly_shutdown()


def activate() -> bool:
    """Load and register the native face. Idempotent; False when the library is unavailable."""
    global _lib
    with _lock:
        if _lib is not None:
            return True
        import importlib

        from shim.native import build, numba_ptx, registry

        try:
            folder = settings.internal("WOOLY_NATIVE_LIBDIR") or build.ensure_built()
        except build.NativeBuildError as exc:
            print(f"wooly: the CUDA driver face is unavailable: {exc}", file=sys.stderr)
            return False
        path = os.path.join(folder, "libcuda.so.1")
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        for name in API_MODULES:
            importlib.import_module(name)
        registry.register_with(lib)
        lib.wooly_shutdown.restype = None
        _lib = lib
        atexit.register(_shutdown)
        numba_ptx.install()
        # numba-cuda probes for the driver by path; point it at ours when LD_LIBRARY_PATH does not.
        os.environ.setdefault("NUMBA_CUDA_DRIVER", path)
        return True


def activate_embedded() -> bool:
    """Activation inside the interpreter that the native library started for a program with no Python
    of its own (NOTE [embedded interpreter] in src/wooly_native.c): the program's own argv names it,
    the launcher's sys.path is completed with its folders' .pth files (editable installs: Python
    does not read them for PYTHONPATH entries), and device printf output goes through the
    program's C stdio buffer, so it interleaves with the program's own lines as on a GPU."""
    import site

    try:
        with open("/proc/self/cmdline", "rb") as f:
            sys.argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a] or ["native"]
    except OSError:
        sys.argv = ["native"]
    for folder in settings.internal("WOOLY_PYTHONPATH").split(os.pathsep):
        if folder.endswith(("site-packages", "dist-packages")):
            site.addsitedir(folder)
    from shim import client

    libc = ctypes.CDLL(None)
    c_stdout = ctypes.c_void_p.in_dll(libc, "stdout")
    libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]

    def through_stdio(text: str) -> None:
        libc.fputs(text.encode(), c_stdout)

    client.write_device_output = through_stdio
    return activate()


def embedded_exit() -> None:
    """The native program is exiting: flush its queued work and let nothing enter Python again."""
    _shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
