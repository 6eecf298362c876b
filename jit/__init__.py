"""woolyhv PTX JIT: PTX -> LLVM IR -> native code (CPU today; AMDGPU planned).

Public API (stable, used by gpud's CPU backend)::

    from jit import compile_module, JitError
    mod = compile_module(ptx, target="cpu")
    k = mod.get_kernel("name"); k.launch(grid=(..), block=(..), shared_mem=0, params=b"...")
"""

from __future__ import annotations

from jit.errors import JitError

__all__ = ["compile_module", "JitError", "CpuModule", "CpuKernel", "GlobalInfo", "ParamInfo", "LaunchResult",
           "warm_up"]


def compile_module(ptx: str | bytes, target: str = "cpu"):  # -> CpuModule
    """Compile a PTX module for ``target`` ('cpu') and load it. Raises JitError (INVALID_PTX, NOT_SUPPORTED...)."""
    from jit.compiler import compile_object
    from jit.errors import CUDA_ERROR_INVALID_PTX, CUDA_ERROR_NOT_SUPPORTED
    from jit.runtime import CpuModule
    if isinstance(ptx, str):
        data = ptx.encode()
    elif isinstance(ptx, (bytes, bytearray, memoryview)):
        data = bytes(ptx)
    else:
        raise JitError(CUDA_ERROR_INVALID_PTX, f"PTX must be str or bytes, not {type(ptx).__name__}")
    data = data.split(b"\0", 1)[0]
    if target != "cpu":
        raise JitError(CUDA_ERROR_NOT_SUPPORTED, f"JIT target '{target}' (only 'cpu' is implemented)")
    obj, meta = compile_object(data, target)
    return CpuModule(obj, meta)


def warm_up() -> None:
    from jit.compiler import warm_up as _w
    _w()


def __getattr__(name: str):  # lazy re-exports keep `import jit` cheap
    if name in ("CpuModule", "CpuKernel", "GlobalInfo", "ParamInfo", "LaunchResult"):
        from jit import runtime
        return getattr(runtime, name)
    raise AttributeError(name)
