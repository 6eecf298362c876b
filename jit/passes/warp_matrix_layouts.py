"""Where each lane holds each element of a warp matrix fragment (used by jit/passes/warp_matrix.py).

A layout places element i of a lane's fragment at (row, col) of the logical matrix, with
    hi = lane >> sh, lo = lane & mask,
    row = rh * hi + rl * lo + rows[i],  col = ch * hi + cl * lo + cols[i].
For `mma` the PTX ISA fixes the layouts ("Matrix fragments for mma.m16n8k*": groupID = lane >> 2,
threadID_in_group = lane % 4). For `wmma` the ISA leaves the mapping unspecified; ours puts element j of lane l at
row-major position 32 * j + l (`wmma_layout`), which needs no data exchange for loads and stores.
"""

from __future__ import annotations

from dataclasses import dataclass

from jit.errors import not_supported


@dataclass(frozen=True)
class Layout:
    rows_n: int  # logical matrix shape
    cols_n: int
    sh: int
    mask: int
    rh: int
    rl: int
    ch: int
    cl: int
    at: tuple[tuple[int, int], ...]  # (row, col) constant parts, one per fragment element

    def __len__(self) -> int:
        return len(self.at)


def _g_t(rows_n: int, cols_n: int, row: tuple[int, int], col: tuple[int, int], at: list[tuple[int, int]]) -> Layout:
    """A layout in terms of groupID (= lane >> 2) and threadID_in_group (= lane & 3)."""
    return Layout(rows_n, cols_n, 2, 3, row[0], row[1], col[0], col[1], tuple(at))


_G, _T = (1, 0), (0, 1)


def _x(k: int, term: tuple[int, int]) -> tuple[int, int]:
    return (term[0] * k, term[1] * k)


def mma_layouts(shape: str, atype: str) -> tuple[Layout, Layout, Layout]:
    """(A, B, C/D) layouts of `mma.sync.aligned.<shape>.row.col` for input type ``atype``."""
    half = atype in ("f16", "bf16")
    byte = atype in ("s8", "u8")
    if half and shape == "m16n8k16":
        a = _g_t(16, 16, _G, _x(2, _T), [(8 * (i % 4 >= 2), (i & 1) + 8 * (i >= 4)) for i in range(8)])
        b = _g_t(16, 8, _x(2, _T), _G, [((i & 1) + 8 * (i >= 2), 0) for i in range(4)])
    elif half and shape == "m16n8k8":
        a = _g_t(16, 8, _G, _x(2, _T), [(8 * (i >= 2), i & 1) for i in range(4)])
        b = _g_t(8, 8, _x(2, _T), _G, [(i, 0) for i in range(2)])
    elif atype == "tf32" and shape == "m16n8k8":
        a = _g_t(16, 8, _G, _T, [(8 * (i & 1), 4 * (i >= 2)) for i in range(4)])
        b = _g_t(8, 8, _T, _G, [(4 * i, 0) for i in range(2)])
    elif atype == "tf32" and shape == "m16n8k4":
        a = _g_t(16, 4, _G, _T, [(8 * i, 0) for i in range(2)])
        b = _g_t(4, 8, _T, _G, [(0, 0)])
    elif atype == "f64" and shape == "m8n8k4":
        a = _g_t(8, 4, _G, _T, [(0, 0)])
        b = _g_t(4, 8, _T, _G, [(0, 0)])
        return a, b, _g_t(8, 8, _G, _x(2, _T), [(0, i) for i in range(2)])
    elif byte and shape == "m16n8k32":
        a = _g_t(16, 32, _G, _x(4, _T), [(8 * ((i // 4) % 2), (i & 3) + 16 * (i >= 8)) for i in range(16)])
        b = _g_t(32, 8, _x(4, _T), _G, [((i & 3) + 16 * (i >= 4), 0) for i in range(8)])
    elif byte and shape == "m16n8k16":
        a = _g_t(16, 16, _G, _x(4, _T), [(8 * (i >= 4), i & 3) for i in range(8)])
        b = _g_t(16, 8, _x(4, _T), _G, [(i, 0) for i in range(4)])
    elif byte and shape == "m8n8k16":
        a = _g_t(8, 16, _G, _x(4, _T), [(0, i) for i in range(4)])
        b = _g_t(16, 8, _x(4, _T), _G, [(i, 0) for i in range(4)])
        return a, b, _g_t(8, 8, _G, _x(2, _T), [(0, i) for i in range(2)])
    else:
        raise not_supported(f"mma.sync shape .{shape} with .{atype} inputs")
    c = _g_t(16, 8, _G, _x(2, _T), [(8 * (i >= 2), i & 1) for i in range(4)])
    return a, b, c


def wmma_dims(shape: str, atype: str | None) -> tuple[int, int, int]:
    """(M, N, K) of a `wmma` shape that we support for input type ``atype`` (None: any input type)."""
    ok = {"m16n16k16": (16, 16, 16), "m32n8k16": (32, 8, 16), "m8n32k16": (8, 32, 16)}
    if atype in ("f16", "bf16", "s8", "u8", None) and shape in ok:
        return ok[shape]
    if atype in ("tf32", None) and shape == "m16n16k8":
        return 16, 16, 8
    if atype in ("f64", None) and shape == "m8n8k4":
        return 8, 8, 4
    raise not_supported(f"wmma shape .{shape}" + (f" with .{atype} inputs" if atype else ""))


def wmma_layout(rows_n: int, cols_n: int) -> Layout:
    """Our wmma fragment layout: element j of lane l is row-major element 32 * j + l (cols_n divides 32)."""
    sh = cols_n.bit_length() - 1
    per = 32 // cols_n
    return Layout(rows_n, cols_n, sh, cols_n - 1, 1, 0, 0, 1, tuple((per * j, 0) for j in range(rows_n * cols_n // 32)))
