"""Driver API: CUDA arrays, texture objects and surface objects (NOTE [textures] in jit/texture.py).

A CUDA array is a plain device allocation in gpud, its texels packed row after row (pitch = width x texel size),
depth slices (or layers, or a cubemap's faces) after one another; its handle is that allocation's address. A texture
or surface object is the address of a 96-byte descriptor written into the tenant's own memory: what the object reads
(an array, linear or pitched memory), its extent, format and sampling state. The JIT rewrites the kernel's tex /
suld / sust statements into calls of a PTX library that reads the descriptor, so the same objects work on every
backend, and a handle a kernel forges can reach no further than its own memory.
"""

from __future__ import annotations

import ctypes
import dataclasses
import struct
from ctypes import c_size_t, c_uint64, c_void_p
from dataclasses import dataclass

from proto import errors as codes
from proto import texture
from proto.errors import CudaError
from shim.native import cu_memory
from shim.native.registry import api, put_u64
from shim.native.state import STATE

P = c_void_p
D = c_uint64

_A2D = struct.Struct("<QQII")  # CUDA_ARRAY_DESCRIPTOR
_A3D = struct.Struct("<QQQIII4x")  # CUDA_ARRAY3D_DESCRIPTOR
LAYERED, SURFACE_LDST, CUBEMAP, TEXTURE_GATHER = 0x01, 0x02, 0x04, 0x08  # CUDA_ARRAY3D_*
_KNOWN_ARRAY_FLAGS = LAYERED | SURFACE_LDST | CUBEMAP | TEXTURE_GATHER
RES_ARRAY, RES_MIPMAPPED, RES_LINEAR, RES_PITCH2D = 0, 1, 2, 3  # CUresourcetype
_RES_SIZE = 144  # CUDA_RESOURCE_DESC
_TEX = struct.Struct("<3I I I I I fff 4f 48x")  # CUDA_TEXTURE_DESC
_KNOWN_TEX_FLAGS = 0x01 | 0x02 | 0x10 | 0x20 | 0x40  # CU_TRSF_*: integer, normalized, sRGB, no trilinear, seamless
MAX_EXTENT = 1 << 16  # texels per dimension (a GPU's 3D and layered limits are smaller still)


@dataclass(frozen=True)
class Array:
    base: int
    width: int
    height: int  # as created (0 for 1D)
    depth: int  # as created (0 for 2D; layers for a layered or cubemap array)
    fmt: int
    channels: int
    flags: int

    @property
    def elem(self) -> int:
        return texture.FORMAT_BYTES[self.fmt] * self.channels

    @property
    def pitch(self) -> int:
        return self.width * self.elem

    @property
    def rows(self) -> int:
        return max(self.height, 1)

    @property
    def slices(self) -> int:
        return max(self.depth, 1)

    @property
    def size(self) -> int:
        return self.pitch * self.rows * self.slices


_arrays: dict[int, Array] = {}
_objects: dict[int, tuple[bytes, bytes, bytes]] = {}  # descriptor address -> (resource, texture desc, view desc)


def array(handle: int, what: str) -> Array:
    a = _arrays.get(int(handle or 0))
    if a is None:
        raise CudaError(codes.INVALID_HANDLE, f"{what}: 0x{int(handle or 0):x} is not a CUDA array of this context")
    return a


def _check_format(fmt: int, channels: int, what: str) -> None:
    if fmt not in texture.FORMAT_BYTES:
        raise CudaError(
            codes.INVALID_VALUE if fmt < 0x10 or fmt in (0x10, 0x20) else codes.NOT_SUPPORTED,
            f"{what}: array format 0x{fmt:x} is not supported (8/16/32-bit integers, half and float are)",
        )
    if channels not in (1, 2, 4):
        raise CudaError(codes.INVALID_VALUE, f"{what}: NumChannels must be 1, 2 or 4, not {channels}")


