"""The rest of the surface: torch.load onto gpud, torch.compile falling back to eager, Generator."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch

from shim.torch.factories import is_cuda
from shim.torch.tensor import RemoteTensor

_warned: set[str] = set()


def _warn_once(key: str, text: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(text, stacklevel=3)


def _wants_cuda(map_location: Any) -> bool:
    if isinstance(map_location, dict):
        return any(is_cuda(v) for v in map_location.values())
    return is_cuda(map_location)


def _to_cuda(obj: Any) -> Any:
    if isinstance(obj, RemoteTensor):
        return obj
    if isinstance(obj, torch.nn.Parameter):
        return torch.nn.Parameter(obj.data.cuda(), obj.requires_grad)
    if isinstance(obj, torch.Tensor):
        out = obj.detach().cuda()
        if obj.requires_grad:
            out.requires_grad_(True)
        return out
    if isinstance(obj, torch.nn.Module):
        return obj.cuda()
    if isinstance(obj, dict):
        new = obj.__class__() if obj.__class__ is not dict else {}
        try:
            for k, v in obj.items():
                new[k] = _to_cuda(v)
        except TypeError:
            return obj
        if hasattr(obj, "_metadata"):
            new._metadata = obj._metadata  # type: ignore[attr-defined]
        return new
    if isinstance(obj, list):
        return [_to_cuda(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_to_cuda(v) for v in obj)
    return obj


def _patch_load() -> None:
    orig = torch.load

    @functools.wraps(orig)
    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if _wants_cuda(map_location):
            return _to_cuda(orig(f, *args, map_location="cpu", **kwargs))
        if map_location is None:
            pos = f.tell() if hasattr(f, "tell") and hasattr(f, "seek") else None
            try:
                return orig(f, *args, **kwargs)
            except (RuntimeError, AssertionError) as exc:
                if "cuda" not in str(exc).lower() and "CUDA" not in str(exc):
                    raise
                if pos is not None:
                    f.seek(pos)
                return _to_cuda(orig(f, *args, map_location="cpu", **kwargs))
        return orig(f, map_location, *args, **kwargs)

    torch.load = load


def _patch_compile() -> None:
    orig = torch.compile

    @functools.wraps(orig)
    def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:  # noqa: A001
        _warn_once("compile", "wooly: torch.compile runs eagerly under wooly (ops stream to gpud one by one)")
        if model is None:
            return lambda m: m
        return model

    torch.compile = compile


class _CudaGenerator:
    """``torch.Generator('cuda')``: its seed seeds the session's generator on gpud."""

    def __init__(self, device: Any = "cuda") -> None:
        self.device = torch.device("cuda", 0)
        self._seed = 67280421310721

    def manual_seed(self, seed: int) -> _CudaGenerator:
        from shim.torch import stream as S

        self._seed = int(seed)
        S.seed(self._seed)
        return self

    def seed(self) -> int:
        import random

        self.manual_seed(random.getrandbits(63))
        return self._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> torch.Tensor:
        return torch.cuda.get_rng_state()

    def set_state(self, state: torch.Tensor) -> _CudaGenerator:
        torch.cuda.set_rng_state(state)
        return self


def _patch_generator() -> None:
    orig = torch.Generator

    class _GeneratorMeta(type):
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, (orig, _CudaGenerator))

        def __call__(cls, device: Any = "cpu") -> Any:
            if is_cuda(device):
                return _CudaGenerator(device)
            return orig(device)

    class Generator(metaclass=_GeneratorMeta):
        pass

    Generator.__doc__ = orig.__doc__
    torch.Generator = Generator  # type: ignore[misc]


def _patch_foreach() -> None:
    # Optimizers default to their multi-tensor (foreach) path for CUDA parameters; on a real GPU
    # that is what an unmodified script runs. Remote tensors qualify too: a handful of
    # _foreach_* ops per step instead of ~10 ops per parameter.
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    for types in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        if RemoteTensor not in types:
            types.append(RemoteTensor)
    # Helpers such as clip_grad_norm_ group tensors by their C++ device, which for remote
    # tensors is "meta": let that group take the foreach path too (one _foreach_norm, not N norms).
    orig = _foreach_utils._get_foreach_kernels_supported_devices
    if not getattr(orig, "__wooly__", False):

        def supported() -> list[str]:
            return [*orig(), "meta"]

        supported.__wooly__ = True  # type: ignore[attr-defined]
        _foreach_utils._get_foreach_kernels_supported_devices = supported


class _NoGraphs:
    """``torch.cuda.CUDAGraph`` and friends: refused by name (capture and replay are not implemented yet)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("CUDA error: CUDA_ERROR_NOT_SUPPORTED: torch.cuda.CUDAGraph (wooly does not capture "
                           "CUDA graphs yet; run the captured code eagerly)")


def _no_graph_callables(*args: Any, **kwargs: Any) -> Any:
    _NoGraphs()


def _refuse_dlpack(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("wooly: DLPack export of a cuda tensor is not supported: its memory is on gpud, not in "
                       "this process (use .cpu() first)")


def _patch_surface() -> None:
    """The small rest: CUDA version, nvtx ranges as no-ops, graphs and DLPack refused by name."""
    import types

    if torch.version.cuda is None:
        torch.version.cuda = "12.8"  # the CUDA API level the driver face implements (docs/driver-api.md)
    nvtx = types.SimpleNamespace(rangePushA=lambda msg: 0, rangePop=lambda: 0, rangeStartA=lambda msg: 0,
                                 rangeEnd=lambda range_id: None, markA=lambda msg: None,
                                 deviceRangeStart=lambda *a: None, deviceRangeEnd=lambda *a: None)
    torch.cuda.nvtx._nvtx = nvtx  # torch.cuda.nvtx's functions (and its range() context) call these
    torch.cuda.CUDAGraph = _NoGraphs  # type: ignore[misc,assignment]
    torch.cuda.graph = _NoGraphs  # type: ignore[assignment]
    torch.cuda.make_graphed_callables = _no_graph_callables
    orig_dlpack = torch.Tensor.__dlpack__

    def __dlpack__(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self, RemoteTensor):
            _refuse_dlpack()
        return orig_dlpack(self, *args, **kwargs)

    torch.Tensor.__dlpack__ = __dlpack__  # type: ignore[method-assign]
    orig_to = torch.utils.dlpack.to_dlpack

    def to_dlpack(t: Any) -> Any:
        if isinstance(t, RemoteTensor):
            _refuse_dlpack()
        return orig_to(t)

    torch.utils.dlpack.to_dlpack = to_dlpack
    torch.to_dlpack = to_dlpack  # type: ignore[attr-defined]


def patch() -> None:
    _patch_surface()
    _patch_foreach()
    _patch_load()
    _patch_compile()
    _patch_generator()
    from shim.torch import autocast, composite

    composite.patch()
    autocast.patch()
