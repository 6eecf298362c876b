"""Lazily translated modules: a big module's kernels are translated at their first use.

See NOTE [lazy modules] in jit/ptx/split.py. ``LazyCpuModule`` answers what a ``CpuModule`` answers
(kernel names, globals, kernels) but translates only the header and variables at load time (the
data block: its layout, image and addresses are the module's from then on) and each kernel's piece
at its first ``get_kernel``. Every piece declares the same variables in the same order, so its
layout is checked against the load-time one and its kernels are bound to the module's one data
block and device heap: kernels of one module see one set of globals, as on a GPU. Pieces are
compiled through the same tiered, disk-cached path as whole modules, so a kernel used in an earlier
run is not translated again.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from jit.errors import CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_SUPPORTED, JitError
from jit.ptx.split import Split


def _layout(meta: dict) -> tuple[Any, ...]:
    return (meta.get("globals"), meta.get("gsize"), meta.get("gdata"), meta.get("grelocs"))


class LazyCpuModule:
    """A module whose kernels are translated at first use (see the module docstring)."""

    def __init__(self, parts: Split, bounds_check: bool, tier: str) -> None:
        from jit.compiler import compile_tiered
        from jit.runtime import CpuModule

        self._split = parts
        self._tier = tier
        self.bounds_check = bool(bounds_check)
        obj, meta, key, quick, pending = compile_tiered(parts.piece(None), "cpu", self.bounds_check, "optimized")
        self._owner = CpuModule(obj, meta, key, quick=quick, pending=pending)
        self._layout_meta = _layout(meta)
        self.globals = self._owner.globals
        self._pieces: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.tier = "lazy"
        self._owner._lazy = weakref.ref(self)  # a kernel's module is the owner: launches by handle come back here

    def by_handle(self, handle: int) -> Any:
        """The kernel a device-side launch names (NOTE [device launches]): the copy in a piece already translated
        (a kernel's piece holds the kernels it launches), else its own piece."""
        from jit.emit.abi import kernel_handle

        name = next((n for n in self._split.entries if kernel_handle(n) == handle), None)
        if name is None:
            return None
        with self._lock:
            pieces = list(self._pieces.values())
        for piece in pieces:
            if name in piece.kernel_names:
                return piece.get_kernel(name)
        return self.get_kernel(name)

    # what CpuKernel asks of its module: the data block, its size, the heap, whether checked
    @property
    def _data_addr(self) -> int:
        return self._owner._data_addr

    @property
    def kernel_names(self) -> list[str]:
        return list(self._split.entries)

    def compiled(self, name: str) -> bool:
        return name in self._pieces

    def get_kernel(self, name: str) -> Any:
        if name not in self._split.entries:
            raise JitError(CUDA_ERROR_NOT_FOUND, f"no kernel named '{name}' in module")
        with self._lock:
            piece = self._pieces.get(name)
        if piece is None:
            piece = self._translate(name)
        return piece.get_kernel(name)

    def _translate(self, name: str) -> Any:
        from jit.compiler import compile_tiered
        from jit.runtime import CpuModule

        obj, meta, key, quick, pending = compile_tiered(self._split.piece(name), "cpu", self.bounds_check, self._tier)
        if _layout(meta) != self._layout_meta:
            raise JitError(
                CUDA_ERROR_NOT_SUPPORTED,
                f"kernel {name}: its piece of the module lays out the module's variables differently",
            )
        piece = CpuModule(obj, meta, key, quick=quick, pending=pending)
        for kname in piece.kernel_names:
            piece.get_kernel(kname)._module = self._owner  # one data block and heap for the whole module
        with self._lock:
            return self._pieces.setdefault(name, piece)

    def get_global(self, name: str) -> Any:
        return self._owner.get_global(name)

    def heap(self) -> Any:
        return self._owner.heap()

    def wait_optimized(self, timeout: float | None = None) -> bool:
        with self._lock:
            pieces = list(self._pieces.values())
        return all(p.wait_optimized(timeout) for p in pieces)
