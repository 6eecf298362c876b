"""The CUDA device of a client's PyTorch (a CPU build, or a CUDA build without a GPU): a small native library.

NOTE [a cuda device in a CPU build] (the C++ side is shim/torch/native/cuda_device.cpp): remote
tensors live on device ``cuda:N`` in C++ too, so C++ composites (LSTM, ``torch.where`` with
Python scalars, index ops, dlpack...) see CUDA tensors and create their helper tensors on
``cuda``. Such a factory reaches the CUDA dispatch key with no remote tensor among its arguments;
a Python fallback registered for that key (``register_fallback``) sends it to gpud like any
other op. The library must be loaded before torch creates its CUDA hooks, so ``load()`` runs
from the import hook just before ``import torch`` executes.

A CUDA build of PyTorch on a machine without a GPU (what ``pip install torch`` gives on Linux)
is handled the same way: its libtorch_cuda is loaded first, then the library's hooks (at a higher
registry priority) and device guard replace the ones that would ask a missing driver. Its CUDA
kernels stay registered, so the fallback is not reached by factories that have one (``empty``,
``empty_strided``, ``tril_indices``...): those are overridden for the CUDA key one by one
(``cuda_build_factories``, found from the dispatcher), and SDPA takes the math path on remote
tensors as on the CPU build (shim/torch/composite.py), since the build's own kernel choice would
ask about a GPU on this side.

Without a C++ compiler (or with ``WOOLY_TORCH_CUDA_DEVICE=0``) the face falls back to wrapper
tensors on the ``meta`` device that only *report* ``cuda`` (FACTS option C): scripts whose C++
composites create helper tensors then fail with a clear message.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import sys
import warnings

from proto import settings as config
from shim.native.build import NativeBuildError, cache_base, compile_atomically, find_compiler

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "native", "cuda_device.cpp")
ACTIVE = False  # remote tensors are on cuda:N in C++ (else: on meta, reporting cuda)
CUDA_BUILD = False  # the client's torch is a CUDA build (its CUDA registrations replaced by ours)
_lib: ctypes.CDLL | None = None
# The device count the C++ guard starts with, until the program's first session says how many it has: the autograd
# engine starts one thread per device at its first backward pass and never more, so a backward pass run before the
# session opened (a CPU one) must not fix it at one (NOTE [devices of a program] in shim/runtime.py).
MAX_DEVICES_AT_START = 16
_why_not = ""


def _torch_dir() -> str | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _torch_version(tdir: str) -> str:
    try:
        with open(os.path.join(tdir, "version.py")) as f:
            return f.read()
    except OSError:
        return ""


def _key(tdir: str) -> str:
    h = hashlib.sha256()
    with open(SRC, "rb") as f:
        h.update(f.read())
    h.update(_torch_version(tdir).encode() + b"\0" + tdir.encode())
    return h.hexdigest()[:16]


def library_path(tdir: str) -> str:
    """Where the library for this torch build is cached (keyed by source, torch version and path)."""
    return os.path.join(cache_base(), "torch-device", _key(tdir), "libwooly_torch_cuda.so")


def prebuilt_path(tdir: str) -> str:
    """Where an installation built it ahead of time (``python -m shim.torch.device``, the container image does):
    beside the interpreter's prefix, so that a machine without a compiler finds it."""
    return os.path.join(sys.prefix, "share", "wooly", "torch-device", _key(tdir), "libwooly_torch_cuda.so")


def build(tdir: str, out: str) -> str:
    """Compile the library against the torch in ``tdir`` (atomically: concurrent builders do not collide)."""
    cxx = find_compiler(cxx=True)
    if cxx is None:
        raise RuntimeError("no C++ compiler (set CXX or install g++)")
    lib = os.path.join(tdir, "lib")
    timer = os.path.join(tdir, "include", "torch", "csrc", "distributed", "c10d", "reducer_timer.hpp")
    try:
        return compile_atomically(
            [
                cxx,
                "-O1",
                "-g0",
                "-shared",
                "-fPIC",
                "-std=c++20",
                "-w",
                *(["-DHAVE_C10D_TIMER"] if os.path.exists(timer) else []),  # a torch with torch.distributed
                "-I",
                os.path.join(tdir, "include"),
                "-o",
                "{out}",
                SRC,
                "-L",
                lib,
                "-lc10",
                "-ltorch_cpu",
                f"-Wl,-rpath,{lib}",
            ],
            out,
        )
    except NativeBuildError as exc:
        raise RuntimeError(f"compiling {os.path.basename(SRC)} failed: {str(exc).strip().splitlines()[-1]}") from None


