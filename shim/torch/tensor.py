"""``RemoteTensor``: a tensor whose data lives on gpud and which reports ``device='cuda:0'``.

NOTE [remote tensor]: the Python object is a wrapper subclass whose C++ TensorImpl is on the
``meta`` device (pure Python, no compiler: FACTS "option C"), so autograd runs on the calling
thread, and every ATen op on it reaches ``__torch_dispatch__`` (``shim.torch.dispatch``). It
overrides ``device``/``is_cuda``/``is_meta`` so the script sees a CUDA tensor. ``_h`` is its
handle in the session's tensor table on gpud; ``_x`` its wire form; ``_k`` its metadata key
(shape, stride, offset, dtype) for the output-metadata cache.
"""

from __future__ import annotations

from typing import Any

import torch

from shim.torch import device as _device
from shim.torch import stream as S

META = torch.device("meta")
CUDA0 = torch.device("cuda", 0)
CUDA = [torch.device("cuda", i) for i in range(64)]  # cuda:N, made once (``device`` is read often)


# NOTE [storage resize] (shim/torch/storage.py): the wrapper storage (its StorageImpl's address) a remote tensor's
# ``untyped_storage()`` returned -> (the tensor's wire form, its device, strided); dropped when the tensor dies
STORAGE_OWNERS: dict[int, tuple[Any, int, bool]] = {}


class RemoteTensor(torch.Tensor):
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]  # autocast swaps this in (see autocast.py)
    _h: int
    _x: Any
    _k: tuple[Any, ...]
    _d: int = 0  # the program's cuda:N it lives on (NOTE [devices of a program] in shim/runtime.py)

    @staticmethod
    def __new__(cls, *args: Any, **kwargs: Any) -> RemoteTensor:  # noqa: PYI034
        raise TypeError("RemoteTensor is created by wooly, not directly: use tensor.cuda() or device='cuda'")

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
        if func is _LAYOUT:  # a compressed sparse wrapper's (dispatch_layout)
            return args[0]._k[7]
        return _dispatch(func, args, kwargs or {})

    # -------------------------------------------------------------- what the script sees
    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return CUDA[self._d]

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_meta(self) -> bool:  # type: ignore[override]
        return False

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    def get_device(self) -> int:
        return self._d

    def record_stream(self, stream: Any) -> None:
        """Nothing to do (data prefetchers, FSDP): gpud runs a session's work in order and frees a tensor after
        the work queued before the free. The streams here are Python objects, which torch's binding refuses."""
        return None

    def data_ptr(self) -> int:
        """Its storage's id on gpud (the same for every view of one storage: NOTE [storage resize] in
        shim/torch/storage.py) plus its offset, as a GPU tensor's address is its allocation's plus the offset."""
        sid = self.__dict__.get("_sid")
        if sid is None:
            sid = self.__dict__["_sid"] = S.storage_info(self._x, self._d)[0]
        return int(sid + self.storage_offset() * self.element_size())

    def untyped_storage(self) -> torch.UntypedStorage:
        """The wrapper's own storage, noted as standing for this tensor's storage on gpud (NOTE [storage resize])."""
        st = torch.Tensor.untyped_storage(self)
        key = st._cdata
        if self.__dict__.get("_scd") != key:
            self.__dict__["_scd"] = key
            STORAGE_OWNERS[key] = (self._x, self._d, self.layout == torch.strided)
        return st

    def __del__(self, _streams: Any = S) -> None:
        # The stream module is bound at definition: at interpreter exit this module's globals are already None.
        scd = self.__dict__.get("_scd")
        if scd is not None and STORAGE_OWNERS is not None:
            STORAGE_OWNERS.pop(scd, None)
        h = self.__dict__.get("_h")
        if h:
            free = getattr(_streams, "free_later", None)
            if free is not None:
                free(self._d, h)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        import torch._tensor_str as ts

        from shim.torch.transfer import download

        cpu = download(self)
        if cpu.layout != torch.strided:  # torch prints a sparse tensor's parts; the device goes before the layout
            return repr(cpu).replace("layout=", f"device='{self.device}', layout=", 1)
        with torch.no_grad():
            body = ts._tensor_str(cpu, len("tensor("))
        s = ts._str_intern(self, tensor_contents=body)
        prefix = type(self).__name__ + "("
        if s.startswith(prefix):
            s = "tensor(" + s[len(prefix) :]
        if getattr(self, "_is_param", False):
            s = "Parameter containing:\n" + s
        return s

    def __format__(self, spec: str) -> str:
        if self.dim() == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec) if spec else repr(self)

    @property
    def data(self) -> Any:
        return _DATA.__get__(self)  # type: ignore[attr-defined]

    @data.setter
    def data(self, new: Any) -> None:
        # ``p.data = t`` swaps the C++ metadata only; the wrapper must also name t's data on gpud.
        from shim.torch.transfer import upload

        if not isinstance(new, RemoteTensor):
            new = upload(new)
        alias = torch.ops.aten.alias.default(new)  # a handle of our own for the same data
        _DATA.__set__(self, new)  # type: ignore[attr-defined]
        d, a = self.__dict__, alias.__dict__
        old, old_dev = d.get("_h"), self._d
        d["_h"], d["_x"], d["_k"] = a["_h"], a["_x"], a["_k"]
        d.pop("_sid", None)  # the data is new's
        if new._d != old_dev:
            d["_d"] = new._d
        a["_h"] = 0  # the alias object dies now; its handle lives on as ours
        if old:
            S.free_later(old_dev, old)

    def __setitem__(self, index: Any, value: Any) -> None:
        # C++ indexing turns a Python number into a tensor on the wrapper's (meta) device, which
        # holds no value: make it a host scalar tensor, which travels with the op.
        if isinstance(value, (int, float, bool, complex)):
            value = torch.tensor(value, dtype=self.dtype)
        torch.Tensor.__setitem__(self, _host_index(index), value)

    def numpy(self, *, force: bool = False) -> Any:
        if force:
            return self.detach().cpu().numpy()
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
            "memory first."
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        return self.numpy()

    def tolist(self) -> Any:
        from shim.torch.transfer import download

        return download(self).tolist()

    def __reduce_ex__(self, proto: Any) -> Any:
        # NOTE [saving] in shim/torch/serialization.py: a host copy whose storage torch.save tags cuda:N.
        from shim.torch.serialization import host_copy

        cpu = host_copy(self)
        if getattr(self, "_is_param", False):
            return torch.nn.Parameter(cpu, self.requires_grad).__reduce_ex__(proto)
        if self.requires_grad:
            cpu.requires_grad_(True)
        return cpu.__reduce_ex__(proto)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = self.clone()
        if self.requires_grad:
            new.requires_grad_(True)
        if getattr(self, "_is_param", False):
            new = torch.nn.Parameter(new, self.requires_grad)
        memo[id(self)] = new
        return new

    def pin_memory(self, device: Any = None) -> Any:
        return self

    # -------------------------------------------------------------- traceable-subclass protocol
    # Having these makes nn.Module.cuda()/.to() swap parameters in place, so they stay
    # nn.Parameter (FACTS). There are no inner tensors: the data is on gpud.
    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return [], (self._h,)

    @staticmethod
    def __tensor_unflatten__(inner: Any, ctx: Any, size: Any, stride: Any) -> Any:
        raise NotImplementedError("wooly remote tensors cannot be rebuilt from a flattened form")


