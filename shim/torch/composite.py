"""Composite ops sent whole instead of as client-side decompositions.

NOTE [composites]: with the wrapper on the ``meta`` device, a composite op (one whose C++
implementation is a sequence of other ops) is decomposed on the client, and may create helper
tensors on ``meta`` that hold no data (SDPA's causal mask). Such ops are intercepted at the
Python API and sent as the fused ATen kernel that the same call would use on the host, with an
autograd.Function whose backward is that kernel's backward, so values and gradients equal a
local CPU run bit for bit and an attention call is 1 op forward and 1 op backward, not ~16.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from shim.torch import device as _device
from shim.torch.tensor import RemoteTensor

_aten = torch.ops.aten


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Any, k: Any, v: Any, dropout_p: float, is_causal: bool, mask: Any, scale: Any) -> Any:
        out, lse = _aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, dropout_p, is_causal, attn_mask=mask, scale=scale
        )
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.args = (dropout_p, is_causal, scale)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        q, k, v, out, lse, mask = ctx.saved_tensors
        dropout_p, is_causal, scale = ctx.args
        dq, dk, dv = _aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad, q, k, v, out, lse, dropout_p, is_causal, attn_mask=mask, scale=scale
        )
        return dq, dk, dv, None, None, None, None


_CHOICE: dict[Any, int] = {}
_FLASH = 1  # torch.nn.attention.SDPBackend.FLASH_ATTENTION


def _host(t: Any) -> Any:
    e = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)  # no data: only the kernel choice looks at it
    return e.requires_grad_(True) if t.requires_grad and (e.is_floating_point() or e.is_complex()) else e


def _host_choice(
    q: Any, k: Any, v: Any, mask: Any, dropout_p: float, is_causal: bool, scale: Any, enable_gqa: bool
) -> int:
    """The SDPA kernel a host run of the same call picks (cached per argument metadata)."""
    grad = torch.is_grad_enabled()
    key = (
        q._k,
        k._k,
        v._k,
        q.requires_grad,
        k.requires_grad,
        v.requires_grad,
        grad,
        None if mask is None else (mask._k, mask.requires_grad),
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
    )
    choice = _CHOICE.get(key)
    if choice is None:
        with torch.set_grad_enabled(grad):
            choice = _CHOICE[key] = int(
                torch._fused_sdp_choice(
                    _host(q),
                    _host(k),
                    _host(v),
                    None if mask is None else _host(mask),
                    dropout_p,
                    is_causal,
                    scale=scale,
                    enable_gqa=enable_gqa,
                )
            )
    return choice


def _patch_sdpa() -> None:
    F = torch.nn.functional
    orig = F.scaled_dot_product_attention

    @functools.wraps(orig)
    def scaled_dot_product_attention(
        query: Any,
        key: Any,
        value: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: Any = None,
        enable_gqa: bool = False,
    ) -> Any:
        # Sent fused only where the host would run its fused kernel (otherwise its math path, which the
        # client decomposes): a mask that needs a gradient, dropout, odd strides... take the math path.
        if (
            isinstance(query, RemoteTensor)
            and isinstance(key, RemoteTensor)
            and isinstance(value, RemoteTensor)
            and (attn_mask is None or isinstance(attn_mask, RemoteTensor) and attn_mask.dtype == query.dtype)
            and _host_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) == _FLASH
            and dropout_p == 0.0
        ):
            return _FlashAttention.apply(query, key, value, dropout_p, is_causal, attn_mask, scale)
        with (
            sdpa_kernel(SDPBackend.MATH)
            # A CUDA build's composite would pick a kernel for a GPU on this side (there is none): the math
            # path, as the CPU build takes for remote tensors, whatever gpud runs on.
            if _device.CUDA_BUILD and isinstance(query, RemoteTensor)
            else contextlib.nullcontext()
        ):
            return orig(
                query,
                key,
                value,
                attn_mask=attn_mask,
                dropout_p=dropout_p,
                is_causal=is_causal,
                scale=scale,
                enable_gqa=enable_gqa,
            )

    F.scaled_dot_product_attention = scaled_dot_product_attention


def patch() -> None:
    _patch_sdpa()
