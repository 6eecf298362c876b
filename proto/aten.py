"""The ATen op stream's value encoding (NOTE [aten wire] in proto/messages.py).

Op arguments are msgpack values; what msgpack has no type for travels as an ext type whose code
is below. The encoding itself is here too, as one pair both ends call (NOTE [aten values]):
``encoder()`` on the client, ``decoder()`` on gpud, so it is defined in one place.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import msgpack
import msgspec

from proto.errors import INVALID_VALUE, CudaError

EXT_TENSOR = 1  # 8-byte little-endian handle of a tensor in the session's table
EXT_DTYPE = 2  # ascii dtype name without "torch." ("float32")
EXT_DEVICE = 3  # ascii device type ("cuda", "cpu"); any accelerator device means gpud's device
EXT_MEMFMT = 4  # ascii memory format name ("contiguous_format", "channels_last", ...)
EXT_LAYOUT = 5  # ascii layout name ("strided")
EXT_SCALAR_TENSOR = 6  # msgpack [dtype, value]: a 0-dim host tensor (CUDA ops accept those)
EXT_HOST_TENSOR = 7  # msgpack [frame, dtype, shape]: a host tensor whose bytes ride in a bulk frame
EXT_COMPLEX = 8  # msgpack [real, imag]
EXT_GENERATOR = 9  # the session's generator (its state lives on gpud)

# Pseudo-ops carried in the same stream as ATen ops.
OP_FREE = "wooly.free"  # args: handles to drop
OP_UPLOAD = "wooly.upload"  # args: [frame, dtype, shape], outs: [handle]
OP_SEED = "wooly.seed"  # args: [seed]
OP_FETCH = "wooly.fetch"  # args: [tensor] -> [dtype, shape] + one bulk frame (sync only)
OP_STATS = "wooly.stats"  # -> {"allocated", "peak", "tensors", "device"} (sync only)
OP_RESET_PEAK = "wooly.reset_peak"
OP_GET_RNG = "wooly.get_rng_state"  # -> bytes (sync only)
OP_SET_RNG = "wooly.set_rng_state"  # args: [bytes]
OP_SYNC = "wooly.sync"  # nothing: waits for the session's queued ops
OP_GRAPH_DEFINE = "wooly.graph_define"  # args: [graph id, [op, ...]]: a captured CUDA graph (NOTE [aten graphs])
OP_GRAPH_REPLAY = "wooly.graph_replay"  # args: [graph id]
OP_GRAPH_DROP = "wooly.graph_drop"  # args: [graph id]
# NOTE [migration] (gpud/migrate.py): only gpud sends these (a client's are refused by gpud/aten.py)
OP_MOVE_EXPORT = "wooly.move_export"  # -> the tensor table + one bulk frame per storage (sync only)
OP_MOVE_IMPORT = "wooly.move_import"  # args: [what move_export returned], bulk: its storages
BROKER_ONLY = frozenset({OP_MOVE_EXPORT, OP_MOVE_IMPORT})
# NOTE [storage resize] (shim/torch/storage.py): a remote tensor's storage on gpud
OP_RESIZE_STORAGE = "wooly.resize_storage"  # args: [tensor, nbytes]: its storage, for every view
OP_STORAGE_INFO = "wooly.storage_info"  # args: [tensor] -> [storage id, nbytes] (sync only)
# NOTE [shared tensors] (gpud/aten_share.py): synchronous calls only; gpud's broker adds their scope
OP_SHARE_EXPORT = "wooly.share_export"  # args: [tensor] -> a token for another process of the tenant
OP_SHARE_IMPORT = "wooly.share_import"  # args: [token] -> the tensor, described as a synchronous op's result
SHARE_OPS = frozenset({OP_SHARE_EXPORT, OP_SHARE_IMPORT})
# NOTE [device memory aliases] (gpud/aten_alias.py): a synchronous call only; gpud's broker adds the memory
OP_ALIAS_DEVICE = "wooly.alias_device"  # args: [pointer, bytes, dtype, shape, stride] -> the tensor over that memory
OP_EXPORT_DEVICE = "wooly.export_device"  # args: [tensor] -> the device address of its first element
LENDING_OPS = frozenset({OP_ALIAS_DEVICE, OP_EXPORT_DEVICE})
OP_SET_LIMIT = (
    "wooly.set_limit"  # args: [bytes or 0]: cap this session's tensor bytes (set_per_process_memory_fraction)
)

# Wire names of the dtypes both ends know.
DTYPES = (
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
    "uint16",
    "uint32",
    "uint64",
    "complex32",
)
MEMORY_FORMATS = ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")
LAYOUTS = ("strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc")


# ---------------------------------------------------------------------- the value codec
# NOTE [aten values]: one encode/decode pair for every op-argument leaf msgpack has no type for.
# ``encoder()`` (the client) turns torch values into ``msgspec.msgpack.Ext`` (what the client's msgspec encoder
# writes); ``decoder()`` (gpud) reads them back as the same ``msgspec.msgpack.Ext``: proto/codec.py decodes a
# request without an ext hook and gpud/chan.py hands the ops to an executor with msgspec, so an argument is never
# rebuilt as a Python object on its way (a ``msgpack.ExtType`` is: ~4 us each on a 2-core host, 11 us per op of
# a batch of tensor ops). Both are built once per process, on first use, from the torch they are given
# (the process's own by default): importing this module never imports torch. The client's hot
# path (shim/torch/dispatch.py) reads the encoder's precomputed tables directly: a dict lookup
# per dtype/memory format/layout, a shared ExtType per device kind and for the generator.
#
#   value                         ext code           payload
#   device tensor (handle h)      EXT_TENSOR         h as 8 bytes, little-endian
#   torch.dtype                   EXT_DTYPE          b"float32"
#   torch.device                  EXT_DEVICE         b"cpu", or b"cuda" for any other device type
#   torch.memory_format           EXT_MEMFMT         b"channels_last"
#   torch.layout                  EXT_LAYOUT         b"strided"
#   torch.Generator               EXT_GENERATOR      b"" (gpud uses the session's generator)
#   complex                       EXT_COMPLEX        msgpack [real, imag]
#   0-dim host tensor             EXT_SCALAR_TENSOR  msgpack [dtype name, value or [real, imag]]
#   host tensor in bulk frame f   EXT_HOST_TENSOR    msgpack [f, dtype name, shape]

_Ext = msgspec.msgpack.Ext
# an ext value as gpud reads it: msgspec's (the wire) or msgpack's (a value decoded by msgpack-python)
EXT_TYPES = (_Ext, msgpack.ExtType)
_MAX_DIMS = 64
_MAX_DIM = 1 << 48


def tensor_ref(h: int) -> msgspec.msgpack.Ext:
    """A device tensor's wire form: its handle in the session's tensor table."""
    return _Ext(EXT_TENSOR, h.to_bytes(8, "little"))


def dtype_tables(torch: Any) -> tuple[dict[Any, str], dict[str, Any]]:
    """``(dtype -> wire name, wire name -> dtype)`` for the ``DTYPES`` this torch has."""
    to_name = {dt: n for n in DTYPES if isinstance(dt := getattr(torch, n, None), torch.dtype)}
    return to_name, {n: dt for dt, n in to_name.items()}


def check_shape(v: Any) -> list[int]:
    """A shape from the wire: a list of at most 64 non-negative ints below 2**48."""
    if not isinstance(v, list) or len(v) > _MAX_DIMS or not all(isinstance(d, int) and 0 <= d < _MAX_DIM for d in v):
        raise CudaError(INVALID_VALUE, f"invalid shape {str(v)[:80]}")
    return v


class Encoder:
    """The client half: torch values -> ``msgspec.msgpack.Ext`` (see NOTE [aten values]).

    The tables are public so the hot path can index them without a call: ``dtype``,
    ``memory_format`` and ``layout`` map torch objects to their ExtType; ``dtype_name`` and
    ``name_dtype`` map dtypes to wire names and back; ``device_cuda``, ``device_cpu`` and
    ``generator`` are shared ExtTypes.
    """

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.dtype_name, self.name_dtype = dtype_tables(torch)
        self.dtype = {dt: _Ext(EXT_DTYPE, n.encode()) for dt, n in self.dtype_name.items()}
        self.memory_format = {getattr(torch, n): _Ext(EXT_MEMFMT, n.encode()) for n in MEMORY_FORMATS}
        self.layout = {getattr(torch, n): _Ext(EXT_LAYOUT, n.encode()) for n in LAYOUTS}
        self.device_cuda = _Ext(EXT_DEVICE, b"cuda")
        self.device_cpu = _Ext(EXT_DEVICE, b"cpu")
        self.generator = _Ext(EXT_GENERATOR, b"")

    tensor = staticmethod(tensor_ref)

    def device(self, dev: Any) -> msgspec.msgpack.Ext:
        return self.device_cpu if dev.type == "cpu" else self.device_cuda

    @staticmethod
    def complex(v: complex) -> msgspec.msgpack.Ext:
        return _Ext(EXT_COMPLEX, msgpack.packb([v.real, v.imag]))

    def scalar_tensor(self, t: Any) -> msgspec.msgpack.Ext:
        """A 0-dim host tensor, sent by value."""
        value = t.item()
        if isinstance(value, complex):
            value = [value.real, value.imag]
        return _Ext(EXT_SCALAR_TENSOR, msgpack.packb([self.dtype_name[t.dtype], value]))

    def host_tensor(self, frame: int, dtype: Any, shape: Any) -> msgspec.msgpack.Ext:
        """A host tensor whose contiguous bytes ride in bulk frame ``frame`` of the same message."""
        return _Ext(EXT_HOST_TENSOR, msgpack.packb([frame, self.dtype_name[dtype], list(shape)]))

    def encode(self, v: Any) -> msgspec.msgpack.Ext:
        """Any one leaf but tensors (whose wire form needs a handle or a frame: ``tensor``,
        ``scalar_tensor``, ``host_tensor``). The hot path inlines this."""
        torch = self.torch
        t = type(v)
        if t is torch.dtype:
            return self.dtype[v]
        if t is torch.device:
            return self.device(v)
        if t is torch.memory_format:
            return self.memory_format[v]
        if t is torch.layout:
            return self.layout[v]
        if isinstance(v, torch.Generator):
            return self.generator
        if t is complex:
            return self.complex(v)
        raise TypeError(f"wooly: cannot send a {t.__name__} argument to gpud")


class AtenSession(Protocol):
    """What gpud's decoder needs from the session it decodes for (gpud/aten_exec.Executor)."""

    device: Any  # every EXT_DEVICE is this device
    gen: Any  # every EXT_GENERATOR is this generator

    def get(self, h: int) -> Any: ...  # the live tensor under handle h (raises CudaError if none)

    def from_frame(self, frame: Any, dtype: Any, shape: list[int], device: Any) -> Any: ...


