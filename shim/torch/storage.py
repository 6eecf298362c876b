"""Freeing and regrowing a tensor's storage in place, as FSDP does with its unsharded parameters.

NOTE [storage resize]: FSDP2 (``fully_shard``) keeps each parameter unsharded only around its use: after the
layer's forward (and backward) it frees the unsharded memory with ``tensor.untyped_storage().resize_(0)`` and grows it back (``resize_(nbytes)``) before the next all-gather writes
into it; the parameter the module sees is a view of that storage, so it sees the new memory. A remote tensor's
storage is gpud's; the wrapper's own storage (``_make_wrapper_subclass``) holds nothing and cannot be resized. So
FSDP2's two helpers are given remote tensors' versions here: ``wooly.resize_storage`` resizes the storage on gpud
(every view of it sees the new memory, the session is charged the new size: gpud/aten_exec.py), streamed like any
op, and the wrapper remembers the size it asked for (FSDP asks it before each resize). The helpers are patched when
their module loads (only programs that use FSDP2 import it). (FSDP1, ``FullyShardedDataParallel``, resizes through
``_typed_storage()`` and ``set_`` of its flat parameter in many places: not offered.)
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

import torch

from proto import aten as W
from shim.torch import stream as S
from shim.torch.tensor import RemoteTensor


def storage_bytes(t: RemoteTensor) -> int:
    """The size of a remote tensor's storage on gpud: what it was last resized to, else what it was made with."""
    got = t.__dict__.get("_storage_bytes")
    if got is None:
        return int((t.storage_offset() + t.numel()) * t.element_size()) if t.numel() else 0
    return int(got)


def resize(t: RemoteTensor, nbytes: int) -> None:
    S.for_tensor(t).push([W.OP_RESIZE_STORAGE, [t._x, int(nbytes)], {}, []])
    t.__dict__["_storage_bytes"] = int(nbytes)


# ---------------------------------------------------------------- FSDP2 (torch.distributed.fsdp._fully_shard)
def _fsdp2(module: Any) -> None:
    real_alloc, real_free = module.alloc_storage, module.free_storage

    def alloc_storage(tensor: torch.Tensor) -> None:
        if not isinstance(tensor, RemoteTensor):
            return real_alloc(tensor)
        size = tensor.numel() * tensor.itemsize
        if storage_bytes(tensor) != size:
            resize(tensor, size)
        return None

    def free_storage(tensor: torch.Tensor) -> None:
        if not isinstance(tensor, RemoteTensor):
            return real_free(tensor)
        if storage_bytes(tensor) != 0:
            resize(tensor, 0)
        return None

    module.alloc_storage, module.free_storage = alloc_storage, free_storage


_AFTER_IMPORT: dict[str, Callable[[Any], None]] = {
    "torch.distributed.fsdp._fully_shard._fsdp_param": _fsdp2,
}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, then: Callable[[Any], None]) -> None:
        self.inner, self.then = inner, then

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        self.then(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a module of ``_AFTER_IMPORT`` right after it runs, before whoever imported it takes its names."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        then = _AFTER_IMPORT.pop(name, None)
        if then is None:
            return None
        if not _AFTER_IMPORT:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, then)
                return spec
        return None


def patch() -> None:
    for name in list(_AFTER_IMPORT):
        module = sys.modules.get(name)
        if module is not None:
            _AFTER_IMPORT.pop(name)(module)
    if _AFTER_IMPORT:
        sys.meta_path.insert(0, _Finder())
