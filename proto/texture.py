"""Texture and surface object descriptors: what the client writes (shim/native/cu_texture.py) and the JIT's PTX
texture library reads (``struct Desc`` in jit/texture_lib.cu; NOTE [textures] in jit/texture.py)."""

from __future__ import annotations

import struct

DESC = struct.Struct("<QQQ IIII II III I I I 4f")
DESC_SIZE = 96
assert DESC.size <= DESC_SIZE
WIDTH, HEIGHT, DEPTH, LAYERS, ELEM = 24, 28, 32, 36, 68  # offsets of the fields txq/suq read
READ_AS_INTEGER, NORMALIZED_COORDINATES = 1, 2  # CU_TRSF_*

# CUarray_format -> bytes per channel
FORMAT_BYTES = {0x01: 1, 0x02: 2, 0x03: 4, 0x08: 1, 0x09: 2, 0x0A: 4, 0x10: 2, 0x20: 4}


def pack_descriptor(
    base: int,
    pitch: int,
    slice_pitch: int,
    width: int,
    height: int,
    depth: int,
    layers: int,
    fmt: int,
    channels: int,
    address: tuple[int, int, int] = (1, 1, 1),
    filter_mode: int = 0,
    flags: int = 0,
    border: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0),
) -> bytes:
    """The bytes of one descriptor (NOTE [textures])."""
    elem = FORMAT_BYTES[fmt] * channels
    raw = DESC.pack(
        base, pitch, slice_pitch, width, height, depth, layers, fmt, channels, *address, filter_mode, flags, elem,
        *border,
    )  # fmt: skip
    return raw + bytes(DESC_SIZE - len(raw))
