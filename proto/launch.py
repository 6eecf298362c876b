"""Launch rules: whether a kernel launch is valid, decided in one place from the device's attributes.

Both ends call ``check``: the client to fail early, at the call, as a CUDA driver does (with the
driver API's contract: dynamic shared memory above the default needs ``cuFuncSetAttribute``), and
gpud's backend to enforce what the device can do whatever a client says (dynamic shared memory up
to the device's opt-in limit). Same rules, same messages; only the inputs differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proto import errors as codes
from proto.errors import CudaError

# CUdevice_attribute numbers read here.
MAX_THREADS_PER_BLOCK = 1
MAX_BLOCK_DIM = (2, 3, 4)
MAX_GRID_DIM = (5, 6, 7)
MAX_SHARED_PER_BLOCK = 8
SM_COUNT = 16
MAX_THREADS_PER_SM = 39
MAX_SHARED_PER_SM = 81
COOPERATIVE_LAUNCH = 95
MAX_SHARED_PER_BLOCK_OPTIN = 97
MAX_BLOCKS_PER_SM = 106

MAX_PARAM_BYTES = 32764  # the kernel parameter buffer (CUDA 12.1+ on sm_70 and later)
_DEFAULTS = {
    MAX_THREADS_PER_BLOCK: 1024,
    2: 1024,
    3: 1024,
    4: 64,
    5: 2**31 - 1,
    6: 65535,
    7: 65535,
    MAX_SHARED_PER_BLOCK: 49152,
    SM_COUNT: 1,
    MAX_THREADS_PER_SM: 2048,
    MAX_SHARED_PER_SM: 167936,
    COOPERATIVE_LAUNCH: 0,
    MAX_SHARED_PER_BLOCK_OPTIN: 49152,
    MAX_BLOCKS_PER_SM: 32,
}


def attr(device: Mapping[Any, int], number: int) -> int:
    """A device attribute (keys may be ints, or strings after a msgpack round trip)."""
    v = device.get(number)
    if v is None:
        v = device.get(str(number), _DEFAULTS.get(number, 0))
    return int(v)


def dynamic_shared_limit(device: Mapping[Any, int], static_shared: int, opted_in: int | None = None) -> int:
    """Dynamic shared memory a launch may ask for: the per-block default less the static part, or what
    ``cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)`` opted in to (``opted_in``)."""
    if opted_in is not None:
        return opted_in
    return max(0, attr(device, MAX_SHARED_PER_BLOCK) - static_shared)


def optin_shared_limit(device: Mapping[Any, int], static_shared: int) -> int:
    """The most dynamic shared memory a function can opt in to on this device."""
    return max(0, attr(device, MAX_SHARED_PER_BLOCK_OPTIN) - static_shared)


def blocks_per_sm(device: Mapping[Any, int], threads: int, max_threads: int, shared_total: int) -> int:
    """Occupancy: blocks of ``threads`` threads using ``shared_total`` bytes of shared memory resident per SM."""
    if threads <= 0 or threads > max_threads:
        return 0
    by_blocks = attr(device, MAX_BLOCKS_PER_SM)
    by_smem = attr(device, MAX_SHARED_PER_SM) // shared_total if shared_total else by_blocks
    return max(0, min(attr(device, MAX_THREADS_PER_SM) // threads, by_blocks, by_smem))


def check(
    name: str,
    device: Mapping[Any, int],
    grid: Sequence[int],
    block: Sequence[int],
    shared: int,
    *,
    max_threads: int | None = None,
    dynamic_shared: int | None = None,
    static_shared: int = 0,
    params: int | None = None,
    cooperative: bool = False,
    resident_blocks: int | None = None,
) -> None:
    """Raise the CudaError a driver raises for this launch, or return. ``max_threads``: the function's limit
    (default the device's); ``dynamic_shared``: the function's dynamic shared memory limit (default
    ``dynamic_shared_limit``); ``params``: the parameter buffer's size; ``resident_blocks``: how many blocks fit on
    the device at once for a cooperative launch (default SMs x blocks per SM)."""
    if len(grid) != 3 or len(block) != 3:
        raise CudaError(codes.INVALID_VALUE, f"{name}: grid and block take three dimensions")
    for axis in range(3):
        b, limit = block[axis], attr(device, MAX_BLOCK_DIM[axis])
        if not 1 <= b <= limit:
            raise CudaError(codes.INVALID_VALUE, f"{name}: blockDim.{'xyz'[axis]}={b} not in [1, {limit}]")
    for axis in range(3):
        g, limit = grid[axis], attr(device, MAX_GRID_DIM[axis])
        if not 1 <= g <= limit:
            raise CudaError(codes.INVALID_VALUE, f"{name}: gridDim.{'xyz'[axis]}={g} not in [1, {limit}]")
    threads = block[0] * block[1] * block[2]
    most = min(attr(device, MAX_THREADS_PER_BLOCK), max_threads if max_threads is not None else 1 << 30)
    if threads > most:
        raise CudaError(codes.INVALID_VALUE, f"{name}: {threads} threads per block exceed the limit of {most}")
    dyn = dynamic_shared if dynamic_shared is not None else dynamic_shared_limit(device, static_shared)
    if not 0 <= shared <= dyn:
        raise CudaError(
            codes.INVALID_VALUE,
            f"{name}: {shared} bytes of dynamic shared memory exceed the {dyn} available ({static_shared} "
            f"static; raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES for more)",
        )
    if params is not None and params > MAX_PARAM_BYTES:
        raise CudaError(codes.INVALID_VALUE, f"{name}: a parameter buffer of {params} bytes exceeds {MAX_PARAM_BYTES}")
    if cooperative:
        if not attr(device, COOPERATIVE_LAUNCH):
            raise CudaError(codes.NOT_SUPPORTED, f"{name}: the device does not support cooperative launches")
        fit = (
            resident_blocks if resident_blocks is not None else attr(device, SM_COUNT) * attr(device, MAX_BLOCKS_PER_SM)
        )
        blocks = grid[0] * grid[1] * grid[2]
        if blocks > fit:
            raise CudaError(
                codes.COOPERATIVE_LAUNCH_TOO_LARGE,
                f"{name}: a cooperative grid of {blocks} blocks, at most {fit} blocks of {threads} threads "
                f"fit on the device at once",
            )
