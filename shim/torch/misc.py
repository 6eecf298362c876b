"""The rest of the surface: torch.compile falling back to eager, Generator."""

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
    torch.Generator = Generator  # type: ignore[assignment, misc]


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


def _patch_surface() -> None:
    """The small rest: CUDA version, nvtx ranges as no-ops."""
    import types

    if torch.version.cuda is None:
        torch.version.cuda = "12.8"  # the CUDA API level the driver face implements (docs/driver-api.md)
    nvtx = types.SimpleNamespace(
        rangePushA=lambda msg: 0,
        rangePop=lambda: 0,
        rangeStartA=lambda msg: 0,
        rangeEnd=lambda range_id: None,
        markA=lambda msg: None,
        deviceRangeStart=lambda *a: None,
        deviceRangeEnd=lambda *a: None,
    )
    torch.cuda.nvtx._nvtx = nvtx  # type: ignore[assignment]  # torch.cuda.nvtx's functions (and its range() context) call these


def _patch_module_moves() -> None:
    """A model's weights reach gpud as many tensors, each below the progress bar's threshold: ``Module.to`` and
    ``Module.cuda`` show one bar for all the host bytes they move (shim/progress.py; uploads advance it)."""
    import itertools

    from shim import progress

    def wrap(orig: Any, is_to: bool) -> Any:
        @functools.wraps(orig)
        def moved(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if not progress.enabled():
                return orig(self, *args, **kwargs)
            if is_to:
                try:
                    device = torch._C._nn._parse_to(*args, **kwargs)[0]
                except Exception:  # noqa: BLE001 - the real call reports bad arguments
                    device = None
                if device is None or device.type != "cuda":
                    return orig(self, *args, **kwargs)
            total = sum(t.nbytes for t in itertools.chain(self.parameters(), self.buffers()) if t.device.type == "cpu")
            with progress.transfer(total, f"moving {type(self).__name__} to cuda"):
                return orig(self, *args, **kwargs)

        return moved

    torch.nn.Module.to = wrap(torch.nn.Module.to, True)  # type: ignore[method-assign]
    torch.nn.Module.cuda = wrap(torch.nn.Module.cuda, False)  # type: ignore[method-assign]


def _reduce_shared(t: Any) -> Any:
    """NOTE [shared tensors] (gpud/aten_share.py): torch.multiprocessing sends a CUDA tensor to another process
    through CUDA IPC, and the receiver works on the same memory (hogwild training updates one model from several
    processes). A remote tensor is sent as a token gpud gave for it: the receiving process, a session of the same
    tenant, gets the same storage on gpud. (Pickled as a temporary host copy, pytorch/examples mnist_hogwild
    ``--cuda`` failed with "bad value(s) in fds_to_keep"; a copy would have let each process train its own model.)"""
    import torch

    from proto import aten as W
    from shim.runtime import visible
    from shim.torch import stream as S

    if t.requires_grad and not t.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not support "
            "crossing process boundaries.  If you just want to transfer the data, call detach() on the tensor "
            "before serializing (e.g., putting it on the queue)."
        )
    if t.layout != torch.strided:
        raise RuntimeError(
            "wooly: sharing a sparse cuda tensor with another process is not supported: send its indices and values"
        )
    token, _ = S.for_tensor(t).call([W.OP_SHARE_EXPORT, [t._x], {}, []], "share a cuda tensor")
    return (_rebuild_shared, (token, visible()[t._d], bool(t.requires_grad), bool(getattr(t, "_is_param", False))))


def _rebuild_shared(token: str, ordinal: int, requires_grad: bool, is_param: bool) -> Any:
    """The receiving side of ``_reduce_shared``: the same storage on gpud, on the program's device that is gpud's
    ``ordinal`` (a child process numbers devices as its parent: NOTE [devices of a program] in shim/runtime.py)."""
    import torch

    from proto import aten as W
    from shim.runtime import visible
    from shim.torch import stream as S
    from shim.torch.dispatch import NAME_DTYPE
    from shim.torch.tensor import wrap

    order = visible()
    if ordinal not in order:
        raise RuntimeError(
            f"wooly: a cuda tensor was received from a process on gpud device {ordinal}, which this process does not"
            f" use (its devices are gpud's {order})"
        )
    st = S.stream(order.index(ordinal))
    value, _ = st.call([W.OP_SHARE_IMPORT, [token], {}, []], "receive a cuda tensor")
    h, shape, stride, offset, dtype, *bits = value["t"]
    out = wrap(h, shape, stride, offset, NAME_DTYPE[dtype], bits[0] if bits else 0, st.device)
    if is_param:
        return torch.nn.Parameter(out, requires_grad)
    return out.requires_grad_(requires_grad) if requires_grad else out


def _patch_sharing() -> None:
    from multiprocessing.reduction import ForkingPickler

    from shim.torch.tensor import RemoteTensor

    ForkingPickler.register(RemoteTensor, _reduce_shared)


def patch() -> None:
    _patch_surface()
    _patch_sharing()
    _patch_module_moves()
    _patch_foreach()
    _patch_compile()
    _patch_generator()
    from shim.torch import autocast, composite, graphs, serialization

    serialization.patch()
    graphs.patch()

    composite.patch()
    autocast.patch()
