"""Argument checks for ATen kernels that trust their inputs (NOTE [unsafe ops] in gpud/aten_exec.py).

Every tenant's tensors share gpud's heap, so a CPU kernel that reads or writes where an argument points,
unchecked, is a cross-tenant read or a crash of gpud. The kernels listed here were found by the ATen fuzzer
(tests/integration/test_fuzz_aten.py) to do that on bad arguments; each gets the checks its kernel skips,
and an argument out of range is CUDA_ERROR_INVALID_VALUE naming the op and the argument. (Per-tenant executor
processes, issue 21, are the structural fix; these remain as defence in depth.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

import torch

from gpud.errors import CudaError, codes


def _bind(schema: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        a.name: (args[i] if i < len(args) else kwargs.get(a.name, a.default_value))
        for i, a in enumerate(schema.arguments)
    }


def _ints(name: str, what: str, v: Any) -> list[int]:
    if isinstance(v, torch.Tensor):
        if v.is_floating_point() or v.is_complex() or v.dim() > 1:
            raise CudaError(codes.INVALID_VALUE, f"{name}: {what} must be a 1-d integer tensor")
        return [int(x) for x in v.tolist()] if v.dim() else [int(v)]
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return list(v)
    raise CudaError(codes.INVALID_VALUE, f"{name}: {what} must be integers")


def _bad(name: str, text: str) -> CudaError:
    return CudaError(codes.INVALID_VALUE, f"{name}: {text} (gpud checks what this kernel does not)")


def ctc_loss(name: str, named: dict[str, Any]) -> None:
    lp, tg = named["log_probs"], named["targets"]
    if not isinstance(lp, torch.Tensor) or not isinstance(tg, torch.Tensor) or lp.dim() not in (2, 3):
        return  # the kernel's own checks refuse these
    if tg.is_floating_point() or tg.is_complex() or tg.dtype == torch.bool:
        raise _bad(name, "targets must be integer class indices")
    steps, classes = lp.shape[0], lp.shape[-1]
    batch = lp.shape[1] if lp.dim() == 3 else 1
    il = _ints(name, "input_lengths", named["input_lengths"])
    tl = _ints(name, "target_lengths", named["target_lengths"])
    if len(il) != batch or len(tl) != batch:
        raise _bad(name, f"input_lengths and target_lengths need {batch} entries, got {len(il)} and {len(tl)}")
    if any(not 0 <= x <= steps for x in il):
        raise _bad(name, f"input_lengths must lie in [0, {steps}]")
    if tg.dim() == 2:
        if tg.shape[0] < batch or any(not 0 <= x <= tg.shape[1] for x in tl):
            raise _bad(name, f"target_lengths must lie in [0, {tg.shape[1]}] for padded targets of {batch} rows")
    elif any(x < 0 for x in tl) or sum(tl) > tg.numel():
        raise _bad(name, f"target_lengths must be >= 0 and sum to at most the {tg.numel()} targets")
    blank = named.get("blank", 0)
    if not isinstance(blank, int) or not 0 <= blank < classes:
        raise _bad(name, f"blank must lie in [0, {classes})")
    if tg.numel() and (int(tg.min()) < 0 or int(tg.max()) >= classes):
        raise _bad(name, f"targets must lie in [0, {classes})")


def _in_range(name: str, indices: Any, size: int, what: str) -> None:
    if not isinstance(indices, torch.Tensor) or indices.numel() == 0:
        return
    if indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
        raise _bad(name, "indices must be integers")
    if int(indices.min()) < 0 or int(indices.max()) >= size:
        raise _bad(name, f"indices must lie in [0, {size}) ({what})")


def _plane(v: Any, dims: int) -> int | None:
    if not isinstance(v, torch.Tensor) or v.dim() < dims:
        return None
    n = 1
    for d in v.shape[-dims:]:
        n *= int(d)
    return n


def pool_backward(dims: int) -> Callable[[str, dict[str, Any]], None]:
    """max/adaptive/fractional pooling backwards scatter the gradient to ``indices`` within each input plane."""

    def check(name: str, named: dict[str, Any]) -> None:
        plane = _plane(named.get("self"), dims)
        if plane is not None:
            _in_range(name, named.get("indices"), plane, "positions within an input plane")

    return check


def max_unpool(name: str, named: dict[str, Any]) -> None:
    size = named.get("output_size")
    if isinstance(size, (list, tuple)) and all(isinstance(x, int) for x in size) and size:
        n = 1
        for d in size:
            n *= d
        _in_range(name, named.get("indices"), n, "positions within an output plane")


def segment_reduce(name: str, named: dict[str, Any]) -> None:
    """Segments must be non-negative and, as offsets, non-decreasing within the reduced axis."""
    data, axis = named.get("data"), named.get("axis", 0)
    if not isinstance(data, torch.Tensor) or not isinstance(axis, int) or not -data.dim() <= axis < max(data.dim(), 1):
        return
    size = int(data.shape[axis]) if data.dim() else 1
    lengths, offsets = named.get("lengths"), named.get("offsets")
    if isinstance(lengths, torch.Tensor) and lengths.numel():
        if lengths.is_floating_point() or lengths.is_complex() or int(lengths.min()) < 0:
            raise _bad(name, "lengths must be non-negative integers")
    if isinstance(offsets, torch.Tensor) and offsets.numel():
        if offsets.is_floating_point() or offsets.is_complex():
            raise _bad(name, "offsets must be integers")
        if (
            int(offsets.min()) < 0
            or int(offsets.max()) > size
            or (offsets.dim() and offsets.shape[-1] > 1 and bool((offsets[..., 1:] < offsets[..., :-1]).any()))
        ):
            raise _bad(name, f"offsets must be non-decreasing within [0, {size}]")


def sparse_mm_reduce_backward(name: str, named: dict[str, Any]) -> None:
    """``torch.sparse.mm(csr, dense, "amax"/"amin")``'s backward reads the sparse values at the positions its
    forward recorded (``arg_out``): one per output element, each within [0, nnz] (nnz: an empty row)."""
    self, grad, other, arg = (named.get(k) for k in ("self", "grad_out", "weight", "arg_out"))
    if not (
        isinstance(self, torch.Tensor)
        and isinstance(grad, torch.Tensor)
        and isinstance(other, torch.Tensor)
        and isinstance(arg, torch.Tensor)
    ):
        return
    if self.dim() != 2 or other.dim() != 2 or tuple(grad.shape) != (self.shape[0], other.shape[1]):
        raise _bad(name, "grad_out must be (rows of self) x (columns of other)")
    if named.get("reduce") in ("amax", "amin"):
        if arg.dtype != torch.int64 or tuple(arg.shape) != tuple(grad.shape):
            raise _bad(name, f"arg_out must be an int64 tensor shaped like grad_out {tuple(grad.shape)}")
        nnz = self._nnz() if self.layout != torch.strided else 0
        if arg.numel() and (int(arg.min()) < 0 or int(arg.max()) > nnz):
            raise _bad(name, f"arg_out must hold positions within [0, {nnz}]")


def _integers(t: Any) -> TypeGuard[torch.Tensor]:
    return isinstance(t, torch.Tensor) and t.layout == torch.strided and t.dtype in (torch.int32, torch.int64)


def csr_to_coo(name: str, named: dict[str, Any]) -> None:
    """The row offsets are trusted as a CSR tensor's: from 0 to the number of columns given, never decreasing."""
    crow, col = named.get("crow_indices"), named.get("col_indices")
    if not (_integers(crow) and _integers(col)):
        raise _bad(name, "crow_indices and col_indices must be int32 or int64 tensors")
    if crow.dim() != 1 or col.dim() != 1 or crow.numel() < 1:
        raise _bad(name, "crow_indices and col_indices must be 1-d (crow_indices not empty)")
    if int(crow[0]) != 0 or int(crow[-1]) != col.numel() or bool((crow[1:] < crow[:-1]).any()):
        raise _bad(name, f"crow_indices must rise from 0 to {col.numel()} (the number of col_indices)")