_make = torch.Tensor._make_wrapper_subclass
_ROOM = 1 << 48  # bytes an empty wrapper's (never allocated) storage may describe
# NOTE [a cuda device in a CPU build] (shim/torch/device.py): on cuda when the device library is
# loaded, else on meta (the properties above then make the tensor report cuda).
_WRAP_DEVICE = CUDA0 if _device.ACTIVE else META
_DATA = torch._C.TensorBase.data


def _host_index(index: Any) -> Any:
    """Python sequences in an index (lists, ranges, NumPy arrays; tuples inside a tuple index) become host tensors
    here: C++ would build them on the CPU and copy them to the index's device through a kernel stub the CPU build
    lacks for CUDA (the CUDA build's copy asks a driver that is not there: ``x[range(n), y] = v`` failed with
    "CUDA error: invalid argument"). A host index tensor travels with the op."""
    if type(index) is tuple:
        if any(_sequence(i, True) for i in index):
            return tuple(_as_index(i) if _sequence(i, True) else i for i in index)
        return index
    return _as_index(index) if _sequence(index, False) else index


def _sequence(i: Any, inner: bool) -> bool:
    t = type(i)
    if t is list:
        return _plain(i)
    if t is range:
        return True
    if inner and t is tuple:  # (a tuple inside a tuple index is an index sequence, as a list is)
        return _plain(list(i))
    return t.__module__ == "numpy" and t.__name__ == "ndarray" and i.dtype.kind in "biu"


