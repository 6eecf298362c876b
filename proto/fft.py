"""The layout rules of a cuFFT transform on the wire (``FftExec``), shared by both ends: the client checks a plan
when it is made (cuFFT answers CUFFT_INVALID_VALUE/INVALID_SIZE at once), gpud checks every execution again
against the session's allocations (NOTE [vendor libraries], gpud/fft.py).

A plan is cuFFT's advanced data layout: ``rank`` (1–3) sizes ``n``, batch ``batch``, and for input and output an
embedding ``inembed``/``onembed`` (empty: the basic, packed layout), an element stride and a distance between
batches. Element ``(x, y, z)`` of batch ``b`` of the input sits at element offset
``b * idist + ((x * inembed[1] + y) * inembed[2] + z) * istride``. For real-to-complex transforms the complex side
holds ``n[-1] // 2 + 1`` elements along the last axis.
"""

from __future__ import annotations

from typing import Any, Literal

from proto import errors as codes
from proto.errors import CudaError

# cufftType -> (input type, output type); element bytes of each
TYPES = {
    0x2A: ("f32", "c64"),  # CUFFT_R2C
    0x2C: ("c64", "f32"),  # CUFFT_C2R
    0x29: ("c64", "c64"),  # CUFFT_C2C
    0x6A: ("f64", "c128"),  # CUFFT_D2Z
    0x6C: ("c128", "f64"),  # CUFFT_Z2D
    0x69: ("c128", "c128"),  # CUFFT_Z2Z
}
ITEM = {"f32": 4, "f64": 8, "c64": 8, "c128": 16}
NAMES = {0x2A: "R2C", 0x2C: "C2R", 0x29: "C2C", 0x6A: "D2Z", 0x6C: "Z2D", 0x69: "Z2Z"}
FORWARD: Literal[-1] = -1
INVERSE: Literal[1] = 1
MAX_ELEMENTS = 1 << 40


def _bad(message: str) -> CudaError:
    return CudaError(codes.INVALID_VALUE, f"cufft: {message}")


def logical(n: list[int], typ: int) -> tuple[list[int], list[int]]:
    """The input's and the output's logical sizes (the complex side of a real transform is halved)."""
    half = [*n[:-1], n[-1] // 2 + 1]
    if typ in (0x2A, 0x6A):
        return list(n), half
    if typ in (0x2C, 0x6C):
        return half, list(n)
    return list(n), list(n)


def layout(
    n: list[int], embed: list[int], stride: int, dist: int, padded: bool = False
) -> tuple[list[int], list[int], int]:
    """(sizes, element strides per axis, distance) of one side: the basic layout when ``embed`` is empty (the real
    side of an in-place real transform is padded to ``2 * (n[-1] // 2 + 1)`` along its last axis, as in cuFFT)."""
    if not embed:
        strides: list[int] = []
        acc = 1
        for d in reversed([*n[:-1], 2 * (n[-1] // 2 + 1)] if padded else n):
            strides.insert(0, acc)
            acc *= d
        return n, strides, acc
    strides = []
    acc = stride
    for d in reversed(embed):
        strides.insert(0, acc)
        acc *= d
    return n, strides, dist


def plan(f: Any) -> tuple[tuple[list[int], list[int], int], tuple[list[int], list[int], int]]:
    """Check a plan's geometry: ((sizes, strides, dist) of the input, the same of the output)."""
    if f.type not in TYPES:
        raise CudaError(codes.INVALID_VALUE, f"cufft: unknown transform type 0x{f.type:x}")
    if not 1 <= f.rank <= 3 or len(f.n) != f.rank:
        raise _bad(f"rank {f.rank} with {len(f.n)} sizes (cuFFT plans have rank 1 to 3)")
    if any(d < 1 for d in f.n) or f.batch < 1:
        raise _bad(f"sizes {f.n} and batch {f.batch} must be positive")
    for name, embed in (("inembed", f.inembed), ("onembed", f.onembed)):
        if embed and (len(embed) != f.rank or any(d < 1 for d in embed)):
            raise _bad(f"{name} {embed} must hold {f.rank} positive sizes")
    if (f.inembed or f.onembed) and (f.istride < 1 or f.ostride < 1 or f.idist < 0 or f.odist < 0):
        raise _bad("strides must be positive and distances non-negative")
    ln_in, ln_out = logical(f.n, f.type)
    inplace = getattr(f, "idata", 0) == getattr(f, "odata", 1)
    return (
        layout(ln_in, f.inembed, f.istride, f.idist, inplace and f.type in (0x2A, 0x6A)),
        layout(ln_out, f.onembed, f.ostride, f.odist, inplace and f.type in (0x2C, 0x6C)),
    )


def extent(side: tuple[list[int], list[int], int], batch: int, typ: str) -> int:
    """Bytes one side spans from its base address over the whole batch."""
    sizes, strides, dist = side
    last = sum((d - 1) * s for d, s in zip(sizes, strides, strict=True)) + (batch - 1) * dist
    if last + 1 > MAX_ELEMENTS:
        raise _bad(f"a transform spanning {last + 1} elements")
    return (last + 1) * ITEM[typ]


def extents(f: Any) -> list[tuple[str, int, int]]:
    """(side, address, bytes) of the input and the output of an execution (``FftExec``)."""
    side_in, side_out = plan(f)
    tin, tout = TYPES[f.type]
    if f.direction not in (FORWARD, INVERSE):
        raise _bad(f"direction {f.direction} (expected CUFFT_FORWARD -1 or CUFFT_INVERSE 1)")
    return [("input", f.idata, extent(side_in, f.batch, tin)), ("output", f.odata, extent(side_out, f.batch, tout))]
