"""The device the CPU target implements: its CUdevice_attribute values, shaped like an A100 (sm_80).

One table, three readers: gpud's CPU backend advertises it (``cuDeviceGetAttribute`` on the client reads it from
the hello reply), launches are checked against it by the launch rules (proto/launch.py: the client to fail early,
the backend, and the JIT's own ``CpuKernel.launch`` for callers that bypass gpud), and device code reads it through
the device runtime's ``cudaDeviceGetAttribute`` (NOTE [device launches] in jit/devlaunch.py). The SM count is the
number of cores the device computes on.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from proto import launch as launch_rules


def sm80_attributes(sm_count: int, shared_per_block: int = 49152) -> dict[int, int]:
    """CUdevice_attribute -> value, shaped like an A100 (sm_80) so libraries take normal paths."""
    a = {
        1: 1024,
        2: 1024,
        3: 1024,
        4: 64,
        5: 2147483647,
        6: 65535,
        7: 65535,
        8: shared_per_block,
        9: 65536,
        10: 32,
        11: 2147483647,
        12: 65536,
        13: 1410000,
        14: 512,
        15: 1,
        16: sm_count,
        17: 0,
        18: 0,
        19: 1,
        20: 0,
        21: 131072,
        22: 131072,
        23: 65536,
        24: 16384,
        25: 16384,
        26: 16384,
        27: 32768,
        28: 32768,
        29: 2048,
        30: 512,
        31: 1,
        32: 0,
        33: 0,
        34: 0,
        35: 0,
        36: 1215000,
        37: 5120,
        38: 41943040,
        39: 2048,
        40: 2,
        41: 1,
        42: 32768,
        43: 2048,
        44: 1,
        45: 32768,
        46: 32768,
        47: 8192,
        48: 8192,
        49: 32768,
        50: 0,
        51: 32,
        52: 32768,
        53: 32768,
        54: 2046,
        55: 32768,
        56: 131072,
        57: 65536,
        58: 16384,
        59: 16384,
        60: 16384,
        61: 32768,
        62: 2048,
        63: 32768,
        64: 32768,
        65: 2048,
        66: 32768,
        67: 32768,
        68: 2046,
        69: 268435456,
        70: 131072,
        71: 65000,
        72: 2097120,
        73: 32768,
        74: 32768,
        75: 8,
        76: 0,
        77: 32768,
        78: 1,
        79: 1,
        80: 1,
        81: 167936,
        82: 65536,
        83: 0,
        84: 0,
        85: 0,
        86: 0,
        87: 2,
        88: 0,
        89: 0,
        90: 1,
        91: 0,
        92: 0,
        93: 0,
        94: 0,
        95: 1,
        96: 0,
        97: 166912,
        98: 0,
        99: 0,
        100: 0,
        101: 0,
        102: 0,
        103: 0,
        104: 0,
        105: 0,
        106: 32,
        107: 0,
        108: 31457280,
        109: 134213632,
        110: 0,
        111: 1024,
        112: 0,
        113: 0,
        114: 0,
        115: 1,
        116: 0,
        117: 0,
        118: 0,
        119: 0,
        120: 0,
        121: 0,
        122: 0,
        123: 0,
        124: 0,
        125: 0,
        126: 1,
        127: 0,
        128: 0,
        129: 0,
        130: 0,
        131: -1,
        132: 0,
        133: 0,
        134: -1,
        135: 0,
        136: 0,
        137: 0,
        138: 0,
        139: 0,
        140: 0,
        141: 0,
        142: 0,
        143: 0,
    }
    return a


@functools.cache
def default() -> Mapping[int, int]:
    """The device of a launch made without one (the JIT used directly, as numba-cuda's tests or a benchmark do),
    read-only: launches remember which configurations were valid on it (jit/runtime.py ``CpuKernel._valid``)."""
    return MappingProxyType(sm80_attributes(os.cpu_count() or 1))


def function_attributes(kernel: Any, device: Mapping[Any, int]) -> dict[str, int]:
    """A compiled kernel's CUfunction_attribute values on ``device``, by name: what gpud's backend reports for
    ``cuFuncGetAttribute`` (the client refines the constant bytes, register cap and PTX version from the PTX it
    loaded) and what device code reads with ``cudaFuncGetAttributes``."""
    static = int(kernel.static_shared_bytes)
    return {
        "max_threads_per_block": int(kernel.max_threads_per_block),
        "shared_size_bytes": static,
        "const_size_bytes": 0,
        "local_size_bytes": int(kernel.local_bytes_per_thread),
        "num_regs": int(kernel.num_regs),
        "ptx_version": 80,
        "binary_version": 80,
        "cache_mode_ca": 0,
        "max_dynamic_shared_size_bytes": launch_rules.dynamic_shared_limit(device, static),
        "preferred_shmem_carveout": -1,
    }
