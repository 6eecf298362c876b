"""ATen ops on remote tensors: output metadata on the client, the op itself on gpud.

NOTE [metadata cache]: to return an op's outputs at once (so the script runs ahead of gpud), the
client must know their shapes, strides and dtypes. Running the op's meta kernel costs ~250 µs, so
the answer is cached under a key built from the op and its arguments' metadata: tensors by
(shape, stride, offset, dtype), ints/bools/strings/dtypes by value, floats by type only (their
value never changes an output's metadata, except for the few ops in ``_FLOAT_SHAPED``). One
pass over the arguments builds both that key and the wire form of the op. Ops whose outputs
depend on data (``nonzero``, boolean indexing, ``item()``...) or have no meta kernel are marked
``SYNC`` in the cache: they run synchronously and gpud describes their outputs.
"""

from __future__ import annotations

from typing import Any

import torch

from proto import aten as W
from shim.torch import stream as S
from shim.torch import tensor as T
from shim.torch.tensor import RemoteTensor, wrap

SYNC = object()
_CACHE: dict[Any, Any] = {}
_INFO: dict[Any, OpInfo] = {}
_FLOAT_SHAPED = ("arange", "range", "linspace", "logspace", "upsample", "interpolate", "histc")
# Ops that change a tensor's own metadata in place: the wrapper's metadata is updated too.
# (resize_ and ops writing into a resized out= argument take their new metadata from ``_retarget``.)
_META_INPLACE = frozenset({"t_", "transpose_", "squeeze_", "unsqueeze_", "as_strided_", "swapdims_", "swapaxes_"})

# The wire encoding is proto's (NOTE [aten values] in proto/aten.py); its precomputed tables are
# bound here so the hot path below indexes them without a call.
_E = W.encoder()
_DTYPE_EXT = _E.dtype
DTYPE_NAME = _E.dtype_name
NAME_DTYPE = _E.name_dtype
SPARSE_LAYOUTS = {n: getattr(torch, n) for n in W.LAYOUTS if n.startswith("sparse_")}
_MEMFMT_EXT = _E.memory_format
_LAYOUT_EXT = _E.layout
_DEV_CUDA = _E.device_cuda
_DEV_CPU = _E.device_cpu
_GEN = _E.generator
_complex = _E.complex
_scalar_tensor = _E.scalar_tensor
_CPU = torch.device("cpu")


_COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
_BACKEND = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
try:
    _WAIT: Any = torch.ops._c10d_functional.wait_tensor.default
except (AttributeError, RuntimeError):  # a torch without distributed
    _WAIT = None
_CUDA_KERNEL_HERE = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd", "fsdp"})


class OpInfo:
    __slots__ = ("name", "short", "inplace", "inplace_map", "float_by_value", "meta_inplace", "on_client", "settle")

    def __init__(self, func: Any) -> None:
        self.name = str(func)  # "aten.add.Tensor"
        schema = func._schema
        # Ops outside aten run here, redispatched below the Python key (``on_client``: to these keys): torch's own
        # Python custom ops (torch_nn::_linear_cross_entropy_*) by their composite kernel, whose ATen ops come back
        # to us (gpud runs only the aten namespace); collectives (c10d::, _c10d_functional::) and FSDP's copy-in
        # and copy-out ops by their CUDA kernel, which hands a collective to the process group's backend for cuda
        # (NOTE [collectives] in shim/torch/collectives.py) and runs FSDP's as ATen ops that come back to us.
        self.on_client: Any = None
        # A functional collective registers its work under its output's storage until wait_tensor; a remote view
        # has a storage of its own, so the wait on a view of the output (DTensor's) never finds it and the work,
        # with its tensors, stayed registered for the life of the process. Every collective here is complete when
        # it returns (NOTE [collectives]): its output is waited on at once.
        self.settle = func.namespace == "_c10d_functional" and func._schema.name != "_c10d_functional::wait_tensor"
        if func.namespace in _CUDA_KERNEL_HERE:
            self.on_client = _BACKEND
        elif func.namespace != "aten" and torch._C._dispatch_has_kernel_for_dispatch_key(
            schema.name, "CompositeExplicitAutograd"
        ):
            self.on_client = _COMPOSITE
        self.short = schema.name.split("::", 1)[-1]
        self.float_by_value = any(s in self.short for s in _FLOAT_SHAPED)
        self.meta_inplace = self.short in _META_INPLACE
        # Returns that are an argument written in place: (return index, arg position, arg name).
        self.inplace: list[tuple[int, int, str]] = []
        for i, ret in enumerate(schema.returns):
            ai = ret.alias_info
            if ai is None or not ai.is_write:
                continue
            for pos, arg in enumerate(schema.arguments):
                if (
                    arg.alias_info is not None
                    and arg.alias_info.is_write
                    and set(arg.alias_info.before_set) & set(ai.before_set)
                ):
                    self.inplace.append((i, -1 if arg.kwarg_only else pos, arg.name))
                    break
        self.inplace_map = {i: (pos, name) for i, pos, name in self.inplace} or None


