"""What a bounds-checked launch needs besides the kernel: the table of allowed ranges, the per-parameter ranges
of rooted checks, and the device heap of checked modules (NOTE [bounds checking], NOTE [rooted bounds checks],
NOTE [device heap], jit/emit/bounds.py)."""

from __future__ import annotations

import array
import bisect
import ctypes
import mmap
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from jit.errors import CUDA_ERROR_INVALID_VALUE, JitError
from proto import settings


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


HEAP_SIZE = settings.jit().jit_malloc_heap
HEAPS: dict[int, DeviceHeap] = {}
_HEAP_ALLOC_T = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64)
_HEAP_FREE_T = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64)
_heap_alloc_cb = _HEAP_ALLOC_T(lambda h, n: HEAPS[h].alloc(n))
_heap_free_cb = _HEAP_FREE_T(lambda h, p: HEAPS[h].free(p))
HEAP_ALLOC_ADDR = ctypes.cast(_heap_alloc_cb, ctypes.c_void_p).value
HEAP_FREE_ADDR = ctypes.cast(_heap_free_cb, ctypes.c_void_p).value


class RangeTable:
    """Sorted, merged [start, end) spans of allowed ranges, as two parallel lists (NOTE [bounds checking] in
    jit/emit/bounds.py). Building one is O(n log n) in Python; a launch reuses the table of its caller's ranges
    (see ``for_ranges``) and only merges its own few per-launch buffers into a copy (``with_spans``: C-speed list
    copies plus a bisect per span), so a tenant with 10000 live allocations does not pay milliseconds per launch."""

    __slots__ = ("starts", "ends")

    def __init__(self, starts: list[int], ends: list[int]) -> None:
        self.starts, self.ends = starts, ends

    @classmethod
    def build(cls, ranges: Any) -> RangeTable:
        spans = []
        for r in ranges:
            start, size = (r.start, r.size) if isinstance(r, GlobalRange) else (int(r[0]), int(r[1]))
            if size < 0 or start < 0:
                raise JitError(CUDA_ERROR_INVALID_VALUE, f"bad allowed range ({start:#x}, {size})")
            if size:
                spans.append((start, start + size))
        spans.sort()
        starts: list[int] = []
        ends: list[int] = []
        for a, b in spans:
            if ends and a <= ends[-1]:
                ends[-1] = max(ends[-1], b)
            else:
                starts.append(a)
                ends.append(b)
        return cls(starts, ends)

    def with_spans(self, extra: list[tuple[int, int]]) -> RangeTable:
        """A copy with the (start, size) spans ``extra`` merged in."""
        starts, ends = self.starts.copy(), self.ends.copy()
        for a, n in extra:
            if n <= 0:
                continue
            b = a + n
            i = bisect.bisect_right(starts, a)
            if i > 0 and a <= ends[i - 1]:  # joins the span before it
                i -= 1
                a = starts[i]
                b = max(b, ends[i])
                del starts[i], ends[i]
            while i < len(starts) and starts[i] <= b:  # swallows the spans it reaches
                b = max(b, ends[i])
                del starts[i], ends[i]
            starts.insert(i, a)
            ends.insert(i, b)
        return RangeTable(starts, ends)

    def covers(self, start: int, size: int) -> bool:
        """Whether [start, start + size) lies inside one span."""
        i = bisect.bisect_right(self.starts, start) - 1
        return size == 0 or (i >= 0 and start + size <= self.ends[i])

    def as_array(self) -> Any:
        """The table as the kernel reads it: an i64 array of start, end pairs ([0, 0] when empty)."""
        flat: list[int] = [0] * (2 * len(self.starts)) or [0, 0]
        if self.starts:
            flat[0::2] = self.starts
            flat[1::2] = self.ends
        buf = array.array("Q", flat)
        return (ctypes.c_uint64 * len(flat)).from_buffer(buf), buf

    def root_table(self, params: bytes, offsets: list[int]) -> Any:
        """[lo, hi) of the span holding each rooted pointer parameter (read from the launch's parameter bytes at
        ``offsets``); (1, 0), an empty range, for a pointer in none (NOTE [rooted bounds checks])."""
        out = []
        for off in offsets:
            p = int.from_bytes(params[off : off + 8].ljust(8, b"\0"), "little")
            i = bisect.bisect_right(self.starts, p) - 1
            if i >= 0 and p <= self.ends[i]:  # inside, or one past the end (a base for negative indexing)
                out += [self.starts[i], self.ends[i]]
            else:
                out += [1, 0]
        return (ctypes.c_uint64 * len(out))(*out)


_TABLES: OrderedDict[int, tuple[Any, RangeTable]] = OrderedDict()
_TABLES_LOCK = threading.Lock()
_TABLES_MAX = 64


def for_ranges(ranges: Any) -> RangeTable:
    """The RangeTable of a launch's ``allowed_ranges``. A tuple is immutable, so its table is kept (keyed by the
    tuple's identity, with the tuple itself held so the identity stays valid) and the next launch given the same
    tuple reuses it: gpud passes each session's ranges as one tuple, rebuilt only when an allocation comes or goes.
    Lists are built afresh every time (the caller may change them)."""
    if not isinstance(ranges, tuple):
        return RangeTable.build(ranges or [])
    key = id(ranges)
    with _TABLES_LOCK:
        hit = _TABLES.get(key)
        if hit is not None and hit[0] is ranges:
            _TABLES.move_to_end(key)
            return hit[1]
    table = RangeTable.build(ranges)
    with _TABLES_LOCK:
        _TABLES[key] = (ranges, table)
        while len(_TABLES) > _TABLES_MAX:
            _TABLES.popitem(last=False)
    return table
