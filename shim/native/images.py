"""Reading module images handed to cuModuleLoadData / cuLibraryLoadData by pointer.

The driver API passes images without a length: PTX is NUL-terminated text, a cubin is an ELF file
(its length follows from the section headers), a fatbin starts with a header that gives its size.
Kernels must reach gpud as PTX (its backends compile PTX); a fatbin is searched for a PTX entry
(decompressed: nvcc 13 compresses with zstd, CUDA 12 with LZ4), nvcc's fatbin wrapper (what the
CUDA runtime registers) is unwrapped, and a cubin or a fatbin with machine code only is refused
with CUDA_ERROR_NO_BINARY_FOR_GPU naming the nvcc flag that embeds PTX.
"""

from __future__ import annotations

import ctypes
import re
import struct
from dataclasses import dataclass

from proto import errors as codes
from proto.errors import CudaError

FATBIN_MAGIC = 0xBA55ED50
FATBINC_MAGIC = 0x466243B1  # the wrapper that __cudaRegisterFatBinary and cuLibraryLoadData receive from nvcc
FATBINC_LINK_VERSION = 2  # the wrapper of a device-linked (-rdc) program: its objects' fatbins beside the image
_KIND_PTX, _KIND_ELF = 1, 2
_LZ4, _ZSTD = 0x2000, 0x8000
MAX_PTX_BYTES = 256 << 20  # a decompressed entry larger than this is refused, not inflated


@dataclass
class FatbinEntry:
    """One file of a fatbin: ``kind`` 1 PTX / 2 cubin, the GPU architecture, its (decoded) payload."""

    kind: int
    arch: int
    flags: int
    payload: bytes
    size: int  # the uncompressed size the header gives (0 when not compressed)


def fatbin_entries(data: bytes) -> list[FatbinEntry]:
    """The entries of one fatbin (header magic 0xBA55ED50), compressed payloads still compressed."""
    magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, 0)
    if magic != FATBIN_MAGIC:
        raise CudaError(codes.INVALID_IMAGE, "not a fatbin")
    out: list[FatbinEntry] = []
    off, end = header_size, min(header_size + fat_size, len(data))
    while off + 16 <= end:
        kind, _v, hsize, payload_size, _u0, compressed = struct.unpack_from("<HHIIII", data, off)
        if hsize < 16:
            break
        arch = struct.unpack_from("<I", data, off + 28)[0] if hsize >= 32 else 0
        flags = struct.unpack_from("<Q", data, off + 40)[0] if hsize >= 48 else 0
        size = struct.unpack_from("<Q", data, off + 56)[0] if hsize >= 64 else 0
        length = compressed if flags & (_LZ4 | _ZSTD) and compressed else payload_size
        out.append(FatbinEntry(kind, arch, flags, data[off + hsize : off + hsize + length], size))
        off += hsize + max(payload_size, compressed)
    return out