def info_of(func: Any) -> OpInfo:
    info = _INFO.get(func)
    if info is None:
        info = _INFO[func] = OpInfo(func)
    return info


_MULTI = S.MULTI


class _Enc:
    """One pass over an op's arguments: the cache key, the wire form, host tensors to upload, the device.

    ``dev`` is the device of the op's remote tensors (-1: none, a factory), ``want`` a CUDA device an argument
    names (``device=cuda:1``, as C++ composites pass ``self.options()``). Host tensors are uploaded once the
    device is known (``host``: their handles and tensors)."""

    __slots__ = ("key", "by_value", "temps", "dev", "want", "host")

    def __init__(self, by_value: bool) -> None:
        self.key: list[Any] = []
        self.by_value = by_value
        self.temps: list[int] = []
        self.dev = -1
        self.want = -1
        self.host: list[Any] = []

    def enc(self, v: Any) -> Any:
        if isinstance(v, RemoteTensor):
            self.key.append(v._k)
            if _MULTI[0]:
                self._device(v._d)
            else:
                self.dev = 0
            return v._x
        t = type(v)
        if t is int or t is bool or t is str or v is None:
            self.key.append(v)
            return v
        if t is float:
            self.key.append(v if self.by_value else float)
            return v
        if t is list or t is tuple or isinstance(v, (list, tuple)):
            self.key.append((len(v),))
            return [self.enc(x) for x in v]
        if isinstance(v, torch.Tensor):
            return self._host(v)
        if t is torch.dtype:
            self.key.append(v)
            return _DTYPE_EXT[v]
        if t is torch.device:
            self.key.append(v.type)
            if v.type == "cpu":
                return _DEV_CPU
            if v.index is not None and v.type == "cuda":
                self.want = v.index
            return _DEV_CUDA
        if t is torch.memory_format:
            self.key.append(v)
            return _MEMFMT_EXT[v]
        if t is torch.layout:
            self.key.append(v)
            return _LAYOUT_EXT[v]
        if isinstance(v, torch.Generator):
            self.key.append("gen")
            return _GEN
        if t is complex:
            self.key.append(complex)
            return _complex(v)
        raise TypeError(f"wooly: cannot send a {t.__name__} argument to gpud")

    def _host(self, v: torch.Tensor) -> Any:
        if v.device.type == "meta":
            raise RuntimeError(
                "wooly: a meta tensor was mixed with cuda tensors (an op moved a remote tensor to 'meta')"
            )
        if v.dim() == 0 and v.device.type == "cpu":
            self.key.append(("cpu0", v.dtype))
            return _scalar_tensor(v)
        if v.layout != torch.strided:  # sparse: uploaded now, by constructor ops; ops on it run synchronously
            from shim.torch.transfer import upload_handle

            d = self.dev if self.dev >= 0 else S.current_device()
            h = upload_handle(v, d)
            self._device(d)
            self.temps.append(h)
            self.key.append((T.SPARSE_COO, tuple(v.shape), v.dtype, v.layout))
            return S.tensor_ref(h)
        h = S.new_handle()
        self.host.append((h, v))
        self.temps.append(h)
        c = v.contiguous()
        self.key.append((tuple(c.shape), tuple(c.stride()), 0, c.dtype))
        return S.tensor_ref(h)

    def _device(self, d: int) -> None:
        if self.dev != d:
            if self.dev >= 0:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two devices, "
                    f"cuda:{min(d, self.dev)} and cuda:{max(d, self.dev)}!"
                )
            self.dev = d

    def device(self, dev: int) -> int:
        """The device the op runs on: its remote tensors', else the one its factory was asked for (``dev``, or
        an argument naming one), else the thread's current device; then its host tensors go there."""
        d = self.dev
        if d < 0:
            d = dev if dev >= 0 else self.want if self.want >= 0 else S.current_device()
        if self.host:
            from shim.torch.transfer import upload_handle

            for h, v in self.host:
                upload_handle(v, d, h)
        return d


