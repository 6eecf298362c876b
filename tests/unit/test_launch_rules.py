"""proto/launch.py: the launch rules both ends apply, from a device's attributes."""

from __future__ import annotations

import pytest

from jit.device import sm80_attributes
from proto import launch as rules
from proto.errors import CudaError

DEV = sm80_attributes(108)


def refused(*args, **kw) -> CudaError:
    with pytest.raises(CudaError) as e:
        rules.check("k", DEV, *args, **kw)
    return e.value


def test_accepts_a_launch_within_every_limit() -> None:
    rules.check("k", DEV, (2**31 - 1, 65535, 65535), (1024, 1, 1), 49152)
    rules.check("k", {str(k): v for k, v in DEV.items()}, (1, 1, 1), (32, 32, 1), 0)  # msgpack'd keys


@pytest.mark.parametrize(
    "grid,block,shared,needle",
    [
        ((1, 1, 1), (1025, 1, 1), 0, "blockDim.x=1025"),
        ((1, 1, 1), (1, 1, 65), 0, "blockDim.z=65"),
        ((1, 1, 1), (0, 1, 1), 0, "blockDim.x=0"),
        ((1, 65536, 1), (1, 1, 1), 0, "gridDim.y=65536"),
        ((1, 1, 1), (64, 32, 1), 0, "2048 threads per block"),
        ((1, 1, 1), (1, 1, 1), 49153, "49153 bytes of dynamic shared memory exceed the 49152"),
    ],
)
def test_refusals_name_the_limit(grid, block, shared, needle) -> None:
    e = refused(grid, block, shared)
    assert e.name == "CUDA_ERROR_INVALID_VALUE" and needle in e.message


def test_function_limits_static_shared_and_opt_in() -> None:
    assert refused((1, 1, 1), (256, 1, 1), 0, max_threads=128).message.endswith("limit of 128")
    assert "16385 bytes" in refused((1, 1, 1), (1, 1, 1), 16385, static_shared=32768).message
    optin = rules.optin_shared_limit(DEV, 1024)
    rules.check("k", DEV, (1, 1, 1), (1, 1, 1), optin, static_shared=1024, dynamic_shared=optin)
    assert rules.dynamic_shared_limit(DEV, 1024) == 47 * 1024
    assert "parameter buffer of 40000" in refused((1, 1, 1), (1, 1, 1), 0, params=40000).message


def test_cooperative_grids_fit_on_the_device_at_once() -> None:
    most = 108 * DEV[rules.MAX_BLOCKS_PER_SM]
    rules.check("k", DEV, (most, 1, 1), (1, 1, 1), 0, cooperative=True)
    assert refused((most + 1, 1, 1), (1, 1, 1), 0, cooperative=True).name == "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"
    assert (
        refused((9, 1, 1), (1, 1, 1), 0, cooperative=True, resident_blocks=8).name
        == "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"
    )
    no_coop = {**DEV, rules.COOPERATIVE_LAUNCH: 0}
    with pytest.raises(CudaError) as e:
        rules.check("k", no_coop, (1, 1, 1), (1, 1, 1), 0, cooperative=True)
    assert e.value.name == "CUDA_ERROR_NOT_SUPPORTED"


def test_occupancy() -> None:
    assert rules.blocks_per_sm(DEV, 1024, 1024, 0) == 2  # 2048 threads per SM
    assert rules.blocks_per_sm(DEV, 32, 1024, 0) == 32  # blocks per SM
    assert rules.blocks_per_sm(DEV, 32, 1024, 100 * 1024) == 1  # shared memory per SM
    assert rules.blocks_per_sm(DEV, 2048, 1024, 0) == 0
