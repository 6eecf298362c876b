"""Where tensors become remote: factories with a CUDA device, ``.cuda()``/``.to()``, ``torch.tensor``.

NOTE [factories]: a factory asked for a CUDA device (explicitly, through ``set_default_device``
or inside ``with torch.device('cuda')``) is run with ``device='meta'`` under ``_FactoryMode``,
a dispatch mode that hands the resulting ATen op (``aten.randn``, ``aten.full``...) to the
ordinary remote dispatch, so each factory is one op computed on gpud (random ones from the
session's generator). ``torch.tensor``/``as_tensor`` build the value on the host and upload it.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from shim.torch import stream as S
from shim.torch.dispatch import dispatch
from shim.torch.tensor import CUDA, RemoteTensor
from shim.torch.transfer import to_host, to_remote

_FACTORIES = (
    "empty",
    "zeros",
    "ones",
    "full",
    "rand",
    "randn",
    "randint",
    "randperm",
    "arange",
    "range",
    "linspace",
    "logspace",
    "eye",
    "empty_strided",
    "normal",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "rand_like",
    "randn_like",
    "randint_like",
    "tril_indices",
    "triu_indices",
    "scalar_tensor",
    "bartlett_window",
    "hann_window",
    "hamming_window",
    "blackman_window",
    "kaiser_window",
)
_SPARSE_BUILT = (
    "sparse_coo_tensor",
    "sparse_compressed_tensor",
    "sparse_csr_tensor",
    "sparse_csc_tensor",
    "sparse_bsr_tensor",
    "sparse_bsc_tensor",
)
_HOST_BUILT = ("tensor", "as_tensor", "asarray", *_SPARSE_BUILT)
_ARRAY_TAKERS = frozenset(("tensor", "as_tensor", "asarray"))
# NOTE [device memory aliases]: (is it another library's device array?, the tensor over its memory), set by
# shim/torch/dlpack.py
DEVICE_ARRAYS: list[Any] = []
ORIGINAL: dict[str, Any] = {}


class _FactoryMode(TorchDispatchMode):
    def __init__(self, dev: int) -> None:
        super().__init__()
        self.dev = dev  # the program's cuda:N the factory was asked for


def _factory_dispatch(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
    if any(t is not RemoteTensor and t is not torch.Tensor and t is not torch.nn.Parameter for t in types):
        return NotImplemented  # a tensor subclass (DTensor) runs the factory on its parts, which come back here
    first = args[0] if args else None
    name = func.overloadpacket.__name__
    if name.endswith("_like") and type(first) in (torch.Tensor, torch.nn.Parameter):
        return _like_host(name, args, kwargs or {}, self.dev)  # a subclass's part: a meta or host tensor
    return dispatch(func, args, kwargs or {}, self.dev)


# Set after the class exists: TorchDispatchMode.__init_subclass__ would wrap it in dynamo's
# "disable", whose first call imports all of dynamo (seconds).
_FactoryMode.__torch_dispatch__ = _factory_dispatch  # type: ignore[method-assign]


def is_cuda(dev: Any) -> bool:
    if dev is None:
        return False
    if isinstance(dev, torch.device):
        return dev.type == "cuda"
    if isinstance(dev, str):
        return dev.startswith("cuda")
    if isinstance(dev, int) and not isinstance(dev, bool):
        return True  # a bare ordinal means a CUDA device
    return False


def check_ordinal(dev: Any) -> int:
    """The program's device index ``dev`` names (the current device when it names none); one the program does not
    have is CUDA's "invalid device ordinal" (cuda:0 costs nothing). NOTE [devices of a program] (shim/runtime.py)."""
    from shim.torch import stream as S

    if isinstance(dev, str):
        dev = torch.device(dev)
    idx = dev.index if isinstance(dev, torch.device) else dev if isinstance(dev, int) else None
    if idx is None:
        return S.current_device()
    if idx:
        from shim.torch.cuda_api import device_count

        n = device_count()
        if not 0 <= idx < n:
            raise RuntimeError(
                f"CUDA error: invalid device ordinal (cuda:{idx} requested, {n} device(s) visible: the devices of "
                "gpud this tenant may use, or those CUDA_VISIBLE_DEVICES lists)"
            )
    return idx


