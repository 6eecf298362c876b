"""The allowed-range table of bounds-checked launches (jit/checked.py RangeTable): merging, per-launch spans,
roots, and the cache of a caller's tuple."""

from __future__ import annotations

import random

import pytest

from jit import GlobalRange, JitError
from jit.checked import RangeTable, for_ranges


def spans(t: RangeTable) -> list[tuple[int, int]]:
    return list(zip(t.starts, t.ends, strict=True))


def test_build_sorts_and_merges() -> None:
    t = RangeTable.build([(300, 10), GlobalRange(100, 50), (140, 20), (160, 5), (500, 0)])
    assert spans(t) == [(100, 165), (300, 310)]  # overlapping and touching spans merge; empty ones vanish
    with pytest.raises(JitError):
        RangeTable.build([(-4, 8)])


@pytest.mark.parametrize(
    "extra,want",
    [
        ([(200, 10)], [(100, 150), (200, 210), (300, 310)]),  # between two spans
        ([(150, 10)], [(100, 160), (300, 310)]),  # touching the end of one
        ([(90, 10)], [(90, 150), (300, 310)]),  # touching the start of one
        ([(120, 200)], [(100, 320)]),  # swallowing the next one
        ([(0, 10), (400, 10)], [(0, 10), (100, 150), (300, 310), (400, 410)]),
        ([(120, 5), (0, 0)], [(100, 150), (300, 310)]),  # inside one; empty
    ],
)
def test_with_spans(extra: list[tuple[int, int]], want: list[tuple[int, int]]) -> None:
    base = RangeTable.build([(100, 50), (300, 10)])
    assert spans(base.with_spans(extra)) == want
    assert spans(base) == [(100, 150), (300, 310)]  # the cached base is never changed


def test_with_spans_matches_a_fresh_build() -> None:
    rng = random.Random(7)
    for _ in range(200):
        base = [(rng.randrange(0, 10_000), rng.randrange(0, 300)) for _ in range(rng.randrange(0, 40))]
        extra = [(rng.randrange(0, 10_000), rng.randrange(0, 300)) for _ in range(rng.randrange(0, 6))]
        assert spans(RangeTable.build(base).with_spans(extra)) == spans(RangeTable.build(base + extra))


def test_array_and_roots() -> None:
    t = RangeTable.build([(100, 50), (300, 10)])
    arr, _buf = t.as_array()
    assert list(arr) == [100, 150, 300, 310]
    assert list(RangeTable([], []).as_array()[0]) == [0, 0]
    params = (120).to_bytes(8, "little") + (310).to_bytes(8, "little") + (200).to_bytes(8, "little")
    assert list(t.root_table(params, [0, 8, 16])) == [100, 150, 300, 310, 1, 0]  # inside, one past the end, none


def test_tuples_are_cached_lists_are_not() -> None:
    ranges = ((100, 50), (300, 10))
    assert for_ranges(ranges) is for_ranges(ranges)
    lst = [(100, 50)]
    first = for_ranges(lst)
    lst.append((300, 10))  # a list may change between launches: built afresh
    assert spans(for_ranges(lst)) == [(100, 150), (300, 310)] and spans(first) == [(100, 150)]
