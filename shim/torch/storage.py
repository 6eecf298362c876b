"""A remote tensor's storage: its size, data pointer and in-place resize answered by gpud.

Any program: ``untyped_storage()`` of a remote tensor stands for the storage on gpud (see below), which is what
FSDP1's flat parameter and transformers' ``save_pretrained`` (tied weights found by storage pointer) need.

NOTE [storage resize]: FSDP2 (``fully_shard``) keeps each parameter unsharded only around its use: after the
layer's forward (and backward) it frees the unsharded memory with ``tensor.untyped_storage().resize_(0)`` and grows it back (``resize_(nbytes)``) before the next all-gather writes
into it; the parameter the module sees is a view of that storage, so it sees the new memory. A remote tensor's
storage is gpud's; the wrapper's own storage (``_make_wrapper_subclass``) holds nothing and cannot be resized. So
FSDP2's two helpers are given remote tensors' versions here: ``wooly.resize_storage`` resizes the storage on gpud
(every view of it sees the new memory, the session is charged the new size: gpud/aten_exec.py), streamed like any
op, and the wrapper remembers the size it asked for (FSDP asks it before each resize). The helpers are patched when
their module loads (only programs that use FSDP2 import it). FSDP1 (``FullyShardedDataParallel``) resizes through
``_typed_storage()`` and ``set_`` of its flat parameter: the general storage proxy below serves it.
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
from shim.torch.tensor import STORAGE_OWNERS, RemoteTensor

# ---------------------------------------------------------------- any program: untyped_storage() of a remote tensor
# The wrapper's own storage (a StorageImpl with no data) stands for the storage on gpud: ``untyped_storage()`` of a
# remote tensor notes which wrapper it came from, and the storage's size, data pointer and resize_ are answered by
# gpud (one synchronous call each; a resize is streamed). The data pointer is the gpud storage's id: the same for
# every view of one storage, different for different storages (what transformers' save_pretrained and
# safetensors compare to find tied weights; it raised "invalid python storage" before).
_REAL: dict[str, Any] = {}


def _owner(st: Any) -> tuple[Any, int, bool] | None:
    return STORAGE_OWNERS.get(st._cdata) if STORAGE_OWNERS else None


def _data_ptr(self: Any) -> int:
    o = _owner(self)
    return S.storage_info(o[0], o[1])[0] if o is not None else int(_REAL["data_ptr"](self))


def _nbytes(self: Any) -> int:
    o = _owner(self)
    return S.storage_info(o[0], o[1])[1] if o is not None else int(_REAL["nbytes"](self))


def _len(self: Any) -> int:
    o = _owner(self)
    return S.storage_info(o[0], o[1])[1] if o is not None else int(_REAL["__len__"](self))


def _resize_(self: Any, size: int) -> Any:
    o = _owner(self)
    if o is None:
        return _REAL["resize_"](self, size)
    if not o[2]:
        raise RuntimeError("wooly: resizing the storage of a sparse cuda tensor is not supported")
    S.stream(o[1]).push([W.OP_RESIZE_STORAGE, [o[0], int(size)], {}, []])
    return self


def _patch_storages() -> None:
    if _REAL:
        return
    for name in ("data_ptr", "nbytes", "__len__", "resize_"):
        _REAL[name] = getattr(torch.UntypedStorage, name)
    torch.UntypedStorage.data_ptr = _data_ptr  # type: ignore[method-assign]
    torch.UntypedStorage.nbytes = _nbytes  # type: ignore[method-assign]
    torch.UntypedStorage.__len__ = _len  # type: ignore[method-assign]
    torch.UntypedStorage.resize_ = _resize_  # type: ignore[method-assign]


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
    _patch_storages()
    for name in list(_AFTER_IMPORT):
        module = sys.modules.get(name)
        if module is not None:
            _AFTER_IMPORT.pop(name)(module)
    if _AFTER_IMPORT:
        sys.meta_path.insert(0, _Finder())
