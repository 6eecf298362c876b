"""torch.save / torch.load of cuda tensors, as on a real GPU.

NOTE [saving]: ``torch.save`` of a cuda tensor writes the standard file format with the storage tagged with its
device (``cuda:0``, ``cuda:1``), exactly what PyTorch writes on a GPU machine: a PyTorch without wooly loads the file (with a
GPU, or with ``map_location``), and ``torch.load`` under wooly puts those tensors back on gpud while
tensors saved from the CPU stay on the CPU. The bytes are downloaded once, at save time
(``RemoteTensor.__reduce_ex__`` pickles a host copy and records it here so the tagger recognises its
storage). Loading reads every storage to the host first (``map_location`` keeps it there) and uploads
the ones tagged for cuda afterwards to the device of their tag, one upload per storage, so tensors that shared a storage in the
file still share one remote storage (a view of an uploaded base) and tied weights stay tied.

Within one ``torch.save`` the tensors that are views of one gpud storage (a state dict holding a buffer and a slice
of it, ``t`` and ``t[2:5]``) are saved as views of one host copy of that whole storage, downloaded once
(``host_copy``), as a GPU's save writes the storage once with each tensor's offset: they load back sharing one
storage. Outside a save (``pickle``, ``copy.deepcopy`` through ``__reduce_ex__``) each tensor is copied by itself.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any

import torch

from shim.torch.factories import is_cuda
from shim.torch.tensor import RemoteTensor

# the storages of host copies made by RemoteTensor.__reduce_ex__, by identity (alive while being pickled)
_SAVED: weakref.WeakValueDictionary[int, torch.UntypedStorage] = weakref.WeakValueDictionary()


def saved_from_gpud(cpu: torch.Tensor, device: int = 0) -> torch.Tensor:
    """Mark a host copy of a remote tensor of the program's ``cuda:<device>`` so that torch.save tags its storage
    with that device."""
    storage = cpu.untyped_storage()
    storage._wooly_device = device  # type: ignore[attr-defined]  # the storage's Python object is kept per storage
    _SAVED[storage._cdata] = storage
    return cpu


_scope = threading.local()  # .storages: (device, gpud storage id) -> host copy, while torch.save runs on the thread


def host_copy(t: RemoteTensor) -> torch.Tensor:
    """A host copy of ``t`` for pickling, marked for torch.save's tagger; inside ``torch.save``, a view of the host
    copy of its whole gpud storage, shared with the other tensors of that storage in the same save (NOTE [saving])."""
    from shim.torch import stream as S
    from shim.torch.transfer import download

    storages = getattr(_scope, "storages", None)
    if storages is None or t.layout != torch.strided or len(t._k) > 4:  # not in a save; sparse; a conj/neg view
        return saved_from_gpud(download(t), t._d)
    sid, nbytes = S.storage_info(t._x, t._d)
    size = t.element_size()
    key = (t._d, sid)
    st = storages.get(key)
    if st is None:
        if nbytes % size:  # a storage whose bytes this dtype does not tile: the tensor alone
            return saved_from_gpud(download(t), t._d)
        flat = torch.ops.aten.as_strided.default(t.detach(), (nbytes // size,), (1,), 0)
        st = storages[key] = saved_from_gpud(download(flat), t._d).untyped_storage()
    if (t.storage_offset() + _span(t)) * size > st.nbytes():
        return saved_from_gpud(download(t), t._d)
    return torch.empty(0, dtype=t.dtype).set_(st, t.storage_offset(), t.shape, t.stride())


def _tag(storage: Any) -> str | None:
    cdata = getattr(storage, "_cdata", None)
    if cdata is None or _SAVED.get(cdata) is not storage:
        return None
    return f"cuda:{getattr(storage, '_wooly_device', 0)}"


def _wants_cuda(map_location: Any) -> bool:
    if isinstance(map_location, dict):
        return any(is_cuda(v) for v in map_location.values())
    return is_cuda(map_location)


class _Uploader:
    """Moves the loaded objects that belong on gpud there, one upload per storage (see NOTE [saving])."""

    def __init__(self, storages: dict[int, int] | None) -> None:
        self.storages = storages  # data_ptr of a host storage to upload -> its device; None = every tensor, current
        self.bases: dict[int, torch.Tensor] = {}  # host storage data_ptr -> the remote flat storage
        self.memo: dict[int, Any] = {}

    def wanted(self, t: torch.Tensor) -> bool:
        if isinstance(t, RemoteTensor) or t.device.type != "cpu":
            return False
        return self.storages is None or t.untyped_storage().data_ptr() in self.storages

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        base = self.bases.get(st.data_ptr())
        device = None if self.storages is None else self.storages.get(st.data_ptr())
        if base is None:
            base = self.bases[st.data_ptr()] = torch.empty(0, dtype=torch.uint8).set_(st).cuda(device)
        size = t.element_size()
        if base.numel() % size or (t.storage_offset() + _span(t)) * size > base.numel():
            return t.detach().cuda(device)
        return base.view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())

    def __call__(self, obj: Any) -> Any:
        key = id(obj)
        if key in self.memo:
            return self.memo[key]
        out = self._convert(obj)
        self.memo[key] = out
        return out

    def _convert(self, obj: Any) -> Any:
        if isinstance(obj, torch.nn.Parameter):
            if not self.wanted(obj):
                return obj
            return torch.nn.Parameter(self.tensor(obj.data), obj.requires_grad)
        if isinstance(obj, torch.Tensor):
            if not self.wanted(obj):
                return obj
            out = self.tensor(obj.detach())
            if obj.requires_grad:
                out.requires_grad_(True)
            return out
        if isinstance(obj, torch.nn.Module):
            for mod in obj.modules():
                for name, p in list(mod._parameters.items()):
                    if p is not None:
                        mod._parameters[name] = self(p)
                for name, b in list(mod._buffers.items()):
                    if b is not None:
                        mod._buffers[name] = self(b)
            return obj
        if isinstance(obj, dict):
            new = obj.__class__() if obj.__class__ is not dict else {}
            try:
                for k, v in obj.items():
                    new[k] = self(v)
            except TypeError:
                return obj
            if hasattr(obj, "_metadata"):
                new._metadata = obj._metadata  # type: ignore[attr-defined]
            return new
        if isinstance(obj, list):
            return [self(v) for v in obj]
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return tuple(self(v) for v in obj)
        return obj


def _span(t: torch.Tensor) -> int:
    if t.numel() == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))


def to_cuda(obj: Any) -> Any:
    """Every tensor in ``obj`` (a tensor, module, dict, list or tuple) moved to gpud."""
    return _Uploader(None)(obj)


def _patch_load() -> None:
    orig = torch.load

    @functools.wraps(orig)
    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if _wants_cuda(map_location):
            where = (
                torch.device("cuda", map_location)
                if type(map_location) is int
                else torch.device(map_location)
                if isinstance(map_location, (str, torch.device))
                else None
            )
            if where is not None and where.index:  # map_location="cuda:1": that device of the program
                with torch.cuda.device(where.index):
                    return to_cuda(orig(f, *args, map_location="cpu", **kwargs))  # type: ignore[misc]
            return to_cuda(orig(f, *args, map_location="cpu", **kwargs))  # type: ignore[misc]
        if map_location is not None:
            return orig(f, map_location, *args, **kwargs)
        tagged: dict[int, int] = {}

        def locate(storage: Any, location: str) -> Any:
            if location.startswith("cuda"):
                index = torch.device(location).index or 0
                count = torch.cuda.device_count()
                if index >= count:  # PyTorch's own words for a file from a machine with more GPUs
                    raise RuntimeError(
                        f"Attempting to deserialize object on CUDA device {index} but torch.cuda.device_count() is "
                        f"{count}. Please use torch.load with map_location to map your storages to an existing device."
                    )
                tagged[storage.data_ptr()] = index
            return storage

        obj = orig(f, *args, map_location=locate, **kwargs)  # type: ignore[misc]
        return _Uploader(tagged)(obj) if tagged else obj

    torch.load = load


def _patch_save() -> None:
    orig = torch.save

    @functools.wraps(orig)
    def save(*args: Any, **kwargs: Any) -> Any:
        outer = getattr(_scope, "storages", None)
        _scope.storages = {} if outer is None else outer
        try:
            return orig(*args, **kwargs)
        finally:
            _scope.storages = outer

    torch.save = torch.serialization.save = save


def patch() -> None:
    torch.serialization.register_package(5, _tag, lambda storage, location: None)
    _patch_load()
    _patch_save()