class Decoder:
    """The gpud half: ``msgpack.ExtType`` -> torch values (see NOTE [aten values]).

    Every input is hostile: anything malformed raises ``CudaError(INVALID_VALUE)``.
    """

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.dtype_name, self.name_dtype = dtype_tables(torch)
        self.memory_format = {n: getattr(torch, n) for n in MEMORY_FORMATS}
        self.layout = {n: getattr(torch, n) for n in LAYOUTS}

    def dtype(self, name: Any) -> Any:
        dt = self.name_dtype.get(name.decode() if isinstance(name, bytes) else name)
        if dt is None:
            raise CudaError(INVALID_VALUE, f"unknown dtype {str(name)[:40]!r}")
        return dt

    def decode(self, v: Any, sess: AtenSession) -> Any:
        """An op's arguments (lists, dicts, plain msgpack values and ext values), decoded."""
        if isinstance(v, list):
            return [self.decode(x, sess) for x in v]
        if isinstance(v, EXT_TYPES):
            return self.ext(v.code, cast(bytes, v.data), sess)
        if isinstance(v, dict):
            return {str(k): self.decode(x, sess) for k, x in v.items()}
        return v

    def ext(self, code: int, data: bytes, sess: AtenSession) -> Any:
        if code == EXT_TENSOR:
            if len(data) != 8:
                raise CudaError(INVALID_VALUE, "tensor handle must be 8 bytes")
            return sess.get(int.from_bytes(data, "little"))
        if code == EXT_DTYPE:
            return self.dtype(data)
        if code == EXT_DEVICE:
            return sess.device
        if code == EXT_MEMFMT:
            return _lookup(self.memory_format, data, "memory format")
        if code == EXT_LAYOUT:
            return _lookup(self.layout, data, "layout")
        if code == EXT_GENERATOR:
            return sess.gen
        if code == EXT_COMPLEX:
            re_, im = msgpack.unpackb(data)
            return complex(float(re_), float(im))
        if code == EXT_SCALAR_TENSOR:
            dt, value = msgpack.unpackb(data)
            if isinstance(value, list):
                value = complex(*value)
            return self.torch.tensor(value, dtype=self.dtype(dt))
        if code == EXT_HOST_TENSOR:
            frame, dt, shape = msgpack.unpackb(data)
            return sess.from_frame(frame, self.dtype(dt), check_shape(shape), sess.device)
        raise CudaError(INVALID_VALUE, f"unknown value type {code} in an aten op")


def _lookup(table: dict[str, Any], data: bytes, what: str) -> Any:
    v = table.get(data.decode(errors="replace"))
    if v is None:
        raise CudaError(INVALID_VALUE, f"unknown {what} {data[:40]!r}")
    return v


_encoder: Encoder | None = None
_decoder: Decoder | None = None


def encoder() -> Encoder:
    """The process's encoder, built from its torch on first use."""
    global _encoder
    if _encoder is None:
        import torch

        _encoder = Encoder(torch)
    return _encoder


def decoder() -> Decoder:
    """The process's decoder, built from its torch on first use."""
    global _decoder
    if _decoder is None:
        import torch

        _decoder = Decoder(torch)
    return _decoder
