"""Helpers shared by the benchmarks: timing statistics and the JSON result line (see DESIGN.md)."""

from __future__ import annotations

import json
import statistics
from typing import Any


def percentile(samples: list[float], q: float) -> float:
    s = sorted(samples)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def emit(
    bench: str,
    metric: str,
    value: float,
    baseline: float,
    target: float,
    unit: str,
    *,
    higher_is_better: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """Print one result line. ``ratio`` = value / baseline; ``target`` is on the ratio."""
    ratio = value / baseline if baseline else float("nan")
    ok = ratio >= target if higher_is_better else ratio <= target
    line = {
        "bench": bench,
        "metric": metric,
        "value": round(value, 4),
        "baseline": round(baseline, 4),
        "ratio": round(ratio, 4),
        "target": target,
        "unit": unit,
        "meets_target": ok,
        **extra,
    }
    print(json.dumps(line), flush=True)
    return line