def _decompress(entry: FatbinEntry) -> bytes:
    """The entry's payload as written by the compiler (nvcc 13 compresses with zstd, CUDA 12 with LZ4)."""
    try:
        if entry.flags & _ZSTD:
            import zstandard

            return zstandard.ZstdDecompressor().decompress(entry.payload, max_output_size=MAX_PTX_BYTES)
        if entry.flags & _LZ4:
            import lz4.block

            if not 0 < entry.size <= MAX_PTX_BYTES:
                raise ValueError(f"uncompressed size {entry.size} out of range")
            return lz4.block.decompress(entry.payload, uncompressed_size=entry.size)
    except ImportError as exc:
        raise CudaError(
            codes.NOT_SUPPORTED, f"the fatbin's PTX is compressed and {exc.name} is not installed"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a corrupt payload is the image's fault
        raise CudaError(codes.INVALID_IMAGE, f"the fatbin's compressed PTX does not decompress: {exc}") from None
    return entry.payload


def _elf_kernels(image: bytes) -> list[str]:
    """Kernel names of a cubin (its ``.text.<name>`` sections), for the message that it cannot run here."""
    try:
        shoff = struct.unpack_from("<Q", image, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
        strtab = struct.unpack_from("<Q", image, shoff + shstrndx * shentsize + 0x18)[0]
        names = []
        for i in range(shnum):
            name_off = struct.unpack_from("<I", image, shoff + i * shentsize)[0]
            name = image[strtab + name_off : image.index(b"\0", strtab + name_off)].decode(errors="replace")
            if name.startswith(".text."):
                names.append(name[len(".text.") :])
        return names
    except (struct.error, ValueError):
        return []


def ptx_from_fatbin(data: bytes) -> bytes:
    """The PTX of the best entry of a fatbin (the highest arch not above sm_80), or raise.

    A fatbin with machine code only (nvcc's default for a real architecture without its virtual
    one) gets CUDA_ERROR_NO_BINARY_FOR_GPU naming its kernels and the flag that embeds PTX.
    """
    entries = fatbin_entries(data)
    ptx = [e for e in entries if e.kind == _KIND_PTX]
    fitting = [e for e in ptx if e.arch <= 80] or ptx
    if fitting:
        best = max(fitting, key=lambda e: e.arch)
        return _decompress(best).rstrip(b"\0")
    archs = sorted({e.arch for e in entries if e.kind == _KIND_ELF})
    kernels = sorted(
        {k for e in entries if e.kind == _KIND_ELF and not e.flags & (_LZ4 | _ZSTD) for k in _elf_kernels(e.payload)}
    )
    arch = archs[-1] if archs else 80
    what = f"machine code for {', '.join(f'sm_{a}' for a in archs)} only" if archs else "no PTX"
    named = f" (kernels: {', '.join(kernels[:8])}{', ...' if len(kernels) > 8 else ''})" if kernels else ""
    raise CudaError(
        codes.NO_BINARY_FOR_GPU,
        f"the fatbin holds {what}{named}; wooly devices run PTX: rebuild with "
        f"-gencode arch=compute_{arch},code=compute_{arch} added to embed it",
    )


def read_image(ptr: int | None) -> bytes:
    """The PTX text of the image at ``ptr``: PTX, a fatbin carrying PTX, or nvcc's wrapper of a fatbin."""
    if not ptr:
        raise CudaError(codes.INVALID_VALUE, "module image pointer is NULL")
    head = ctypes.string_at(ptr, 4)
    if head == b"\x7fELF":
        raise CudaError(
            codes.NO_BINARY_FOR_GPU,
            "a cubin holds machine code for one real GPU; wooly devices load PTX (compile to PTX instead)",
        )
    magic = struct.unpack("<I", head)[0]
    if magic == FATBINC_MAGIC:
        version = struct.unpack("<I", ctypes.string_at(ptr + 4, 4))[0]
        prelinked = ctypes.c_void_p.from_address(ptr + 16).value
        if version == FATBINC_LINK_VERSION and prelinked:
            return _relocatable_ptx(prelinked)
        ptr = ctypes.c_void_p.from_address(ptr + 8).value
        if not ptr:
            raise CudaError(codes.INVALID_IMAGE, "fatbin wrapper holds a NULL fatbin")
        magic = struct.unpack("<I", ctypes.string_at(ptr, 4))[0]
        if magic != FATBIN_MAGIC:
            raise CudaError(codes.INVALID_IMAGE, f"fatbin wrapper points at no fatbin (magic 0x{magic:08x})")
    if magic == FATBIN_MAGIC:
        header_size, fat_size = struct.unpack_from("<HQ", ctypes.string_at(ptr, 16), 6)
        if fat_size > MAX_PTX_BYTES * 4:
            raise CudaError(codes.INVALID_IMAGE, f"fatbin claims {fat_size} bytes")
        return ptx_from_fatbin(ctypes.string_at(ptr, header_size + fat_size))
    return ctypes.string_at(ptr)


def _fatbin_at(ptr: int) -> bytes:
    magic = struct.unpack("<I", ctypes.string_at(ptr, 4))[0]
    if magic != FATBIN_MAGIC:
        raise CudaError(codes.INVALID_IMAGE, f"a relocatable-code fatbin with magic 0x{magic:08x}")
    header_size, fat_size = struct.unpack_from("<HQ", ctypes.string_at(ptr, 16), 6)
    if fat_size > MAX_PTX_BYTES * 4:
        raise CudaError(codes.INVALID_IMAGE, f"fatbin claims {fat_size} bytes")
    return ctypes.string_at(ptr, header_size + fat_size)


def _is_device_runtime(data: bytes) -> bool:
    """cudadevrt's own object: the device-side launch API, which the JIT supplies itself (jit/devrt.py). Its PTX
    defines the API; its machine code (where it carries no PTX) names it."""
    entries = fatbin_entries(data)
    for e in entries:
        if e.kind == _KIND_PTX:
            return _DEVICE_RUNTIME_PTX.search(_decompress(e)) is not None
    names = {k for e in entries if e.kind == _KIND_ELF for k in _elf_kernels(_decompress(e))}
    return any(n.startswith(("__cudaCDP2", "cnprt")) for n in names)


_DEVICE_RUNTIME_PTX = re.compile(rb"\.func\s*(?:\([^)]*\))?\s*__cudaCDP2LaunchDeviceV2\s*\([^;{]*\)\s*\{")


def _relocatable_ptx(array: int) -> bytes:
    """NOTE [relocatable device code]: a program built with ``nvcc -rdc=true`` registers the device-linked image,
    which nvlink makes of machine code only, with the fatbins of its objects beside it (version 2 of nvcc's wrapper:
    a NULL-terminated array of them, as a driver JIT-links them for a GPU the image has no code for). Their PTX is
    linked here as cuLinkComplete links (shim/native/cu_link.py): one module, the functions one object calls in
    another resolved. cudadevrt's object is left out: the JIT supplies the device runtime (jit/devrt.py)."""
    from shim.native.numba_ptx import merge_ptx

    ptx: list[str] = []
    for i in range(4096):
        p = ctypes.c_void_p.from_address(array + 8 * i).value
        if not p:
            break
        data = _fatbin_at(p)
        if _is_device_runtime(data):
            continue
        ptx.append(ptx_from_fatbin(data).decode(errors="replace"))
    if not ptx:
        raise CudaError(codes.NO_BINARY_FOR_GPU, "the device-linked program holds no PTX of its own objects")
    return merge_ptx(ptx).encode()


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