def remote_factory(name: str, orig: Any, args: Any, kwargs: dict[str, Any], default: Any = None) -> Any:
    S.INITIALIZED[0] = True  # the program's first cuda tensor initialises CUDA, as in PyTorch
    asked = kwargs.get("device")
    dev = check_ordinal(default if asked is None else asked)
    if name in _HOST_BUILT:
        return _host_built(orig, args, kwargs, dev)
    first = args[0] if args else None
    if isinstance(first, torch.Tensor) and type(first) not in (torch.Tensor, torch.nn.Parameter, RemoteTensor):
        # ``empty_like(dtensor, device="cuda:1")``: a tensor subclass (DTensor) runs the factory on its parts, whose
        # CUDA factories come back to this face (NOTE [a cuda device in a CPU build] in shim/torch/device.py)
        return orig(*args, **kwargs)
    if (
        name.endswith("_like")
        and isinstance(first, torch.Tensor)
        and type(first) in (torch.Tensor, torch.nn.Parameter)  # a subclass (DTensor) makes its own *_like
        and first.layout == torch.strided
        and (first.device.type == "meta" or first.is_contiguous())
    ):
        return _like_host(name, args, kwargs, dev)
    kwargs = dict(kwargs)
    out = kwargs.get("out")
    if isinstance(out, RemoteTensor):  # torch.arange(n, out=t, device="cuda"): the op goes to t's device
        kwargs["device"] = out.device
        return orig(*args, **kwargs)
    kwargs["device"] = "meta"
    gen = kwargs.get("generator")
    if gen is not None and getattr(getattr(gen, "device", None), "type", None) != "cuda":
        raise RuntimeError(f"Expected a 'cuda' device type for generator but found '{gen.device.type}'")
    kwargs.pop("generator", None)  # a cuda generator is the session's generator on gpud
    requires_grad = kwargs.pop("requires_grad", False)
    pin = kwargs.pop("pin_memory", None)
    del pin
    with _FactoryMode(dev):
        out = orig(*args, **kwargs)
    if requires_grad:
        out.requires_grad_(True)
    return out


def _like_host(name: str, args: Any, kwargs: dict[str, Any], dev: int) -> Any:
    """``empty_like(t, device="cuda:1")`` of a host or meta tensor ``t`` (transformers fills a model built on the
    meta device this way, one device per layer under ``device_map="auto"``): only ``t``'s shape and dtype are
    used, so the matching factory makes the tensor on gpud (contiguous, as ``*_like`` gives for contiguous
    input)."""
    t, rest = args[0], args[1:]
    kw = {k: v for k, v in kwargs.items() if k not in ("memory_format", "layout", "pin_memory")}
    if kw.get("dtype") is None:
        kw["dtype"] = t.dtype
    kw["device"] = CUDA[dev]
    base = name[: -len("_like")]
    if base == "full":
        return torch.full(tuple(t.shape), *rest, **kw)
    if base == "randint":  # randint_like(t, high) / (t, low, high)
        bounds = [int(b) for b in rest]
        return torch.randint(*bounds, size=tuple(t.shape), **kw)  # type: ignore[call-overload]
    return getattr(torch, base)(tuple(t.shape), *rest, **kw)


def _is_original(orig: Any, name: str) -> bool:
    return orig is ORIGINAL.get(name)


