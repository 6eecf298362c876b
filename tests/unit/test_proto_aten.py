"""proto/aten.py's value codec: every kind of op-argument leaf survives encode -> wire -> decode,
and its wire bytes are the ones pinned here (NOTE [aten values])."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import msgpack
import msgspec
import pytest
from msgspec.msgpack import Ext

torch = pytest.importorskip("torch")

from proto import aten as W  # noqa: E402
from proto.errors import INVALID_VALUE, CudaError  # noqa: E402

ENC = W.encoder()
DEC = W.decoder()


class _Sess:
    """The decoder's AtenSession: a tensor table, a device, a generator and bulk frames."""

    def __init__(self, bulk: list[bytes] | None = None) -> None:
        self.device = torch.device("cpu")
        self.gen = torch.Generator(self.device)
        self.tensors = {7: torch.arange(3.0), (1 << 40) + 5: torch.ones(2)}
        self.bulk = bulk or []

    def get(self, h: int) -> Any:
        if h not in self.tensors:
            raise CudaError(INVALID_VALUE, f"no tensor {h}")
        return self.tensors[h]

    def from_frame(self, frame: Any, dtype: Any, shape: list[int], device: Any) -> Any:
        raw = bytearray(self.bulk[frame])
        return torch.frombuffer(raw, dtype=dtype).reshape(shape).to(device)


