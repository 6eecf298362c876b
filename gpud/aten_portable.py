"""Portable stand-ins for host-only kernels the PyTorch face sends (NOTE [composites] in shim/torch).

The client sends SDPA as ``_scaled_dot_product_flash_attention_for_cpu`` (+ backward) so that a
CPU gpud computes exactly what a local CPU run computes. Those kernels exist only for CPU
tensors; on a GPU gpud the same ops run as the math below (same outputs: the attention and the
row log-sum-exp; the backward recomputes the probabilities from the log-sum-exp).
"""

from __future__ import annotations

import math
from typing import Any

import torch

SDPA_FWD = "_scaled_dot_product_flash_attention_for_cpu"
SDPA_BWD = "_scaled_dot_product_flash_attention_for_cpu_backward"


def _ct(t: torch.Tensor) -> torch.dtype:
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def _scores(q: torch.Tensor, k: torch.Tensor, is_causal: bool, mask: Any, scale: Any) -> tuple[torch.Tensor, float]:
    s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    att = (q.to(_ct(q)) @ k.to(_ct(q)).transpose(-2, -1)) * s
    if is_causal:
        L, S = att.shape[-2], att.shape[-1]
        causal = torch.ones(L, S, dtype=torch.bool, device=att.device).tril()
        att = att.masked_fill(~causal, float("-inf"))
    if mask is not None:
        att = att.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else att + mask.to(att.dtype)
    return att, s


def sdpa_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0, is_causal: bool = False,
                 *, attn_mask: Any = None, scale: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    if dropout_p:
        raise NotImplementedError("attention dropout on a non-CPU gpud")
    att, _ = _scores(q, k, is_causal, attn_mask, scale)
    lse = torch.logsumexp(att, dim=-1)
    out = torch.exp(att - lse.unsqueeze(-1)) @ v.to(att.dtype)
    return out.to(q.dtype), lse


def sdpa_backward(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor, dropout_p: float = 0.0, is_causal: bool = False, *, attn_mask: Any = None,
                  scale: Any = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    att, s = _scores(q, k, is_causal, attn_mask, scale)
    ct = att.dtype
    p = torch.exp(att - lse.to(ct).unsqueeze(-1))
    g = grad.to(ct)
    dv = p.transpose(-2, -1) @ g
    dp = g @ v.to(ct).transpose(-2, -1)
    ds = p * (dp - (g * out.to(ct)).sum(-1, keepdim=True))
    dq = (ds @ k.to(ct)) * s
    dk = (ds.transpose(-2, -1) @ q.to(ct)) * s
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


PORTABLE = {SDPA_FWD: sdpa_forward, SDPA_BWD: sdpa_backward}
