"""FFTs on tenants' device memory: the gpud side of the cuFFT stand-in (NOTE [vendor libraries], gpud/blas.py).

An ``FftExec`` carries its plan's geometry (proto/fft.py); its input and output extents were checked against the
session's allocations before it was queued. On the CPU backend NumPy's pocketfft runs it on views of device
memory, in the transform's own precision (complex64 stays complex64), unnormalised in both directions as cuFFT
is: a forward transform then an inverse one multiplies by the product of the sizes. The input is read in full
before the output is written, so in-place transforms need no care here.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from proto.fft import INVERSE, ITEM, TYPES, extent, plan

NUMPY: dict[str, Any] = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}


def _view(addr: int, side: tuple[list[int], list[int], int], batch: int, typ: str) -> np.ndarray:
    """One side as a NumPy view ``(batch, *sizes)`` of device memory."""
    sizes, strides, dist = side
    item = ITEM[typ]
    raw = (ctypes.c_char * extent(side, batch, typ)).from_address(addr)
    base = np.frombuffer(memoryview(raw), dtype=NUMPY[typ])
    return np.lib.stride_tricks.as_strided(
        base, (batch, *sizes), (dist * item, *(s * item for s in strides)), writeable=True
    )


def fft_numpy(f: Any) -> None:
    side_in, side_out = plan(f)
    tin, tout = TYPES[f.type]
    x = _view(f.idata, side_in, f.batch, tin)
    axes = tuple(range(1, 1 + f.rank))
    y: np.ndarray
    if tin == tout:  # C2C, Z2Z
        y = np.fft.ifftn(x, axes=axes, norm="forward") if f.direction == INVERSE else np.fft.fftn(x, axes=axes)
    elif tin in ("f32", "f64"):  # R2C, D2Z (always forward)
        y = np.fft.rfftn(x, axes=axes)
    else:  # C2R, Z2D (always inverse)
        y = np.fft.irfftn(x, s=f.n, axes=axes, norm="forward")
    _view(f.odata, side_out, f.batch, tout)[...] = y.astype(NUMPY[tout], copy=False)
