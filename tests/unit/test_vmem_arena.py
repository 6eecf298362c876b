"""Session arenas (NOTE [session arenas] in gpud/vmem.py): what moves and checkpoint restores rely on."""

from __future__ import annotations

import ctypes
import random

import pytest

from gpud.vmem import ARENA_HI, ARENA_LO, PAGE, Arena

MiB = 1 << 20


def test_allocations_are_pages_of_the_arena_and_hold_bytes() -> None:
    a = Arena()
    try:
        assert ARENA_LO <= a.base < ARENA_HI and a.base % a.size == 0
        p, q = a.alloc(10), a.alloc(3 * MiB + 1)
        assert p == a.base and q == a.base + PAGE and q % PAGE == 0 and p in a and q in a
        ctypes.memset(q, 0xAB, 3 * MiB + 1)
        assert ctypes.string_at(q + 3 * MiB - 2, 3) == b"\xab\xab\xab"
        a.free(p)
        assert a.alloc(PAGE) == p  # first fit: the hole is used again
    finally:
        for addr in list(a.live):
            a.free(addr)
        a.close()


def test_the_same_allocations_give_the_same_next_addresses() -> None:
    """A restored session re-creates its allocations with ``alloc_at``; the calls replayed after the checkpoint
    must then get the addresses they got the first time (the free list is kept coalesced, so it is canonical)."""
    rng = random.Random(5)
    a, b = Arena(), Arena()
    try:
        live: list[int] = []
        for _ in range(300):
            if live and rng.random() < 0.4:
                a.free(live.pop(rng.randrange(len(live))))
            else:
                live.append(a.alloc(rng.choice([1, PAGE, 5 * PAGE + 3, MiB, 7 * MiB])))
        for addr, n in sorted(a.live.items()):
            b.alloc_at(b.base + (addr - a.base), n)
        for size in (PAGE, 3 * MiB, 1, 64 * MiB, 2 * PAGE):
            assert a.alloc(size) - a.base == b.alloc(size) - b.base
    finally:
        for arena in (a, b):
            for addr in list(arena.live):
                arena.free(addr)
            arena.close()


def test_alloc_at_refuses_what_it_cannot_place_and_a_taken_range_is_refused() -> None:
    a = Arena()
    try:
        p = a.alloc(2 * PAGE)
        with pytest.raises(ValueError, match="overlaps"):
            a.alloc_at(p + PAGE, PAGE)
        with pytest.raises(ValueError, match="page-aligned"):
            a.alloc_at(p + 2 * PAGE + 1, PAGE)
        with pytest.raises(ValueError, match="page-aligned"):
            a.alloc_at(a.base + a.size - PAGE, 2 * PAGE)
        with pytest.raises(OSError):
            Arena(base=a.base)  # this process holds it: MAP_FIXED_NOREPLACE says so
    finally:
        for addr in list(a.live):
            a.free(addr)
        a.close()


def test_close_waits_for_the_last_allocation() -> None:
    a = Arena()
    p = a.alloc(PAGE)
    a.close()
    ctypes.memset(p, 1, PAGE)  # still mapped: an IPC importer may hold it past the session
    assert a.size
    a.free(p)
    assert a.size == 0
    b = Arena(base=a.base)  # the range is free again
    b.close()