def _create(out: int, width: int, height: int, depth: int, fmt: int, channels: int, flags: int, what: str) -> None:
    STATE.require_current()
    if not out:
        raise CudaError(codes.INVALID_VALUE, f"{what}: pHandle is NULL")
    _check_format(fmt, channels, what)
    if flags & ~_KNOWN_ARRAY_FLAGS:
        raise CudaError(codes.INVALID_VALUE, f"{what}: unknown flags 0x{flags:x}")
    if width == 0 or (depth and not height and not flags & LAYERED):
        raise CudaError(codes.INVALID_VALUE, f"{what}: extent {width} x {height} x {depth} is not an array's")
    if flags & CUBEMAP and (width != height or depth == 0 or depth % 6):
        raise CudaError(
            codes.INVALID_VALUE,
            f"{what}: a cubemap needs Width == Height and Depth a multiple of 6 ({width}, {height})",
        )
    if max(width, height, depth) > MAX_EXTENT:
        raise CudaError(codes.INVALID_VALUE, f"{what}: extent {width} x {height} x {depth} exceeds {MAX_EXTENT}")
    a = Array(0, width, height, depth, fmt, channels, flags)
    a = dataclasses.replace(a, base=STATE.driver().mem_alloc(a.size))
    _arrays[a.base] = a
    put_u64(out, a.base)


@api("cuArrayCreate", 3020, P, P)
def cuArrayCreate(out: int, desc: int) -> None:
    if not desc:
        raise CudaError(codes.INVALID_VALUE, "cuArrayCreate: pAllocateArray is NULL")
    width, height, fmt, channels = _A2D.unpack(ctypes.string_at(desc, _A2D.size))
    _create(out, width, height, 0, fmt, channels, 0, "cuArrayCreate")


@api("cuArray3DCreate", 3020, P, P)
def cuArray3DCreate(out: int, desc: int) -> None:
    if not desc:
        raise CudaError(codes.INVALID_VALUE, "cuArray3DCreate: pAllocateArray is NULL")
    width, height, depth, fmt, channels, flags = _A3D.unpack(ctypes.string_at(desc, _A3D.size))
    _create(out, width, height, depth, fmt, channels, flags, "cuArray3DCreate")


@api("cuArrayDestroy", 2000, D)
def cuArrayDestroy(handle: int) -> None:
    a = array(handle, "cuArrayDestroy")
    del _arrays[a.base]
    STATE.driver().mem_free(a.base)


@api("cuArrayGetDescriptor", 3020, P, D)
def cuArrayGetDescriptor(out: int, handle: int) -> None:
    a = array(handle, "cuArrayGetDescriptor")
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuArrayGetDescriptor: pArrayDescriptor is NULL")
    if a.depth:
        raise CudaError(codes.INVALID_VALUE, "cuArrayGetDescriptor: a 3D or layered array: use cuArray3DGetDescriptor")
    ctypes.memmove(out, _A2D.pack(a.width, a.height, a.fmt, a.channels), _A2D.size)


@api("cuArray3DGetDescriptor", 3020, P, D)
def cuArray3DGetDescriptor(out: int, handle: int) -> None:
    a = array(handle, "cuArray3DGetDescriptor")
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuArray3DGetDescriptor: pArrayDescriptor is NULL")
    ctypes.memmove(out, _A3D.pack(a.width, a.height, a.depth, a.fmt, a.channels, a.flags), _A3D.size)


def _linear(handle: int, offset: int, size: int, what: str) -> int:
    a = array(handle, what)
    if offset + size > a.size:
        raise CudaError(codes.INVALID_VALUE, f"{what}: {size} bytes at offset {offset} run past the array's {a.size}")
    return a.base + offset


@api("cuMemcpyHtoA", 3020, D, c_size_t, P, c_size_t)
def cuMemcpyHtoA(handle: int, offset: int, src: int, size: int) -> None:
    cu_memory.htod(_linear(handle, offset, size, "cuMemcpyHtoA"), src, size, 0, "cuMemcpyHtoA")


@api("cuMemcpyAtoH", 3020, P, D, c_size_t, c_size_t)
def cuMemcpyAtoH(dst: int, handle: int, offset: int, size: int) -> None:
    cu_memory.dtoh(dst, _linear(handle, offset, size, "cuMemcpyAtoH"), size, 0, "cuMemcpyAtoH")


@api("cuMemcpyDtoA", 3020, D, c_size_t, D, c_size_t)
def cuMemcpyDtoA(handle: int, offset: int, src: int, size: int) -> None:
    cu_memory.dtod(_linear(handle, offset, size, "cuMemcpyDtoA"), src, size, 0, "cuMemcpyDtoA")


@api("cuMemcpyAtoD", 3020, D, D, c_size_t, c_size_t)
def cuMemcpyAtoD(dst: int, handle: int, offset: int, size: int) -> None:
    cu_memory.dtod(dst, _linear(handle, offset, size, "cuMemcpyAtoD"), size, 0, "cuMemcpyAtoD")


