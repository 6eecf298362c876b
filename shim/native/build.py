"""Finding or building the native library (the process's libcuda.so.1 and libnvidia-ml.so.1).

Order: a library built at install time (``setup.py`` compiles ``src/wooly_native.c`` into the
package as ``_wooly_native*.so``), else one compiled earlier into the cache, else compile now
with the C compiler (``$CC`` or cc/gcc/clang) into ``~/.cache/wooly/native/<source hash>/``.
``ensure_built()`` returns a folder holding ``libcuda.so.1``, ``libcuda.so`` and
``libnvidia-ml.so.1`` links to it, for LD_LIBRARY_PATH.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile

# setup.py runs this file in pip's isolated build environment, where only setuptools is installed:
# nothing at module level may import the package's dependencies (proto imports msgpack and pydantic).

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "src")
SOURCES = [os.path.join(SRC, name) for name in ("wooly_native.c", "export_tables.c")]
NVRTC_SOURCE = os.path.join(SRC, "nvrtc_standin.c")
NVRTC_SONAMES = ("libnvrtc.so.12", "libnvrtc.so.13")  # NOTE [nvrtc stand-in]
SONAMES = (
    "libcuda.so.1",
    "libcuda.so",
    "libnvidia-ml.so.1",
    "libnvidia-ml.so",
    # NOTE [vendor libraries]: the same library stands in for cuBLAS (shim/native/cublas.py)
    "libcublas.so.12",
    "libcublas.so.13",
    "libcublas.so",
    "libcublasLt.so.12",
    "libcublasLt.so.13",
    "libcublasLt.so",
    # and for cuFFT (shim/native/cufft.py): 11 ships with CUDA 12, 12 with CUDA 13
    "libcufft.so.11",
    "libcufft.so.12",
    "libcufft.so",
    # and for cuRAND (shim/native/curand.py): 10 ships with CUDA 12 and 13
    "libcurand.so.10",
    "libcurand.so",
    # and for cuSOLVER (shim/native/cusolver.py): 11 ships with CUDA 12, 12 with CUDA 13
    "libcusolver.so.11",
    "libcusolver.so.12",
    "libcusolver.so",
    # and for cuSPARSE, which cuSOLVER's users load with it (handles only: shim/native/cusolver.py)
    "libcusparse.so.12",
    "libcusparse.so",
)


class NativeBuildError(RuntimeError):
    """The native library is neither installed nor buildable here."""


def _source_hash() -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(SRC)):
        if name.endswith((".c", ".h")):
            with open(os.path.join(SRC, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def cache_base() -> str:
    """The root of wooly's per-user build cache (``WOOLY_CACHE_DIR``, else ``$XDG_CACHE_HOME/wooly``)."""
    from proto import settings as config

    return config.client().cache_dir or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "wooly"
    )


def cache_dir() -> str:
    return os.path.join(cache_base(), "native", _source_hash())


def installed_library(stem: str = "_wooly_native") -> str | None:
    """The library compiled by ``pip install`` into the package, if its source is current."""
    newest = max(os.path.getmtime(os.path.join(SRC, n)) for n in os.listdir(SRC) if n.endswith((".c", ".h")))
    for path in sorted(glob.glob(os.path.join(HERE, f"{stem}*.so"))):
        stamp = path + ".srchash"
        if os.path.exists(stamp):
            if open(stamp).read().strip() == _source_hash():
                return path
        elif os.path.getmtime(path) >= newest:  # an in-place build without its stamp: current if newer
            return path
    return None


def find_compiler(cxx: bool = False) -> str | None:
    """A C compiler (``$CC``, cc, gcc, clang), or with ``cxx`` a C++ one (``$CXX``, c++, g++, clang++)."""
    names = (os.environ.get("CXX"), "c++", "g++", "clang++") if cxx else (os.environ.get("CC"), "cc", "gcc", "clang")
    for cc in names:
        if cc and shutil.which(cc):
            return cc
    return None


