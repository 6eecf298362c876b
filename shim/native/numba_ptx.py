"""Make numba-cuda hand kernels over as PTX instead of a client-side cubin.

numba-cuda links every kernel with nvJitLink into a cubin (machine code for one real GPU) before
loading it; a wooly device compiles PTX itself. The patch replaces the link step
(``numba.cuda.cudadrv.driver._Linker.complete``) with one that returns ``ObjectCode.from_ptx``:
PTX inputs (numba's own, ``.ptx`` and ``.cu`` link files, which numba compiles to PTX with NVRTC)
are merged into one module; LTO-IR inputs go through nvJitLink's PTX output. The cudadevrt library (grid
groups) is left out: the JIT supplies its functions in PTX (jit/devrt.py). Other machine-code inputs (cubin,
fatbin without PTX, static libraries) cannot run and say so.

The patch is applied when ``numba.cuda.cudadrv.driver`` is imported (an import hook), so a program
that never uses numba pays nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys
from typing import Any

TARGET = "numba.cuda.cudadrv.driver"

_HEADER = re.compile(r"^\s*\.(version|target|address_size)\b.*$", re.MULTILINE)
_EXTERN_FUNC = re.compile(r"\.extern\s+\.func\s+(\([^)]*\)\s*)?([\w$]+)\s*(\([^)]*\))?\s*;", re.DOTALL)
_ENTRY_HEADER = re.compile(r"\.entry\s+[\w$]+\s*\([^)]*\)")
_DEFINED_FUNC = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.func\s+(?:\([^)]*\)\s*)?([\w$]+)", re.MULTILINE)


def merge_ptx(modules: list[str]) -> str:
    """Merge PTX modules into one: one header, extern declarations dropped where a module defines them.

    The first module (numba's) calls into the others, and PTX wants a function defined or declared
    before its call, so the other modules come first.
    """
    if len(modules) == 1:
        return modules[0]
    header = "\n".join(m.group(0) for m in _HEADER.finditer(modules[0]))
    defined = {name for text in modules for name in _DEFINED_FUNC.findall(text)}
    bodies = [
        _EXTERN_FUNC.sub(lambda m: "" if m.group(2) in defined else m.group(0), _HEADER.sub("", text))
        for text in modules
    ]
    return header + "\n" + "\n".join(bodies[1:] + bodies[:1])


def _code_type(obj: Any) -> str:
    return str(getattr(obj, "code_type", None) or getattr(obj, "_code_type", "")).lower()


def _code_bytes(obj: Any) -> bytes:
    code = getattr(obj, "code", None)
    if code is None:
        code = obj._module
    if isinstance(code, str):  # a path
        with open(code, "rb") as f:
            return f.read()
    return bytes(code)


def _is_cudadevrt(obj: Any) -> bool:
    """numba-cuda's cudadevrt input (the library of grid-group functions, which jit/devrt.py stands in for)."""
    return _code_type(obj) == "library" and "cudadevrt" in str(getattr(obj, "name", ""))


def patched_complete(self: Any) -> Any:
    """Replacement for ``_Linker.complete``: returns PTX ObjectCode."""
    ObjectCode = sys.modules[TARGET].ObjectCode

    driver_mod = sys.modules[TARGET]
    self._object_codes = [o for o in self._object_codes if not _is_cudadevrt(o)]
    kinds = [_code_type(o) for o in self._object_codes]
    if not self._object_codes:
        raise driver_mod.LinkerError("nothing to link")
    bad = sorted({k for k in kinds if k not in ("ptx", "ltoir")})
    if bad:
        raise driver_mod.LinkerError(
            f"wooly devices load PTX; cannot link machine-code inputs ({', '.join(bad)}) such as cudadevrt"
        )
    texts = [
        _code_bytes(o).decode().strip("\x00") for o, k in zip(self._object_codes, kinds, strict=True) if k == "ptx"
    ]
    lto = [o for o, k in zip(self._object_codes, kinds, strict=True) if k == "ltoir"]
    if lto:  # LTO-IR (numba's own code when LTO is on): nvJitLink optimizes it into one PTX module
        options = driver_mod.LinkerOptions(
            arch=self.arch,
            link_time_optimization=True,
            ptx=True,
            max_register_count=self.max_registers,
            lineinfo=self.lineinfo,
        )
        linker = driver_mod.Linker(*lto, options=options)
        try:
            texts.insert(0, bytes(linker.link("ptx").code).decode().strip("\x00"))
        finally:
            linker.close()
    ptx = merge_ptx(texts)
    if self.max_registers:  # nvJitLink's -maxrregcount, as the PTX directive it stands for
        ptx = _ENTRY_HEADER.sub(lambda m: f"{m.group(0)}\n.maxnreg {int(self.max_registers)}", ptx)
    self._info_log = self._error_log = ""
    self._complete = True
    return ObjectCode.from_ptx(ptx.encode())


def _info_log(self: Any) -> str:
    return getattr(self, "_info_log", "")


def patch_driver_module(mod: Any) -> None:
    linker = getattr(mod, "_Linker", None)
    if linker is None or getattr(linker, "_wooly_patched", False):
        return
    linker.complete = patched_complete
    linker.info_log = property(_info_log)
    linker.error_log = property(lambda self: getattr(self, "_error_log", ""))
    linker._wooly_patched = True


class _Hook(importlib.abc.MetaPathFinder):
    """Patches the numba driver module right after it is executed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                original = spec.loader.exec_module

                def exec_module(module: Any, _orig: Any = original) -> None:
                    _orig(module)
                    patch_driver_module(module)

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec
        return None


_hook = _Hook()


def install() -> None:
    """Patch now if numba's driver is already imported, else when it is."""
    if TARGET in sys.modules:
        patch_driver_module(sys.modules[TARGET])
    elif _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)