# ---------------------------------------------------------------------------- texture and surface objects
def _resource(res: bytes, what: str) -> dict:
    """The extent and layout of what a CUDA_RESOURCE_DESC names, checked against its allocation."""
    (kind,) = struct.unpack_from("<I", res, 0)
    if struct.unpack_from("<I", res, 136)[0]:
        raise CudaError(codes.INVALID_VALUE, f"{what}: CUDA_RESOURCE_DESC.flags must be 0")
    if kind == RES_ARRAY:
        a = array(struct.unpack_from("<Q", res, 8)[0], what)
        layered = bool(a.flags & (LAYERED | CUBEMAP))
        return {
            "base": a.base, "pitch": a.pitch, "slice": a.pitch * a.rows, "width": a.width, "height": a.rows,
            "depth": 1 if layered else a.slices, "layers": a.slices if layered else 1, "fmt": a.fmt,
            "channels": a.channels, "surface": bool(a.flags & SURFACE_LDST),
        }  # fmt: skip
    if kind == RES_LINEAR:
        ptr, fmt, channels, size = struct.unpack_from("<QIIQ", res, 8)
        _check_format(fmt, channels, what)
        elem = texture.FORMAT_BYTES[fmt] * channels
        if size == 0 or size % elem:
            raise CudaError(codes.INVALID_VALUE, f"{what}: sizeInBytes {size} is not a whole number of texels")
        cu_memory.check_device(ptr, size, what)
        return {
            "base": ptr, "pitch": size, "slice": size, "width": size // elem, "height": 1, "depth": 1, "layers": 1,
            "fmt": fmt, "channels": channels, "surface": False,
        }  # fmt: skip
    if kind == RES_PITCH2D:
        ptr, fmt, channels, width, height, pitch = struct.unpack_from("<QIIQQQ", res, 8)
        _check_format(fmt, channels, what)
        elem = texture.FORMAT_BYTES[fmt] * channels
        if not width or not height or pitch < width * elem or max(width, height) > MAX_EXTENT:
            raise CudaError(codes.INVALID_VALUE, f"{what}: pitch2D {width} x {height}, pitch {pitch} is not valid")
        cu_memory.check_device(ptr, pitch * (height - 1) + width * elem, what)
        return {
            "base": ptr, "pitch": pitch, "slice": pitch * height, "width": width, "height": height, "depth": 1,
            "layers": 1, "fmt": fmt, "channels": channels, "surface": False,
        }  # fmt: skip
    if kind == RES_MIPMAPPED:
        raise CudaError(codes.NOT_SUPPORTED, f"{what}: mipmapped arrays are not supported")
    raise CudaError(codes.INVALID_VALUE, f"{what}: unknown resource type {kind}")


def _write_descriptor(raw: bytes, what: str) -> int:
    addr = STATE.driver().mem_alloc(texture.DESC_SIZE)
    buf = ctypes.create_string_buffer(raw, len(raw))
    cu_memory.htod(addr, ctypes.addressof(buf), len(raw), 0, what)
    STATE.driver().stream_synchronize(0)  # any stream's next kernel may read it
    return addr


@api("cuTexObjectCreate", 5000, P, P, P, P)
def cuTexObjectCreate(out: int, res_desc: int, tex_desc: int, view_desc: int) -> None:
    what = "cuTexObjectCreate"
    STATE.require_current()
    if not out or not res_desc or not tex_desc:
        raise CudaError(codes.INVALID_VALUE, f"{what}: pTexObject, pResDesc and pTexDesc must not be NULL")
    if view_desc:
        raise CudaError(codes.NOT_SUPPORTED, f"{what}: resource views are not supported")
    res = ctypes.string_at(res_desc, _RES_SIZE)
    tex = ctypes.string_at(tex_desc, _TEX.size)
    r = _resource(res, what)
    a0, a1, a2, filt, flags, _aniso, _mfilt, _bias, _lo, _hi, *border = _TEX.unpack(tex)
    if any(m > 3 for m in (a0, a1, a2)) or filt > 1:
        raise CudaError(codes.INVALID_VALUE, f"{what}: unknown address mode or filter mode")
    if flags & ~_KNOWN_TEX_FLAGS:
        raise CudaError(codes.INVALID_VALUE, f"{what}: unknown flags 0x{flags:x}")
    if flags & 0x10:
        raise CudaError(codes.NOT_SUPPORTED, f"{what}: sRGB conversion (CU_TRSF_SRGB) is not supported")
    if filt == 1 and (r["fmt"] in (0x03, 0x0A) or flags & 0x01 and r["fmt"] not in (0x10, 0x20)):
        raise CudaError(codes.INVALID_VALUE, f"{what}: linear filtering needs texels read as floats")
    modes = (a0, a1, a2)
    if not flags & 0x02:  # wrap and mirror need normalized coordinates; a texture unit clamps unnormalized ones
        a0, a1, a2 = (1 if m in (0, 2) else m for m in modes)
        modes = (a0, a1, a2)
    raw = texture.pack_descriptor(
        r["base"], r["pitch"], r["slice"], r["width"], r["height"], r["depth"], r["layers"], r["fmt"], r["channels"],
        modes, filt, flags, tuple(border),
    )  # fmt: skip
    addr = _write_descriptor(raw, what)
    _objects[addr] = (res, tex, b"")
    put_u64(out, addr)


