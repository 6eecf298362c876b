"""proto/fft.py: cuFFT's data layouts as both ends read them, checked against NumPy's own strides."""

from __future__ import annotations

import numpy as np
import pytest

from proto import messages as m
from proto.errors import CudaError
from proto.fft import extents, plan

C2C, R2C, C2R, Z2Z = 0x29, 0x2A, 0x2C, 0x69


def test_the_basic_layout_is_packed_and_real_transforms_halve_the_complex_side() -> None:
    f = m.FftExec(type=R2C, rank=2, n=[6, 10], batch=3, idata=0x1000, odata=0x100000)
    (si, sti, di), (so, sto, do) = plan(f)
    assert (si, sti, di) == ([6, 10], [10, 1], 60)
    assert (so, sto, do) == ([6, 6], [6, 1], 36)
    assert extents(f) == [("input", 0x1000, 3 * 60 * 4), ("output", 0x100000, 3 * 36 * 8)]


def test_in_place_real_transforms_pad_the_real_side_as_cufft_does() -> None:
    f = m.FftExec(type=C2R, rank=1, n=[10], batch=2, idata=0x1000, odata=0x1000, direction=1)
    (_, _, di), (_, sto, do) = plan(f)
    assert di == 6 and sto == [1] and do == 12  # 2 * (10 // 2 + 1) reals per batch


def test_the_advanced_layout_is_numpys_strides() -> None:
    a = np.zeros((4, 5, 7), np.complex64)  # a transform over axis 1 of a C-ordered array: n=[5], stride 7
    f = m.FftExec(
        type=C2C,
        rank=1,
        n=[5],
        batch=7,
        inembed=[5],
        istride=7,
        idist=1,
        onembed=[5],
        ostride=7,
        odist=1,
        idata=1,
        odata=2,
    )
    (sizes, strides, dist), _ = plan(f)
    assert sizes == [5] and strides[0] * a.itemsize == a.strides[1] and dist == 1
    assert extents(f)[0][2] == ((5 - 1) * 7 + (7 - 1) * 1 + 1) * 8  # (n-1)*stride + (batch-1)*dist + 1 elements
    g = m.FftExec(
        type=Z2Z, rank=2, n=[3, 4], inembed=[9, 8], istride=2, idist=200, onembed=[3, 4], ostride=1, odist=12,
        batch=2, idata=1, odata=2,
    )  # fmt: skip
    (sizes, strides, dist), (_, so, do) = plan(g)
    assert strides == [16, 2] and dist == 200 and so == [4, 1] and do == 12
    assert extents(g)[0][2] == ((3 - 1) * 16 + (4 - 1) * 2 + 200 + 1) * 16


@pytest.mark.parametrize(
    "bad",
    [
        {"type": 0x77, "rank": 1, "n": [8]},
        {"type": C2C, "rank": 2, "n": [8]},
        {"type": C2C, "rank": 1, "n": [0]},
        {"type": C2C, "rank": 1, "n": [8], "inembed": [8, 8]},
        {"type": C2C, "rank": 1, "n": [8], "direction": 0},
    ],
)
def test_what_cufft_refuses_is_invalid_value(bad: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(CudaError) as e:
        extents(m.FftExec(idata=1, odata=2, **bad))
    assert e.value.name in ("CUDA_ERROR_INVALID_VALUE",)
