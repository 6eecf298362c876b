"""The ATen op stream's value encoding (NOTE [aten wire] in proto/messages.py).

Op arguments are msgpack values; what msgpack has no type for travels as an ext type whose code
is below. Both ends import these constants, so the encoding is defined in one place.
"""

from __future__ import annotations

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

# Wire names of the dtypes both ends know.
DTYPES = (
    "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
    "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64",
)
MEMORY_FORMATS = ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")
LAYOUTS = ("strided", "sparse_coo", "sparse_csr")