def load() -> bool:
    """Load the library ahead of ``import torch`` (idempotent). True when remote tensors are on cuda."""
    global ACTIVE, CUDA_BUILD, _lib, _why_not
    if _lib is not None or _why_not:
        return ACTIVE
    if not config.client().torch_cuda_device:
        _why_not = "WOOLY_TORCH_CUDA_DEVICE=0"
        return False
    if hasattr(sys.modules.get("torch"), "Tensor"):  # (during the import hook the module exists, empty)
        _why_not = "torch was imported before the wooly face"
        return False
    tdir = _torch_dir()
    if tdir is None:
        _why_not = "torch is not installed"
        return False
    path = prebuilt_path(tdir)
    if not os.path.exists(path):
        path = library_path(tdir)
    try:
        if not os.path.exists(path):
            build(tdir, path)
        cuda_build = os.path.join(tdir, "lib", "libtorch_cuda.so")
        if os.path.exists(cuda_build):  # its registrations first, so that ours replace them
            ctypes.CDLL(cuda_build, mode=ctypes.RTLD_GLOBAL)
            CUDA_BUILD = True
        _lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        ACTIVE = _lib.wooly_install_cuda_device(MAX_DEVICES_AT_START) == 0
        if ACTIVE:
            from shim.torch import stream

            stream.GUARD.update(active=True, set_count=set_device_count)
    except (OSError, RuntimeError) as exc:
        _why_not = str(exc)
        print(
            f"wooly: the torch face runs without its CUDA device library ({exc}); "
            "C++ composites that create tensors will fail",
            file=sys.stderr,
        )
    return ACTIVE


def set_device_count(n: int) -> None:
    """Tell the C++ guard how many devices the program has (NOTE [devices of a program] in shim/runtime.py)."""
    if _lib is not None and ACTIVE:
        _lib.wooly_set_device_count(int(n))


def why_not() -> str:
    """Why remote tensors are on the meta device ('' when they are on cuda)."""
    return "" if ACTIVE else (_why_not or "not loaded")


def register_fallback() -> None:
    """Ops reaching the CUDA dispatch key without a remote tensor (factories inside composites) go to gpud."""
    if not ACTIVE:
        return
    import torch

    from shim.torch.dispatch import dispatch

    def cuda_fallback(op, *args, **kwargs):
        return dispatch(op, args, kwargs)

    global _fallback_lib, _factory_lib
    _fallback_lib = torch.library.Library("_", "IMPL")  # noqa: PLW0603 - kept alive: dropping it unregisters
    _fallback_lib.fallback(cuda_fallback, "CUDA")
    factories = cuda_build_factories()
    if factories:
        _factory_lib = torch.library.Library("aten", "IMPL")  # noqa: PLW0603
        with warnings.catch_warnings():  # "Overriding a previously registered kernel": that is the point
            warnings.simplefilter("ignore")
            for op in factories:
                _factory_lib.impl(
                    op._schema.name.split("::")[1] + (f".{op._overloadname}" if op._overloadname != "default" else ""),
                    _to_gpud(op),
                    "CUDA",
                )


def _to_gpud(op):
    from shim.torch.dispatch import dispatch

    def kernel(*args, **kwargs):
        return dispatch(op, args, kwargs)

    return kernel


def cuda_build_factories() -> list:
    """The aten ops a CUDA build of torch runs with its own CUDA kernel though no tensor argument is remote.

    On a CUDA build without a GPU (what ``pip install torch`` gives on Linux) the fallback above is reached only
    by ops with no CUDA kernel, so a composite's ``at::empty(..., self.options())`` would run torch's CUDA
    allocator and fail ("Allocator not initialized"). Those ops are the factories: a CUDA kernel and no tensor
    in the schema (``empty``, ``empty_strided``, ``tril_indices``...), found from the dispatcher rather than
    listed, so a later torch's are found too. Every other op a composite calls has a remote tensor argument
    once its helper tensors come from gpud, and reaches the Python key first. Empty on the CPU build."""
    import torch

    found = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA"):
            continue
        base, _, overload = name[len("aten::") :].partition(".")
        op = getattr(getattr(torch.ops.aten, base, None), overload or "default", None)
        if op is not None and not any("Tensor" in str(a.type) for a in op._schema.arguments):
            found.append(op)
    return found


_fallback_lib = None
_factory_lib = None


if __name__ == "__main__":  # build ahead of time, into prebuilt_path (containers/build.py)
    _tdir = _torch_dir()
    if _tdir is None:
        raise SystemExit("torch is not installed")
    _out = build(_tdir, prebuilt_path(_tdir))
    # for every user of this installation (the build cache it reuses is private to its builder)
    _d = os.path.dirname(_out)
    while _d.startswith(os.path.join(sys.prefix, "share", "wooly")):
        os.chmod(_d, 0o755)
        _d = os.path.dirname(_d)
    os.chmod(_out, 0o755)
    print(_out)
