"""Another library's device array as a torch tensor, without a copy: ``torch.from_dlpack`` (DLPack capsules and
objects with ``__dlpack__``: CuPy, numba), ``torch.as_tensor``/``torch.asarray`` of an object with
``__cuda_array_interface__`` (and ``torch.tensor`` of one, which copies).

The client's half of NOTE [device memory aliases] (gpud/aten_alias.py): the producer's pointer, shape, strides
and dtype go to gpud (``wooly.alias_device``), which builds the tensor on the same pages, so writes through either
are seen by the other, as on a GPU. The producer (the array, or the consumed capsule whose deleter is called) is
kept here until gpud reports the tensor's storage dead: whatever views, ``detach()`` or parameters share it, its
memory is not given back to the producer (CuPy's memory pool would hand it to the next array) while torch uses it.

The other way, a cuda tensor's memory handed to another library (``cupy.from_dlpack(t)``, ``t.__dlpack__()``,
``__cuda_array_interface__`` for ``cupy.asarray(t)`` or ``numba.cuda.as_cuda_array(t)``): gpud moves the tensor's
storage onto memory it maps at a new driver allocation of the session (``wooly.export_device``; every tensor on that
storage follows) and answers that allocation's address. The capsule or the consumer's reference keeps the tensor,
and so the storage and the allocation, alive.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
from typing import Any

import numpy as np
import torch

from proto import aten as W
from shim.torch import stream as S

_KDL_CUDA, _KDL_CUDA_MANAGED = 2, 13
_DL_DTYPES = {
    (0, 8): "int8",
    (0, 16): "int16",
    (0, 32): "int32",
    (0, 64): "int64",
    (1, 8): "uint8",
    (1, 16): "uint16",
    (1, 32): "uint32",
    (1, 64): "uint64",
    (2, 16): "float16",
    (2, 32): "float32",
    (2, 64): "float64",
    (4, 16): "bfloat16",
    (5, 64): "complex64",
    (5, 128): "complex128",
    (6, 8): "bool",
}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):  # DLPack 0.x: capsule "dltensor"
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):  # DLPack 1.x: capsule "dltensor_versioned"
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# PyCapsule_SetName keeps the pointer: these names must live as long as the process.
_NAMES = {b"dltensor": b"used_dltensor", b"dltensor_versioned": b"used_dltensor_versioned"}
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_EXITING = [False]
atexit.register(_EXITING.__setitem__, 0, True)

# (program device, gpud's token) -> what keeps the producer's memory: released when gpud reports the storage dead
_OWNERS: dict[tuple[int, int], Any] = {}


class _Consumed:
    """A DLPack capsule this process consumed: its deleter runs (the producer may free the memory) when dropped."""

    def __init__(self, managed: int, deleter: int | None) -> None:
        self.managed = managed
        self.deleter = deleter

    def __del__(self, call: Any = _DELETER, exiting: list[bool] = _EXITING) -> None:
        if self.deleter and not exiting[0]:  # at exit the producer's library may be gone before this runs
            call(self.deleter)(self.managed)
        self.deleter = None


_TYPESTR = {
    torch.float16: "<f2",
    torch.float32: "<f4",
    torch.float64: "<f8",
    torch.complex64: "<c8",
    torch.complex128: "<c16",
    torch.uint8: "|u1",
    torch.int8: "|i1",
    torch.int16: "<i2",
    torch.int32: "<i4",
    torch.int64: "<i8",
    torch.uint16: "<u2",
    torch.uint32: "<u4",
    torch.uint64: "<u8",
    torch.bool: "|b1",
}
_DL_CODES = {name: code for code, name in _DL_DTYPES.items()}


def device_address(t: Any) -> int:
    """The driver-API address of a cuda tensor's first element (its storage is moved onto lent memory once)."""
    if t.numel() == 0:
        return 0
    st = S.for_tensor(t)
    value, _ = st.call([W.OP_EXPORT_DEVICE, [t._x], {}, []], "export a cuda tensor's memory")
    st.driver.lent(value["base"], value["size"], value["gone"])  # the driver API knows the range from now on
    st.conn.before_driver_work = st.flush  # and the program's driver calls come after its tensor ops
    return int(value["ptr"])


def _cuda_array_interface(t: Any) -> dict[str, Any]:
    if t.requires_grad:  # as PyTorch says it
        raise RuntimeError(
            "Can't get __cuda_array_interface__ on Variable that requires grad. If gradients aren't needed, use "
            "var.detach() to get Variable that doesn't require grad."
        )
    if t.layout != torch.strided:
        raise AttributeError(f"Can't get __cuda_array_interface__ on non-strided tensor type: {t.layout}")
    typestr = _TYPESTR.get(t.dtype)
    if typestr is None:
        raise TypeError(f"dtype {t.dtype} is not supported by __cuda_array_interface__")
    itemsize = t.element_size()
    strides = None if t.is_contiguous() else tuple(s * itemsize for s in t.stride())
    ptr = device_address(t)
    return {"typestr": typestr, "shape": tuple(t.shape), "strides": strides, "data": (ptr, False), "version": 2}


