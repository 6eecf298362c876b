"""Sparse tensors on gpud, kept only with indices that are known to be in bounds.

NOTE [sparse tensors]
A sparse COO tensor is a pair of dense tensors, indices (sparse_dim x nnz, int64) and values (nnz x dense
sizes); a compressed one (CSR, CSC, BSR, BSC) a triple: compressed indices (one offset per row, or column,
plus one), plain indices (the column, or row, of each element) and values. Every sparse kernel trusts the
indices: one out of bounds is a read or write outside the tensor (torch's invariant checks are off by
default). So gpud keeps sparse tensors under three rules, which together mean that no index a tenant could
choose is ever used unchecked:

* they are built from parts only by ``_sparse_coo_tensor_with_dims_and_tensors`` (what ``torch.sparse_coo_tensor``
  and the client's upload of a host sparse tensor send) and the ``sparse_{compressed,csr,csc,bsr,bsc}_tensor``
  constructors, and gpud validates the parts as ``check_invariants=True`` does (COO: every index within its
  dimension, shapes consistent, a claim to be coalesced true; compressed: offsets starting at 0, ending at nnz
  and never decreasing, every plain index within its dimension and sorted and unique within its row) on its
  own copy of the indices, so the tensors the client named as indices do not alias them. The constructors
  that skip validation (``*_unsafe``, ``_sparse_compressed_tensor_with_dims``) stay refused;
* every other op that produces one (``to_sparse``, ``to_sparse_csr``, ``coalesce``, sparse ``add``, ``t`` ...)
  is one of torch's own kernels, which keep the invariant for valid inputs;
* no handle a client holds aliases a sparse tensor's indices: ``_indices()``, ``indices()``,
  ``crow_indices()``, ``col_indices()``, ``ccol_indices()`` and ``row_indices()`` return copies here, and
  ``_coalesced_(True)`` is refused unless the tensor is coalesced. Values are data, and aliasing them is
  harmless (``_values()`` and ``values()`` are views, as on a GPU).

The one difference a program can see: writing into ``s._indices()`` (or ``s.crow_indices()``) does not change
``s`` (it is the one unsafe thing to do with a sparse tensor).
"""

from __future__ import annotations

from typing import Any

import torch

from gpud.errors import CudaError, codes

_BUILD = torch.ops.aten._sparse_coo_tensor_with_dims_and_tensors.default
_INDICES = torch.ops.aten._indices.default


def coo_from_parts(
    sparse_dim: int, dense_dim: int, size: list[int], indices: torch.Tensor, values: torch.Tensor, **kw: Any
) -> torch.Tensor:
    """``_sparse_coo_tensor_with_dims_and_tensors``, validated, on a private copy of the indices."""
    name = "aten._sparse_coo_tensor_with_dims_and_tensors"
    if not isinstance(indices, torch.Tensor) or not isinstance(values, torch.Tensor):
        raise CudaError(codes.INVALID_VALUE, f"{name}: indices and values must be tensors")
    if indices.layout != torch.strided or values.layout != torch.strided:
        raise CudaError(codes.INVALID_VALUE, f"{name}: indices and values must be dense tensors")
    if indices.dtype != torch.int64 or indices.dim() != 2 or indices.shape[0] != sparse_dim:
        raise CudaError(
            codes.INVALID_VALUE,
            f"{name}: indices must be an int64 tensor of shape (sparse_dim={sparse_dim}, nnz), "
            f"not {indices.dtype} {tuple(indices.shape)}",
        )
    if len(size) != sparse_dim + dense_dim or values.dim() != 1 + dense_dim or values.shape[0] != indices.shape[1]:
        raise CudaError(
            codes.INVALID_VALUE,
            f"{name}: size {list(size)}, indices {tuple(indices.shape)} and values {tuple(values.shape)} "
            f"do not describe one tensor with {sparse_dim} sparse and {dense_dim} dense dimensions",
        )
    coalesced = kw.get("is_coalesced")
    try:
        torch._validate_sparse_coo_tensor_args(indices, values, size, coalesced)
    except RuntimeError as exc:
        raise CudaError(codes.INVALID_VALUE, f"{name}: {str(exc).splitlines()[0][:500]}") from None
    kw["layout"] = torch.sparse_coo  # the op's only layout; without it the dispatcher looks for a dense kernel
    if kw.get("device") is None:
        kw["device"] = values.device
    return _BUILD(sparse_dim, dense_dim, size, indices.clone(memory_format=torch.contiguous_format), values, **kw)


def indices_copy(self: torch.Tensor) -> torch.Tensor:
    """``_indices()`` / ``indices()``: a copy, so no handle aliases the indices that sparse kernels trust."""
    return _INDICES(self).clone()


def coalesced_(self: torch.Tensor, coalesced: bool) -> torch.Tensor:
    """``_coalesced_``: the flag may be cleared, and set only where it is true (kernels trust it)."""
    if coalesced and self.layout == torch.sparse_coo and not self.is_coalesced():
        c = self.coalesce()
        if c._nnz() != self._nnz() or not torch.equal(c._indices(), _INDICES(self)):
            raise CudaError(
                codes.INVALID_VALUE,
                "aten._coalesced_: the tensor's indices are not coalesced (sorted and unique); gpud does not "
                "let the flag claim they are",
            )
    return torch.ops.aten._coalesced_.default(self, coalesced)


COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
_ROW_MAJOR = (torch.sparse_csr, torch.sparse_bsr)  # compressed rows; the other two compress columns


def compressed_parts(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(compressed indices, plain indices) of a compressed tensor: the tensor's own, not copies."""
    if t.layout in _ROW_MAJOR:
        return t.crow_indices(), t.col_indices()
    return t.ccol_indices(), t.row_indices()


def _compressed_from_parts(base: str) -> Any:
    """``sparse_compressed_tensor`` and the per-layout constructors, validated, on private copies of the
    indices (the size may be left out: torch infers it from the indices, reading only within them)."""
    name = f"aten.{base}"
    packet = getattr(torch.ops.aten, base)

    def build(compressed: Any, plain: Any, values: Any, *rest: Any, **kw: Any) -> torch.Tensor:
        for what, v in (("compressed indices", compressed), ("plain indices", plain), ("values", values)):
            if not isinstance(v, torch.Tensor) or v.layout != torch.strided:
                raise CudaError(codes.INVALID_VALUE, f"{name}: {what} must be a dense tensor")
        if compressed.dtype not in (torch.int32, torch.int64) or plain.dtype != compressed.dtype:
            raise CudaError(
                codes.INVALID_VALUE,
                f"{name}: indices must be int32 or int64, both the same ({compressed.dtype}, {plain.dtype})",
            )
        t = packet(
            compressed.clone(memory_format=torch.contiguous_format),
            plain.clone(memory_format=torch.contiguous_format),
            values,
            *rest,
            **kw,
        )
        ci, pi = compressed_parts(t)
        try:
            torch._validate_sparse_compressed_tensor_args(ci, pi, t.values(), list(t.shape), t.layout)
        except RuntimeError as exc:
            raise CudaError(codes.INVALID_VALUE, f"{name}: {str(exc).splitlines()[0][:500]}") from None
        return t

    return build


def sparse_mm_reduce(self: torch.Tensor, other: torch.Tensor, reduce: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``_sparse_mm_reduce_impl`` records where each amax/amin came from only when autograd asks (grad mode on,
    an input requiring grad); the client's autograd asks, gpud's no_grad executor would not, and the backward
    then has nothing to read. So gpud always records them (as autograd on the client expects)."""
    op = torch.ops.aten._sparse_mm_reduce_impl.default
    if reduce not in ("amax", "amin") or not (self.is_floating_point() and other.is_floating_point()):
        return op(self, other, reduce)
    with torch.enable_grad():
        out, arg = op(self.detach().requires_grad_(True), other.detach().requires_grad_(True), reduce)
    return out.detach(), arg


def _parts_copy(op: Any) -> Any:
    def copy(self: torch.Tensor) -> torch.Tensor:
        return op(self).clone()

    return copy


# aten base name -> what gpud runs instead (resolve() in gpud/aten_exec.py)
SUBSTITUTES = {
    "_sparse_coo_tensor_with_dims_and_tensors": coo_from_parts,
    "_indices": indices_copy,
    "indices": indices_copy,
    "_coalesced_": coalesced_,
    "_sparse_mm_reduce_impl": sparse_mm_reduce,
    **{
        f"sparse_{kind}_tensor": _compressed_from_parts(f"sparse_{kind}_tensor")
        for kind in ("compressed", "csr", "csc", "bsr", "bsc")
    },
    **{
        part: _parts_copy(getattr(torch.ops.aten, part).default)
        for part in ("crow_indices", "col_indices", "ccol_indices", "row_indices")
    },
}


def describe(t: torch.Tensor) -> list[Any] | None:
    """[shape, sparse_dim, dense_dim, nnz, coalesced] of a sparse COO tensor, and the same with the layout's
    name after it for a compressed one (coalesced: False); None for a strided one; an error naming the layout
    for the rest."""
    if t.layout == torch.strided:
        return None
    if t.layout == torch.sparse_coo:
        return [list(t.shape), t.sparse_dim(), t.dense_dim(), t._nnz(), t.is_coalesced()]
    if t.layout in COMPRESSED:
        return [list(t.shape), t.sparse_dim(), t.dense_dim(), t._nnz(), False, str(t.layout).removeprefix("torch.")]
    raise CudaError(
        codes.NOT_SUPPORTED,
        f"{str(t.layout).removeprefix('torch.')} tensors are not kept on gpud (sparse COO tensors are: "
        "NOTE [sparse tensors] in gpud/aten_sparse.py)",
    )


def storage_key(t: torch.Tensor) -> tuple[tuple[Any, ...], int]:
    """(storage key, bytes to charge) of a sparse tensor: the pair of its indices' and values' storages (tensors
    that share both share the charge); a view of the values held as a handle of its own is charged again (an
    overcount, never an undercount)."""
    if t.layout in COMPRESSED:
        ci, pi = (x.untyped_storage() for x in compressed_parts(t))
        v = t.values().untyped_storage()
        return ("cmp", ci.data_ptr(), pi.data_ptr(), v.data_ptr()), ci.nbytes() + pi.nbytes() + v.nbytes()
    i, v = _INDICES(t).untyped_storage(), t._values().untyped_storage()
    return ("coo", i.data_ptr(), v.data_ptr()), i.nbytes() + v.nbytes()