def _host_built(orig: Any, args: Any, kwargs: dict[str, Any], dev: int) -> Any:
    kwargs = dict(kwargs)
    kwargs.pop("device", None)
    requires_grad = kwargs.pop("requires_grad", False)
    data = args[0] if args else kwargs.pop("data", None)
    out: torch.Tensor
    if any(_is_original(orig, n) for n in _SPARSE_BUILT):  # built on the host, then uploaded (and checked)
        args = tuple(to_host(a) if isinstance(a, RemoteTensor) else a for a in args)
        kwargs = {k: to_host(v) if isinstance(v, RemoteTensor) else v for k, v in kwargs.items()}
        out = to_remote(orig(*args, **kwargs), dev)
    elif isinstance(data, RemoteTensor):
        dt = kwargs.get("dtype")
        out = data if dt is None or dt == data.dtype else data.to(dt)
        if data._d != dev:
            out = out.to(CUDA[dev])
        if orig is ORIGINAL.get("tensor"):
            out = out.detach().clone()
    else:
        host = orig(data, *args[1:], **kwargs)
        out = to_remote(host, dev)
    if requires_grad:
        out.requires_grad_(True)
    return out


_FAKE_MODE = torch._C._get_dispatch_mode
_FAKE = torch._C._TorchDispatchModeKey.FAKE


def _make(name: str, orig: Any) -> Any:
    @functools.wraps(orig)
    def factory(*args: Any, **kwargs: Any) -> Any:
        if name in _ARRAY_TAKERS and args and DEVICE_ARRAYS and DEVICE_ARRAYS[0](args[0]):  # a CuPy/numba array
            return DEVICE_ARRAYS[1](name, orig, args, kwargs)
        if is_cuda(kwargs.get("device")) and _FAKE_MODE(_FAKE) is None:  # a fake tensor's "cuda" is the fake mode's
            return remote_factory(name, orig, args, kwargs)
        return orig(*args, **kwargs)

    factory.__wooly_original__ = orig  # type: ignore[attr-defined]
    return factory