@api("cuSurfObjectCreate", 5000, P, P)
def cuSurfObjectCreate(out: int, res_desc: int) -> None:
    what = "cuSurfObjectCreate"
    STATE.require_current()
    if not out or not res_desc:
        raise CudaError(codes.INVALID_VALUE, f"{what}: pSurfObject and pResDesc must not be NULL")
    res = ctypes.string_at(res_desc, _RES_SIZE)
    if struct.unpack_from("<I", res, 0)[0] != RES_ARRAY:
        raise CudaError(codes.INVALID_VALUE, f"{what}: a surface's resource must be a CUDA array")
    r = _resource(res, what)
    if not r["surface"]:
        raise CudaError(codes.INVALID_VALUE, f"{what}: the array was not created with CUDA_ARRAY3D_SURFACE_LDST")
    raw = texture.pack_descriptor(
        r["base"], r["pitch"], r["slice"], r["width"], r["height"], r["depth"], r["layers"], r["fmt"], r["channels"],
    )  # fmt: skip
    addr = _write_descriptor(raw, what)
    _objects[addr] = (res, b"", b"")
    put_u64(out, addr)


def _object(handle: int, what: str) -> tuple[bytes, bytes, bytes]:
    o = _objects.get(int(handle or 0))
    if o is None:
        raise CudaError(codes.INVALID_HANDLE, f"{what}: 0x{int(handle or 0):x} is not an object of this context")
    return o


def _destroy(handle: int, what: str) -> None:
    _object(handle, what)
    del _objects[handle]
    STATE.driver().mem_free(handle)


@api("cuTexObjectDestroy", 5000, D)
def cuTexObjectDestroy(handle: int) -> None:
    _destroy(handle, "cuTexObjectDestroy")


@api("cuSurfObjectDestroy", 5000, D)
def cuSurfObjectDestroy(handle: int) -> None:
    _destroy(handle, "cuSurfObjectDestroy")


def _get(out: int, raw: bytes, what: str) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, f"{what}: output pointer is NULL")
    if not raw:
        raise CudaError(codes.INVALID_HANDLE, f"{what}: the object has no such descriptor")
    ctypes.memmove(out, raw, len(raw))


@api("cuTexObjectGetResourceDesc", 5000, P, D)
def cuTexObjectGetResourceDesc(out: int, handle: int) -> None:
    _get(out, _object(handle, "cuTexObjectGetResourceDesc")[0], "cuTexObjectGetResourceDesc")


@api("cuSurfObjectGetResourceDesc", 5000, P, D)
def cuSurfObjectGetResourceDesc(out: int, handle: int) -> None:
    _get(out, _object(handle, "cuSurfObjectGetResourceDesc")[0], "cuSurfObjectGetResourceDesc")


@api("cuTexObjectGetTextureDesc", 5000, P, D)
def cuTexObjectGetTextureDesc(out: int, handle: int) -> None:
    _get(out, _object(handle, "cuTexObjectGetTextureDesc")[1], "cuTexObjectGetTextureDesc")


def array_side(handle: int, what: str) -> tuple[int, int, int]:
    """(base, pitch, rows) of a CUDA array as one side of a 2D or 3D copy."""
    a = array(handle, what)
    return a.base, a.pitch, a.rows
