"""Moving tensor data between the script's host memory and gpud."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch

from proto import aten as W
from shim import progress
from shim.torch import stream as S
from shim.torch.tensor import CUDA, RemoteTensor, wrap


def _dtype_name(dt: torch.dtype) -> str:
    from shim.torch.dispatch import DTYPE_NAME

    name = DTYPE_NAME.get(dt)
    if name is None:
        raise TypeError(f"wooly: dtype {dt} cannot be sent to gpud")
    return name


def upload_handle(t: torch.Tensor, dev: int | None = None, h: int = 0) -> int:
    """Queue a host tensor's bytes for gpud's copy of the program's ``cuda:dev`` (default: the current device);
    returns the new tensor's handle (``h`` when given)."""
    if dev is None:
        dev = S.current_device()
    c = t.detach()
    if c.layout in _SPARSE:  # (its handle is the one gpud's constructor op gets: ``h`` is not for it)
        r = upload_sparse(c, dev)
        h = r.__dict__["_h"]
        r.__dict__["_h"] = 0  # the handle is the caller's now
        return h
    if c.layout != torch.strided:
        raise NotImplementedError(
            f"wooly: {str(c.layout).removeprefix('torch.')} tensors on cuda are not supported (dense and sparse "
            "tensors are); keep it on the CPU, or convert it with .to_dense()"
        )
    if c.device.type != "cpu":
        c = c.cpu()
    c = c.resolve_conj().resolve_neg()
    flat = c.reshape(-1)
    if flat.numel() and flat.stride(0) != 1:  # non-contiguous, or size-1 dims with odd strides
        flat = flat.clone()
    h = h or S.new_handle()
    st = S.stream(dev)
    raw = flat.view(torch.uint8) if c.numel() else torch.empty(0, dtype=torch.uint8)
    buf = raw.numpy()  # a view; the stream takes its bytes before upload returns
    n = buf.nbytes
    if n < progress.THRESHOLD:  # the hot path; a module move's bar (misc.py) is advanced here too
        st.upload(h, memoryview(buf), _dtype_name(c.dtype), list(c.shape))  # type: ignore[arg-type]
    else:
        with progress.transfer(n, f"uploading a {n >> 20} MiB tensor"):
            st.upload(h, memoryview(buf), _dtype_name(c.dtype), list(c.shape))  # type: ignore[arg-type]
    progress.advance(n)
    return h


def upload_sparse(t: torch.Tensor, dev: int = 0) -> RemoteTensor:
    """A host sparse tensor (COO or compressed) on gpud: its indices and values travel as dense tensors and gpud
    builds the tensor from them, validating the indices (NOTE [sparse tensors] in gpud/aten_sparse.py)."""
    c = t.detach().cpu()
    if c.layout != torch.sparse_coo:
        compressed, plain = _compressed_parts(c)
        return torch.ops.aten.sparse_compressed_tensor.comp_plain_value_size(
            upload(compressed, dev),
            upload(plain, dev),
            upload(c.values(), dev),
            list(c.shape),
            dtype=c.dtype,
            layout=c.layout,
            device=CUDA[dev],
        )
    parts = upload(c._indices(), dev), upload(c._values(), dev)
    return torch.ops.aten._sparse_coo_tensor_with_dims_and_tensors.default(
        c.sparse_dim(),
        c.dense_dim(),
        list(c.shape),
        *parts,
        dtype=c.dtype,
        layout=torch.sparse_coo,
        device=CUDA[dev],
        is_coalesced=c.is_coalesced(),
    )


_SPARSE = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def _compressed_parts(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(compressed indices, plain indices) of a compressed sparse tensor, host or remote."""
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return torch.ops.aten.crow_indices.default(t), torch.ops.aten.col_indices.default(t)
    return torch.ops.aten.ccol_indices.default(t), torch.ops.aten.row_indices.default(t)


def upload(t: torch.Tensor, dev: int | None = None) -> RemoteTensor:
    """A host tensor's copy on the program's ``cuda:dev`` (default: the current device)."""
    if dev is None:
        dev = S.current_device()
    if t.layout in _SPARSE:
        return upload_sparse(t, dev)
    h = upload_handle(t, dev)
    shape = tuple(t.shape)
    return wrap(h, shape, _contiguous_strides(shape), 0, t.dtype, 0, dev)


def between_devices(t: RemoteTensor, dev: int) -> RemoteTensor:
    """A remote tensor's copy on another device of the program (NOTE [devices of a program] in shim/runtime.py):
    its two sessions may be on different gpud devices, so the bytes go through the client."""
    return upload(download(t), dev)


def download(t: RemoteTensor) -> torch.Tensor:
    """The tensor's value as a new host tensor (one round trip; a sparse tensor's two parts, four)."""
    from shim.torch.dispatch import NAME_DTYPE

    if t.layout == torch.sparse_coo:
        _, shape, _, _, _, coalesced, *_ = t._k
        i, v = download(torch.ops.aten._indices.default(t)), download(torch.ops.aten._values.default(t))
        return torch.sparse_coo_tensor(i, v, shape, is_coalesced=coalesced)
    if t.layout in _SPARSE:  # compressed: three parts
        compressed, plain = (download(cast(RemoteTensor, x)) for x in _compressed_parts(t))
        values = download(torch.ops.aten.values.default(t))
        return torch.sparse_compressed_tensor(compressed, plain, values, t._k[1], layout=t.layout)

    value, bulk = S.for_tensor(t).call([W.OP_FETCH, [t._x], {}, []], "copy to host")
    dt_name, shape = value
    dtype = NAME_DTYPE[dt_name]
    data = bulk[0] if bulk else b""
    n = memoryview(data).nbytes
    flat = torch.empty(n, dtype=torch.uint8)
    if n:
        flat.numpy()[:] = np.frombuffer(data, dtype=np.uint8)
    return flat.view(dtype).reshape(shape) if n else torch.empty(shape, dtype=dtype)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


class ToRemote(torch.autograd.Function):
    """Upload that autograd sees: the gradient flows back to the host tensor."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dev: int | None = None) -> Any:
        return upload(x, dev)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return (download(g) if isinstance(g, RemoteTensor) else g), None


class ToHost(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: RemoteTensor) -> Any:
        ctx.dev = x._d
        return download(x)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return upload(g, ctx.dev)


def to_remote(t: torch.Tensor, dev: int | None = None) -> RemoteTensor:
    """``t`` on the program's ``cuda:dev`` (default: the current device), the gradient flowing back to ``t``."""
    S.INITIALIZED[0] = True
    if t.requires_grad and torch.is_grad_enabled():
        return ToRemote.apply(t, dev)
    return upload(t, dev)


def to_host(t: RemoteTensor) -> torch.Tensor:
    if t.requires_grad and torch.is_grad_enabled():
        return ToHost.apply(t)
    return download(t)