def wire(v: Any) -> Any:
    """What the other end sees: written by the client's msgspec encoder, read as gpud's codec reads it."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(v))  # as proto/codec.py's decoder: no ext hook


def roundtrip(ext: Any, sess: _Sess | None = None) -> Any:
    got = wire(ext)
    assert isinstance(got, msgspec.msgpack.Ext)
    return DEC.decode(got, sess or _Sess())


def test_importing_proto_aten_does_not_import_torch() -> None:
    code = "import sys, proto.aten; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("dt", [getattr(torch, n) for n in W.DTYPES if hasattr(torch, n)])
def test_dtype(dt: Any) -> None:
    name = str(dt).removeprefix("torch.")
    assert ENC.dtype[dt] == ENC.encode(dt) == Ext(W.EXT_DTYPE, name.encode())
    assert roundtrip(ENC.dtype[dt]) is dt
    assert ENC.name_dtype[ENC.dtype_name[dt]] is dt


@pytest.mark.parametrize("name", W.MEMORY_FORMATS)
def test_memory_format(name: str) -> None:
    mf = getattr(torch, name)
    assert ENC.memory_format[mf] == ENC.encode(mf) == Ext(W.EXT_MEMFMT, name.encode())
    assert roundtrip(ENC.memory_format[mf]) is mf


@pytest.mark.parametrize("name", W.LAYOUTS)
def test_layout(name: str) -> None:
    lay = getattr(torch, name)
    assert ENC.layout[lay] == ENC.encode(lay) == Ext(W.EXT_LAYOUT, name.encode())
    assert roundtrip(ENC.layout[lay]) is lay


@pytest.mark.parametrize(("dev", "data"), [("cpu", b"cpu"), ("cuda", b"cuda"), ("cuda:1", b"cuda"), ("meta", b"cuda")])
def test_device(dev: str, data: bytes) -> None:
    d = torch.device(dev)
    assert ENC.device(d) == ENC.encode(d) == Ext(W.EXT_DEVICE, data)
    sess = _Sess()
    assert roundtrip(ENC.device(d), sess) is sess.device  # every device is the session's


def test_generator() -> None:
    g = torch.Generator()
    assert ENC.encode(g) == ENC.generator == Ext(W.EXT_GENERATOR, b"")
    sess = _Sess()
    assert roundtrip(ENC.generator, sess) is sess.gen


@pytest.mark.parametrize("z", [1.5 - 2j, complex(0, 0), complex(-1e300, 3.25)])
def test_complex(z: complex) -> None:
    ext = ENC.encode(z)
    assert ext == ENC.complex(z) == Ext(W.EXT_COMPLEX, msgpack.packb([z.real, z.imag]))
    got = roundtrip(ext)
    assert type(got) is complex and got == z


@pytest.mark.parametrize(
    "t",
    [
        torch.tensor(3.5),
        torch.tensor(7, dtype=torch.int64),
        torch.tensor(True),
        torch.tensor(2.5, dtype=torch.float16),
        torch.tensor(1 - 2j, dtype=torch.complex64),
    ],
)
def test_scalar_tensor(t: Any) -> None:
    ext = ENC.scalar_tensor(t)
    value = t.item()
    value = [value.real, value.imag] if isinstance(value, complex) else value
    assert ext == Ext(W.EXT_SCALAR_TENSOR, msgpack.packb([ENC.dtype_name[t.dtype], value]))
    got = roundtrip(ext)
    assert got.dim() == 0 and got.dtype == t.dtype and bool(got == t)


def test_host_tensor() -> None:
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    ext = ENC.host_tensor(1, t.dtype, t.shape)
    assert ext == Ext(W.EXT_HOST_TENSOR, msgpack.packb([1, "int32", [2, 3]]))
    got = roundtrip(ext, _Sess([b"junk", t.numpy().tobytes()]))
    assert got.dtype == torch.int32 and torch.equal(got, t)


@pytest.mark.parametrize("h", [7, (1 << 40) + 5])
def test_tensor_handle(h: int) -> None:
    ext = W.tensor_ref(h)
    assert ext == ENC.tensor(h) == Ext(W.EXT_TENSOR, h.to_bytes(8, "little"))
    assert msgspec.msgpack.encode(ext) == msgpack.packb(msgpack.ExtType(W.EXT_TENSOR, h.to_bytes(8, "little")))
    sess = _Sess()
    assert roundtrip(ext, sess) is sess.tensors[h]


def test_nested_arguments() -> None:
    sess = _Sess()
    args = [
        [W.tensor_ref(7), 2, None],
        {"dtype": ENC.dtype[torch.float64], "alpha": 0.5, "memory_format": ENC.memory_format[torch.channels_last]},
        "x",
    ]
    got = DEC.decode(wire(args), sess)
    assert got == [
        [sess.tensors[7], 2, None],
        {"dtype": torch.float64, "alpha": 0.5, "memory_format": torch.channels_last},
        "x",
    ]


def test_unsendable_value() -> None:
    with pytest.raises(TypeError, match="cannot send a object"):
        ENC.encode(object())


@pytest.mark.parametrize(
    "ext",
    [
        msgpack.ExtType(W.EXT_TENSOR, b"\x07"),  # not 8 bytes
        msgpack.ExtType(W.EXT_TENSOR, (99).to_bytes(8, "little")),  # not live
        msgpack.ExtType(W.EXT_DTYPE, b"float33"),
        msgpack.ExtType(W.EXT_MEMFMT, b"\xff\xfe"),
        msgpack.ExtType(W.EXT_LAYOUT, b"jagged"),
        msgpack.ExtType(W.EXT_SCALAR_TENSOR, msgpack.packb(["nope", 1])),
        msgpack.ExtType(W.EXT_HOST_TENSOR, msgpack.packb([0, "float32", [-1]])),
        msgpack.ExtType(77, b"x"),
    ],
)
def test_bad_values_are_invalid_value(ext: Any) -> None:
    with pytest.raises(CudaError) as e:
        DEC.decode([ext], _Sess())
    assert e.value.code == INVALID_VALUE


def test_client_hot_path_uses_proto_encoding() -> None:
    """shim/torch/dispatch.py's one-pass encoder emits exactly proto's encoding."""
    from shim.torch import dispatch

    enc = dispatch._Enc(by_value=False)
    leaves = [
        torch.float32,
        torch.device("cuda", 0),
        torch.device("cpu"),
        torch.channels_last,
        torch.strided,
        torch.Generator(),
        2 + 3j,
        torch.tensor(4.0),
    ]
    got = [enc.enc(v) for v in leaves]
    want = [ENC.encode(v) for v in leaves[:-1]] + [ENC.scalar_tensor(leaves[-1])]
    assert got == want
    assert [msgspec.msgpack.encode(g) for g in got] == [msgspec.msgpack.encode(w) for w in want]
