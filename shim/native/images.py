"""Reading module images handed to cuModuleLoadData / cuLibraryLoadData by pointer.

The driver API passes images without a length: PTX is NUL-terminated text, a cubin is an ELF file
(its length follows from the section headers), a fatbin starts with a header that gives its size.
Kernels must reach gpud as PTX (its backends compile PTX); a fatbin is searched for a PTX entry,
a cubin (machine code for one real GPU) is refused with CUDA_ERROR_NO_BINARY_FOR_GPU.
"""

from __future__ import annotations

import ctypes
import struct

from proto import errors as codes
from proto.errors import CudaError

FATBIN_MAGIC = 0xBA55ED50
_FATBIN_KIND_PTX = 1
_FATBIN_COMPRESSED = 0x2000


def elf_size(ptr: int) -> int:
    """Length of an ELF64 image from its header (the section header table ends it)."""
    hdr = ctypes.string_at(ptr, 64)
    shoff = struct.unpack_from("<Q", hdr, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", hdr, 0x3A)
    return int(shoff + shentsize * shnum)


def ptx_from_fatbin(data: bytes) -> bytes:
    """The PTX of the best entry of a fatbin (the highest arch not above sm_80), or raise."""
    magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, 0)
    if magic != FATBIN_MAGIC:
        raise CudaError(codes.INVALID_IMAGE, "not a fatbin")
    off, end = header_size, header_size + fat_size
    best: tuple[int, bytes] | None = None
    saw_compressed = False
    while off + 16 <= min(end, len(data)):
        kind, _u, hsize, size = struct.unpack_from("<HHIQ", data, off)
        if hsize == 0:
            break
        arch = struct.unpack_from("<I", data, off + 28)[0] if hsize >= 32 else 0
        flags = struct.unpack_from("<Q", data, off + 40)[0] if hsize >= 48 else 0
        payload = data[off + hsize : off + hsize + size]
        if kind == _FATBIN_KIND_PTX:
            if flags & _FATBIN_COMPRESSED:
                saw_compressed = True
            elif arch <= 80 and (best is None or arch > best[0]):
                best = (arch, payload.rstrip(b"\0"))
        off += hsize + size
    if best is None:
        why = "its PTX is compressed (rebuild with -Xfatbin -compress=false)" if saw_compressed else "it holds no PTX"
        raise CudaError(codes.NO_BINARY_FOR_GPU, f"fatbin cannot run on a wooly device: {why}")
    return best[1]


def read_image(ptr: int | None) -> bytes:
    """The PTX text of the image at ``ptr`` (PTX, or a fatbin carrying PTX)."""
    if not ptr:
        raise CudaError(codes.INVALID_VALUE, "module image pointer is NULL")
    head = ctypes.string_at(ptr, 4)
    if head == b"\x7fELF":
        raise CudaError(
            codes.NO_BINARY_FOR_GPU,
            "a cubin holds machine code for one real GPU; wooly devices load PTX (compile to PTX instead)",
        )
    if struct.unpack("<I", head)[0] == FATBIN_MAGIC:
        header_size, fat_size = struct.unpack_from("<HQ", ctypes.string_at(ptr, 16), 6)
        return ptx_from_fatbin(ctypes.string_at(ptr, header_size + fat_size))
    return ctypes.string_at(ptr)


def read_file(path: bytes | None) -> bytes:
    if not path:
        raise CudaError(codes.INVALID_VALUE, "file name is NULL")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CudaError(301, f"{path!r}: {exc}") from None
    buf = ctypes.create_string_buffer(data)
    return read_image(ctypes.addressof(buf))
