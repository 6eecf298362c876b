"""``torch.cuda``'s memory surface, answered from the session's tensor table on gpud.

``memory_stats()`` returns the caching allocator's whole key set (``memory_summary()`` and tools
built on it index dozens of keys): allocated/active/requested bytes come from gpud's figures for
this session (storage bytes, charged once per storage); gpud has no caching allocator of its own
for the PyTorch face, so "reserved" equals "allocated" and the split/inactive counters are zero.
``set_per_process_memory_fraction`` sets a cap on this session's tensor bytes that gpud enforces
(``torch.OutOfMemoryError`` beyond it), as the CUDA allocator does for its process.
"""

from __future__ import annotations

from typing import Any

from proto import aten as W
from shim.torch import stream as S

_STATS = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)
_POOLS = ("all", "small_pool", "large_pool")


def _stats(device: Any = None) -> dict[str, Any]:
    value, _ = S.stream_of(device).call([W.OP_STATS, [], {}, []], "memory stats")
    return value


def memory_allocated(device: Any = None) -> int:
    return int(_stats(device)["allocated"])


def max_memory_allocated(device: Any = None) -> int:
    return int(_stats(device)["peak"])


def memory_stats(device: Any = None) -> dict[str, Any]:
    s = _stats(device)
    cur, peak = int(s["allocated"]), int(s["peak"])
    n = int(s.get("tensors", 0))
    out: dict[str, Any] = {}
    for stat in _STATS:
        if stat.startswith("inactive_split"):
            c = p = 0
        elif stat.endswith("_bytes"):
            c, p = cur, peak
        else:
            c = p = n if stat != "segment" else int(cur > 0)
        for pool in _POOLS:
            large = pool != "small_pool"
            out[f"{stat}.{pool}.current"] = c if large else 0
            out[f"{stat}.{pool}.peak"] = p if large else 0
            out[f"{stat}.{pool}.allocated"] = p if large else 0
            out[f"{stat}.{pool}.freed"] = max(p - c, 0) if large else 0
    out.update(
        {
            "num_alloc_retries": 0,
            "num_ooms": 0,
            "num_sync_all_streams": 0,
            "num_device_alloc": n,
            "num_device_free": 0,
            "max_split_size": -1,
            "oversize_allocations.current": 0,
            "oversize_allocations.peak": 0,
            "oversize_allocations.allocated": 0,
            "oversize_allocations.freed": 0,
            "oversize_segments.current": 0,
            "oversize_segments.peak": 0,
            "oversize_segments.allocated": 0,
            "oversize_segments.freed": 0,
        }
    )
    return dict(sorted(out.items()))


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def reset_peak_memory_stats(device: Any = None) -> None:
    S.stream_of(device).call([W.OP_RESET_PEAK, [], {}, []], "reset_peak_memory_stats")


def mem_get_info(device: Any = None) -> tuple[int, int]:
    st = S.stream_of(device)
    # Ops stream ahead: let the queued ones (allocations, frees) run so the figures include them,
    # as they would with CUDA's synchronous allocations (the tenant's virtual GPU: docs/hypervisor.md).
    st.call([W.OP_SYNC, [], {}, []], "mem_get_info")
    free, total = st.driver_call(st.driver.mem_get_info)
    return int(free), int(total)


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _, total = mem_get_info(device)
    S.stream_of(device).call(
        [W.OP_SET_LIMIT, [int(total * float(fraction))], {}, []], "set_per_process_memory_fraction"
    )


def get_per_process_memory_fraction(device: Any = None) -> float:
    s = _stats(device)
    limit = s.get("limit")
    if not limit:
        return 1.0
    return float(limit) / mem_get_info(device)[1]


def empty_cache() -> None:
    for st in S.opened():
        st.flush()  # frees of dropped tensors reach gpud now


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


TABLE = {
    "memory_allocated": memory_allocated,
    "max_memory_allocated": max_memory_allocated,
    "memory_reserved": memory_allocated,
    "max_memory_reserved": max_memory_allocated,
    "memory_stats": memory_stats,
    "memory_stats_as_nested_dict": memory_stats_as_nested_dict,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_max_memory_allocated": reset_peak_memory_stats,
    "reset_max_memory_cached": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": _noop,
    "mem_get_info": mem_get_info,
    "empty_cache": empty_cache,
    "set_per_process_memory_fraction": set_per_process_memory_fraction,
    "get_per_process_memory_fraction": get_per_process_memory_fraction,
}
