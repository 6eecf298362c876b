"""Portable stand-ins for kernels that exist on one kind of device only.

``PORTABLE``: host-only kernels the PyTorch face sends (NOTE [composites] in shim/torch), run on a
GPU gpud. ``CUDA_ONLY``: kernels that PyTorch's C++ composites choose for CUDA tensors (the client's
remote tensors are CUDA tensors: NOTE [a cuda device in a CPU build] in shim/torch/device.py) and
that the CPU build lacks, run on a CPU gpud: the fused LSTM/GRU cells and their backwards, with the
CUDA kernels' workspace layouts, and the matmuls with an ``out_dtype``. Keys are an op's name ("mm") or,
for one overload only, its name and overload ("mm.dtype_out").

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


def _heads(q: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Grouped-query attention: key/value heads shared by ``q.shape[-3] // t.shape[-3]`` query heads each, as the
    CPU kernel reads them."""
    if q.dim() < 3 or t.dim() < 3 or t.shape[-3] == q.shape[-3]:
        return t
    if t.shape[-3] == 0 or q.shape[-3] % t.shape[-3]:
        raise ValueError(f"{q.shape[-3]} query heads cannot share {t.shape[-3]} key/value heads")
    return t.repeat_interleave(q.shape[-3] // t.shape[-3], dim=-3)


def _unheads(d: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The gradient of ``_heads``: each shared head's gradient summed over the query heads that read it."""
    if d.shape == t.shape:
        return d
    return d.unflatten(-3, (t.shape[-3], d.shape[-3] // t.shape[-3])).sum(-3)


def sdpa_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: Any = None,
    scale: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    if dropout_p:
        raise NotImplementedError("attention dropout on a non-CPU gpud")
    k, v = _heads(q, k), _heads(q, v)
    att, _ = _scores(q, k, is_causal, attn_mask, scale)
    lse = torch.logsumexp(att, dim=-1)
    out = torch.exp(att - lse.unsqueeze(-1)) @ v.to(att.dtype)
    return out.to(q.dtype), lse


def sdpa_backward(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: Any = None,
    scale: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    k0, v0 = k, v
    k, v = _heads(q, k), _heads(q, v)
    att, s = _scores(q, k, is_causal, attn_mask, scale)
    ct = att.dtype
    p = torch.exp(att - lse.to(ct).unsqueeze(-1))
    g = grad.to(ct)
    dv = p.transpose(-2, -1) @ g
    dp = g @ v.to(ct).transpose(-2, -1)
    ds = p * (dp - (g * out.to(ct)).sum(-1, keepdim=True))
    dq = (ds @ k.to(ct)) * s
    dk = (ds.transpose(-2, -1) @ q.to(ct)) * s
    return dq.to(q.dtype), _unheads(dk, k0).to(k.dtype), _unheads(dv, v0).to(v.dtype)


PORTABLE = {SDPA_FWD: sdpa_forward, SDPA_BWD: sdpa_backward}


def _gates(ig: torch.Tensor, hg: torch.Tensor, ib: Any, hb: Any) -> torch.Tensor:
    g = ig + hg
    if ib is not None:
        g = g + ib
    if hb is not None:
        g = g + hb
    return g


def lstm_cell(
    ig: torch.Tensor, hg: torch.Tensor, cx: torch.Tensor, ib: Any = None, hb: Any = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(hy, cy, workspace); the workspace holds the activated gates i, f, g, o (as the CUDA kernel's)."""
    i, f, g, o = _gates(ig, hg, ib, hb).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat((i, f, g, o), 1)


def lstm_cell_backward(
    ghy: Any, gcy: Any, cx: torch.Tensor, cy: torch.Tensor, ws: torch.Tensor, has_bias: bool
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    i, f, g, o = ws.chunk(4, 1)
    tcy = cy.tanh()
    ghy = torch.zeros_like(cy) if ghy is None else ghy
    gc = (torch.zeros_like(cy) if gcy is None else gcy) + ghy * o * (1 - tcy * tcy)
    gates = torch.cat((gc * g * i * (1 - i), gc * cx * f * (1 - f), gc * i * (1 - g * g), ghy * tcy * o * (1 - o)), 1)
    return gates, gc * f, gates.sum(0) if has_bias else None


def gru_cell(
    ig: torch.Tensor, hg: torch.Tensor, hx: torch.Tensor, ib: Any = None, hb: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(hy, workspace); the workspace holds r, z, n, hx and the hidden gate's n part (as CUDA's)."""
    ir, iz, in_ = (ig if ib is None else ig + ib).chunk(3, 1)
    hr, hz, hn = (hg if hb is None else hg + hb).chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n), torch.cat((r, z, n, hx, hn), 1)


def gru_cell_backward(ghy: torch.Tensor, ws: torch.Tensor, has_bias: bool) -> tuple[Any, ...]:
    r, z, n, hx, hn = ws.chunk(5, 1)
    gn = ghy * (1 - z) * (1 - n * n)
    gz = ghy * (hx - n) * z * (1 - z)
    gr = gn * hn * r * (1 - r)
    gi, gh = torch.cat((gr, gz, gn), 1), torch.cat((gr, gz, gn * r), 1)
    bias = (gi.sum(0), gh.sum(0)) if has_bias else (None, None)
    return gi, gh, ghy * z, *bias


# The out_dtype matmuls (bfloat16/float16 inputs, float32 result) are CUDA kernels: float32 accumulation, as there.
def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32) if t.dtype in (torch.float16, torch.bfloat16) else t


def _mm_dtype(fn: Any, nin: int) -> Any:
    def run(*args: Any, **kwargs: Any) -> torch.Tensor:
        *tensors, out_dtype = args[: nin + 1]
        return fn(*[_f32(t) for t in tensors], **kwargs).to(out_dtype)

    return run


def _mm_dtype_out(fn: Any, nin: int) -> Any:
    def run(*args: Any, out: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return out.copy_(_mm_dtype(fn, nin)(*args, **kwargs))

    return run


_MATMUL_DTYPE = {
    f"{name}.{variant}": make(getattr(torch, name), nin)
    for name, nin in (("mm", 2), ("bmm", 2), ("addmm", 3), ("baddbmm", 3))
    for variant, make in (("dtype", _mm_dtype), ("dtype_out", _mm_dtype_out))
}


# softmax/log_softmax of a float16 or bfloat16 input with a float32 result (``half_to_float``, what PyTorch's
# ``softmax(x, dim, dtype=torch.float32)`` calls on CUDA, as autocast does), and their backwards with a gradient
# wider than the input: CUDA kernels that read the narrow type and compute in float32. CPU's refuse the conversion;
# the same is the float32 kernel on the widened input, and the gradient narrowed after.
def _half_to_float(op: Any) -> Any:
    def run(x: torch.Tensor, dim: int, half_to_float: bool, *, out: torch.Tensor | None = None) -> torch.Tensor:
        if half_to_float and x.dtype in (torch.float16, torch.bfloat16):
            r = op(x.to(torch.float32), dim, False)
        else:
            r = op(x, dim, half_to_float)
        return r if out is None else out.copy_(r)

    return run


def _narrowed_grad(op: Any) -> Any:
    def run(
        grad: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype, *, grad_input: Any = None
    ) -> torch.Tensor:
        if input_dtype != grad.dtype:
            r = op(grad, output, dim, grad.dtype).to(input_dtype)
        else:
            r = op(grad, output, dim, input_dtype)
        return r if grad_input is None else grad_input.copy_(r)

    return run


_SOFTMAX = {
    "_softmax": _half_to_float(torch.ops.aten._softmax.default),
    "_log_softmax": _half_to_float(torch.ops.aten._log_softmax.default),
    "_softmax_backward_data": _narrowed_grad(torch.ops.aten._softmax_backward_data.default),
    "_log_softmax_backward_data": _narrowed_grad(torch.ops.aten._log_softmax_backward_data.default),
}


def _no_cudnn(*args: Any, **kwargs: Any) -> bool:
    return False  # cuDNN's and MIOpen's CTC losses are GPU kernels: the native _ctc_loss runs instead


CUDA_ONLY = {
    **_MATMUL_DTYPE,
    **_SOFTMAX,
    "_use_cudnn_ctc_loss": _no_cudnn,
    "_use_miopen_ctc_loss": _no_cudnn,
    "_thnn_fused_lstm_cell": lstm_cell,
    "_thnn_fused_lstm_cell_backward_impl": lstm_cell_backward,
    "_thnn_fused_gru_cell": gru_cell,
    "_thnn_fused_gru_cell_backward": gru_cell_backward,
}
