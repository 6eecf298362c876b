"""Composite ops sent whole instead of as client-side decompositions.

NOTE [composites]: with the wrapper on the ``meta`` device, a composite op (one whose C++
implementation is a sequence of other ops) is decomposed on the client, and may create helper
tensors on ``meta`` that hold no data (SDPA's causal mask). Such ops are intercepted at the
Python API and sent as the fused ATen kernel that the same call would use on the host, with an
autograd.Function whose backward is that kernel's backward, so values and gradients equal a
local CPU run bit for bit and an attention call is 1 op forward and 1 op backward, not ~16.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from shim.torch.tensor import RemoteTensor

_aten = torch.ops.aten


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Any, k: Any, v: Any, dropout_p: float, is_causal: bool, mask: Any, scale: Any) -> Any:  # type: ignore[override]
        out, lse = _aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, dropout_p, is_causal, attn_mask=mask, scale=scale
        )
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.args = (dropout_p, is_causal, scale)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:  # type: ignore[override]
        q, k, v, out, lse, mask = ctx.saved_tensors
        dropout_p, is_causal, scale = ctx.args
        dq, dk, dv = _aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad, q, k, v, out, lse, dropout_p, is_causal, attn_mask=mask, scale=scale
        )
        return dq, dk, dv, None, None, None, None


def _patch_sdpa() -> None:
    F = torch.nn.functional
    orig = F.scaled_dot_product_attention

    @functools.wraps(orig)
    def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                                     is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Any:
        if isinstance(query, RemoteTensor) and not enable_gqa and query.dim() == 4 and (
            attn_mask is None or isinstance(attn_mask, RemoteTensor) and attn_mask.dtype == query.dtype
        ) and query.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            if dropout_p == 0.0 or torch.is_grad_enabled():
                return _FlashAttention.apply(query, key, value, dropout_p, is_causal, attn_mask, scale)
        return orig(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    enable_gqa=enable_gqa)

    F.scaled_dot_product_attention = scaled_dot_product_attention


def patch() -> None:
    _patch_sdpa()