def _patch_device_context() -> None:
    from torch.utils import _device as D

    orig_tf = D.DeviceContext.__torch_function__
    ctor_names = {getattr(f, "__name__", ""): f for f in D._device_constructors()}
    del ctor_names

    def __torch_function__(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in D._device_constructors() and kwargs.get("device") is None and is_cuda(self.device):
            name = getattr(func, "__name__", "")
            orig = getattr(func, "__wooly_original__", func)
            return remote_factory(name, orig, args, kwargs, self.device)
        return orig_tf(self, func, types, args, kwargs)

    D.DeviceContext.__torch_function__ = __torch_function__  # type: ignore[method-assign]


# ---------------------------------------------------------------------- Tensor methods
_Uninit = torch.nn.parameter.UninitializedTensorMixin  # type: ignore[attr-defined]


def _lazy_to_cuda(t: Any) -> Any:
    """A lazy module's parameter that has no shape yet stays on the host, marked for gpud: it moves there once
    the first forward has materialised it (``_patch_lazy_modules``)."""
    t._wooly_cuda = True
    return t


def _patch_lazy_modules() -> None:
    from torch.nn.modules.lazy import LazyModuleMixin

    orig = LazyModuleMixin._infer_parameters

    def _infer_parameters(self: Any, module: Any, args: Any, kwargs: Any = None) -> Any:
        marked = [
            (table, name)
            for table in (module._parameters, module._buffers)
            for name, t in table.items()
            if getattr(t, "_wooly_cuda", False)
        ]
        out = orig(self, module, args, kwargs)
        for table, name in marked:  # initialised on the host (the host's generator, as the reference); now moved
            t = table[name]
            table[name] = (
                torch.nn.Parameter(t.data.cuda(), t.requires_grad) if table is module._parameters else t.cuda()
            )
        return out

    LazyModuleMixin._infer_parameters = _infer_parameters  # type: ignore[method-assign]


def _dispatch_subclass(t: torch.Tensor) -> bool:
    """A tensor subclass with dispatch of its own (DTensor, FakeTensor): it moves its inner tensors itself."""
    return getattr(type(t), "__torch_dispatch__", _PLAIN_DISPATCH) is not _PLAIN_DISPATCH


_PLAIN_DISPATCH = torch.Tensor.__torch_dispatch__


def _patch_tensor_methods() -> None:
    orig_to = torch.Tensor.to
    orig_cuda = torch.Tensor.cuda
    orig_cpu = torch.Tensor.cpu
    parse_to = torch._C._nn._parse_to

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self, _Uninit) and (args or "device" in kwargs):
            device, dtype, _, _ = parse_to(*args, **{k: v for k, v in kwargs.items() if k != "copy"})
            if device is not None and device.type == "cuda":
                return _lazy_to_cuda(self if dtype is None else orig_to(self, dtype=dtype))
        remote = isinstance(self, RemoteTensor)
        if not remote and not args and "device" not in kwargs:
            return orig_to(self, *args, **kwargs)
        kw = dict(kwargs)
        copy = bool(kw.pop("copy", False))
        device, dtype, non_blocking, memory_format = parse_to(*args, **kw)
        if remote:
            if device is not None and device.type == "cpu":
                out = to_host(self)  # type: ignore[arg-type]
                return orig_to(out, dtype=dtype) if dtype is not None else out
            elsewhere = device is not None and device.type == "cuda" and check_ordinal(device) != self._d  # type: ignore[attr-defined]
            if (
                (dtype is None or dtype == self.dtype)
                and not copy
                and memory_format in (None, torch.preserve_format)
                and not elsewhere
            ):
                return self
            kw: dict[str, Any] = {"copy": copy}  # type: ignore[no-redef]
            if elsewhere:
                kw["device"] = device
            if dtype is not None:
                kw["dtype"] = dtype
            if memory_format is not None:
                kw["memory_format"] = memory_format
            return orig_to(self, **kw)
        if device is not None and device.type == "cuda" and not _dispatch_subclass(self):
            dev = check_ordinal(device)
            src = self if dtype is None else orig_to(self, dtype=dtype)
            return to_remote(src, dev)
        return orig_to(self, *args, **kwargs)  # (a DTensor moves its parts, which come back here)

    def cuda(
        self: torch.Tensor, device: Any = None, non_blocking: bool = False, memory_format: Any = torch.preserve_format
    ) -> Any:
        dev = check_ordinal(device)
        if isinstance(self, RemoteTensor):
            return self if self._d == dev else orig_to(self, device=CUDA[dev])
        if isinstance(self, _Uninit):
            return _lazy_to_cuda(self)
        if _dispatch_subclass(self):
            return orig_cuda(self, device, non_blocking, memory_format)
        return to_remote(self, dev)

    def cpu(self: torch.Tensor, memory_format: Any = torch.preserve_format) -> Any:
        if isinstance(self, RemoteTensor):
            return to_host(self)
        return orig_cpu(self, memory_format=memory_format)

    def pin_memory(self: torch.Tensor, device: Any = None) -> Any:
        return self

    from shim.torch.tensor import _host_index

    orig_getitem = torch.Tensor.__getitem__

    def __getitem__(self: torch.Tensor, index: Any) -> Any:  # also when called as torch.Tensor.__getitem__(t, i)
        return orig_getitem(self, _host_index(index) if isinstance(self, RemoteTensor) else index)

    torch.Tensor.__getitem__ = __getitem__  # type: ignore[method-assign,assignment]

    torch.Tensor.to = to  # type: ignore[assignment, method-assign]
    torch.Tensor.cuda = cuda  # type: ignore[assignment, method-assign]
    torch.Tensor.cpu = cpu  # type: ignore[assignment, method-assign]
    torch.Tensor.pin_memory = pin_memory  # type: ignore[assignment, method-assign]
    torch.Tensor.is_pinned = lambda self, device=None: True  # type: ignore[method-assign]


def patch() -> None:
    from torch.utils import _device as D

    D._device_constructors()  # cached: computed now, over torch's own functions, before they are wrapped
    for name in _FACTORIES + _HOST_BUILT:
        orig = getattr(torch, name, None)
        if orig is None or hasattr(orig, "__wooly_original__"):
            continue
        ORIGINAL[name] = orig
        setattr(torch, name, _make(name, orig))
    _patch_device_context()
    _patch_tensor_methods()
    _patch_lazy_modules()