class _Exported:
    """A DLPack capsule's memory here: the struct, its shape and strides, and the tensor it keeps alive."""

    def __init__(self, t: Any, ptr: int) -> None:
        n = t.dim()
        self.dims = (ctypes.c_int64 * max(n, 1))(*t.shape)
        self.strides = (ctypes.c_int64 * max(n, 1))(*t.stride())
        self.managed = _DLManagedTensor()
        self.tensor = t
        dl = self.managed.dl_tensor
        dl.data = ptr
        dl.device = _DLDevice(_KDL_CUDA, t.device.index or 0)
        dl.ndim = n
        code, bits = _DL_CODES[str(t.dtype).removeprefix("torch.")]
        dl.dtype = _DLDataType(code, bits, 1)
        dl.shape = ctypes.cast(self.dims, ctypes.POINTER(ctypes.c_int64))
        dl.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        dl.byte_offset = 0
        self.managed.deleter = ctypes.cast(_EXPORT_DELETER, ctypes.c_void_p).value


_LIVE_EXPORTS: dict[int, _Exported] = {}  # address of a DLManagedTensor we made -> what it keeps


def _delete_export(managed: int | None, live: dict[int, _Exported] = _LIVE_EXPORTS) -> None:
    live.pop(managed or 0, None)  # (bound here: a consumer may call it while the interpreter tears this module down)


_EXPORT_DELETER = _DELETER(_delete_export)
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))


def _capsule_destructor(cap: int | None) -> None:
    """A capsule nobody consumed (its name is still "dltensor") gives its tensor back when it goes."""
    if cap and _raw_is_valid(cap, b"dltensor"):
        _delete_export(_raw_pointer(cap, b"dltensor"))


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_capsule_destructor)
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api)
)


def _dlpack_device(t: Any) -> tuple[int, int]:
    return _KDL_CUDA, t.device.index or 0


def _dlpack(t: Any, *args: Any, **kwargs: Any) -> Any:
    """``t.__dlpack__()``: a DLPack (0.x) capsule of the tensor's memory on the driver API's side."""
    if t.requires_grad:
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
    if t.layout != torch.strided or t.is_conj() or t.is_neg():
        raise RuntimeError("wooly: only a strided tensor without a lazy conjugate/negation can be exported")
    if str(t.dtype).removeprefix("torch.") not in _DL_CODES:
        raise BufferError(f"DLPack has no {t.dtype}")
    ex = _Exported(t, device_address(t))
    addr = ctypes.addressof(ex.managed)
    _LIVE_EXPORTS[addr] = ex
    return _new_capsule(addr, b"dltensor", ctypes.cast(_CAPSULE_DESTRUCTOR, ctypes.c_void_p).value)


def _span(shape: list[int], strides: list[int], itemsize: int) -> int:
    if any(s == 0 for s in shape):
        return 0
    if any(st < 0 for st in strides):
        raise RuntimeError("wooly: torch.from_dlpack: negative strides are not supported (PyTorch has none)")
    return (sum((s - 1) * st for s, st in zip(shape, strides, strict=True)) + 1) * itemsize


def _contiguous(shape: list[int]) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(s, 1)
    return out[::-1]


def alias(ptr: int, dtype_name: str, shape: list[int], strides: list[int], dev: int, owner: Any) -> torch.Tensor:
    """The cuda tensor over ``ptr`` (the program's ``cuda:dev``), keeping ``owner`` while gpud's storage lives."""
    from shim.torch.dispatch import NAME_DTYPE
    from shim.torch.tensor import wrap

    dtype = NAME_DTYPE.get(dtype_name)
    if dtype is None:
        raise RuntimeError(f"wooly: torch.from_dlpack: {dtype_name} data has no torch dtype here")
    span = _span(shape, strides, dtype.itemsize)
    st = S.stream(dev)
    st.conn.before_driver_work = st.flush  # the program's driver calls come after its tensor ops from now on
    value, _ = st.call([W.OP_ALIAS_DEVICE, [int(ptr), span, dtype_name, shape, strides], {}, []], "torch.from_dlpack")
    for token in value.get("dead", []):
        _OWNERS.pop((dev, token), None)
    h, got_shape, stride, offset, dt, *bits = value["t"]
    out = wrap(h, got_shape, stride, offset, NAME_DTYPE[dt], bits[0] if bits else 0, st.device)
    _OWNERS[(dev, int(value["token"]))] = owner
    return out