def _as_index(i: Any) -> Any:
    if type(i) is range or type(i) is tuple:
        i = list(i)
    return torch.as_tensor(i) if type(i) is not list else torch.tensor(i)


def _plain(items: list[Any]) -> bool:
    return bool(items) and all(type(i) in (int, bool) or (type(i) in (list, tuple) and _plain(list(i))) for i in items)


def wrap(h: int, shape: Any, stride: Any, offset: int, dtype: torch.dtype, bits: int = 0, dev: int = 0) -> RemoteTensor:
    """The wrapper of handle ``h`` of the program's ``cuda:dev``. ``bits``: 1 = conjugate view, 2 = negative view,
    as the tensor on gpud is (C++ must see them too: the Conjugate/Negative fallbacks resolve them before ops that
    cannot take them)."""
    if dev:
        return _wrap_on(h, shape, stride, offset, dtype, bits, dev)
    if 0 in shape:  # room to grow: resize_ and out= restride empty wrappers (dispatch._retarget)
        r = _make(
            RemoteTensor,
            shape,
            strides=stride,
            storage_offset=offset,
            dtype=dtype,
            device=_WRAP_DEVICE,
            storage_size=_ROOM,
        )
    else:
        r = _make(RemoteTensor, shape, strides=stride, storage_offset=offset, dtype=dtype, device=_WRAP_DEVICE)
    d = r.__dict__
    d["_h"] = h
    d["_x"] = S.tensor_ref(h)
    if bits:
        if bits & 1:
            torch._C._set_conj(r, True)
        if bits & 2:
            torch._C._set_neg(r, True)
        d["_k"] = (tuple(shape), tuple(stride), offset, dtype, bits)
    else:
        d["_k"] = (tuple(shape), tuple(stride), offset, dtype)
    return r


def _wrap_on(h: int, shape: Any, stride: Any, offset: int, dtype: torch.dtype, bits: int, dev: int) -> RemoteTensor:
    where = CUDA[dev] if _device.ACTIVE else META
    if 0 in shape:  # room to grow, as in ``wrap``
        r = _make(
            RemoteTensor, shape, strides=stride, storage_offset=offset, dtype=dtype, device=where, storage_size=_ROOM
        )
    else:
        r = _make(RemoteTensor, shape, strides=stride, storage_offset=offset, dtype=dtype, device=where)
    d = r.__dict__
    d["_h"], d["_x"], d["_d"] = h, S.tensor_ref(h), dev
    if bits & 1:
        torch._C._set_conj(r, True)
    if bits & 2:
        torch._C._set_neg(r, True)
    d["_k"] = (
        (tuple(shape), tuple(stride), offset, dtype, bits) if bits else (tuple(shape), tuple(stride), offset, dtype)
    )
    return r


def wrap_sparse(
    h: int,
    shape: Any,
    sparse_dim: int,
    dense_dim: int,
    nnz: int,
    coalesced: bool,
    dtype: torch.dtype,
    layout: torch.layout = torch.sparse_coo,
    dev: int = 0,
) -> RemoteTensor:
    """The wrapper of a sparse tensor on gpud, COO or compressed (NOTE [sparse tensors] in gpud/aten_sparse.py).
    Its metadata (``sparse_dim()``, ``_nnz()``, ``layout`` ...) is answered here; every op on it is a synchronous
    call, which describes the outputs (their nnz depends on the data)."""
    where = CUDA[dev] if _device.ACTIVE else META
    if layout == torch.sparse_coo:
        r = _make(RemoteTensor, shape, dtype=dtype, layout=layout, device=where)
    else:  # torch answers a wrapper's compressed layout only through dispatch (prim.layout)
        r = _make(RemoteTensor, shape, dtype=dtype, layout=layout, device=where, dispatch_layout=True)
    d = r.__dict__
    if dev:
        d["_d"] = dev
    d["_h"] = h
    d["_x"] = S.tensor_ref(h)
    d["_k"] = (SPARSE_COO, tuple(shape), sparse_dim, dense_dim, nnz, bool(coalesced), dtype, layout)
    return r


SPARSE_COO = "sparse"  # the first item of a sparse wrapper's ``_k``, any layout (a strided one starts with its shape)
_LAYOUT = torch.ops.prim.layout.default


def _dispatch(func: Any, args: Any, kwargs: Any) -> Any:
    from shim.torch.dispatch import dispatch

    return dispatch(func, args, kwargs)
