"""What a bounds-checked launch needs besides the kernel: the table of allowed ranges, the per-parameter ranges
of rooted checks, and the device heap of checked modules (NOTE [bounds checking], NOTE [rooted bounds checks],
NOTE [device heap], jit/emit/bounds.py)."""

from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import threading
from dataclasses import dataclass
from typing import Any

from jit.errors import CUDA_ERROR_INVALID_VALUE, JitError


@dataclass(frozen=True)
class GlobalRange:
    """One device allocation a bounds-checked launch may touch: [start, start + size)."""
    start: int
    size: int


class DeviceHeap:
    """Device-side malloc/free of a bounds-checked module (NOTE [device heap] in jit/emit/bounds.py): first fit over
    one lazily committed anonymous mapping, 16-byte aligned blocks, neighbours coalesced on free."""

    ALIGN = 16

    def __init__(self, size: int) -> None:
        self.size = max(size, 4096)
        self._map = mmap.mmap(-1, self.size)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self._free: list[list[int]] = [[self.base, self.size]]  # sorted [start, size]
        self._used: dict[int, int] = {}
        self._lock = threading.Lock()

    def alloc(self, n: int) -> int:
        n = max(self.ALIGN, (n + self.ALIGN - 1) // self.ALIGN * self.ALIGN)
        with self._lock:
            for i, (start, size) in enumerate(self._free):
                if size >= n:
                    if size == n:
                        del self._free[i]
                    else:
                        self._free[i] = [start + n, size - n]
                    self._used[start] = n
                    return start
        return 0

    def free(self, p: int) -> None:
        with self._lock:
            n = self._used.pop(p, None)
            if n is None:
                return
            i = bisect.bisect_left(self._free, [p, 0])
            if i < len(self._free) and p + n == self._free[i][0]:  # merge with the next free block
                n += self._free.pop(i)[1]
            if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == p:  # and the previous one
                self._free[i - 1][1] += n
            else:
                self._free.insert(i, [p, n])


HEAP_SIZE = int(os.environ.get("WOOLY_JIT_MALLOC_HEAP", str(8 << 20)))
HEAPS: dict[int, DeviceHeap] = {}
_HEAP_ALLOC_T = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64)
_HEAP_FREE_T = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64)
_heap_alloc_cb = _HEAP_ALLOC_T(lambda h, n: HEAPS[h].alloc(n))
_heap_free_cb = _HEAP_FREE_T(lambda h, p: HEAPS[h].free(p))
HEAP_ALLOC_ADDR = ctypes.cast(_heap_alloc_cb, ctypes.c_void_p).value
HEAP_FREE_ADDR = ctypes.cast(_heap_free_cb, ctypes.c_void_p).value


def range_table(ranges: list[Any]) -> Any:
    """Sorted, merged [start, end) pairs as an i64 array (NOTE [bounds checking] in jit/emit/bounds.py)."""
    spans = []
    for r in ranges:
        start, size = (r.start, r.size) if isinstance(r, GlobalRange) else (int(r[0]), int(r[1]))
        if size < 0 or start < 0:
            raise JitError(CUDA_ERROR_INVALID_VALUE, f"bad allowed range ({start:#x}, {size})")
        if size:
            spans.append((start, start + size))
    spans.sort()
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    flat = [x for ab in merged for x in ab] or [0, 0]
    return (ctypes.c_uint64 * len(flat))(*flat)


def root_table(table: Any, params: bytes, offsets: list[int]) -> Any:
    """[lo, hi) of the range of ``table`` holding each rooted pointer parameter (read from the launch's parameter
    bytes at ``offsets``); (1, 0), an empty range, for a pointer in none (NOTE [rooted bounds checks])."""
    starts = table[0::2]
    out = []
    for off in offsets:
        p = int.from_bytes(params[off:off + 8].ljust(8, b"\0"), "little")
        i = bisect.bisect_right(starts, p) - 1
        if i >= 0 and p <= table[2 * i + 1]:  # inside, or one past the end (a base for negative indexing)
            out += [table[2 * i], table[2 * i + 1]]
        else:
            out += [1, 0]
    return (ctypes.c_uint64 * len(out))(*out)