def _from_capsule(cap: Any) -> tuple[Any, ...] | None:
    """(pointer, dtype, shape, strides, device, owner) of a DLPack capsule on a CUDA device, or None for a host one
    (left to PyTorch). The capsule is consumed (renamed) only when it is a CUDA one."""
    for name in _NAMES:
        if _api.PyCapsule_IsValid(cap, name):
            break
    else:
        raise RuntimeError("torch.from_dlpack: the capsule is not a DLPack tensor or was consumed already")
    managed = _api.PyCapsule_GetPointer(cap, name)
    mt: Any = (_DLManagedTensor if name == b"dltensor" else _DLManagedTensorVersioned).from_address(managed)
    t = mt.dl_tensor
    if t.device.device_type not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        return None
    dt = _DL_DTYPES.get((t.dtype.code, t.dtype.bits))
    if dt is None or t.dtype.lanes != 1:
        raise RuntimeError(
            f"torch.from_dlpack: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, {t.dtype.lanes} lanes) has "
            "no torch dtype"
        )
    shape = [int(t.shape[i]) for i in range(t.ndim)]
    strides = [int(t.strides[i]) for i in range(t.ndim)] if t.strides else _contiguous(shape)
    ptr = int(t.data or 0) + int(t.byte_offset)
    dev = int(t.device.device_id)
    _api.PyCapsule_SetName(cap, _NAMES[name])
    return ptr, dt, shape, strides, dev, _Consumed(managed, mt.deleter)


def _from_cai(obj: Any) -> tuple[Any, ...]:
    cai = obj.__cuda_array_interface__
    try:
        npdt = np.dtype(cai["typestr"])
    except (TypeError, KeyError) as exc:
        raise RuntimeError(f"wooly: a __cuda_array_interface__ without a usable typestr: {exc}") from None
    if npdt.byteorder == ">":
        raise RuntimeError(f"wooly: big-endian device data ({cai['typestr']}) has no torch dtype")
    shape = [int(s) for s in cai["shape"]]
    if cai.get("strides") is None:
        strides = _contiguous(shape)
    else:
        if any(int(b) % npdt.itemsize for b in cai["strides"]):
            raise RuntimeError("wooly: __cuda_array_interface__ strides are not whole elements")
        strides = [int(b) // npdt.itemsize for b in cai["strides"]]
    if cai.get("mask") is not None:
        raise RuntimeError("wooly: a masked __cuda_array_interface__ array has no torch equivalent")
    name = "bool" if npdt == np.bool_ else npdt.name
    return int(cai["data"][0] or 0), name, shape, strides, S.current_device(), obj


def _describe(ext: Any) -> tuple[Any, ...] | None:
    """What to alias for a CUDA producer, or None for anything PyTorch handles itself (host data, tensors)."""
    if isinstance(ext, torch.Tensor):
        return None
    if hasattr(ext, "__dlpack_device__"):
        kind, _ = ext.__dlpack_device__()
        if int(kind) not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
            return None
        return _from_capsule(ext.__dlpack__())  # no stream: gpud waits for every stream of the session
    if type(ext).__name__ == "PyCapsule":
        return _from_capsule(ext)
    if hasattr(ext, "__cuda_array_interface__"):
        return _from_cai(ext)
    return None


def is_device_array(obj: Any) -> bool:
    return not isinstance(obj, torch.Tensor) and hasattr(obj, "__cuda_array_interface__")


def from_device_array(name: str, orig: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    """``torch.as_tensor``/``asarray`` (no copy unless asked) and ``torch.tensor`` (a copy) of a device array."""
    got = _from_cai(args[0])
    t = alias(*got)
    dtype = kwargs.get("dtype", args[1] if len(args) > 1 and name != "asarray" else None)
    device = kwargs.get("device")
    copy = name == "tensor" or kwargs.get("copy") is True
    if dtype is not None or device is not None:
        t = t.to(device=device if device is not None else t.device, dtype=dtype or t.dtype, copy=copy)
    elif copy:
        t = t.clone()
    if kwargs.get("requires_grad"):
        t.requires_grad_(True)
    return t


def patch() -> None:
    import torch.utils.dlpack as D

    from shim.torch import factories
    from shim.torch.tensor import RemoteTensor

    orig = D.from_dlpack

    @functools.wraps(orig)
    def from_dlpack(ext_tensor: Any, *, device: Any = None, copy: bool | None = None) -> Any:
        got = _describe(ext_tensor)
        if got is None:
            return orig(ext_tensor, device=device, copy=copy)
        t = alias(*got)
        if device is not None or copy:
            t = t.to(device=device if device is not None else t.device, copy=bool(copy))
        return t

    D.from_dlpack = from_dlpack
    torch.from_dlpack = from_dlpack
    factories.DEVICE_ARRAYS[:] = [is_device_array, from_device_array]

    RemoteTensor.__dlpack__ = _dlpack  # type: ignore[method-assign,assignment]
    RemoteTensor.__dlpack_device__ = _dlpack_device  # type: ignore[method-assign,assignment]
    RemoteTensor.__cuda_array_interface__ = property(_cuda_array_interface)  # type: ignore[assignment]
    orig_to = D.to_dlpack

    def to_dlpack(t: Any) -> Any:
        return _dlpack(t) if isinstance(t, RemoteTensor) else orig_to(t)

    D.to_dlpack = to_dlpack  # type: ignore[assignment]
    torch.to_dlpack = to_dlpack  # type: ignore[assignment]
