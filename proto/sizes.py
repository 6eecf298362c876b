"""Byte sizes written by people: ``4096``, ``512MiB``, ``2GiB``, ``1.5G``. Dependency-free, so that the JIT's
cache bound and the hypervisor's quotas read sizes the same way."""

from __future__ import annotations

import re

UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1 << 30,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"([0-9]*\.?[0-9]+)\s*([a-z]*)")


def split_size(text: str) -> tuple[str, str] | None:
    """``"2 GiB"`` -> ("2", "gib"): the number and a known unit, or None when ``text`` is not of that form."""
    m = _SIZE.fullmatch(text.strip().lower().replace("_", ""))
    return (m.group(1), m.group(2)) if m is not None and m.group(2) in UNITS else None


def parse_bytes(value: int | str, examples: str = "4096, 512MiB, 2GiB") -> int:
    """A whole number of bytes from an int or a string with an optional unit; ValueError names the bad input."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"size must be >= 0, got {value}")
        return value
    parts = split_size(value) if isinstance(value, str) else None
    if parts is None:
        raise ValueError(f"cannot read {value!r} as a size (examples: {examples})")
    return int(float(parts[0]) * UNITS[parts[1]])


def human(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``: bytes for people (binary units, one decimal)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