def _to_meta(v: Any) -> Any:
    if isinstance(v, RemoteTensor):
        if v._k[0] is T.SPARSE_COO:
            raise _DataDependent  # ops on sparse tensors run synchronously: their outputs' nnz depends on data
        shape, stride, off, dtype = v._k[:4]
        need = 1 + off + sum((s - 1) * st for s, st in zip(shape, stride, strict=True) if s > 0) if all(shape) else 0
        base = torch.empty(need, dtype=dtype, device="meta")
        m = base.as_strided(shape, stride, off)
        if len(v._k) > 4:
            if v._k[4] & 1:
                m = m.conj()
            if v._k[4] & 2:
                m = m._neg_view()
        return m
    if isinstance(v, torch.Tensor):
        if v.dim() == 0 and v.device.type == "cpu":
            return v
        if v.layout != torch.strided:
            raise _DataDependent
        return torch.empty_strided(v.shape, v.contiguous().stride(), dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(_to_meta(x) for x in v) if type(v) in (list, tuple) else [_to_meta(x) for x in v]
    if isinstance(v, dict):
        return {k: _to_meta(x) for k, x in v.items()}
    if isinstance(v, torch.device) and v.type != "cpu":
        return T.META
    return v


def _spec(v: Any, leaves: list[Any]) -> Any:
    """Structure of a meta result: tensors become leaf indices into ``leaves``."""
    if isinstance(v, torch.Tensor):
        if v.layout != torch.strided:
            raise _DataDependent  # a sparse output: its nnz depends on the data, gpud describes it
        bits = (1 if v.is_conj() else 0) | (2 if v.is_neg() else 0)
        leaf = (tuple(v.shape), tuple(v.stride()), v.storage_offset(), v.dtype)
        leaves.append(leaf + (bits,) if bits else leaf)
        return len(leaves) - 1
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return (type(v) is list, [_spec(x, leaves) for x in v])
    raise _DataDependent


class _DataDependent(Exception):
    pass


def _infer(func: Any, args: Any, kwargs: Any) -> Any:
    try:
        out = func(*_to_meta(args), **_to_meta(kwargs))
        leaves: list[Any] = []
        tree = _spec(out, leaves)
        return (tree, leaves)
    except Exception:  # noqa: BLE001 - no meta kernel, data-dependent shape, ...: run it synchronously
        return SYNC


def _build(tree: Any, outs: list[Any]) -> Any:
    if type(tree) is int:
        return outs[tree]
    if tree is None:
        return None
    is_list, items = tree
    built = [_build(t, outs) for t in items]
    return built if is_list else tuple(built)


def dispatch(func: Any, args: Any, kwargs: Any, dev: int = -1) -> Any:
    """Run ``func`` on gpud (``dev``: the device a factory was asked for, NOTE [factories])."""
    info = _INFO.get(func) or info_of(func)
    if info.on_client is not None:
        out = func.redispatch(info.on_client, *args, **kwargs)
        if info.settle:
            for t in out if isinstance(out, (list, tuple)) else (out,):
                if isinstance(t, RemoteTensor):
                    _WAIT(t)
        return out
    if info.short == "set_" and args and isinstance(args[0], RemoteTensor):
        args[0].__dict__.pop("_sid", None)  # its storage changes (RemoteTensor.data_ptr)
    special = _SPECIAL.get(info.short)
    if special is not None:
        r = special(func, info, args, kwargs)
        if r is not NotImplemented:
            return r
    enc = _Enc(info.float_by_value)
    wargs = [enc.enc(a) for a in args]
    wkw = {k: enc.enc(v) for k, v in kwargs.items()} if kwargs else {}
    key = (func, *enc.key)
    meta = _CACHE.get(key)
    if meta is None:
        if len(_CACHE) > 200_000:  # shapes that never repeat (growing sequences): start over
            _CACHE.clear()
        meta = _CACHE[key] = _infer(func, args, kwargs)
    want = enc.want if enc.want >= 0 else dev
    if want >= 0 and enc.dev >= 0 and want != enc.dev:  # zeros_like(x, device="cuda:1"), x on cuda:0
        return _made_elsewhere(func, args, kwargs, enc.dev, want)
    d = enc.dev if enc.dev >= 0 and not enc.host else enc.device(dev)
    st = S.stream(d) if d else S.stream()
    if meta is SYNC:
        return _run_sync(func, info, args, kwargs, wargs, wkw, enc, st)
    tree, leaves = meta
    outs: list[Any] = []
    handles: list[int] = []
    regrown: list[tuple[RemoteTensor, Any]] = []
    inplace = info.inplace_map
    for i, leaf in enumerate(leaves):
        if inplace is not None and i in inplace:
            pos, name = inplace[i]
            obj = args[pos] if 0 <= pos < len(args) else kwargs[name]
            if isinstance(obj, RemoteTensor) and obj._k != leaf and not info.meta_inplace:
                _check_room(obj, leaf)
                regrown.append((obj, leaf))  # resize_, or an out= argument the op resizes (arange(..., out=t))
            outs.append(obj)
            handles.append(0)
            continue
        h = S.new_handle()
        outs.append(
            wrap(h, *leaf) if not d else wrap(h, leaf[0], leaf[1], leaf[2], leaf[3], leaf[4] if len(leaf) > 4 else 0, d)
        )
        handles.append(h)
    st.push([info.name, wargs, wkw, handles])
    if enc.temps:
        st.frees.extend(enc.temps)
    if regrown:
        # gpud charges the memory a resize gives a tensor, and fails the op past the quota leaving the tensor as it
        # was (NOTE [storages an op regrows] in gpud/aten_exec.py): the wrapper takes its new shape only once gpud
        # has said yes, and the error comes from this call, as CUDA's allocator raises it from resize_ itself
        st.call([W.OP_SYNC, [], {}, []], info.name.replace(".", "::", 1))
        for obj, leaf in regrown:
            _retarget(obj, leaf)
    if info.meta_inplace:
        _apply_meta_inplace(func, args, kwargs)
    return _build(tree, outs)


def _run_sync(func: Any, info: OpInfo, args: Any, kwargs: Any, wargs: Any, wkw: Any, enc: _Enc, st: S.OpStream) -> Any:
    value, _ = st.call([info.name, wargs, wkw, []], info.name.replace(".", "::", 1))
    if enc.temps:
        st.frees.extend(enc.temps)
    inplace = {i: (pos, name) for i, pos, name in info.inplace}
    counter = [0]

    def build(v: Any) -> Any:
        if isinstance(v, dict) and "t" in v:
            h, shape, stride, off, dt, *bits = v["t"]
            i = counter[0]
            counter[0] += 1
            if i in inplace:
                st.free(h)
                pos, name = inplace[i]
                return args[pos] if 0 <= pos < len(args) else kwargs[name]
            return wrap(h, shape, stride, off, NAME_DTYPE[dt], bits[0] if bits else 0, st.device)
        if isinstance(v, dict) and "s" in v:  # sparse, any layout (NOTE [sparse tensors] in gpud/aten_sparse.py)
            h, shape, sdim, ddim, nnz, coalesced, dt, *lay = v["s"]
            layout = SPARSE_LAYOUTS[lay[0]] if lay else torch.sparse_coo
            i = counter[0]
            counter[0] += 1
            if i in inplace:  # the tensor changed in place (add_, zero_, sparse_resize_ ...): its new nnz
                st.free(h)
                pos, name = inplace[i]
                obj = args[pos] if 0 <= pos < len(args) else kwargs[name]
                obj.__dict__["_k"] = (T.SPARSE_COO, tuple(shape), sdim, ddim, nnz, coalesced, NAME_DTYPE[dt], layout)
                return obj
            return T.wrap_sparse(h, shape, sdim, ddim, nnz, coalesced, NAME_DTYPE[dt], layout, st.device)
        if isinstance(v, dict) and "c" in v:
            return complex(*v["c"])
        if isinstance(v, list):
            return [build(x) for x in v]
        return v

    out = build(value)
    if isinstance(out, list) and func._schema.returns and len(func._schema.returns) > 1:
        out = tuple(out)
    if info.meta_inplace:
        _apply_meta_inplace(func, args, kwargs)
    return out


def _made_elsewhere(func: Any, args: Any, kwargs: Any, dev: int, want: int) -> Any:
    """An op on one device's tensors asked to make its result on another (``*_like``/``new_*`` with ``device=``):
    made where its arguments are, then moved (NOTE [devices of a program] in shim/runtime.py)."""
    from shim.torch.transfer import between_devices

    kw = {k: (T.CUDA[dev] if isinstance(v, torch.device) and v.type == "cuda" else v) for k, v in kwargs.items()}
    out = func(*args, **kw)
    if isinstance(out, RemoteTensor):
        return between_devices(out, want)
    if isinstance(out, (list, tuple)):
        return type(out)(between_devices(o, want) if isinstance(o, RemoteTensor) else o for o in out)
    return out


_WRAPPER_NBYTES = torch._C.StorageBase.nbytes  # type: ignore[attr-defined]  # (shim/torch/storage.py: gpud's for a remote tensor)


def _check_room(obj: RemoteTensor, leaf: tuple[Any, ...]) -> None:
    """Refuse, before the op goes, a new shape that ``_retarget`` could not give the wrapper."""
    shape, stride, off = leaf[:3]
    if leaf[3] != obj.dtype or 0 in shape:
        return
    need = (off + sum((n - 1) * st for n, st in zip(shape, stride, strict=True)) + 1) * obj.element_size()
    if need > _WRAPPER_NBYTES(torch.Tensor.untyped_storage(obj)):  # the wrapper's own storage, not gpud's
        raise NotImplementedError(
            f"wooly: growing a non-empty cuda tensor of {tuple(obj.shape)} in place to {shape} "
            "(resize_ or out=) is not supported; start from an empty tensor"
        )


def _retarget(obj: RemoteTensor, leaf: tuple[Any, ...]) -> None:
    """Give a wrapper the metadata its tensor on gpud now has (resize_, an out= argument the op resized). C++ cannot
    resize a tensor of the CUDA device in a CPU build, but it can restride one within its storage: empty wrappers
    (the usual ``out=`` and ``resize_`` targets) are made with room to grow (``wrap``)."""
    shape, stride, off, dtype = leaf[:4]
    if dtype != obj.dtype:
        return  # a dtype the op could not change: its own error comes back from gpud
    try:
        with torch._C._DisableTorchDispatch():
            obj.as_strided_(shape, stride, off)
    except RuntimeError:
        raise NotImplementedError(
            f"wooly: growing a non-empty cuda tensor of {tuple(obj.shape)} in place to {shape} "
            "(resize_ or out=) is not supported; start from an empty tensor"
        ) from None
    obj.__dict__["_k"] = leaf


def _apply_meta_inplace(func: Any, args: Any, kwargs: Any) -> None:
    """Apply a metadata-changing in-place op (``unsqueeze_``...) to the wrapper itself."""
    self = args[0]
    with torch._C._DisableTorchDispatch():
        func(self, *_to_meta(args[1:]), **_to_meta(kwargs))
    self.__dict__["_k"] = (tuple(self.shape), tuple(self.stride()), self.storage_offset(), self.dtype)


# ---------------------------------------------------------------------- special cases
def _to_copy(func: Any, info: OpInfo, args: Any, kwargs: Any) -> Any:
    dev = kwargs.get("device")
    if dev is None:
        return NotImplemented
    dev = torch.device(dev)
    if dev.type == "cpu":
        from shim.torch.transfer import download

        out = download(args[0])
        dt = kwargs.get("dtype")
        return out.to(dt) if dt is not None and dt != out.dtype else out
    x = args[0]
    if isinstance(x, RemoteTensor) and dev.index is not None and dev.index != x._d:  # another device of ours
        from shim.torch.transfer import between_devices

        kw = dict(kwargs)
        kw.pop("device")
        kw.pop("non_blocking", None)
        moved = between_devices(x, dev.index)
        return torch.ops.aten._to_copy.default(moved, **kw) if kw else moved
    return NotImplemented


def _copy_(func: Any, info: OpInfo, args: Any, kwargs: Any) -> Any:
    dst, src = args[0], args[1]
    if not isinstance(dst, RemoteTensor):  # gpud -> host
        from shim.torch.transfer import download

        with torch.no_grad():
            dst.copy_(download(src))
        return dst
    if isinstance(src, RemoteTensor) and src._d != dst._d:  # between two devices: through the client
        from shim.torch.transfer import between_devices

        return func(dst, between_devices(src, dst._d), *args[2:], **kwargs)
    return NotImplemented


def _local_scalar_dense(func: Any, info: OpInfo, args: Any, kwargs: Any) -> Any:
    value, _ = S.for_tensor(args[0]).call([info.name, [args[0]._x], {}, []], "aten::_local_scalar_dense")
    if isinstance(value, dict) and "c" in value:
        return complex(*value["c"])
    return value


def _sparse_meta(pick: int) -> Any:
    """``sparse_dim()``, ``_nnz()`` ... of a sparse wrapper, from the metadata gpud described (no round trip)."""

    def answer(func: Any, info: OpInfo, args: Any, kwargs: Any) -> Any:
        x = args[0] if args else None
        if isinstance(x, RemoteTensor) and x._k[0] is T.SPARSE_COO and (pick != 5 or x._k[7] == torch.sparse_coo):
            return x._k[pick]  # (is_coalesced of a compressed tensor: gpud's torch says it has none)
        return NotImplemented

    return answer


_SPECIAL = {
    "_to_copy": _to_copy,
    "copy_": _copy_,
    "_local_scalar_dense": _local_scalar_dense,
    "sparse_dim": _sparse_meta(2),
    "_dimI": _sparse_meta(2),
    "dense_dim": _sparse_meta(3),
    "_dimV": _sparse_meta(3),
    "_nnz": _sparse_meta(4),
    "is_coalesced": _sparse_meta(5),
}

T._dispatch = dispatch