def compile_atomically(command: list[str], out_path: str) -> str:
    """Run a compiler ``command`` whose output goes to ``out_path`` (the command names it as ``{out}``) through a
    temporary file beside it, renamed into place: concurrent builders never see, or leave, a partial library."""
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(out_path))
    os.close(fd)
    cmd = [tmp if a == "{out}" else a for a in command]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp)
        raise NativeBuildError(
            f"compiling {os.path.basename(out_path)} failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}"
        )
    os.replace(tmp, out_path)
    return out_path


def compile_library(out_path: str) -> str:
    """Compile the library to ``out_path`` (atomically: concurrent builders do not collide)."""
    cc = find_compiler()
    if cc is None:
        raise NativeBuildError(
            "no C compiler found (set CC or install gcc) and no prebuilt wooly native library; "
            "`pip install .` on a machine with a compiler builds it into the package"
        )
    return compile_atomically(
        [cc, "-O1", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", "{out}", *SOURCES, "-lpthread", "-ldl"],
        out_path,
    )


def _link_dir(lib: str, folder: str, names: tuple[str, ...] = SONAMES) -> str:
    os.makedirs(folder, exist_ok=True)
    for name in names:
        link = os.path.join(folder, name)
        if os.path.islink(link) and os.readlink(link) == lib:
            continue
        tmp = f"{link}.{os.getpid()}.tmp"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(lib, tmp)
        os.replace(tmp, link)
    return folder


def library_path() -> str:
    """Path of the native library, building it if needed."""
    lib = installed_library()
    if lib is not None:
        return lib
    cached = os.path.join(cache_dir(), "libwooly_native.so")
    if os.path.exists(cached):
        return cached
    return compile_library(cached)


def nvrtc_library_path() -> str:
    """Path of the NVRTC stand-in (NOTE [nvrtc stand-in] in src/nvrtc_standin.c), building it if needed."""
    lib = installed_library("_wooly_nvrtc")
    if lib is not None:
        return lib
    cached = os.path.join(cache_dir(), "libwooly_nvrtc.so")
    if os.path.exists(cached):
        return cached
    cc = find_compiler()
    if cc is None:
        raise NativeBuildError("no C compiler found (set CC or install gcc) for the NVRTC stand-in")
    return compile_atomically(
        [cc, "-O1", "-shared", "-fPIC", "-Wl,-soname,libnvrtc.so.12", "-o", "{out}", NVRTC_SOURCE, "-lpthread", "-ldl"],
        cached,
    )


def real_nvrtc() -> str | None:
    """The NVRTC the stand-in forwards to: the CUDA toolkit's, else the one of the nvidia-cuda-nvrtc wheel."""
    found = sorted(glob.glob("/usr/local/cuda/lib64/libnvrtc.so.[0-9]*"), key=len)
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia.cuda_nvrtc")
        for base in (spec.submodule_search_locations or []) if spec else []:
            found += sorted(glob.glob(os.path.join(base, "lib", "libnvrtc.so.[0-9]*")), key=len)
    except (ImportError, ValueError):
        pass
    real = [p for p in found if "builtins" not in p and os.path.realpath(p) != os.path.realpath(NVRTC_SOURCE)]
    return real[0] if real else None


def ensure_built() -> str:
    """A folder holding libcuda.so.1 and libnvidia-ml.so.1 (links to the native library) and, when a C compiler
    or an installed copy allows, the NVRTC stand-in as libnvrtc.so.12/.13."""
    lib = library_path()
    folder = os.path.join(cache_dir(), "lib") if lib.startswith(os.path.dirname(cache_dir())) else None
    if folder is None:
        folder = os.path.join(cache_dir(), "installed-lib")
    _link_dir(lib, folder)
    try:
        _link_dir(nvrtc_library_path(), folder, NVRTC_SONAMES)
    except NativeBuildError:
        pass  # programs then use the real NVRTC as it is
    return folder