def coo_to_csr(name: str, named: dict[str, Any]) -> None:
    """Each row index is written through as a position in the ``size + 1`` offsets: it must be in [0, size)."""
    rows, size = named.get("self"), named.get("size")
    if not _integers(rows) or rows.dim() != 1 or not isinstance(size, int) or size < 0:
        raise _bad(name, "expects 1-d int32/int64 row indices and a size >= 0")
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= size):
        raise _bad(name, f"row indices must be within [0, {size})")


# base name -> check(op name, arguments by name)
def _rois(name: str, rois: Any, batch: int) -> None:
    """torchvision's ROI kernels read (and their backward ops write) plane ``int(rois[k, 0])`` of a batch of
    ``batch`` without a check."""
    if not isinstance(rois, torch.Tensor) or rois.dim() != 2 or rois.shape[1] != 5:
        raise _bad(name, "rois must be a [K, 5] tensor (batch index, x1, y1, x2, y2)")
    if rois.numel() and not rois.is_floating_point():
        raise _bad(name, "rois must be floating point")
    if rois.shape[0]:
        first = rois[:, 0]
        if not bool(torch.isfinite(first).all()) or int(first.min()) < 0 or int(first.max()) >= batch:
            raise _bad(name, f"the batch indices in rois[:, 0] must lie in [0, {batch})")


def roi_forward(name: str, named: dict[str, Any]) -> None:
    x = named["input"]
    if isinstance(x, torch.Tensor) and x.dim() == 4:
        _rois(name, named["rois"], x.shape[0])


