"""``torch.autocast('cuda')`` that really casts, done in Python for remote tensors.

NOTE [autocast]: torch's autocast works in C++ on tensors carrying the CUDA dispatch key; remote
tensors carry the meta key, so it would silently do nothing. While a CUDA autocast region is
active, ``RemoteTensor.__torch_function__`` is switched on and applies CUDA autocast's policy
above autograd: ops of the lower-precision list get their float32 tensor arguments cast to the
region's dtype, ops of the float32 list get lower-precision float arguments cast up. The casts
are ordinary (differentiable) ops, so gradients reach float32 parameters as on a GPU. Outside
autocast regions the hook is off and costs nothing.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from shim.torch.tensor import RemoteTensor

LOWER_PRECISION = frozenset(
    {
        "linear",
        "matmul",
        "__matmul__",
        "__rmatmul__",
        "mm",
        "bmm",
        "addmm",
        "addbmm",
        "baddbmm",
        "addmv",
        "addr",
        "mv",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "conv_tbc",
        "prelu",
        "chain_matmul",
        "multi_dot",
        "scaled_dot_product_attention",
        "_convolution",
        "convolution",
        "lstm_cell",
        "gru_cell",
        "rnn_tanh_cell",
        "rnn_relu_cell",
        "einsum",
    }
)
FLOAT32 = frozenset(
    {
        "acos",
        "asin",
        "cosh",
        "erfinv",
        "exp",
        "expm1",
        "log",
        "log10",
        "log2",
        "log1p",
        "reciprocal",
        "rsqrt",
        "sinh",
        "tan",
        "pow",
        "__pow__",
        "softplus",
        "layer_norm",
        "group_norm",
        "norm",
        "nll_loss",
        "cross_entropy",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "binary_cross_entropy_with_logits",
        "kl_div",
        "cosine_similarity",
        "cosine_embedding_loss",
        "log_softmax",
        "softmax",
        "cumsum",
        "cumprod",
        "sum",
        "prod",
        "dist",
        "pdist",
        "cdist",
        "renorm",
        "logsumexp",
        "soft_margin_loss",
        "multilabel_margin_loss",
        "margin_ranking_loss",
        "poisson_nll_loss",
        "triplet_margin_loss",
        "hinge_embedding_loss",
        "rms_norm",
    }
)
_LOW = (torch.float16, torch.bfloat16)
_state = threading.local()
_active = [0]
_DISABLED = torch._C._disabled_torch_function_impl


def _cast(v: Any, dtype: torch.dtype, want: tuple[torch.dtype, ...]) -> Any:
    if isinstance(v, torch.Tensor):
        if v.dtype in want and v.is_floating_point():
            return v.to(dtype)
        return v
    if type(v) in (list, tuple):
        return type(v)(_cast(x, dtype, want) for x in v)
    return v


def _autocast_torch_function(cls: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
    kwargs = kwargs or {}
    if torch.is_autocast_enabled("cuda") and not getattr(_state, "inside", False):
        name = getattr(func, "__name__", "")
        if name in LOWER_PRECISION:
            dt = torch.get_autocast_dtype("cuda")
            args, kwargs = (
                _cast(args, dt, (torch.float32,)),
                {k: _cast(v, dt, (torch.float32,)) for k, v in kwargs.items()},
            )
        elif name in FLOAT32:
            args = _cast(args, torch.float32, _LOW)
            kwargs = {k: _cast(v, torch.float32, _LOW) for k, v in kwargs.items()}
    _state.inside = True
    try:
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)
    finally:
        _state.inside = False


def patch() -> None:
    from torch.amp import autocast_mode

    cls = autocast_mode.autocast
    orig_enter, orig_exit = cls.__enter__, cls.__exit__

    def __enter__(self: Any) -> Any:
        r = orig_enter(self)
        if self.device == "cuda" and self._enabled:
            _active[0] += 1
            RemoteTensor.__torch_function__ = classmethod(_autocast_torch_function)  # type: ignore[assignment]
        self._wooly_on = self.device == "cuda" and self._enabled
        return r

    def __exit__(self: Any, *exc: Any) -> Any:
        r = orig_exit(self, *exc)
        if getattr(self, "_wooly_on", False):
            _active[0] -= 1
            if _active[0] <= 0:
                _active[0] = 0
                RemoteTensor.__torch_function__ = _DISABLED
        return r

    cls.__enter__ = __enter__  # type: ignore[method-assign]
    cls.__exit__ = __exit__  # type: ignore[method-assign]
