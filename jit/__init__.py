"""woolyhv PTX JIT: PTX -> LLVM IR -> native code (CPU today; AMDGPU planned).

Public API (stable, used by gpud's CPU backend)::

    from jit import compile_module, JitError
    mod = compile_module(ptx, target="cpu")
    k = mod.get_kernel("name"); k.launch(grid=(..), block=(..), shared_mem=0, params=b"...")
"""

from __future__ import annotations

from jit.errors import JitError

__all__ = [
    "compile_module",
    "JitError",
    "CpuModule",
    "CpuKernel",
    "GlobalInfo",
    "GlobalRange",
    "ParamInfo",
    "LaunchResult",
    "warm_up",
]


# Feature flags callers can test for (tests/integration/hypervisor/test_isolation.py looks at BOUNDS_CHECK).
BOUNDS_CHECK = True  # compile_module(..., bounds_check=True) + launch(..., allowed_ranges=...)
TARGETS = ("cpu", "gfx90a", "gfx942", "gfx1100")


def lazy_bytes() -> int:
    """Modules larger than this many bytes of PTX are translated kernel by kernel (WOOLY_JIT_LAZY_BYTES; 0: never)."""
    from proto import settings

    return settings.jit().jit_lazy_bytes


def compile_module(ptx: str | bytes, target: str = "cpu", bounds_check: bool = False, tier: str = "auto"):
    """Compile a PTX module for ``target`` and load it. Raises JitError (INVALID_PTX, NOT_SUPPORTED...).

    ``target``: 'cpu' (a loaded, launchable CpuModule) or an AMDGPU architecture 'gfx90a' | 'gfx942' | 'gfx1100'
    (an AmdgpuModule holding an HSA code object; launching it is the AMD backend's job).

    ``bounds_check=True``: every global/generic access is checked against the ranges given to
    ``launch(..., allowed_ranges=[GlobalRange(start, size), ...])`` (NOTE [bounds checking], jit/emit/bounds.py).

    ``tier`` (CPU target; NOTE [compile tiers], jit/compiler.py): 'auto' returns at once with quick code unless
    optimised code is cached, and switches to optimised code when a background compile lands
    (``module.tier``, ``module.wait_optimized()``; WOOLY_JIT_TIERS=0 makes 'auto' mean 'optimized');
    'optimized' waits for optimised code; 'quick' never tiers up."""
    from jit.compiler import compile_tiered
    from jit.errors import CUDA_ERROR_INVALID_PTX, CUDA_ERROR_NOT_SUPPORTED
    from jit.runtime import CpuModule

    if isinstance(ptx, str):
        data = ptx.encode()
    elif isinstance(ptx, (bytes, bytearray, memoryview)):
        data = bytes(ptx)
    else:
        raise JitError(CUDA_ERROR_INVALID_PTX, f"PTX must be str or bytes, not {type(ptx).__name__}")
    data = data.split(b"\0", 1)[0]
    from jit.emit import ARCHS

    if target != "cpu" and target not in ARCHS:
        raise JitError(CUDA_ERROR_NOT_SUPPORTED, f"JIT target '{target}' (supported: cpu, {', '.join(ARCHS)})")
    if target == "cpu" and 0 < lazy_bytes() < len(data):  # NOTE [lazy modules] (jit/ptx/split.py)
        from jit.lazy import LazyCpuModule
        from jit.ptx.split import split

        parts = split(data)
        if parts is not None:
            return LazyCpuModule(parts, bool(bounds_check), tier)
    obj, meta, key, quick, pending = compile_tiered(data, target, bool(bounds_check), tier)
    if target in ARCHS:
        from jit.amdgpu_module import AmdgpuModule

        return AmdgpuModule.from_meta(obj, meta)
    return CpuModule(obj, meta, key, quick=quick, pending=pending)


def warm_up() -> None:
    from jit.compiler import warm_up as _w

    _w()


def __getattr__(name: str):  # lazy re-exports keep `import jit` cheap
    if name in ("CpuModule", "CpuKernel", "GlobalInfo", "GlobalRange", "ParamInfo", "LaunchResult"):
        from jit import runtime

        return getattr(runtime, name)
    raise AttributeError(name)