def roi_backward(name: str, named: dict[str, Any]) -> None:
    batch, channels = int(named["batch_size"]), int(named["channels"])
    height, width = int(named["height"]), int(named["width"])
    if min(batch, channels, height, width) < 0:
        raise _bad(name, "batch_size, channels, height and width must be >= 0")
    _rois(name, named["rois"], batch)
    for what, top in (("argmax", height * width), ("channel_mapping", channels)):
        v = named.get(what)
        if isinstance(v, torch.Tensor) and v.numel():
            if v.is_floating_point() or v.is_complex():
                raise _bad(name, f"{what} must be an integer tensor")
            if int(v.min()) < -1 or int(v.max()) >= top:
                raise _bad(name, f"{what} must lie in [-1, {top})")
            g = named.get("grad")
            if isinstance(g, torch.Tensor) and v.shape != g.shape:
                raise _bad(name, f"{what} must have the shape of grad")


GUARDS: dict[str, Callable[[str, dict[str, Any]], None]] = {
    "_ctc_loss": ctc_loss,
    "_ctc_loss_backward": ctc_loss,
    "ctc_loss": ctc_loss,
    "max_pool2d_with_indices_backward": pool_backward(2),
    "max_pool3d_with_indices_backward": pool_backward(3),
    "adaptive_max_pool2d_backward": pool_backward(2),
    "adaptive_max_pool3d_backward": pool_backward(3),
    "fractional_max_pool2d_backward": pool_backward(2),
    "fractional_max_pool3d_backward": pool_backward(3),
    "max_unpool2d": max_unpool,
    "max_unpool3d": max_unpool,
    "segment_reduce": segment_reduce,
    "_segment_reduce_backward": segment_reduce,
    "_sparse_mm_reduce_impl_backward": sparse_mm_reduce_backward,
    "_convert_indices_from_csr_to_coo": csr_to_coo,
    "_convert_indices_from_coo_to_csr": coo_to_csr,
    # NOTE [extension operators] (gpud/aten_exec.py)
    "torchvision::roi_align": roi_forward,
    "torchvision::roi_pool": roi_forward,
    "torchvision::ps_roi_align": roi_forward,
    "torchvision::ps_roi_pool": roi_forward,
    "torchvision::_roi_align_backward": roi_backward,
    "torchvision::_roi_pool_backward": roi_backward,
    "torchvision::_ps_roi_align_backward": roi_backward,
    "torchvision::_ps_roi_pool_backward": roi_backward,
}


def guard_for(base: str, schema: Any) -> Callable[[str, list[Any], dict[str, Any]], None] | None:
    check = GUARDS.get(base)
    if check is None:
        return None
    return lambda name, args, kwargs: check(name, _bind(schema, args, kwargs))


# NOTE [checked equivalents]: the ``_unsafe_*index*`` ops skip bounds checks because a compiler proved the
# indices in range; a tenant proves nothing. gpud runs each as the checked op it stands for, which gives the
# same result whenever the unchecked one is defined and an error naming the op where it would have read or
# written out of bounds. The masked forms index only where ``mask`` holds: as in ATen's own CPU kernels, an
# index is clamped to its dimension first (elsewhere it may be anything), and the checked ``index`` and
# ``index_put`` then see only indices in range.
def _clamped(name: str, self: torch.Tensor, indices: list[Any]) -> list[Any]:
    if len(indices) > self.dim():
        raise CudaError(codes.INVALID_VALUE, f"{name}: {len(indices)} indices for a {self.dim()}-d tensor")
    out: list[Any] = []
    for i, size in zip(indices, self.shape, strict=False):
        if i is None:
            out.append(None)
            continue
        if not isinstance(i, torch.Tensor) or i.dtype not in (torch.int64, torch.int32):
            raise CudaError(codes.INVALID_VALUE, f"{name}: indices must be int64 or int32 tensors")
        out.append(torch.clamp(i, -size, size - 1) if size else i)
    return out


def _index(self: torch.Tensor, indices: list[Any]) -> torch.Tensor:
    return torch.ops.aten.index.Tensor(self, indices)


def _index_put(self: torch.Tensor, indices: list[Any], values: torch.Tensor, accumulate: bool = False) -> torch.Tensor:
    return torch.ops.aten.index_put.default(self, indices, values, accumulate)


def _masked_index(self: torch.Tensor, mask: torch.Tensor, indices: list[Any], fill: Any) -> torch.Tensor:
    got = torch.ops.aten.index.Tensor(self, _clamped("aten._unsafe_masked_index", self, indices))
    return got.masked_fill(torch.logical_not(mask), fill)


def _masked_index_put_accumulate(
    self: torch.Tensor, mask: torch.Tensor, indices: list[Any], values: torch.Tensor
) -> torch.Tensor:
    masked = values.masked_fill(torch.logical_not(mask), 0)
    clamped = _clamped("aten._unsafe_masked_index_put_accumulate", self, indices)
    return torch.ops.aten.index_put.default(self, clamped, masked, True)


CHECKED_EQUIVALENTS: dict[str, Callable[..., torch.Tensor]] = {
    "_unsafe_index": _index,
    "_unsafe_index_put": _index_put,
    "_unsafe_masked_index": _masked_index,
    "_unsafe_masked_index_put_accumulate": _masked_index_put_accumulate,
}
